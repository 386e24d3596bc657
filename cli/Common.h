// Shared pieces of the flowc commands: global options, the daemon client,
// output helpers.
#pragma once

#include "flowc/support/Status.h"

#include "flowc/v1/flowc.grpc.pb.h"

#include <CLI/CLI.hpp>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace flowc::cli {

struct GlobalOptions {
  std::string cacheDir;   ///< --cache-dir / FLOWC_CACHE_DIR / XDG default.
  std::string socketPath; ///< --socket / FLOWC_SOCKET / CACHE_DIR/flowcd.sock.
  /// --daemon / FLOWC_DAEMON: `unix:/PATH` (sets socketPath),
  /// `grpcs://HOST:PORT`, or `grpc://HOST:PORT` on loopback; empty: the
  /// unix socket.
  std::string daemonUrl;
  std::string tlsCa;   ///< --tls-ca / FLOWC_TLS_CA: a grpcs:// daemon's CA.
  std::string tlsCert; ///< --tls-cert / FLOWC_TLS_CERT: client certificate.
  std::string tlsKey;  ///< --tls-key / FLOWC_TLS_KEY.
  /// --token / FLOWC_TOKEN: sent as `authorization: Bearer TOKEN`, never
  /// printed.
  std::string token;
  /// Start flowcd when none answers; FLOWC_AUTOSTART=0 turns it off (CI
  /// farms and supervisors that manage the daemon themselves).
  bool autostart = true;
  /// --trust-daemon: talk to a daemon whose socket another user owns.
  bool trustForeignDaemon = false;
  /// When the command began, for the end-to-end times it prints.
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  /// Applies the environment and defaults where flags left fields empty.
  void resolve();
};

/// A connection to flowcd over its unix socket, or over TCP.
class DaemonClient {
public:
  /// Connects; with `autostart`, starts `flowcd` from the directory of this
  /// executable when nothing answers on the unix socket and waits for it to
  /// become healthy. Unavailable (naming the socket and the daemon log)
  /// otherwise. A TCP daemon is never started; its channel connects on the
  /// first call. InvalidArgument for a bad --daemon URL, a plaintext one
  /// off loopback, an unreadable TLS file or a token that is not printable.
  static Expected<std::unique_ptr<DaemonClient>> connect(const GlobalOptions &options,
                                                         bool autostart);

  /// True for a daemon on TCP: it cannot open this machine's paths.
  bool isRemote() const { return remote_; }
  /// The socket path or the URL, for messages.
  const std::string &endpoint() const { return endpoint_; }

  flowc::v1::Compiler::Stub &compiler() { return *compiler_; }
  flowc::v1::Admin::Stub &admin() { return *admin_; }
  flowc::v1::Cache::Stub &cache() { return *cache_; }

  /// Health with a short deadline; Unavailable if nothing answers.
  Expected<flowc::v1::HealthResponse> health(int timeoutMs = 1000);

private:
  void attach(std::shared_ptr<grpc::Channel> channel);
  static Expected<std::unique_ptr<DaemonClient>> connectTcp(const GlobalOptions &options);

  bool remote_ = false;
  std::string endpoint_;

  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<flowc::v1::Compiler::Stub> compiler_;
  std::unique_ptr<flowc::v1::Admin::Stub> admin_;
  std::unique_ptr<flowc::v1::Cache::Stub> cache_;
};

/// The absolute path of a readable model file, or NotFound naming `path`.
/// Checked here so that a typo fails before any daemon is started.
Expected<std::string> absoluteModelPath(const std::string &path);

/// Status from a failed RPC, keeping the daemon's message.
Status fromGrpc(const grpc::Status &status, const std::string &what);

/// Checks a --target value: cpu, cuda, cuda:sm_NN (the error lists them).
CLI::Validator targetValidator();

/// Sets the wire's target, level and precision from their command-line
/// spellings; InvalidArgument listing the supported names for another.
Status setCompileOptions(const std::string &target, int optLevel,
                         const std::string &precision,
                         flowc::v1::CompileOptions &options);

/// Exit statuses, so scripts and test harnesses can tell a bad model from
/// an unsupported one without parsing messages (also in README).
inline constexpr int kExitFailure = 1;     ///< Internal errors, anything else.
inline constexpr int kExitUsage = 2;       ///< Bad command line.
inline constexpr int kExitBadInput = 3;    ///< Malformed or inconsistent input.
inline constexpr int kExitUnsupported = 4; ///< Valid input flowc does not support.
inline constexpr int kExitUnavailable = 5; ///< No daemon, no space, no resources.

int exitCodeFor(StatusCode code);

/// One `--input-shape NAME=DIMS` value: the name and the dimensions.
Expected<std::pair<std::string, std::vector<int64_t>>>
parseInputShape(const std::string &spec);

/// Parses `--input-shape NAME=DIMS` values (DIMS like 1x128 or 1,128) into
/// a request's repeated InputShape; InvalidArgument quoting a bad one.
template <typename Request>
Status addInputShapes(const std::vector<std::string> &specs, Request &request) {
  for (const std::string &spec : specs) {
    auto parsed = parseInputShape(spec);
    if (!parsed)
      return parsed.status();
    auto *shape = request.add_input_shapes();
    shape->set_name(parsed->first);
    for (int64_t dim : parsed->second)
      shape->add_dims(dim);
  }
  return Status::ok();
}

/// How errors are reported besides the line on stderr: nothing more, an
/// object on stdout for a command's --json ({"error": {...}}), or that
/// object as the last NDJSON event of --progress=json ({"event": "error",
/// "elapsed": S, "error": {...}}).
enum class ErrorFormat { Text, Json, JsonEvent };

/// Chosen once, by main from the parsed command line (and by a command
/// whose mode it refines, before its first error), so that every error
/// path of every command reports alike without a flag of its own.
/// `started` is when the command began, for "elapsed".
void setErrorFormat(ErrorFormat format, std::chrono::steady_clock::time_point started =
                                            std::chrono::steady_clock::now());

/// `text` on one line: newlines become spaces, trailing spaces go (the
/// stderr error line, the JSON error objects, flowc watch's lines).
std::string oneLine(const std::string &text);

/// Prints `flowc: error: <message>` as one line on stderr, and the error
/// object on stdout where setErrorFormat asked for it; returns the exit
/// status for the error's code. The object's file/node/op/digest are the
/// ones the message names (ErrorFields.h).
int reportError(const Status &status);
/// The same, with the fields the daemon sent for an error that crossed the
/// RPC.
int reportError(const Status &status, const flowc::v1::ErrorDetail &detail);

/// {"exit_code", "code" ("InvalidArgument"), "kind" ("invalid_argument"),
/// "message", "file", "node", "op", "digest"}: "" where the error names
/// none. From `detail` when given, else parsed from the message.
nlohmann::json errorJson(const Status &status,
                         const flowc::v1::ErrorDetail *detail = nullptr);

/// The ErrorDetail a failed call's server sent in its trailer
/// (grpc-status-details-bin); nullopt when it sent none or it does not
/// parse. Call after the call finished.
std::optional<flowc::v1::ErrorDetail> errorDetailOf(const grpc::ClientContext &context);

/// One line of JSON on stdout, flushed; bytes that are not UTF-8 (a path
/// or node name from a hostile file) become U+FFFD rather than an abort.
void printJson(const nlohmann::json &json);

/// "93.5%" or "-" when nothing was looked up.
std::string hitRateText(uint64_t hits, uint64_t misses);

} // namespace flowc::cli
