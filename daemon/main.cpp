// flowcd: the flowc daemon. Runs in the foreground; `flowc` starts it in the
// background on demand.
#include "flowc/daemon/Config.h"
#include "flowc/daemon/Server.h"
#include "flowc/runtime/BuildInfo.h"
#include "flowc/support/Environment.h"

#include <CLI/CLI.hpp>
#include <csignal>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <iostream>
#include <spdlog/sinks/rotating_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

namespace {

constexpr int kExitUsage = 2;
/// As the CLI's: the cache cannot be written, the socket cannot be bound.
constexpr int kExitUnavailable = 5;
constexpr size_t kLogFileBytes = 8 << 20;
constexpr size_t kLogFilesKept = 3;

/// A flag given on the command line, as text.
struct FlagSlot {
  std::string value;
  CLI::Option *option = nullptr;
  std::optional<std::string> get() const {
    return option && option->count() ? std::optional<std::string>(value) : std::nullopt;
  }
};

std::string joined(const std::vector<std::string> &values, const char *separator = ",") {
  std::string text;
  for (const std::string &value : values)
    text += (text.empty() ? "" : separator) + value;
  return text;
}

/// The remote cache tier's flags (docs/remote-cache.md).
struct RemoteCacheFlags {
  FlagSlot url, readOnly, caFile, clientCert, clientKey, uploadWeights, timeout, signKey;
  std::vector<std::string> headers, trustKeys;
  CLI::Option *headersOption, *trustKeysOption, *readOnlyOption;
  bool readOnlyValue = false;

  explicit RemoteCacheFlags(CLI::App &app) {
    url.option = app.add_option(
        "--remote-cache", url.value,
        "A remote cache behind the local one: grpc[s]://HOST:PORT (REAPI v2: "
        "bazel-remote, BuildBuddy, Buildbarn, BuildGrid) or http[s]://HOST/PREFIX "
        "(Bazel HTTP cache: bazel-remote, nginx WebDAV) (env FLOWC_REMOTE_CACHE)");
    headersOption = app.add_option(
        "--remote-header", headers,
        "NAME=VALUE sent with every remote cache request, e.g. "
        "authorization='Bearer TOKEN' (repeatable; prefer the config file for secrets)");
    readOnlyOption = app.add_flag(
        "--remote-read-only", readOnlyValue,
        "Use remote hits but never write the remote cache (env FLOWC_REMOTE_READ_ONLY)");
    caFile.option = app.add_option("--remote-ca-file", caFile.value,
                                   "PEM roots for grpcs:// and https:// remote caches "
                                   "(default: the system's)");
    clientCert.option =
        app.add_option("--remote-client-cert", clientCert.value,
                       "PEM client certificate for a remote cache that asks for one");
    clientKey.option = app.add_option("--remote-client-key", clientKey.value,
                                      "PEM key of --remote-client-cert");
    uploadWeights.option = app.add_option(
        "--remote-upload-weights", uploadWeights.value,
        "missing (upload weights the remote lacks; the default) or never (weights and "
        "what is derived from them stay on this machine)");
    timeout.option = app.add_option(
        "--remote-timeout", timeout.value,
        "Per remote cache request, e.g. 10s (the default); a slow or dead remote "
        "means a local compile");
    signKey.option = app.add_option(
        "--sign-key", signKey.value,
        "Ed25519 private key (PEM) that signs every entry written to the remote cache");
    trustKeysOption = app.add_option(
        "--trust-key", trustKeys,
        "Ed25519 public key (PEM) whose signatures remote entries must carry "
        "(repeatable; unsigned or forged entries are refused)");
  }

  void fill(flowc::daemon::DaemonFlags &flags) const {
    flags.remoteCache = url.get();
    // Repeatable values travel joined by newlines (a config file repeats
    // the line): a header value may hold a comma.
    if (headersOption->count())
      flags.remoteHeaders = joined(headers, "\n");
    if (readOnlyOption->count())
      flags.remoteReadOnly = "true";
    flags.remoteCaFile = caFile.get();
    flags.remoteClientCert = clientCert.get();
    flags.remoteClientKey = clientKey.get();
    flags.remoteUploadWeights = uploadWeights.get();
    flags.remoteTimeout = timeout.get();
    flags.signKey = signKey.get();
    if (trustKeysOption->count())
      flags.trustKeys = joined(trustKeys, "\n");
  }
};

/// Logs to stderr, or to `path` rotated at kLogFileBytes; InvalidArgument
/// if the file cannot be opened.
flowc::Status setUpLogging(const std::string &path) {
  // Made (or restricted to) 0600 before spdlog opens it: the log names
  // models and paths, which other users must not read.
  if (!path.empty()) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd < 0)
      return flowc::invalidArgument("--log-file '" + path + "': " + std::strerror(errno));
    (void)fchmod(fd, 0600);
    ::close(fd);
  }
  try {
    if (path.empty())
      spdlog::set_default_logger(spdlog::stderr_logger_mt("flowcd"));
    else
      spdlog::set_default_logger(
          spdlog::rotating_logger_mt("flowcd", path, kLogFileBytes, kLogFilesKept));
  } catch (const spdlog::spdlog_ex &e) {
    return flowc::invalidArgument("--log-file '" + path + "': " + e.what());
  }
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %l flowcd %v");
  spdlog::flush_on(spdlog::level::info);
  return flowc::Status::ok();
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"flowcd: the flowc compile daemon.\n"
               "Settings: flags > environment (FLOWC_*) > config file > defaults"};
  FlagSlot cacheDir, socket, listen, http, workers, maxSize, idleTimeout, logFile, config,
      taskMemoryLimit, remoteExecutor, remoteInstance, remoteFallback, remoteJobs;
  cacheDir.option = app.add_option("--cache-dir", cacheDir.value,
                                   "Cache directory (env FLOWC_CACHE_DIR; default "
                                   "$XDG_CACHE_HOME/flowc or ~/.cache/flowc)");
  socket.option = app.add_option(
      "--socket", socket.value,
      "Unix socket to listen on (env FLOWC_SOCKET; default CACHE_DIR/flowcd.sock)");
  listen.option = app.add_option(
      "--listen", listen.value,
      "Also listen on TCP host:port: needs --tls-cert, --tls-key and --tokens, or "
      "--insecure-loopback");
  http.option = app.add_option(
      "--http", http.value,
      "Serve the web UI and /metrics on a loopback HOST:PORT, 'auto' (127.0.0.1, port "
      "8470 or the next free one; the default) or 'off' (env FLOWC_HTTP); `flowc "
      "status` prints its URL");
  FlagSlot tlsCert, tlsKey, tlsClientCa, tokens;
  tlsCert.option = app.add_option("--tls-cert", tlsCert.value,
                                  "PEM certificate chain of the TCP port");
  tlsKey.option = app.add_option(
      "--tls-key", tlsKey.value,
      "PEM private key of the TCP port (mode 600: no group or other access)");
  tlsClientCa.option =
      app.add_option("--tls-client-ca", tlsClientCa.value,
                     "PEM CA bundle: TCP clients must present a certificate it signed");
  tokens.option = app.add_option(
      "--tokens", tokens.value,
      "Bearer tokens of the TCP port, one 'NAME ROLE sha256:HEX' per line (roles read, "
      "submit, admin; mode 600)");
  bool insecureLoopback = false;
  CLI::Option *insecureLoopbackFlag = app.add_flag(
      "--insecure-loopback", insecureLoopback,
      "Plaintext TCP, allowed only on 127.0.0.1, ::1 or localhost; without --tokens "
      "every local client has every role (development)");
  workers.option = app.add_option(
      "--workers", workers.value,
      "Local worker processes running tasks at once, each one thread (default 0: one "
      "per core)");
  taskMemoryLimit.option = app.add_option(
      "--task-memory-limit", taskMemoryLimit.value,
      "Heap limit of each local task process, e.g. 4G (default: 3/4 of the memory)");
  remoteExecutor.option = app.add_option(
      "--remote-executor", remoteExecutor.value,
      "Run compile tasks on a REAPI v2 engine: grpc://HOST:PORT or grpcs://HOST:PORT "
      "(env FLOWC_REMOTE_EXECUTOR; Buildbarn, BuildBuddy, BuildGrid, ...)");
  remoteInstance.option = app.add_option("--remote-instance", remoteInstance.value,
                                         "The engine's instance name (default: none)");
  std::vector<std::string> remotePlatform;
  CLI::Option *remotePlatformOption = app.add_option(
      "--remote-platform", remotePlatform,
      "KEY=VALUE platform property of every remote action, besides OSFamily and ISA "
      "(repeatable)");
  std::vector<std::string> remoteGpus;
  CLI::Option *remoteGpusOption = app.add_option(
      "--remote-gpu", remoteGpus,
      "A GPU of the farm, e.g. \"NVIDIA H200 sm_90\": CUDA compiles key by its "
      "tuning records (the remote cache's too) and measure on the engine's workers "
      "offering it as their gpu platform property (repeatable)");
  remoteFallback.option = app.add_option(
      "--remote-fallback", remoteFallback.value,
      "What a task does when the engine cannot be reached: local (run it here) or none "
      "(fail its job; the default)");
  remoteJobs.option = app.add_option(
      "--remote-jobs", remoteJobs.value,
      "Remote actions in flight at once per job, each an Execute stream (default 32)");
  maxSize.option = app.add_option("--max-size", maxSize.value,
                                  "Cache size cap, e.g. 20G, 512M (env "
                                  "FLOWC_CACHE_MAX_SIZE; default 20G): least recently "
                                  "used blobs go beyond it");
  idleTimeout.option = app.add_option(
      "--idle-timeout", idleTimeout.value,
      "Exit after this long with no request and no job: 90s, 15m, 2h (default 0: never; "
      "the CLI's auto-start passes 1h)");
  logFile.option =
      app.add_option("--log-file", logFile.value,
                     "Log to this file, rotated at 8 MiB with 3 old files kept "
                     "(default: stderr)");
  config.option = app.add_option(
      "--config", config.value,
      "Config file of 'key = value' lines with the long flags' names (env FLOWC_CONFIG; "
      "default CACHE_DIR/flowcd.conf when it exists)");
  bool readOnly = false;
  CLI::Option *readOnlyFlag = app.add_flag(
      "--read-only", readOnly,
      "Serve hits from a cache it must not write (a read-only mount): misses fail, "
      "nothing is recorded (env FLOWC_CACHE_READ_ONLY; config key read-only)");
  RemoteCacheFlags remoteCache(app);
  bool version = false;
  app.add_flag("--version", version, "Print the version, build id and library versions");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    // --help and --version print and succeed; every other parse failure is
    // a usage error (CLI11's own codes, 105, 106, ..., would hide that),
    // said in one line like every other error.
    if (e.get_exit_code() == 0)
      return app.exit(e);
    std::cerr << "flowcd: error: " << e.what() << " (see flowcd --help)" << std::endl;
    return kExitUsage;
  }
  if (version) {
    std::cout << flowc::runtime::versionText("flowcd");
    return 0;
  }

  flowc::daemon::DaemonFlags flags;
  flags.cacheDir = cacheDir.get();
  flags.socketPath = socket.get();
  flags.tcpAddress = listen.get();
  flags.workers = workers.get();
  flags.maxSize = maxSize.get();
  flags.idleTimeout = idleTimeout.get();
  flags.logFile = logFile.get();
  flags.http = http.get();
  if (readOnlyFlag->count())
    flags.readOnly = "true";
  flags.taskMemoryLimit = taskMemoryLimit.get();
  flags.remoteExecutor = remoteExecutor.get();
  flags.remoteInstance = remoteInstance.get();
  if (remotePlatformOption->count())
    flags.remotePlatform = joined(remotePlatform);
  if (remoteGpusOption->count())
    flags.remoteGpus = joined(remoteGpus);
  flags.remoteFallback = remoteFallback.get();
  flags.remoteJobs = remoteJobs.get();
  flags.configFile = config.get();
  flags.tlsCert = tlsCert.get();
  flags.tlsKey = tlsKey.get();
  flags.tlsClientCa = tlsClientCa.get();
  flags.tokensFile = tokens.get();
  if (insecureLoopbackFlag->count())
    flags.insecureLoopback = "true";
  remoteCache.fill(flags);
  auto options = flowc::daemon::resolveDaemonOptions(flags);
  if (!options) {
    std::cerr << "flowcd: error: " << options.status().message() << "\n";
    return kExitUsage;
  }
  // Everything the daemon creates (socket, log, rotated logs, cache files
  // that it does not chmod itself) is its user's only.
  ::umask(077);
  if (flowc::Status valid = options->validate(); !valid) {
    std::cerr << "flowcd: error: " << valid.message() << "\n";
    return kExitUsage;
  }
  if (flowc::Status logging = setUpLogging(options->logFile); !logging) {
    std::cerr << "flowcd: error: " << logging.message() << "\n";
    return kExitUsage;
  }
  for (const std::string &warning : flowc::unknownEnvironmentWarnings())
    spdlog::warn("{}", warning);
  // Before any thread exists, so every thread inherits the mask. A worker
  // that dies makes writes to its pipe fail with EPIPE instead of a signal.
  flowc::daemon::blockShutdownSignals();
  std::signal(SIGPIPE, SIG_IGN);
  auto server = flowc::daemon::Server::start(*options);
  if (!server) {
    if (!options->logFile.empty())
      spdlog::error("{}", server.status().message());
    std::cerr << "flowcd: error: " << server.status().message() << "\n";
    return server.status().code() == flowc::StatusCode::Unavailable ? kExitUnavailable
                                                                    : 1;
  }
  (*server)->runUntilShutdown();
  return 0;
}
