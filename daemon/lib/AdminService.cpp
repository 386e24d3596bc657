#include "AdminService.h"

#include "GrpcStatus.h"

#include <csignal>
#include <spdlog/spdlog.h>
#include <unistd.h>

namespace flowc::daemon {

grpc::Status AdminService::Health(grpc::ServerContext *, const flowc::v1::HealthRequest *,
                                  flowc::v1::HealthResponse *response) {
  response->set_version(FLOWC_BUILD_ID);
  response->set_pid(getpid());
  response->set_cache_dir(context_.options.cacheDir);
  response->set_uptime_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - context_.started)
          .count());
  response->set_workers(static_cast<int32_t>(context_.jobs->workerCount()));
  return grpc::Status::OK;
}

grpc::Status AdminService::Stats(grpc::ServerContext *, const flowc::v1::StatsRequest *,
                                 flowc::v1::StatsResponse *response) {
  auto stats = context_.cache->stats();
  if (!stats)
    return toGrpcStatus(stats.status());
  scheduler::JobCounts jobs = context_.jobs->counts();
  response->set_blob_count(stats->blobCount);
  response->set_blob_bytes(stats->blobBytes);
  response->set_action_count(stats->actionCount);
  response->set_jobs_queued(jobs.queued);
  response->set_jobs_running(jobs.running);
  response->set_jobs_completed(jobs.completed);
  response->set_jobs_failed(context_.jobsFailed);
  response->set_cache_hits(context_.cacheHits);
  response->set_cache_misses(context_.cacheMisses);
  if (!context_.remoteCache->status(*response->mutable_remote_cache()))
    response->clear_remote_cache();
  return grpc::Status::OK;
}

grpc::Status AdminService::Shutdown(grpc::ServerContext *,
                                    const flowc::v1::ShutdownRequest *,
                                    flowc::v1::ShutdownResponse *) {
  spdlog::info("shutdown requested over Admin.Shutdown");
  // The main thread waits for this signal (see Server::runUntilShutdown).
  kill(getpid(), SIGUSR1);
  return grpc::Status::OK;
}

grpc::Status AdminService::Jobs(grpc::ServerContext *, const flowc::v1::JobsRequest *,
                                flowc::v1::JobsResponse *response) {
  *response = context_.registry.list();
  return grpc::Status::OK;
}

grpc::Status AdminService::Workers(grpc::ServerContext *,
                                   const flowc::v1::WorkersRequest *,
                                   flowc::v1::WorkersResponse *response) {
  context_.tasks->describe(*response);
  return grpc::Status::OK;
}

} // namespace flowc::daemon
