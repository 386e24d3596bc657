#include "CompilerService.h"

#include "Auth.h"
#include "GrpcStatus.h"
#include "WorkerProcess.h"

#include "flowc/support/MappedFile.h"
#include "flowc/worker/RequestValidation.h"
#include "flowc/worker/WorkerProtocol.h"

#include <condition_variable>
#include <mutex>
#include <optional>
#include <spdlog/spdlog.h>
#include <unordered_map>

namespace flowc::daemon {

namespace {

constexpr size_t kChunkBytes = 1 << 20;
/// How often a waiting request looks whether its client went away.
constexpr auto kCancelPoll = std::chrono::milliseconds(100);

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
  return task;
}

/// What identical submits share: the request less what only concerns one
/// client, and the model file's identity (a changed file is another flight).
std::string flightKey(const flowc::v1::SubmitRequest &request,
                      const cache::FileIdentity &file) {
  flowc::v1::SubmitRequest shared = request;
  shared.clear_priority();
  shared.clear_want_local_path();
  shared.clear_client();
  std::string key;
  shared.SerializeToString(&key);
  return key + "\n" + std::to_string(file.device) + ":" + std::to_string(file.inode) +
         ":" + std::to_string(file.size) + ":" + std::to_string(file.mtimeNs) + ":" +
         std::to_string(file.ctimeNs);
}

} // namespace

/// One compile in a worker process that every identical submit arriving
/// while it runs waits for (single flight): each sees every progress event,
/// then the one outcome. It is cancelled once no client waits any more.
struct CompilerService::Flight {
  std::mutex mutex;
  std::condition_variable changed;
  std::string jobId;
  std::vector<flowc::v1::Progress> progress;
  std::optional<flowc::v1::CompileResult> result;
  std::optional<Status> failure;
  bool done = false;
  int waiting = 0;
  std::atomic<bool> abandoned{false};
};

struct CompilerService::Flights {
  std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<Flight>> byKey;
  /// Worker processes running submits; the last one out evicts.
  int running = 0;

  /// The flight for `key` and whether the caller leads it (must start it).
  std::pair<std::shared_ptr<Flight>, bool> join(const std::string &key) {
    std::lock_guard lock(mutex);
    auto [it, added] = byKey.try_emplace(key);
    if (added)
      it->second = std::make_shared<Flight>();
    std::lock_guard flightLock(it->second->mutex);
    ++it->second->waiting;
    return {it->second, added};
  }
  /// Forgets `flight` (ended or abandoned): a later submit starts anew.
  void remove(const std::string &key, const std::shared_ptr<Flight> &flight) {
    std::lock_guard lock(mutex);
    auto it = byKey.find(key);
    if (it != byKey.end() && it->second == flight)
      byKey.erase(it);
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
    return toGrpcStatus(shapes.status());
  if (Status local = authorizeModelPath(*context, path); !local)
    return toGrpcStatus(local);
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
    return toGrpcStatus(status);
  }
  spdlog::info("inspect model={} model_digest={}", path, response->model_digest());
  return grpc::Status::OK;
}

grpc::Status CompilerService::Repro(grpc::ServerContext *context,
                                    const flowc::v1::ReproRequest *request,
                                    grpc::ServerWriter<flowc::v1::ReproChunk> *writer) {
  const std::string &path = request->model_path();
  if (auto valid = worker::validateReproRequest(*request); !valid)
    return toGrpcStatus(valid.status());
  if (Status local = authorizeModelPath(*context, path); !local)
    return toGrpcStatus(local);
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
    return toGrpcStatus(status);
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
    return toGrpcStatus(model.status());
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
    return toGrpcStatus(compile.status());
  const std::string &path = compile->modelPath;
  // The daemon made a materialized model's directory itself; any other
  // path is one the client must be able to open.
  if (Status local = materialized ? Status::ok()
                                  : authorizeModelPath(*context, request->model_path());
      !local)
    return toGrpcStatus(local);
  auto fail = [&](const std::string &jobId, const Status &status) {
    ++context_.jobsFailed;
    spdlog::warn("job={} model={} status={}", jobId, path, status.toString());
    return toGrpcStatus(status);
  };
  // A hit needs no worker: a few stats and index lookups, in this thread.
  auto cached = context_.executor->cachedResult(*compile);
  if (!cached)
    return fail("-", cached.status());
  if (*cached) {
    flowc::v1::CompileResult result;
    worker::toProto(**cached, result);
    return finishSubmit(context, *request, context_.jobs->newId(), std::move(result),
                        writer);
  }
  auto file = cache::FileIdentity::of(path);
  if (!file)
    return fail("-", file.status());
  std::string key = flightKey(*request, *file);
  auto [flight, leads] = flights_->join(key);
  if (leads) {
    if (Status started = startFlight(flight, key, *request); !started) {
      flights_->remove(key, flight);
      return fail("-", started);
    }
  } else {
    std::lock_guard lock(flight->mutex);
    spdlog::info("model={} joins job={}, which compiles the same request", path,
                 flight->jobId);
  }
  return followFlight(context, flight, key, *request, writer);
}

Status CompilerService::startFlight(const std::shared_ptr<Flight> &flight,
                                    const std::string &key,
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
  auto started = std::chrono::steady_clock::now();
  std::lock_guard lock(flight->mutex);
  std::string client = request.client().empty() ? "-" : request.client();
  flight->jobId = context.jobs->submit(
      priority,
      [&context, flights, flight, key, task, started, priority] {
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
                               submit.client());
        // The job's plan and codegen tasks run on the daemon's executors as
        // its worker asks; whatever is left when it ends is cancelled.
        TaskDispatch dispatch(*context.tasks, context.registry, jobId, priority,
                              [&] { return flight->abandoned.load(); });
        Status status = runWorkerTask(
            context.workerPath, task, submit.model_path(),
            [&](flowc::v1::WorkerReply &&reply) {
              std::lock_guard lock(flight->mutex);
              if (reply.has_progress()) {
                flowc::v1::Progress &event =
                    flight->progress.emplace_back(reply.progress());
                event.set_elapsed_seconds(std::chrono::duration<double>(
                                              std::chrono::steady_clock::now() - started)
                                              .count());
              } else if (reply.has_result()) {
                context.remoteCache->record(reply.result().remote());
                context.registry.setExplain(jobId, reply.result().explain());
                flight->result = std::move(*reply.mutable_result());
              }
              flight->changed.notify_all();
            },
            [&] { return flight->abandoned.load(); },
            [&](flowc::v1::TaskRequest &&request, TaskAnswer answer) {
              dispatch.add(std::move(request), std::move(answer));
            });
        dispatch.finish();
        {
          std::lock_guard lock(flight->mutex);
          if (status.isOk() && !flight->result)
            status = internalError(submit.model_path() +
                                   ": the worker ended without a result");
        }
        context.registry.finish(jobId,
                                status.isOk()                            ? "done"
                                : status.code() == StatusCode::Cancelled ? "cancelled"
                                                                         : "failed",
                                status.isOk() ? "" : status.message());
        flights->remove(key, flight);
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
  return Status::ok();
}

grpc::Status CompilerService::followFlight(
    grpc::ServerContext *context, const std::shared_ptr<Flight> &flight,
    const std::string &key, const flowc::v1::SubmitRequest &request,
    grpc::ServerWriter<flowc::v1::SubmitEvent> *writer) {
  size_t sent = 0;
  std::unique_lock lock(flight->mutex);
  while (true) {
    flight->changed.wait_for(lock, kCancelPoll, [&] {
      return flight->progress.size() > sent || flight->done;
    });
    if (context->IsCancelled()) {
      // The last client gone: the compile stops, and a later submit of the
      // same request starts a new one rather than joining a dying one.
      if (--flight->waiting == 0 && !flight->done) {
        flight->abandoned = true;
        lock.unlock();
        flights_->remove(key, flight);
        spdlog::info("job={} model={} cancelled: its client went away", flight->jobId,
                     request.model_path());
      }
      return grpc::Status::CANCELLED;
    }
    std::vector<flowc::v1::Progress> fresh(flight->progress.begin() + sent,
                                           flight->progress.end());
    sent = flight->progress.size();
    bool done = flight->done;
    lock.unlock();
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
    return toGrpcStatus(*flight->failure);
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
    return toGrpcStatus(digest.status());
  // The handle pins the artifact while it streams.
  auto blob = context_.cache->get(*digest);
  if (!blob)
    return toGrpcStatus(blob.status());
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
