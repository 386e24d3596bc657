#include "flowc/runtime/Tuning.h"
#include "flowc/daemon/Server.h"

#include "AdminService.h"
#include "Auth.h"
#include "CacheService.h"
#include "CompilerService.h"
#include "DaemonContext.h"
#include "RemoteTaskExecutor.h"
#include "Trace.h"
#include "WebFront.h"
#include "WorkerProcess.h"

#include "flowc/remote/RemoteExecution.h"
#include "flowc/support/MappedFile.h"
#include "flowc/worker/WorkerProtocol.h"
#include "flowc/support/UnixSocket.h"

#include <arpa/inet.h>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_posix.h>
#include <grpcpp/support/server_interceptor.h>
#include <openssl/bio.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace flowc::daemon {

namespace {

/// Counts every RPC from its start to its end (an interceptor lives as long
/// as its call), so that the idle timeout never stops a daemon mid-request.
class ActivityInterceptor : public grpc::experimental::Interceptor {
public:
  explicit ActivityInterceptor(Activity &activity) : activity_(activity) {
    activity_.begin();
  }
  ~ActivityInterceptor() override { activity_.end(); }
  void Intercept(grpc::experimental::InterceptorBatchMethods *methods) override {
    methods->Proceed();
  }

private:
  Activity &activity_;
};

class ActivityInterceptorFactory
    : public grpc::experimental::ServerInterceptorFactoryInterface {
public:
  explicit ActivityInterceptorFactory(Activity &activity) : activity_(activity) {}
  grpc::experimental::Interceptor *
  CreateServerInterceptor(grpc::experimental::ServerRpcInfo *) override {
    return new ActivityInterceptor(activity_);
  }

private:
  Activity &activity_;
};

/// Waits for a shutdown signal, or until the daemon has been idle (no
/// request in flight, no job) for `idleTimeoutSeconds` when that is set.
/// Returns the signal, or 0 for the idle timeout.
int waitForShutdown(const sigset_t &signals, unsigned idleTimeoutSeconds,
                    DaemonContext &context) {
  while (true) {
    timespec poll{1, 0};
    int received = sigtimedwait(&signals, nullptr, &poll);
    if (received > 0)
      return received;
    if (idleTimeoutSeconds == 0)
      continue;
    scheduler::JobCounts jobs = context.jobs->counts();
    if (jobs.queued || jobs.running)
      continue;
    if (context.activity.idleSeconds() >= idleTimeoutSeconds)
      return 0;
  }
}

/// The daemon's unix socket. It accepts connections itself and hands each
/// to gRPC as a file descriptor, so that a call can read its peer's
/// credentials (SO_PEERCRED) from that descriptor: gRPC's own unix
/// listener tells a handler nothing about the peer.
class UnixListener {
public:
  /// Stops accepting and removes the socket file.
  ~UnixListener() {
    stop();
    if (fd_ >= 0)
      ::close(fd_);
    if (bound_)
      ::unlink(path_.c_str());
    for (int fd : wake_)
      if (fd >= 0)
        ::close(fd);
  }

  /// Binds and listens on `path`, owner-only (the kernel checks write
  /// permission at connect, so a client is the daemon's user or root).
  /// Created under a umask that leaves no window, and set again in case
  /// the file existed. Unavailable if it cannot.
  static Expected<std::unique_ptr<UnixListener>> bind(const std::string &path) {
    auto listener = std::unique_ptr<UnixListener>(new UnixListener());
    listener->path_ = path;
    listener->fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener->fd_ < 0 || ::pipe2(listener->wake_, O_CLOEXEC) != 0)
      return errnoStatus(errno, "cannot create the socket '" + path + "'");
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.data(), path.size());
    mode_t umaskBefore = ::umask(077);
    int bound =
        ::bind(listener->fd_, reinterpret_cast<sockaddr *>(&address), sizeof address);
    int bindError = errno;
    ::umask(umaskBefore);
    if (bound != 0)
      return unavailable("cannot listen on '" + path + "': " + std::strerror(bindError));
    listener->bound_ = true;
    if (::chmod(path.c_str(), 0600) != 0)
      return errnoStatus(errno, "cannot make the socket '" + path + "' private");
    if (::listen(listener->fd_, SOMAXCONN) != 0)
      return unavailable("cannot listen on '" + path + "': " + std::strerror(errno));
    return listener;
  }

  /// Starts accepting into `server`, which must outlive stop().
  void start(grpc::Server &server) {
    thread_ = std::thread([this, &server] { acceptLoop(server); });
  }

  /// Stops accepting; connections already handed over stay gRPC's.
  void stop() {
    if (!thread_.joinable())
      return;
    char byte = 0;
    (void)!::write(wake_[1], &byte, 1);
    thread_.join();
  }

private:
  UnixListener() = default;

  void acceptLoop(grpc::Server &server) {
    pollfd polled[2] = {{fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    while (true) {
      if (::poll(polled, 2, -1) < 0) {
        if (errno == EINTR)
          continue;
        spdlog::error("socket {}: poll: {}", path_, std::strerror(errno));
        return;
      }
      if (polled[1].revents)
        return;
      // gRPC's poller expects a non-blocking descriptor.
      int client = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (client >= 0) {
        grpc::AddInsecureChannelFromFd(&server, client);
        continue;
      }
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED)
        continue;
      // Out of descriptors: wait for some to close instead of spinning.
      spdlog::warn("socket {}: accept: {}", path_, std::strerror(errno));
      ::poll(nullptr, 0, 100);
    }
  }

  std::string path_;
  int fd_ = -1;
  int wake_[2] = {-1, -1};
  bool bound_ = false;
  std::thread thread_;
};

/// A PEM file's text, checked with OpenSSL so that a bad file fails with
/// its name instead of gRPC's "cannot listen".
Expected<std::string> readPem(const std::string &path, const std::string &flag,
                              bool privateKey) {
  if (privateKey)
    FLOWC_RETURN_IF_ERROR(requirePrivateFile(path, flag));
  auto text = readFileToString(path);
  if (!text)
    return invalidArgument(flag + " '" + path + "': " + text.status().message());
  BIO *bio = BIO_new_mem_buf(text->data(), static_cast<int>(text->size()));
  bool parsed = false;
  if (privateKey) {
    EVP_PKEY *key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
    parsed = key != nullptr;
    EVP_PKEY_free(key);
  } else {
    X509 *certificate = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr);
    parsed = certificate != nullptr;
    X509_free(certificate);
  }
  BIO_free(bio);
  if (!parsed)
    return invalidArgument(flag + " '" + path + "' holds no PEM " +
                           (privateKey ? "private key" : "certificate"));
  return text;
}

/// The TCP port's credentials: TLS (or loopback-only plaintext), with the
/// token check on every call.
Expected<std::shared_ptr<grpc::ServerCredentials>>
tcpCredentials(const FrontDoorOptions &door) {
  std::vector<TokenEntry> tokens;
  if (!door.tokensFile.empty()) {
    FLOWC_ASSIGN_OR_RETURN(tokens, loadTokensFile(door.tokensFile));
  }
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (door.insecureLoopback) {
    // Local credentials accept only loopback peers, whatever the address.
    credentials = grpc::experimental::LocalServerCredentials(LOCAL_TCP);
  } else {
    grpc::SslServerCredentialsOptions ssl;
    FLOWC_ASSIGN_OR_RETURN(std::string cert, readPem(door.tlsCert, "--tls-cert", false));
    FLOWC_ASSIGN_OR_RETURN(std::string key, readPem(door.tlsKey, "--tls-key", true));
    ssl.pem_key_cert_pairs.push_back({std::move(key), std::move(cert)});
    if (!door.tlsClientCa.empty()) {
      FLOWC_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                             readPem(door.tlsClientCa, "--tls-client-ca", false));
      ssl.client_certificate_request =
          GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
    credentials = grpc::SslServerCredentials(ssl);
  }
  TokenMode mode = tokens.empty() ? TokenMode::Open : TokenMode::Required;
  credentials->SetAuthMetadataProcessor(makeTokenAuthProcessor(std::move(tokens), mode));
  return credentials;
}

} // namespace

Status DaemonOptions::validate() {
  if (cacheDir.empty())
    return invalidArgument("no cache directory (use --cache-dir or FLOWC_CACHE_DIR)");
  if (socketPath.empty())
    socketPath = cacheDir + "/flowcd.sock";
  if (socketPath.size() > kMaxUnixSocketPath)
    return invalidArgument("socket path '" + socketPath + "' is longer than " +
                           std::to_string(kMaxUnixSocketPath) + " bytes");
  if (workers == 0)
    workers = std::max(1u, std::thread::hardware_concurrency());
  if (!remote.url.empty()) {
    auto endpoint = remote::parseEndpoint(remote.url, remote.instance);
    if (!endpoint)
      return invalidArgument("--remote-executor: " + endpoint.status().message());
  } else if (!remote.platform.empty() || remote.fallbackLocal) {
    return invalidArgument("--remote-platform and --remote-fallback need "
                           "--remote-executor");
  } else if (!remote.instance.empty() && remoteCache.url.empty()) {
    return invalidArgument("--remote-instance needs --remote-executor or --remote-cache");
  } else if (!remote.gpus.empty() && remoteCache.url.empty()) {
    return invalidArgument("--remote-gpu needs --remote-executor or --remote-cache");
  }
  bool remoteCacheSettings =
      !remoteCache.headers.empty() || remoteCache.readOnly ||
      !remoteCache.caFile.empty() || !remoteCache.clientCertFile.empty() ||
      !remoteCache.signKeyFile.empty() || !remoteCache.trustKeyFiles.empty();
  if (remoteCache.url.empty() && remoteCacheSettings)
    return invalidArgument("--remote-header, --remote-read-only, --remote-ca-file, "
                           "--remote-client-cert, --sign-key and --trust-key need "
                           "--remote-cache");
  if (!remoteCache.url.empty()) {
    RemoteCacheState state(*this);
    auto options = worker::fromProto(*state.forJob());
    Status usable = options ? worker::checkRemoteTierOptions(*options) : options.status();
    if (!usable)
      return invalidArgument("--remote-cache: " + usable.message());
  }
  // Off loopback the web front is served as the TCP front is, with its
  // certificate and its tokens.
  if (http != "auto" && http != "off" && !isLoopbackAddress(http) &&
      (tcpAddress.empty() || frontDoor.tlsCert.empty() || frontDoor.tokensFile.empty()))
    return invalidArgument(
        "--http '" + http +
        "' is not a loopback HOST:PORT (127.0.0.1, [::1] or "
        "localhost): off loopback the web UI is served with the TCP "
        "front's TLS and tokens, so it needs --listen with --tls-cert, "
        "--tls-key and --tokens; or use 'auto' or 'off'");
  return validateFrontDoor();
}

Status DaemonOptions::validateFrontDoor() const {
  const FrontDoorOptions &door = frontDoor;
  bool tls = !door.tlsCert.empty() || !door.tlsKey.empty();
  if (tcpAddress.empty()) {
    if (tls || !door.tlsClientCa.empty() || !door.tokensFile.empty() ||
        door.insecureLoopback)
      return invalidArgument(
          "--tls-cert, --tls-key, --tls-client-ca, --tokens and "
          "--insecure-loopback concern the TCP port: they need --listen");
    return Status::ok();
  }
  if (door.insecureLoopback) {
    if (!isLoopbackAddress(tcpAddress))
      return invalidArgument(
          "--insecure-loopback: --listen '" + tcpAddress +
          "' is not a loopback address (127.0.0.1, ::1 or localhost); "
          "any other address needs --tls-cert, --tls-key and --tokens");
    if (tls || !door.tlsClientCa.empty())
      return invalidArgument("--insecure-loopback is plaintext: drop it, or drop "
                             "--tls-cert, --tls-key and --tls-client-ca");
    return Status::ok();
  }
  if (door.tlsCert.empty() || door.tlsKey.empty())
    return invalidArgument("--listen '" + tcpAddress +
                           "' needs TLS: --tls-cert FILE and --tls-key FILE (PEM), or "
                           "--insecure-loopback on a loopback address for development");
  if (door.tokensFile.empty())
    return invalidArgument("--listen '" + tcpAddress +
                           "' needs --tokens FILE: a TCP port with TLS but no tokens "
                           "would let anyone who reaches it clear the cache or shut the "
                           "daemon down");
  return Status::ok();
}

void DaemonContext::describeWorkers(flowc::v1::WorkersResponse &out) const {
  tasks->describe(out);
  for (const std::string &gpu : options.remote.gpus)
    out.add_remote_gpus(std::string(runtime::gpuNameOf(gpu)));
}

/// The local pool, or the remote engine in front of it.
static Expected<std::unique_ptr<TaskExecutor>> makeTaskExecutor(DaemonContext &context) {
  const DaemonOptions &options = context.options;
  auto local = std::make_unique<LocalExecutor>(
      *context.cache, LocalExecutor::Options{context.workerPath, options.workers,
                                             options.taskMemoryLimit});
  if (options.remote.url.empty())
    return std::unique_ptr<TaskExecutor>(std::move(local));
  return makeRemoteTaskExecutor(*context.cache, context.workerPath, options.remote,
                                std::move(local));
}

struct Server::State {
  DaemonContext context;
  std::unique_ptr<UnixListener> unixListener;
  std::unique_ptr<CompilerService> compiler;
  std::unique_ptr<AdminService> admin;
  std::unique_ptr<CacheService> cacheService;
  std::unique_ptr<grpc::Server> grpcServer;
  std::unique_ptr<WebFront> web;
};

Server::Server(std::unique_ptr<State> state) : state_(std::move(state)) {}
Server::~Server() = default;

void blockShutdownSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
}

Expected<std::unique_ptr<Server>> Server::start(DaemonOptions options) {
  FLOWC_RETURN_IF_ERROR(options.validate());
  auto state = std::make_unique<State>();
  DaemonContext &context = state->context;
  context.options = options;
  FLOWC_ASSIGN_OR_RETURN(context.workerPath, workerExecutable());
  FLOWC_ASSIGN_OR_RETURN(context.cache,
                         cache::Cache::open(options.cacheDir, options.cache));
  // A daemon killed mid-write leaves orphans; make the index and the files
  // agree before serving.
  FLOWC_ASSIGN_OR_RETURN(cache::VerifyReport reconciled, context.cache->reconcile());
  if (reconciled.missingFiles || reconciled.orphanFiles)
    spdlog::warn("cache reconciled missing_files={} orphan_files={} quarantined={}",
                 reconciled.missingFiles, reconciled.orphanFiles, reconciled.quarantined);
  context.executor =
      std::make_unique<worker::CompileExecutor>(*context.cache, FLOWC_BUILD_ID);
  // Hits answered here key CUDA compiles as the jobs' processes do.
  context.executor->setRemoteGpus({options.remote.gpus, !options.remote.url.empty()});
  FLOWC_ASSIGN_OR_RETURN(context.tasks, makeTaskExecutor(context));
  context.jobs = std::make_unique<scheduler::JobQueue>(
      options.workers, lastTracedJobNumber(context.traceDir()) + 1);
  context.remoteCache = std::make_unique<RemoteCacheState>(options);
  if (context.remoteCache->configured())
    spdlog::info("remote cache {} instance={} mode={} upload_weights={}",
                 options.remoteCache.url,
                 options.remote.instance.empty() ? "-" : options.remote.instance,
                 options.remoteCache.readOnly ? "read-only" : "read-write",
                 options.remoteCache.uploadWeights);

  if (unixSocketAccepts(options.socketPath))
    return failedPrecondition("another flowcd is already listening on '" +
                              options.socketPath + "'");
  // A socket file nobody answers on was left by a daemon that died.
  ::unlink(options.socketPath.c_str());

  // Every method the TCP port could be asked for has a role, or none is
  // served: a method added without one would otherwise be open.
  if (std::vector<std::string> missing = methodsWithoutRole(); !missing.empty())
    return internalError("method '" + missing.front() +
                         "' has no role in the front "
                         "door's table (daemon/lib/Auth.cpp)");
  std::shared_ptr<grpc::ServerCredentials> tcp;
  if (!options.tcpAddress.empty()) {
    FLOWC_ASSIGN_OR_RETURN(tcp, tcpCredentials(options.frontDoor));
  }
  FLOWC_ASSIGN_OR_RETURN(state->unixListener, UnixListener::bind(options.socketPath));
  // Before any RPC is served, so that Health has the web UI's URL.
  if (options.http != "off") {
    FLOWC_ASSIGN_OR_RETURN(state->web, WebFront::start(context, options.http));
    context.webUrl = state->web->urlWithToken();
  }

  state->compiler = std::make_unique<CompilerService>(context);
  state->admin = std::make_unique<AdminService>(context);
  state->cacheService = std::make_unique<CacheService>(context);
  grpc::ServerBuilder builder;
  int tcpPort = 0;
  if (tcp)
    builder.AddListeningPort(options.tcpAddress, tcp, &tcpPort);
  builder.RegisterService(state->compiler.get());
  builder.RegisterService(state->admin.get());
  builder.RegisterService(state->cacheService.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<ActivityInterceptorFactory>(context.activity));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  state->grpcServer = builder.BuildAndStart();
  if (!state->grpcServer || (tcp && tcpPort == 0))
    return unavailable("cannot listen on '" + options.tcpAddress + "'");
  state->unixListener->start(*state->grpcServer);
  const FrontDoorOptions &door = options.frontDoor;
  spdlog::info("flowcd {} listening socket={} tcp={} tcp_security={} tcp_tokens={} "
               "cache={} workers={} max_size={} idle_timeout_s={} pid={}",
               FLOWC_BUILD_ID, options.socketPath,
               // The port bound, for a --listen HOST:0.
               options.tcpAddress.empty()
                   ? "-"
                   : options.tcpAddress.substr(0, options.tcpAddress.rfind(':') + 1) +
                         std::to_string(tcpPort),
               options.tcpAddress.empty() ? "-"
               : door.insecureLoopback    ? "loopback-plaintext"
               : door.tlsClientCa.empty() ? "tls"
                                          : "mtls",
               door.tokensFile.empty() ? "-" : door.tokensFile, options.cacheDir,
               context.jobs->workerCount(), options.cache.maxBytes,
               options.idleTimeoutSeconds, getpid());
  return std::unique_ptr<Server>(new Server(std::move(state)));
}

void Server::runUntilShutdown() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);
  int received = waitForShutdown(signals, state_->context.options.idleTimeoutSeconds,
                                 state_->context);
  if (received)
    spdlog::info("shutting down on {}", strsignal(received));
  else
    spdlog::info("shutting down after {} s idle",
                 state_->context.options.idleTimeoutSeconds);
  // Refuse new work, let running compiles finish and streams drain.
  state_->context.jobs->shutdown();
  // Event streams would hold the shutdown up until their clients left.
  if (state_->web)
    state_->web->stop();
  state_->unixListener->stop();
  state_->grpcServer->Shutdown(std::chrono::system_clock::now() +
                               std::chrono::seconds(30));
  state_->grpcServer->Wait();
  ::unlink(state_->context.options.socketPath.c_str());
  spdlog::info("flowcd stopped");
}

} // namespace flowc::daemon
