// A client of the Remote Execution API v2 (REAPI): runs one command on an
// engine (Buildbarn, BuildBuddy, EngFlow, NativeLink, BuildGrid) with its
// input root uploaded to the engine's CAS, its result answered by the
// engine's action cache when another client already ran it, and its
// outputs fetched and verified by digest. gRPC types stay in remote/lib.
#pragma once

#include "flowc/cache/Digest.h"
#include "flowc/support/Status.h"

#include <functional>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flowc::remote {

struct Endpoint {
  /// "grpc://host:port" (plaintext) or "grpcs://host:port" (TLS).
  std::string url;
  /// REAPI instance_name; may be empty.
  std::string instance;
  /// PEM roots for grpcs; empty: the system's roots.
  std::string rootCertsPath;
};

/// Checks `url` (scheme grpc or grpcs, a host, a port in 1..65535, nothing
/// after it) and `instance` (REAPI's rules: '/'-separated, no empty, "." or
/// ".." segment, none of the reserved words "blobs", "uploads", "actions",
/// "actionResults", "operations", "capabilities"). InvalidArgument naming
/// the bad part otherwise.
Expected<Endpoint> parseEndpoint(std::string url, std::string instance);

/// One file of an action's input root.
struct InputFile {
  /// Relative, '/'-separated ("task/kernel.mlir", "bin/flowc-worker").
  std::string path;
  /// flowc's digest (SHA-256 + size), which is REAPI's SHA256 digest.
  cache::Digest digest;
  bool executable = false;
  /// The file's bytes, valid for the call (the caller keeps them alive).
  /// Their size is checked against `digest`; their hash is the caller's
  /// word (hashing a large toolchain per call would cost more than the
  /// call), and the engine's CAS verifies every upload.
  std::string_view bytes;
};

struct Action {
  /// arguments[0] is the program, a path in the input root relative to the
  /// working directory, or a name the worker's PATH resolves.
  std::vector<std::string> arguments;
  /// Sorted by the client; a name may appear once.
  std::vector<std::pair<std::string, std::string>> environment;
  /// The input root; directories are implied by the paths.
  std::vector<InputFile> inputs;
  /// Files the command writes, relative to the working directory.
  std::vector<std::string> outputFiles;
  /// Relative to the input root; empty: the root itself.
  std::string workingDirectory;
  /// Platform properties the engine matches workers by; sorted by the
  /// client. A name may repeat with different values.
  std::vector<std::pair<std::string, std::string>> platform;
  /// 0: the engine's default.
  std::chrono::seconds timeout{0};
};

struct OutputFile {
  /// As in Action::outputFiles.
  std::string path;
  cache::Digest digest;
  std::string bytes;
};

struct ActionOutcome {
  cache::Digest actionDigest;
  int exitCode = 0;
  /// The outputs the command produced, in Action::outputFiles order, each
  /// fetched and verified against its digest. A declared output the command
  /// did not write is absent (REAPI reports no error for it).
  std::vector<OutputFile> outputs;
  std::string stdoutText, stderrText;
  /// Answered by the action cache: nothing executed.
  bool cached = false;
  /// ExecutedActionMetadata.worker, as the engine names it.
  std::string worker;
};

/// What one executor did since connect(); monotonic.
struct Counters {
  /// Actions the engine executed for this client.
  uint64_t executed = 0;
  /// Actions answered by the engine's action cache.
  uint64_t cacheHits = 0;
  uint64_t blobsUploaded = 0, bytesUploaded = 0;
  uint64_t blobsDownloaded = 0, bytesDownloaded = 0;
  /// Execute streams lost and resumed with WaitExecution.
  uint64_t streamsResumed = 0;
};

/// How long the client holds on to an engine that stops answering.
struct ClientOptions {
  /// How long a lost Execute stream of an action the engine accepted is
  /// resumed with WaitExecution while the engine cannot be reached (an
  /// engine restart). Unary calls and an Execute not yet accepted retry 4
  /// times (about 1.5 s) instead.
  std::chrono::seconds resumeWindow{30};

  /// InvalidArgument unless resumeWindow is in 0..3600 s.
  Status validate() const;
};

/// A connection to one engine. Thread-safe: any number of threads may call
/// execute() at once (one gRPC channel, multiplexed).
class RemoteExecutor {
public:
  /// Creates the channel; makes no RPC (the first call connects).
  /// InvalidArgument for a bad endpoint or options, or when rootCertsPath
  /// cannot be read.
  static Expected<std::unique_ptr<RemoteExecutor>>
  connect(const Endpoint &endpoint, const ClientOptions &options = {});
  ~RemoteExecutor();
  RemoteExecutor(const RemoteExecutor &) = delete;
  RemoteExecutor &operator=(const RemoteExecutor &) = delete;

  /// GetCapabilities: the engine must take SHA256 digests and have
  /// execution enabled. Caches the batch size limit for execute(). Errors
  /// name the endpoint: Unavailable (unreachable), FailedPrecondition (no
  /// SHA256, execution disabled), or the engine's code.
  Status checkCapabilities();

  /// Runs `action` on the engine. GetActionResult first (a hit runs
  /// nothing), else FindMissingBlobs and upload only the missing blobs
  /// (BatchUpdateBlobs under the engine's max_batch_total_size_bytes or 4
  /// MiB, ByteStream Write for larger ones), Execute, a lost stream resumed
  /// with WaitExecution (for up to ClientOptions::resumeWindow), then every output and
  /// stdout/stderr fetched (BatchReadBlobs / ByteStream Read) and verified
  /// by SHA-256. `cancelled`, when given, is polled about every 100 ms
  /// (from a thread of the call's as well as the caller's, so it must be
  /// thread-safe) and abandons the call (Cancelled).
  /// Errors: InvalidArgument (a bad action: paths, duplicates, sizes);
  /// Unavailable naming the endpoint when it cannot be reached (after a
  /// bounded number of retries); the engine's code and message when
  /// ExecuteResponse.status is not OK (ResourceExhausted for
  /// DEADLINE_EXCEEDED: the action ran out of time); DataLoss when an
  /// output's bytes do not match its digest or the result is malformed. A
  /// non-zero exit code is a result (outcome.exitCode), not an error.
  Expected<ActionOutcome> execute(const Action &action,
                                  const std::function<bool()> &cancelled = nullptr);

  Counters counters() const;
  const Endpoint &endpoint() const;

private:
  struct Impl;
  explicit RemoteExecutor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace flowc::remote
