#include "Common.h"

#include "flowc/rpc/GrpcStatus.h"
#include "flowc/rpc/Json.h"
#include "flowc/rpc/Vocabulary.h"
#include "flowc/support/Environment.h"
#include "flowc/support/ErrorFields.h"
#include "flowc/support/MappedFile.h"
#include "flowc/support/Subprocess.h"
#include "flowc/support/UnixSocket.h"

#include <arpa/inet.h>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/client_interceptor.h>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace flowc::cli {

void GlobalOptions::resolve() {
  if (cacheDir.empty()) {
    const char *dir = std::getenv("FLOWC_CACHE_DIR");
    cacheDir = dir && *dir ? dir : defaultCacheDir();
  }
  std::error_code ec;
  auto absolute = std::filesystem::absolute(cacheDir, ec);
  if (!ec)
    cacheDir = absolute.lexically_normal().string();
  if (const char *autostartEnv = std::getenv("FLOWC_AUTOSTART"))
    autostart = std::string(autostartEnv) != "0";
  auto fromEnvironment = [](std::string &field, const char *variable) {
    if (const char *value = std::getenv(variable); field.empty() && value && *value)
      field = value;
  };
  fromEnvironment(daemonUrl, "FLOWC_DAEMON");
  fromEnvironment(tlsCa, "FLOWC_TLS_CA");
  fromEnvironment(tlsCert, "FLOWC_TLS_CERT");
  fromEnvironment(tlsKey, "FLOWC_TLS_KEY");
  fromEnvironment(token, "FLOWC_TOKEN");
  if (daemonUrl.starts_with("unix:"))
    socketPath = daemonUrl.substr(5);
  if (socketPath.empty()) {
    const char *socket = std::getenv("FLOWC_SOCKET");
    socketPath = socket && *socket ? socket : cacheDir + "/flowcd.sock";
  }
}

Expected<std::string> absoluteModelPath(const std::string &path) {
  std::error_code ec;
  std::filesystem::path absolute = std::filesystem::absolute(path, ec);
  struct stat st;
  if (ec || ::stat(absolute.c_str(), &st) != 0)
    return errno == EACCES ? errnoStatus(errno, "cannot read model '" + path + "'")
                           : notFound("cannot read model '" + path + "': no such file");
  if (!std::filesystem::is_regular_file(absolute, ec))
    return invalidArgument("cannot read model '" + path +
                           "': not a regular file (a FIFO, device or socket)");
  if (::access(absolute.c_str(), R_OK) != 0)
    return errnoStatus(errno, "cannot read model '" + path + "'");
  return absolute.lexically_normal().string();
}

Status fromGrpc(const grpc::Status &status, const std::string &what) {
  Status answer = rpc::fromGrpcStatus(status);
  switch (answer.code()) {
  // The daemon's verdict on the input: its message says what and where.
  case StatusCode::Ok:
  case StatusCode::InvalidArgument:
  case StatusCode::NotFound:
  case StatusCode::Unimplemented:
  case StatusCode::ResourceExhausted:
  case StatusCode::DataLoss:
  case StatusCode::FailedPrecondition:
    return answer;
  case StatusCode::Unavailable:
    return unavailable(what + ": daemon unavailable: " + answer.message());
  // Refused by the daemon's front door: the token or its role, not the
  // input, is wrong.
  case StatusCode::Unauthenticated:
    return failedPrecondition(what + ": unauthenticated: " + answer.message());
  case StatusCode::PermissionDenied:
    return failedPrecondition(what + ": permission denied: " + answer.message());
  default:
    return internalError(what + ": " + answer.message());
  }
}

CLI::Validator targetValidator() {
  return CLI::Validator(
      [](std::string &value) {
        Expected<Target> target = parseTarget(value);
        return target ? std::string() : target.status().message();
      },
      "TARGET");
}

Status setCompileOptions(const std::string &target, int optLevel,
                         const std::string &precision,
                         flowc::v1::CompileOptions &options) {
  FLOWC_ASSIGN_OR_RETURN(Target parsedTarget, parseTarget(target));
  FLOWC_ASSIGN_OR_RETURN(Precision parsedPrecision, parsePrecision(precision));
  options.set_target(rpc::toProto(parsedTarget));
  options.set_opt_level(optLevel);
  options.set_precision(rpc::toProto(parsedPrecision));
  return Status::ok();
}

Expected<flowc::v1::HealthResponse> DaemonClient::health(int timeoutMs) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(timeoutMs));
  flowc::v1::HealthResponse response;
  grpc::Status status = admin_->Health(&context, flowc::v1::HealthRequest(), &response);
  if (status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
      status.error_code() == grpc::StatusCode::PERMISSION_DENIED)
    return fromGrpc(status, "health");
  if (!status.ok())
    return unavailable(remote_ ? "health: daemon " + endpoint_ +
                                     " unavailable: " + status.error_message()
                               : status.error_message());
  return response;
}

namespace {

/// A fresh channel with its own subchannel: after an auto-start, a channel
/// whose first attempt failed would wait out gRPC's reconnect backoff
/// (seconds) before seeing the new daemon.
std::shared_ptr<grpc::Channel> makeChannel(const std::string &socketPath) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel("unix:" + socketPath,
                                   grpc::InsecureChannelCredentials(), args);
}

} // namespace

void DaemonClient::attach(std::shared_ptr<grpc::Channel> channel) {
  channel_ = std::move(channel);
  compiler_ = flowc::v1::Compiler::NewStub(channel_);
  admin_ = flowc::v1::Admin::NewStub(channel_);
  cache_ = flowc::v1::Cache::NewStub(channel_);
}

namespace {

/// How long an auto-started daemon waits for work before it exits.
constexpr const char *kAutostartIdleTimeout = "1h";

/// A daemon another user runs could return any code, which `flowc run`
/// then executes: its socket is refused unless the user says otherwise.
Status requireOwnSocket(const GlobalOptions &options) {
  struct stat st;
  if (::lstat(options.socketPath.c_str(), &st) != 0)
    return Status::ok(); // Nothing there yet: this user's daemon will be.
  if (!S_ISSOCK(st.st_mode))
    return failedPrecondition("'" + options.socketPath +
                              "' is not a socket (see --socket, FLOWC_SOCKET)");
  if (st.st_uid == ::geteuid() || options.trustForeignDaemon)
    return Status::ok();
  return failedPrecondition(
      "the daemon socket '" + options.socketPath + "' belongs to uid " +
      std::to_string(st.st_uid) + ", not to you (uid " + std::to_string(::geteuid()) +
      "): flowc would run the code that daemon returns; use a cache directory of your "
      "own, or --trust-daemon if you trust that user");
}

} // namespace

namespace {

/// Adds the bearer token to every call's metadata: one place for every
/// stub and command.
class BearerInterceptor : public grpc::experimental::Interceptor {
public:
  explicit BearerInterceptor(const std::string &header) : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods *methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA))
      methods->GetSendInitialMetadata()->insert({"authorization", header_});
    methods->Proceed();
  }

private:
  const std::string &header_;
};

class BearerInterceptorFactory
    : public grpc::experimental::ClientInterceptorFactoryInterface {
public:
  explicit BearerInterceptorFactory(std::string token) : header_("Bearer " + token) {}
  grpc::experimental::Interceptor *
  CreateClientInterceptor(grpc::experimental::ClientRpcInfo *) override {
    return new BearerInterceptor(header_);
  }

private:
  // Lives as long as the channel, which outlives its calls.
  const std::string header_;
};

bool isLoopbackHost(const std::string &host) {
  if (host == "localhost" || host == "::1")
    return true;
  in_addr v4{};
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

/// "HOST:PORT" or "[V6]:PORT" with a port of 1 to 65535; the host, or
/// InvalidArgument quoting the URL.
Expected<std::string> hostOfAuthority(const std::string &url,
                                      const std::string &authority) {
  auto bad = [&] {
    return invalidArgument(
        "--daemon '" + url +
        "': expected unix:/PATH, grpc://HOST:PORT or grpcs://HOST:PORT");
  };
  size_t colon = authority.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == authority.size())
    return bad();
  std::string host = authority.substr(0, colon);
  std::string port = authority.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) == 0 || std::stoi(port) > 65535)
    return bad();
  if (host.starts_with("[")) {
    if (!host.ends_with("]") || host.size() < 3)
      return bad();
    host = host.substr(1, host.size() - 2);
  }
  if (host.find_first_of("/@?# ") != std::string::npos)
    return bad();
  return host;
}

Expected<std::string> readOptionFile(const std::string &path, const std::string &flag) {
  auto text = readFileToString(path);
  if (!text)
    return invalidArgument(flag + " '" + path + "': " + text.status().message());
  return text;
}

} // namespace

Expected<std::unique_ptr<DaemonClient>>
DaemonClient::connectTcp(const GlobalOptions &options) {
  const std::string &url = options.daemonUrl;
  bool tls = url.starts_with("grpcs://");
  std::string authority = url.substr(url.find("://") + 3);
  FLOWC_ASSIGN_OR_RETURN(std::string host, hostOfAuthority(url, authority));
  if (!tls && !isLoopbackHost(host))
    return invalidArgument("--daemon '" + url +
                           "': plaintext grpc:// is for loopback only (127.0.0.1, ::1, "
                           "localhost); use grpcs://");
  // A header value is visible ASCII; the token itself is never quoted.
  if (!std::all_of(options.token.begin(), options.token.end(),
                   [](char c) { return c > 0x20 && c < 0x7f; }))
    return invalidArgument("--token / FLOWC_TOKEN holds a space or a character that is "
                           "not printable ASCII");
  if (!tls && (!options.tlsCa.empty() || !options.tlsCert.empty()))
    return invalidArgument("--tls-ca and --tls-cert need a grpcs:// --daemon");
  if (options.tlsCert.empty() != options.tlsKey.empty())
    return invalidArgument("--tls-cert and --tls-key go together");
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (tls) {
    grpc::SslCredentialsOptions ssl;
    if (!options.tlsCa.empty()) {
      FLOWC_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                             readOptionFile(options.tlsCa, "--tls-ca"));
    }
    if (!options.tlsCert.empty()) {
      FLOWC_ASSIGN_OR_RETURN(ssl.pem_cert_chain,
                             readOptionFile(options.tlsCert, "--tls-cert"));
      FLOWC_ASSIGN_OR_RETURN(ssl.pem_private_key,
                             readOptionFile(options.tlsKey, "--tls-key"));
    }
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  if (!options.token.empty())
    interceptors.push_back(std::make_unique<BearerInterceptorFactory>(options.token));
  auto client = std::make_unique<DaemonClient>();
  client->remote_ = true;
  client->endpoint_ = url;
  client->attach(grpc::experimental::CreateCustomChannelWithInterceptors(
      authority, credentials, grpc::ChannelArguments(), std::move(interceptors)));
  return client;
}

Expected<std::unique_ptr<DaemonClient>>
DaemonClient::connect(const GlobalOptions &options, bool autostart) {
  if (options.daemonUrl.starts_with("grpc://") ||
      options.daemonUrl.starts_with("grpcs://"))
    return connectTcp(options);
  if (!options.daemonUrl.empty() && !options.daemonUrl.starts_with("unix:"))
    return invalidArgument(
        "--daemon '" + options.daemonUrl +
        "': expected unix:/PATH, grpc://HOST:PORT or grpcs://HOST:PORT");
  if (!options.token.empty() || !options.tlsCa.empty() || !options.tlsCert.empty())
    return invalidArgument("--token, --tls-ca and --tls-cert are for a TCP --daemon; the "
                           "unix socket needs none");
  // gRPC would otherwise retry a path it cannot bind or connect to until
  // the deadline, and say nothing useful.
  if (options.socketPath.size() > kMaxUnixSocketPath)
    return invalidArgument("socket path '" + options.socketPath + "' is " +
                           std::to_string(options.socketPath.size()) +
                           " bytes; unix sockets allow at most " +
                           std::to_string(kMaxUnixSocketPath) +
                           " (use a shorter --socket or FLOWC_SOCKET, or a shorter "
                           "--cache-dir)");
  FLOWC_RETURN_IF_ERROR(requireOwnSocket(options));
  auto client = std::make_unique<DaemonClient>();
  client->endpoint_ = options.socketPath;
  client->attach(makeChannel(options.socketPath));
  // A plain connect() says whether a daemon listens, in microseconds; the
  // channel then connects on its first call. (A health RPC here would add a
  // round trip to every command, a cache hit's included.)
  int refused = unixSocketConnectError(options.socketPath);
  if (refused == 0)
    return client;
  if (refused == EACCES || refused == EPERM)
    return unavailable("cannot connect to the daemon socket '" + options.socketPath +
                       "': permission denied (a daemon's socket is for its own user "
                       "only)");
  if (!autostart || !options.autostart)
    return unavailable("no flowcd is listening on '" + options.socketPath + "'" +
                       (options.autostart ? "" : " (FLOWC_AUTOSTART=0)"));

  std::error_code ec;
  std::filesystem::create_directories(options.cacheDir, ec);
  if (ec)
    return errnoStatus(ec.value(),
                       "cannot create cache directory '" + options.cacheDir + "'");
  std::string log = options.cacheDir + "/flowcd.log";
  FLOWC_RETURN_IF_ERROR(spawnDetached(
      {executableDirectory() + "/flowcd", "--cache-dir", options.cacheDir, "--socket",
       options.socketPath, "--log-file", log, "--idle-timeout", kAutostartIdleTimeout},
      log));
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    client->attach(makeChannel(options.socketPath));
    auto health = client->health(500);
    if (!health)
      continue;
    // Said once, where a person is watching; scripts' output stays clean.
    if (isatty(STDERR_FILENO))
      std::cerr << "flowc: started flowcd (pid " << health->pid() << ") on "
                << options.socketPath << "; log " << log << "; it exits after "
                << kAutostartIdleTimeout << " idle" << std::endl;
    return client;
  }
  return unavailable("started flowcd but it does not answer on '" + options.socketPath +
                     "'; see " + log);
}

namespace {

/// The process's one command decides it once (setErrorFormat).
struct ErrorOutput {
  ErrorFormat format = ErrorFormat::Text;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
};

ErrorOutput &errorOutput() {
  static ErrorOutput output;
  return output;
}

int report(const Status &status, const flowc::v1::ErrorDetail *detail) {
  std::cerr << "flowc: error: " << oneLine(status.message()) << std::endl;
  const ErrorOutput &output = errorOutput();
  if (output.format == ErrorFormat::Json)
    printJson({{"error", errorJson(status, detail)}});
  if (output.format == ErrorFormat::JsonEvent)
    printJson({{"event", "error"},
               {"elapsed", std::chrono::duration<double>(
                               std::chrono::steady_clock::now() - output.started)
                               .count()},
               {"error", errorJson(status, detail)}});
  return exitCodeFor(status.code());
}

} // namespace

void setErrorFormat(ErrorFormat format, std::chrono::steady_clock::time_point started) {
  errorOutput() = {format, started};
}

nlohmann::json errorJson(const Status &status, const flowc::v1::ErrorDetail *detail) {
  ErrorFields fields;
  if (detail) {
    fields = {detail->file(), detail->node(), detail->op(), detail->digest()};
  } else {
    fields = parseErrorFields(status.message());
  }
  return {{"exit_code", exitCodeFor(status.code())},
          {"code", statusCodeName(status.code())},
          {"kind", statusKindName(status.code())},
          {"message", oneLine(status.message())},
          {"file", fields.file},
          {"node", fields.node},
          {"op", fields.op},
          {"digest", fields.digest}};
}

std::optional<flowc::v1::ErrorDetail> errorDetailOf(const grpc::ClientContext &context) {
  const auto &trailers = context.GetServerTrailingMetadata();
  auto found = trailers.find("grpc-status-details-bin");
  if (found == trailers.end())
    return std::nullopt;
  return rpc::parseErrorDetail(
      std::string_view(found->second.data(), found->second.size()));
}

std::string oneLine(const std::string &text) {
  std::string message = text;
  for (char &c : message)
    if (c == '\n')
      c = ' ';
  while (!message.empty() && message.back() == ' ')
    message.pop_back();
  return message;
}

int reportError(const Status &status) { return report(status, nullptr); }

int reportError(const Status &status, const flowc::v1::ErrorDetail &detail) {
  return report(status, &detail);
}

Expected<std::pair<std::string, std::vector<int64_t>>>
parseInputShape(const std::string &spec) {
  auto bad = [&] {
    return invalidArgument("--input-shape '" + spec +
                           "' is not NAME=DIMS (DIMS like 1x128 or 1,128)");
  };
  size_t eq = spec.rfind('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
    return bad();
  std::vector<int64_t> dims;
  std::string text = spec.substr(eq + 1);
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find_first_of("x,", begin);
    std::string part = text.substr(begin, end == std::string::npos ? end : end - begin);
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos ||
        part.size() > 12)
      return bad();
    dims.push_back(std::stoll(part));
    if (end == std::string::npos)
      break;
    begin = end + 1;
  }
  return std::make_pair(spec.substr(0, eq), dims);
}

int exitCodeFor(StatusCode code) {
  switch (code) {
  case StatusCode::InvalidArgument:
  case StatusCode::NotFound:
  case StatusCode::FailedPrecondition:
  case StatusCode::DataLoss:
    return kExitBadInput;
  case StatusCode::Unimplemented:
    return kExitUnsupported;
  case StatusCode::Unavailable:
  case StatusCode::ResourceExhausted:
    return kExitUnavailable;
  // Credentials the daemon or a server refused: the user's input is wrong.
  case StatusCode::Unauthenticated:
  case StatusCode::PermissionDenied:
    return kExitBadInput;
  default:
    return kExitFailure;
  }
}

void printJson(const nlohmann::json &json) {
  std::cout << json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
            << std::endl;
}

std::string hitRateText(uint64_t hits, uint64_t misses) {
  nlohmann::json rate = rpc::hitRate(hits, misses);
  if (rate.is_null())
    return "-";
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << rate.get<double>() * 100 << "%";
  return out.str();
}

} // namespace flowc::cli
