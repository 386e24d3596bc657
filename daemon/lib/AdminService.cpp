#include "AdminService.h"

#include "Auth.h"
#include "flowc/compiler/Compiler.h"
#include "flowc/rpc/GrpcStatus.h"
#include "Trace.h"

#include <csignal>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

namespace flowc::daemon {

grpc::Status AdminService::Health(grpc::ServerContext *context,
                                  const flowc::v1::HealthRequest *,
                                  flowc::v1::HealthResponse *response) {
  response->set_version(FLOWC_BUILD_ID);
  response->set_pid(getpid());
  response->set_cache_dir(context_.options.cacheDir);
  response->set_uptime_seconds(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - context_.started)
          .count());
  response->set_workers(static_cast<int32_t>(context_.jobs->workerCount()));
  const std::string &web = context_.webUrl;
  response->set_http_url(unixPeerCredentials(*context) ? web
                                                       : web.substr(0, web.find('?')));
  for (const std::string &pass : compiler::optionalPassNames())
    response->add_optional_passes(pass);
  return grpc::Status::OK;
}

grpc::Status AdminService::Stats(grpc::ServerContext *, const flowc::v1::StatsRequest *,
                                 flowc::v1::StatsResponse *response) {
  auto stats = context_.cache->stats();
  if (!stats)
    return rpc::toGrpcStatus(stats.status());
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
  context_.describeWorkers(*response);
  return grpc::Status::OK;
}

namespace {

/// Who called: the unix peer's user, or the TCP peer's address.
std::string callerName(const grpc::ServerContext &context) {
  auto peer = unixPeerCredentials(context);
  if (!peer)
    return context.peer();
  const passwd *user = getpwuid(peer->uid);
  return (user ? std::string(user->pw_name) + " " : std::string()) + "(uid " +
         std::to_string(peer->uid) + ")";
}

Status unknownJob(const std::string &jobId) {
  return notFound("no job '" + jobId +
                  "' among the daemon's queued, running and recent jobs (flowc jobs)");
}

} // namespace

grpc::Status AdminService::Cancel(grpc::ServerContext *context,
                                  const flowc::v1::CancelRequest *request,
                                  flowc::v1::CancelResponse *response) {
  const std::string &jobId = request->job_id();
  if (!isJobId(jobId))
    return rpc::toGrpcStatus(unknownJob(jobId));
  Status why(StatusCode::Cancelled,
             "job " + jobId + " was cancelled by " + callerName(*context));
  if (context_.controls.stop(jobId, why)) {
    spdlog::info("job={} {}", jobId, why.message());
    response->set_state("cancelled");
    return grpc::Status::OK;
  }
  // Ended already: its state says how.
  if (auto job = context_.registry.job(jobId)) {
    response->set_state(job->state());
    spdlog::info("cancel job={}: it had ended ({})", jobId, job->state());
    return grpc::Status::OK;
  }
  spdlog::warn("cancel job={}: no such job", jobId);
  return rpc::toGrpcStatus(unknownJob(jobId));
}

grpc::Status AdminService::Trace(grpc::ServerContext *,
                                 const flowc::v1::TraceRequest *request,
                                 flowc::v1::TraceResponse *response) {
  const std::string &jobId = request->job_id();
  if (auto trace = isJobId(jobId) ? context_.registry.trace(jobId) : std::nullopt) {
    response->set_trace_json(std::move(*trace));
    return grpc::Status::OK;
  }
  auto stored = readTraceFile(context_.traceDir(), jobId);
  if (!stored)
    return rpc::toGrpcStatus(stored.status());
  response->set_trace_json(std::move(*stored));
  return grpc::Status::OK;
}

} // namespace flowc::daemon
