// flowcd: the gRPC front over the cache, the scheduler and embedded
// workers. The binary in daemon/main.cpp is a thin wrapper.
#pragma once

#include "flowc/cache/Cache.h"
#include "flowc/support/Status.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace flowc::daemon {

/// Where tasks run beyond this machine: a REAPI v2 engine.
struct RemoteOptions {
  /// "grpc://host:port" or "grpcs://host:port"; empty: local workers only.
  std::string url;
  std::string instance;
  /// Platform properties every action carries besides OSFamily and ISA.
  std::vector<std::pair<std::string, std::string>> platform;
  /// The farm's GPUs, as GPU tuning devices ("gpu NVIDIA H200 sm_90";
  /// --remote-gpu "NVIDIA H200 sm_90"): CUDA compiles key by their records
  /// (the remote cache tier's too), and their GPU measure tasks go to the
  /// engine's workers offering one (the `gpu` platform property).
  std::vector<std::string> gpus;
  /// A task the engine cannot take (unreachable, down) runs locally instead
  /// of failing its job.
  bool fallbackLocal = false;
  /// Actions in flight at once per job: each holds an Execute stream.
  unsigned jobs = 32;
};

/// The remote cache tier behind the local cache (docs/remote-cache.md).
/// Its instance name is RemoteOptions::instance (--remote-instance).
struct RemoteCacheOptions {
  /// grpc[s]://HOST:PORT (REAPI) or http[s]://HOST/PREFIX (Bazel HTTP
  /// cache); empty: local only.
  std::string url;
  /// Sent with every request ("authorization", "Bearer …").
  std::vector<std::pair<std::string, std::string>> headers;
  /// Hits only; nothing is ever written to the remote.
  bool readOnly = false;
  std::string caFile, clientCertFile, clientKeyFile;
  /// "missing" (upload weights the remote lacks) or "never".
  std::string uploadWeights = "missing";
  uint32_t timeoutMs = 10000;
  /// Sign written entries (Ed25519 private key, PEM); accept only entries
  /// signed by one of these public keys.
  std::string signKeyFile;
  std::vector<std::string> trustKeyFiles;
};

/// How the TCP port (DaemonOptions::tcpAddress) admits clients.
struct FrontDoorOptions {
  /// PEM certificate chain and private key of the TCP port; both or none.
  std::string tlsCert;
  std::string tlsKey;
  /// PEM CA bundle: when set, a client must present a certificate it signed.
  std::string tlsClientCa;
  /// Bearer tokens with roles (Auth.h's parseTokens format); required on
  /// TCP unless insecureLoopback.
  std::string tokensFile;
  /// Plaintext TCP, allowed only on a loopback address; without tokensFile
  /// every local client has every role (development).
  bool insecureLoopback = false;
};

struct DaemonOptions {
  std::string cacheDir;
  /// Unix socket path; default `<cacheDir>/flowcd.sock`.
  std::string socketPath;
  /// Optional "host:port" to listen on TCP as well, through frontDoor.
  std::string tcpAddress;
  FrontDoorOptions frontDoor;
  /// Local task processes at once (each runs one thread), and jobs at
  /// once; 0 means one per core.
  unsigned workers = 0;
  /// RLIMIT_DATA of each local task process; 0: 3/4 of the machine's memory.
  uint64_t taskMemoryLimit = 0;
  RemoteOptions remote;
  RemoteCacheOptions remoteCache;
  /// Cache size cap and inline threshold.
  cache::CacheOptions cache;
  /// Exit after this many seconds with no request and no job; 0 = never.
  /// (The CLI's auto-start passes one; a daemon run by hand has none.)
  unsigned idleTimeoutSeconds = 0;
  /// Log to this file, rotated (kLogFileBytes, kLogFiles kept); empty: stderr.
  std::string logFile;
  /// The web UI and /metrics (docs/web-ui.md): a loopback "HOST:PORT",
  /// "auto" (127.0.0.1, port 8470 or the next free one) or "off".
  std::string http = "auto";

  /// Fills defaults; InvalidArgument naming the bad field.
  Status validate();
  /// InvalidArgument unless the TCP port is TLS with tokens, or plaintext
  /// on a loopback address with insecureLoopback; front-door settings
  /// without --listen are refused too.
  Status validateFrontDoor() const;
};

class Server {
public:
  ~Server();
  /// Opens the cache and starts listening. FailedPrecondition if another
  /// daemon already listens on the socket.
  static Expected<std::unique_ptr<Server>> start(DaemonOptions options);
  /// Blocks until SIGTERM, SIGINT or Admin.Shutdown, then stops cleanly:
  /// no new requests, running compiles finish, the socket file is removed.
  /// The caller must have blocked those signals in every thread
  /// (blockShutdownSignals) before starting any thread.
  void runUntilShutdown();

private:
  struct State;
  explicit Server(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

/// Blocks SIGTERM, SIGINT and SIGUSR1 in the calling thread and in every
/// thread it starts later, so that runUntilShutdown() can wait for them.
void blockShutdownSignals();

} // namespace flowc::daemon
