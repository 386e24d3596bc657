// flowcd's configuration: command-line flags > FLOWC_* environment > config
// file > defaults, all building one DaemonOptions.
#pragma once

#include "flowc/daemon/Server.h"
#include "flowc/support/Status.h"

#include <optional>
#include <string>

namespace flowc::daemon {

/// What the command line set, as text; unset fields fall through to the
/// environment, the config file and the defaults.
struct DaemonFlags {
  std::optional<std::string> cacheDir;
  std::optional<std::string> socketPath;
  std::optional<std::string> tcpAddress;
  std::optional<std::string> workers;
  std::optional<std::string> maxSize;
  std::optional<std::string> idleTimeout;
  std::optional<std::string> logFile;
  /// --http HOST:PORT | auto | off.
  std::optional<std::string> http;
  /// --read-only given: "true".
  std::optional<std::string> readOnly;
  std::optional<std::string> taskMemoryLimit;
  std::optional<std::string> remoteExecutor;
  std::optional<std::string> remoteInstance;
  /// KEY=VALUE pairs joined by commas.
  std::optional<std::string> remotePlatform;
  /// GPU names ("NVIDIA H200 sm_90") joined by commas.
  std::optional<std::string> remoteGpus;
  std::optional<std::string> remoteFallback;
  std::optional<std::string> remoteJobs;
  std::optional<std::string> remoteCache;
  /// Repeatable values joined by newlines.
  std::optional<std::string> remoteHeaders;
  std::optional<std::string> remoteReadOnly;
  std::optional<std::string> remoteCaFile;
  std::optional<std::string> remoteClientCert;
  std::optional<std::string> remoteClientKey;
  std::optional<std::string> remoteUploadWeights;
  std::optional<std::string> remoteTimeout;
  std::optional<std::string> signKey;
  std::optional<std::string> trustKeys;
  /// --config FILE (else FLOWC_CONFIG, else CACHE_DIR/flowcd.conf if it exists).
  std::optional<std::string> configFile;
  /// The TCP front door (FrontDoorOptions); --insecure-loopback given: "true".
  std::optional<std::string> tlsCert;
  std::optional<std::string> tlsKey;
  std::optional<std::string> tlsClientCa;
  std::optional<std::string> tokensFile;
  std::optional<std::string> insecureLoopback;
};

/// The keys a config file may set (one `key = value` per line, `#`
/// comments); the same names as the long flags.
inline constexpr const char *kConfigKeys[] = {"cache-dir",
                                              "socket",
                                              "listen",
                                              "tls-cert",
                                              "tls-key",
                                              "tls-client-ca",
                                              "tokens",
                                              "insecure-loopback",
                                              "workers",
                                              "max-size",
                                              "idle-timeout",
                                              "log-file",
                                              "http",
                                              "read-only",
                                              "task-memory-limit",
                                              "remote-executor",
                                              "remote-instance",
                                              "remote-platform",
                                              "remote-gpu",
                                              "remote-fallback",
                                              "remote-jobs",
                                              "remote-cache",
                                              "remote-header",
                                              "remote-read-only",
                                              "remote-ca-file",
                                              "remote-client-cert",
                                              "remote-client-key",
                                              "remote-upload-weights",
                                              "remote-timeout",
                                              "sign-key",
                                              "trust-key"};

/// Keys that may be given more than once (a config file repeats the line).
inline constexpr const char *kRepeatableConfigKeys[] = {"remote-header", "trust-key"};

/// Resolves the options. InvalidArgument naming the flag, variable or
/// file:line and the bad value (an unknown config key, a size such as
/// "20X", a negative timeout); NotFound for a --config file that is missing.
Expected<DaemonOptions> resolveDaemonOptions(const DaemonFlags &flags);

/// "90", "90s", "15m", "2h" -> seconds; InvalidArgument quoting `text`.
Expected<unsigned> parseDurationSeconds(const std::string &text);

} // namespace flowc::daemon
