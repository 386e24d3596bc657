#include "flowc/daemon/Server.h"

#include "AdminService.h"
#include "CacheService.h"
#include "CompilerService.h"
#include "DaemonContext.h"
#include "RemoteTaskExecutor.h"
#include "WorkerProcess.h"

#include "flowc/remote/RemoteExecution.h"
#include "flowc/worker/WorkerProtocol.h"
#include "flowc/support/UnixSocket.h"

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/server_interceptor.h>
#include <spdlog/spdlog.h>
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
  }
  bool remoteCacheSettings = !remoteCache.headers.empty() || remoteCache.readOnly ||
                             !remoteCache.caFile.empty() ||
                             !remoteCache.clientCertFile.empty() ||
                             !remoteCache.signKeyFile.empty() ||
                             !remoteCache.trustKeyFiles.empty();
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
  return Status::ok();
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
  std::unique_ptr<CompilerService> compiler;
  std::unique_ptr<AdminService> admin;
  std::unique_ptr<CacheService> cacheService;
  std::unique_ptr<grpc::Server> grpcServer;
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
  FLOWC_ASSIGN_OR_RETURN(context.tasks, makeTaskExecutor(context));
  context.jobs = std::make_unique<scheduler::JobQueue>(options.workers);
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

  state->compiler = std::make_unique<CompilerService>(context);
  state->admin = std::make_unique<AdminService>(context);
  state->cacheService = std::make_unique<CacheService>(context);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + options.socketPath,
                           grpc::InsecureServerCredentials());
  int tcpPort = 0;
  if (!options.tcpAddress.empty())
    builder.AddListeningPort(options.tcpAddress, grpc::InsecureServerCredentials(),
                             &tcpPort);
  builder.RegisterService(state->compiler.get());
  builder.RegisterService(state->admin.get());
  builder.RegisterService(state->cacheService.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(std::make_unique<ActivityInterceptorFactory>(context.activity));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  // The socket is its owner's alone (the kernel checks write permission
  // at connect): a client is then this daemon's user or root, so a model
  // path it names is one it could read itself. Created under a umask that
  // leaves no window, and set again in case the file existed.
  mode_t umaskBefore = ::umask(077);
  state->grpcServer = builder.BuildAndStart();
  ::umask(umaskBefore);
  if (state->grpcServer && ::chmod(options.socketPath.c_str(), 0600) != 0)
    return errnoStatus(errno,
                       "cannot make the socket '" + options.socketPath + "' private");
  if (!state->grpcServer)
    return unavailable(
        "cannot listen on '" + options.socketPath + "'" +
        (options.tcpAddress.empty() ? "" : " and '" + options.tcpAddress + "'"));
  spdlog::info("flowcd {} listening socket={} tcp={} cache={} workers={} max_size={} "
               "idle_timeout_s={} pid={}",
               FLOWC_BUILD_ID, options.socketPath,
               options.tcpAddress.empty() ? "-" : options.tcpAddress, options.cacheDir,
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
  state_->grpcServer->Shutdown(std::chrono::system_clock::now() +
                               std::chrono::seconds(30));
  state_->grpcServer->Wait();
  ::unlink(state_->context.options.socketPath.c_str());
  spdlog::info("flowcd stopped");
}

} // namespace flowc::daemon
