#include "CompilerService.h"

#include "Auth.h"
#include "flowc/rpc/GrpcStatus.h"
#include "WorkerProcess.h"

#include "flowc/support/MappedFile.h"
#include "flowc/worker/RequestValidation.h"
#include "flowc/worker/WorkerProtocol.h"

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <spdlog/spdlog.h>
#include <unordered_map>

namespace flowc::daemon {

namespace {

constexpr size_t kChunkBytes = 1 << 20;
/// How often a waiting request looks whether its client went away.
constexpr auto kCancelPoll = std::chrono::milliseconds(100);
/// The longest --timeout: a year.
constexpr double kMaxTimeout = 365.0 * 24 * 3600;

/// Sends `bytes` in chunks of at most kChunkBytes (one empty chunk when
/// there are none); false when the client went away.
bool streamChunks(grpc::ServerContext *context,
                  grpc::ServerWriter<flowc::v1::ArtifactChunk> *writer,
                  std::string_view bytes) {
  for (size_t offset = 0; offset < bytes.size() || offset == 0; offset += kChunkBytes) {
    if (context->IsCancelled())
      return false;
    flowc::v1::ArtifactChunk chunk;
    chunk.set_data(std::string(bytes.substr(offset, kChunkBytes)));
    chunk.set_offset(offset);
    chunk.set_total_size(bytes.size());
    if (!writer->Write(chunk))
      return false;
    // A sent chunk of a mapped artifact is not needed again: keep the
    // daemon's memory flat however large the artifact.
    MappedFile::releasePages(bytes.substr(offset, kChunkBytes));
    if (bytes.empty())
      break;
  }
  return true;
}

flowc::v1::WorkerTask workerTask(const DaemonContext &context) {
  flowc::v1::WorkerTask task;
  task.set_cache_dir(context.cache->root());
  task.set_cache_max_bytes(context.options.cache.maxBytes);
  task.set_cache_read_only(context.options.cache.access == cache::CacheAccess::ReadOnly);
  for (const std::string &gpu : context.options.remote.gpus)
    task.add_remote_gpus(gpu);
  task.set_remote_gpus_measure(!context.options.remote.url.empty());
  return task;
}

/// The Cancelled status of a job stopped by its --timeout.
Status timeoutStatus(const std::string &jobId, double seconds) {
  char limit[32];
  std::snprintf(limit, sizeof limit, "%g", seconds);
  return Status(StatusCode::Cancelled,
                "job " + jobId + " exceeded --timeout " + limit + " s and was cancelled");
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

} // namespace

/// One compile in a worker process that every identical submit arriving
/// while it runs waits for (single flight): each sees every progress event,
/// then the one outcome. It is cancelled once no client waits any more,
/// unless a detached submit asked for it.
struct CompilerService::Flight {
  std::mutex mutex;
  std::condition_variable changed;
  /// Set before it is shared: its flight key and supersede key (Jobs.h).
  std::string key, supersedeKey;
  std::string jobId;
  std::vector<flowc::v1::Progress> progress;
  std::optional<flowc::v1::CompileResult> result;
  std::optional<Status> failure;
  bool done = false;
  int waiting = 0;
  /// A detached submit asked for it: it runs on with no client.
  bool detached = false;
  /// The --timeout of the submit that started it, counted from then.
  double timeoutSeconds = 0;
  std::chrono::steady_clock::time_point accepted;
  /// Why it stops before its end, once it does: what its clients end with.
  std::optional<Status> stopped;
  std::string supersededBy;
  std::atomic<JobStop> stop{JobStop::None};
};

struct CompilerService::Flights {
  std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<Flight>> byKey;
  /// The newest flight of each supersede key.
  std::unordered_map<std::string, std::shared_ptr<Flight>> latest;
  /// Worker processes running submits; the last one out evicts.
  int running = 0;

  /// The flight for `key` and whether the caller leads it (must start it).
  std::pair<std::shared_ptr<Flight>, bool> join(const std::string &key,
                                                const std::string &supersedeKey) {
    std::lock_guard lock(mutex);
    auto [it, added] = byKey.try_emplace(key);
    if (added) {
      it->second = std::make_shared<Flight>();
      it->second->key = key;
      it->second->supersedeKey = supersedeKey;
    }
    std::lock_guard flightLock(it->second->mutex);
    ++it->second->waiting;
    return {it->second, added};
  }
  /// Forgets `flight` (ended or stopping): a later submit starts anew.
  void remove(const std::shared_ptr<Flight> &flight) {
    std::lock_guard lock(mutex);
    if (auto it = byKey.find(flight->key); it != byKey.end() && it->second == flight)
      byKey.erase(it);
    if (auto it = latest.find(flight->supersedeKey);
        it != latest.end() && it->second == flight)
      latest.erase(it);
  }
  /// Makes `flight` the newest of `supersedeKey` (none, for a submit the
  /// cache answered); returns the one it replaces, if any.
  std::shared_ptr<Flight> succeed(const std::string &supersedeKey,
                                  const std::shared_ptr<Flight> &flight) {
    if (supersedeKey.empty())
      return nullptr;
    std::lock_guard lock(mutex);
    auto it = latest.find(supersedeKey);
    std::shared_ptr<Flight> older =
        it == latest.end() || it->second == flight ? nullptr : it->second;
    if (flight)
      latest[supersedeKey] = flight;
    else if (it != latest.end())
      latest.erase(it);
    return older;
  }
  /// Stops `flight` as `how` says (a Kill may follow a Drain); its clients
  /// end with `why`, the first reason given. False when it had ended.
  bool stop(const std::shared_ptr<Flight> &flight, JobStop how, const Status &why) {
    {
      std::lock_guard lock(flight->mutex);
      if (flight->done)
        return false;
      if (!flight->stopped)
        flight->stopped = why;
      if (static_cast<int>(how) > static_cast<int>(flight->stop.load()))
        flight->stop = how;
      flight->changed.notify_all();
    }
    remove(flight);
    return true;
  }
  /// Stops `flight` if its --timeout has passed; whether it is stopping.
  bool checkDeadline(const std::shared_ptr<Flight> &flight) {
    std::string jobId;
    double limit = 0;
    {
      std::lock_guard lock(flight->mutex);
      if (flight->timeoutSeconds <= 0 || flight->stopped || flight->done ||
          secondsSince(flight->accepted) < flight->timeoutSeconds)
        return flight->stop.load() != JobStop::None;
      jobId = flight->jobId;
      limit = flight->timeoutSeconds;
    }
    spdlog::info("job={} cancelled: it exceeded --timeout {} s", jobId, limit);
    stop(flight, JobStop::Kill, timeoutStatus(jobId, limit));
    return true;
  }
};

CompilerService::CompilerService(DaemonContext &context)
    : context_(context), flights_(std::make_shared<Flights>()), uploads_(*context.cache) {
}

CompilerService::~CompilerService() = default;

grpc::Status CompilerService::Inspect(grpc::ServerContext *context,
                                      const flowc::v1::InspectRequest *request,
                                      flowc::v1::InspectResponse *response) {
  const std::string &path = request->model_path();
  auto shapes = worker::validateInspectRequest(*request);
  if (!shapes)
    return rpc::toGrpcStatus(shapes.status());
  if (Status local = authorizeModelPath(*context, path); !local)
    return rpc::toGrpcStatus(local);
  flowc::v1::WorkerTask task = workerTask(context_);
  *task.mutable_inspect() = *request;
  bool answered = false;
  Status status = runWorkerTask(
      context_.workerPath, task, path,
      [&](flowc::v1::WorkerReply &&reply) {
        if (!reply.has_inspect())
          return;
        *response = std::move(*reply.mutable_inspect());
        answered = true;
      },
      [&] { return context->IsCancelled(); });
  if (status.isOk() && !answered)
    status = internalError(path + ": the worker ended without an answer");
  if (!status) {
    spdlog::warn("inspect model={} status={}", path, status.toString());
    return rpc::toGrpcStatus(status);
  }
  spdlog::info("inspect model={} model_digest={}", path, response->model_digest());
  return grpc::Status::OK;
}

grpc::Status CompilerService::Repro(grpc::ServerContext *context,
                                    const flowc::v1::ReproRequest *request,
                                    grpc::ServerWriter<flowc::v1::ReproChunk> *writer) {
  const std::string &path = request->model_path();
  if (auto valid = worker::validateReproRequest(*request); !valid)
    return rpc::toGrpcStatus(valid.status());
  if (Status local = authorizeModelPath(*context, path); !local)
    return rpc::toGrpcStatus(local);
  flowc::v1::WorkerTask task = workerTask(context_);
  *task.mutable_repro() = *request;
  size_t bytes = 0;
  bool clientGone = false;
  Status status = runWorkerTask(
      context_.workerPath, task, path,
      [&](flowc::v1::WorkerReply &&reply) {
        if (!reply.has_repro_chunk() || clientGone)
          return;
        bytes += reply.repro_chunk().data().size();
        clientGone = !writer->Write(reply.repro_chunk());
      },
      [&] { return clientGone || context->IsCancelled(); });
  if (!status) {
    spdlog::warn("repro model={} status={}", path, status.toString());
    return rpc::toGrpcStatus(status);
  }
  spdlog::info("repro model={} bytes={}", path, bytes);
  return grpc::Status::OK;
}

grpc::Status CompilerService::Submit(grpc::ServerContext *context,
                                     const flowc::v1::SubmitRequest *request,
                                     grpc::ServerWriter<flowc::v1::SubmitEvent> *writer) {
  if (!request->has_model())
    return submitPath(context, request, writer, nullptr);
  // A remote submit names blobs, not a path: compiled as a path submit of
  // the model materialized in a directory of the daemon's own, removed
  // when this returns.
  auto model = uploads_.materialize(*request);
  if (!model) {
    spdlog::warn("submit manifest status={}", model.status().toString());
    return rpc::toGrpcStatus(model.status());
  }
  return (*model)->scrub(submitPath(context, &(*model)->request(), writer, model->get()));
}

grpc::Status
CompilerService::submitPath(grpc::ServerContext *context,
                            const flowc::v1::SubmitRequest *request,
                            grpc::ServerWriter<flowc::v1::SubmitEvent> *writer,
                            const MaterializedModel *materialized) {
  auto compile = worker::validateSubmitRequest(*request);
  if (!compile)
    return rpc::toGrpcStatus(compile.status());
  if (double limit = request->timeout_seconds(); !(limit >= 0 && limit <= kMaxTimeout))
    return rpc::toGrpcStatus(
        invalidArgument("timeout_seconds " + std::to_string(limit) +
                        " is not a number of seconds from 0 "
                        "(no limit) to " +
                        std::to_string(static_cast<int64_t>(kMaxTimeout))));
  // The daemon's copy of an uploaded model lives as long as its submit.
  if (request->detach() && materialized)
    return rpc::toGrpcStatus(failedPrecondition(
        "--detach needs a model the daemon reads in place; an uploaded model is kept "
        "only while its submit waits"));
  const std::string &path = compile->modelPath;
  // The daemon made a materialized model's directory itself; any other
  // path is one the client must be able to open.
  if (Status local = materialized ? Status::ok()
                                  : authorizeModelPath(*context, request->model_path());
      !local)
    return rpc::toGrpcStatus(local);
  auto fail = [&](const std::string &jobId, const Status &status) {
    ++context_.jobsFailed;
    spdlog::warn("job={} model={} status={}", jobId, path, status.toString());
    return rpc::toGrpcStatus(status);
  };
  // A hit needs no worker: a few stats and index lookups, in this thread.
  auto cached = context_.executor->cachedResult(*compile);
  if (!cached)
    return fail("-", cached.status());
  if (*cached) {
    flowc::v1::CompileResult result;
    worker::toProto(**cached, result);
    // The newest save wins also when the cache answers it.
    std::string jobId = context_.jobs->newId();
    supersedeOlder(nullptr, jobId, *request);
    // A job of its own in the history, as any other submit (the jobs page).
    context_.registry.start(jobId, request->model_path(), request->priority(),
                            request->client(), std::chrono::steady_clock::now());
    flowc::v1::Progress hit;
    hit.set_stage("cache");
    hit.set_detail("hit " + result.artifact_digest() + " (file unchanged)");
    context_.registry.addProgress(jobId, hit);
    context_.registry.setModelDigest(jobId, result.model_digest());
    context_.registry.finish(jobId, "done", "");
    return finishSubmit(context, *request, jobId, std::move(result), writer);
  }
  auto file = cache::FileIdentity::of(path);
  if (!file)
    return fail("-", file.status());
  auto [flight, leads] =
      flights_->join(flightKey(*request, *file), supersedeKey(*request));
  if (leads) {
    if (Status started = startFlight(flight, *request); !started) {
      flights_->remove(flight);
      return fail("-", started);
    }
    std::string jobId;
    {
      std::lock_guard lock(flight->mutex);
      jobId = flight->jobId;
    }
    supersedeOlder(flight, jobId, *request);
  } else {
    std::lock_guard lock(flight->mutex);
    spdlog::info("model={} joins job={}, which compiles the same request", path,
                 flight->jobId);
  }
  if (!request->detach())
    return followFlight(context, flight, *request, writer, leads);
  // Detached: the job runs on without this client, whoever else follows it.
  std::string jobId;
  {
    std::lock_guard lock(flight->mutex);
    flight->detached = true;
    --flight->waiting;
    jobId = flight->jobId;
  }
  spdlog::info("job={} model={} detached", jobId, path);
  flowc::v1::SubmitEvent event;
  event.mutable_accepted()->set_job_id(jobId);
  writer->Write(event);
  return grpc::Status::OK;
}

void CompilerService::supersedeOlder(const std::shared_ptr<Flight> &flight,
                                     const std::string &newer,
                                     const flowc::v1::SubmitRequest &request) {
  std::shared_ptr<Flight> older = flights_->succeed(supersedeKey(request), flight);
  if (!older)
    return;
  std::string olderId;
  {
    std::lock_guard lock(older->mutex);
    olderId = older->jobId;
    older->supersededBy = newer;
  }
  // Its queued tasks are dropped, its running ones finish into the kernel
  // cache: no work is lost.
  if (!flights_->stop(older, JobStop::Drain,
                      Status(StatusCode::Cancelled,
                             "job " + olderId + " was superseded by job " + newer +
                                 ": a newer submit of " + request.model_path() + " by " +
                                 request.client())))
    return;
  context_.registry.setSupersededBy(olderId, newer);
  spdlog::info("job={} model={} superseded by job={}", olderId, request.model_path(),
               newer);
}

Status CompilerService::startFlight(const std::shared_ptr<Flight> &flight,
                                    const flowc::v1::SubmitRequest &request) {
  flowc::v1::WorkerTask task = workerTask(context_);
  *task.mutable_submit() = request;
  if (auto remote = context_.remoteCache->forJob())
    *task.mutable_remote_cache() = std::move(*remote);
  auto priority = request.priority() == flowc::v1::PRIORITY_BATCH
                      ? scheduler::Priority::Batch
                      : scheduler::Priority::Interactive;
  // The job outlives this service at shutdown only in what it captures: the
  // context (which joins the job queue before its cache goes) and shared state.
  DaemonContext &context = context_;
  std::shared_ptr<Flights> flights = flights_;
  std::lock_guard lock(flight->mutex);
  flight->accepted = std::chrono::steady_clock::now();
  flight->timeoutSeconds = request.timeout_seconds();
  std::string client = request.client().empty() ? "-" : request.client();
  flight->jobId = context.jobs->submit(
      priority,
      [&context, flights, flight, task, priority] {
        {
          std::lock_guard lock(flights->mutex);
          ++flights->running;
        }
        std::string jobId;
        {
          std::lock_guard lock(flight->mutex);
          jobId = flight->jobId;
        }
        const flowc::v1::SubmitRequest &submit = task.submit();
        context.registry.start(jobId, submit.model_path(), submit.priority(),
                               submit.client(), flight->accepted);
        auto stopping = [&] { return flights->checkDeadline(flight); };
        // Progress of the job's worker and of its task processes, stamped
        // with the time since the job was accepted.
        auto relay = [&](flowc::v1::Progress &&progress) {
          std::lock_guard lock(flight->mutex);
          flowc::v1::Progress &event = flight->progress.emplace_back(std::move(progress));
          event.set_elapsed_seconds(secondsSince(flight->accepted));
          context.registry.addProgress(jobId, event);
          flight->changed.notify_all();
        };
        Status status = Status::ok();
        // A job stopped while queued never starts.
        if (!stopping()) {
          // The job's plan and codegen tasks run on the daemon's executors
          // as its worker asks; what is left when it ends is cancelled, or,
          // when it was superseded, left to finish into the kernel cache.
          bool readOnly = context.options.cache.access == cache::CacheAccess::ReadOnly;
          TaskDispatch dispatch(
              *context.tasks, context.registry, readOnly ? nullptr : context.cache.get(),
              jobId, priority, [&] { return flight->stop.load(); }, relay);
          status = runWorkerTask(
              context.workerPath, task, submit.model_path(),
              [&](flowc::v1::WorkerReply &&reply) {
                if (reply.has_progress()) {
                  relay(std::move(*reply.mutable_progress()));
                  return;
                }
                std::lock_guard lock(flight->mutex);
                if (reply.has_result()) {
                  context.remoteCache->record(reply.result().remote());
                  context.registry.setExplain(jobId, reply.result().explain());
                  context.registry.setModelDigest(jobId, reply.result().model_digest());
                  flight->result = std::move(*reply.mutable_result());
                }
                flight->changed.notify_all();
              },
              stopping,
              [&](flowc::v1::TaskRequest &&request, TaskAnswer answer) {
                dispatch.add(std::move(request), std::move(answer));
              });
          dispatch.finish();
        }
        std::string supersededBy;
        {
          std::lock_guard lock(flight->mutex);
          supersededBy = flight->supersededBy;
          // Stopped on purpose: the reason, whatever the worker said as it
          // was killed.
          if (flight->stopped && !(status.isOk() && flight->result))
            status = *flight->stopped;
          else if (status.isOk() && !flight->result)
            status = internalError(submit.model_path() +
                                   ": the worker ended without a result");
        }
        std::string state = status.isOk()                            ? "done"
                            : !supersededBy.empty()                  ? "superseded"
                            : status.code() == StatusCode::Cancelled ? "cancelled"
                                                                     : "failed";
        if (!supersededBy.empty())
          context.registry.setSupersededBy(jobId, supersededBy);
        context.registry.finish(jobId, state, status.isOk() ? "" : status.message());
        context.controls.remove(jobId);
        if (auto trace = context.registry.trace(jobId))
          if (Status written = writeTraceFile(context.traceDir(), jobId, *trace,
                                              DaemonContext::kKeptTraces);
              !written)
            spdlog::warn("job={} trace not written: {}", jobId, written.toString());
        flights->remove(flight);
        bool last = false;
        {
          std::lock_guard lock(flights->mutex);
          last = --flights->running == 0;
        }
        // Pins are per process: only with no worker running does the daemon
        // know every blob in use (its own handles), so only then does it evict.
        if (last)
          if (auto gc = context.cache->enforceLimit(); !gc)
            spdlog::warn("cache eviction failed: {}", gc.status().toString());
        std::lock_guard lock(flight->mutex);
        if (!status.isOk())
          flight->failure = status;
        flight->done = true;
        flight->changed.notify_all();
      },
      client);
  if (flight->jobId.empty())
    return unavailable("the daemon is shutting down");
  std::weak_ptr<Flight> weak = flight;
  context.controls.add(flight->jobId, [flights, weak](const Status &why) {
    std::shared_ptr<Flight> stopped = weak.lock();
    return stopped && flights->stop(stopped, JobStop::Kill, why);
  });
  return Status::ok();
}

grpc::Status CompilerService::followFlight(
    grpc::ServerContext *context, const std::shared_ptr<Flight> &flight,
    const flowc::v1::SubmitRequest &request,
    grpc::ServerWriter<flowc::v1::SubmitEvent> *writer, bool leads) {
  // A joiner's --timeout limits its own wait; the leader's is the job's.
  double ownLimit = leads ? 0 : request.timeout_seconds();
  auto joined = std::chrono::steady_clock::now();
  size_t sent = 0;
  std::unique_lock lock(flight->mutex);
  {
    flowc::v1::SubmitEvent accepted;
    accepted.mutable_accepted()->set_job_id(flight->jobId);
    lock.unlock();
    writer->Write(accepted);
    lock.lock();
  }
  while (true) {
    flight->changed.wait_for(lock, kCancelPoll, [&] {
      return flight->progress.size() > sent || flight->done || flight->stopped;
    });
    if (flight->stopped && !flight->done) {
      // Its clients end at once; a superseded job's running tasks finish
      // without them.
      --flight->waiting;
      Status why = *flight->stopped;
      lock.unlock();
      spdlog::info("job={} model={} status={}", flight->jobId, request.model_path(),
                   why.toString());
      return rpc::toGrpcStatus(why);
    }
    bool timedOut = ownLimit > 0 && secondsSince(joined) >= ownLimit;
    if (context->IsCancelled() || timedOut) {
      // The last client gone: the compile stops (unless it was detached),
      // and a later submit of the same request starts a new one rather
      // than joining a dying one.
      std::string jobId = flight->jobId;
      bool last = --flight->waiting == 0 && !flight->done && !flight->detached;
      lock.unlock();
      Status why = timedOut
                       ? timeoutStatus(jobId, ownLimit)
                       : Status(StatusCode::Cancelled,
                                "job " + jobId + " was cancelled: its client went away");
      if (last && flights_->stop(flight, JobStop::Kill, why))
        spdlog::info("job={} model={} {}", jobId, request.model_path(), why.message());
      return rpc::toGrpcStatus(why);
    }
    std::vector<flowc::v1::Progress> fresh(flight->progress.begin() + sent,
                                           flight->progress.end());
    sent = flight->progress.size();
    bool done = flight->done;
    lock.unlock();
    flights_->checkDeadline(flight);
    for (flowc::v1::Progress &progress : fresh) {
      flowc::v1::SubmitEvent event;
      *event.mutable_progress() = std::move(progress);
      writer->Write(event);
    }
    lock.lock();
    if (done)
      break;
  }
  --flight->waiting;
  std::string jobId = flight->jobId;
  if (flight->failure) {
    ++context_.jobsFailed;
    spdlog::warn("job={} model={} status={}", jobId, request.model_path(),
                 flight->failure->toString());
    return rpc::toGrpcStatus(*flight->failure);
  }
  flowc::v1::CompileResult result = *flight->result;
  lock.unlock();
  return finishSubmit(context, request, jobId, std::move(result), writer);
}

grpc::Status
CompilerService::finishSubmit(grpc::ServerContext *context,
                              const flowc::v1::SubmitRequest &request,
                              const std::string &jobId, flowc::v1::CompileResult result,
                              grpc::ServerWriter<flowc::v1::SubmitEvent> *writer) {
  ++(result.cache_hit() ? context_.cacheHits : context_.cacheMisses);
  spdlog::info("job={} model={} cache={} code_cache={} seconds={:.3f} artifact={}", jobId,
               request.model_path(), result.cache_hit() ? "hit" : "miss",
               result.code_cache_hit() ? "hit" : "miss", result.seconds(),
               result.artifact_digest());
  result.set_job_id(jobId);
  // Artifacts are adopted as files; one stored inline by an older flowc has
  // none, and the client, finding none, streams it.
  auto digest = cache::Digest::parse(result.artifact_digest());
  if (request.want_local_path() && isUnixPeer(*context) && digest)
    result.set_artifact_path(context_.cache->blobPath(*digest));
  flowc::v1::SubmitEvent event;
  *event.mutable_result() = std::move(result);
  writer->Write(event);
  return grpc::Status::OK;
}

grpc::Status
CompilerService::FetchArtifact(grpc::ServerContext *context,
                               const flowc::v1::FetchArtifactRequest *request,
                               grpc::ServerWriter<flowc::v1::ArtifactChunk> *writer) {
  auto digest = cache::Digest::parse(request->digest());
  if (!digest)
    return rpc::toGrpcStatus(digest.status());
  // The handle pins the artifact while it streams.
  auto blob = context_.cache->get(*digest);
  if (!blob)
    return rpc::toGrpcStatus(blob.status());
  std::string_view bytes = blob->bytes();
  if (!streamChunks(context, writer, bytes))
    return grpc::Status::CANCELLED;
  spdlog::info("fetch artifact={} bytes={}", request->digest(), bytes.size());
  return grpc::Status::OK;
}

grpc::Status
CompilerService::FindMissingBlobs(grpc::ServerContext *,
                                  const flowc::v1::FindMissingBlobsRequest *request,
                                  flowc::v1::FindMissingBlobsResponse *response) {
  return uploads_.findMissingBlobs(*request, response);
}

grpc::Status
CompilerService::UploadBlob(grpc::ServerContext *context,
                            grpc::ServerReader<flowc::v1::UploadChunk> *reader,
                            flowc::v1::UploadBlobResponse *response) {
  return uploads_.uploadBlob(context, reader, response);
}

grpc::Status CompilerService::QueryUpload(grpc::ServerContext *,
                                          const flowc::v1::QueryUploadRequest *request,
                                          flowc::v1::QueryUploadResponse *response) {
  return uploads_.queryUpload(*request, response);
}

} // namespace flowc::daemon
