#include "CompilerService.h"

#include "GrpcStatus.h"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <spdlog/spdlog.h>

namespace flowc::daemon {

namespace {

constexpr size_t kChunkBytes = 1 << 20;

/// Events from the compiling worker to the request thread. Shared so that a
/// client that hangs up does not leave the worker writing to freed memory.
struct EventChannel {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<flowc::v1::SubmitEvent> events;
  std::optional<Expected<worker::CompileResult>> outcome;
};

void setTensorInfo(flowc::v1::TensorInfo *out, const compiler::TensorInfo &info) {
  out->set_name(info.name);
  out->set_dtype(compiler::dtypeName(info.dtype));
  for (int64_t dim : info.shape)
    out->add_shape(dim);
}

Status requireAbsolute(const std::string &path) {
  if (path.empty() || path[0] != '/')
    return invalidArgument("model_path must be an absolute path, got '" + path + "'");
  return Status::ok();
}

} // namespace

grpc::Status CompilerService::Inspect(grpc::ServerContext *,
                                      const flowc::v1::InspectRequest *request,
                                      flowc::v1::InspectResponse *response) {
  if (Status valid = requireAbsolute(request->model_path()); !valid)
    return toGrpcStatus(valid);
  auto ingested = worker::ingestModel(request->model_path());
  if (!ingested) {
    spdlog::warn("inspect model={} status={}", request->model_path(),
                 ingested.status().toString());
    return toGrpcStatus(ingested.status());
  }
  response->set_model_digest(ingested->modelDigest.toString());
  response->set_ir_digest(ingested->irDigest.toString());
  response->set_opset(ingested->model.opsetVersion);
  response->set_producer(ingested->model.producer);
  for (const auto &input : ingested->graph.inputs)
    setTensorInfo(response->add_inputs(), input);
  for (const auto &output : ingested->graph.outputs)
    setTensorInfo(response->add_outputs(), output);
  for (const auto &[op, count] : ingested->graph.opCounts)
    (*response->mutable_op_counts())[op] = count;
  response->set_parameters(ingested->graph.parameterCount());
  response->set_parameter_bytes(ingested->graph.parameterBytes());
  response->set_weights(static_cast<uint32_t>(ingested->graph.weights.size()));
  spdlog::info("inspect model={} model_digest={}", request->model_path(),
               response->model_digest());
  return grpc::Status::OK;
}

grpc::Status CompilerService::Submit(grpc::ServerContext *context,
                                     const flowc::v1::SubmitRequest *request,
                                     grpc::ServerWriter<flowc::v1::SubmitEvent> *writer) {
  worker::CompileRequest compile;
  compile.modelPath = request->model_path();
  if (Status valid = requireAbsolute(compile.modelPath); !valid)
    return toGrpcStatus(valid);
  if (!request->target().empty())
    compile.options.target = request->target();
  compile.options.optLevel = request->opt_level();
  if (Status valid = compile.options.validate(); !valid)
    return toGrpcStatus(valid);

  auto channel = std::make_shared<EventChannel>();
  auto started = std::chrono::steady_clock::now();
  auto priority = request->priority() == flowc::v1::PRIORITY_BATCH
                      ? scheduler::Priority::Batch
                      : scheduler::Priority::Interactive;
  worker::CompileExecutor &executor = *context_.executor;
  std::string jobId =
      context_.jobs->submit(priority, [channel, compile, started, &executor] {
        auto progress = [&](const std::string &stage, const std::string &detail) {
          flowc::v1::SubmitEvent event;
          event.mutable_progress()->set_stage(stage);
          event.mutable_progress()->set_detail(detail);
          event.mutable_progress()->set_elapsed_seconds(
              std::chrono::duration<double>(std::chrono::steady_clock::now() - started)
                  .count());
          std::lock_guard lock(channel->mutex);
          channel->events.push_back(std::move(event));
          channel->changed.notify_one();
        };
        auto outcome = executor.compile(compile, progress);
        std::lock_guard lock(channel->mutex);
        channel->outcome.emplace(std::move(outcome));
        channel->changed.notify_one();
      });
  if (jobId.empty())
    return toGrpcStatus(unavailable("the daemon is shutting down"));

  while (true) {
    std::unique_lock lock(channel->mutex);
    channel->changed.wait(lock,
                          [&] { return !channel->events.empty() || channel->outcome; });
    while (!channel->events.empty()) {
      flowc::v1::SubmitEvent event = std::move(channel->events.front());
      channel->events.pop_front();
      if (!context->IsCancelled())
        writer->Write(event);
    }
    if (channel->outcome)
      break;
  }
  Expected<worker::CompileResult> &outcome = *channel->outcome;
  if (!outcome) {
    ++context_.jobsFailed;
    spdlog::warn("job={} model={} status={}", jobId, compile.modelPath,
                 outcome.status().toString());
    return toGrpcStatus(outcome.status());
  }
  ++(outcome->cacheHit ? context_.cacheHits : context_.cacheMisses);
  spdlog::info("job={} model={} cache={} code_cache={} seconds={:.3f} artifact={}", jobId,
               compile.modelPath, outcome->cacheHit ? "hit" : "miss",
               outcome->codeCacheHit ? "hit" : "miss", outcome->seconds,
               outcome->artifactDigest.toString());
  flowc::v1::SubmitEvent event;
  flowc::v1::CompileResult *result = event.mutable_result();
  result->set_artifact_digest(outcome->artifactDigest.toString());
  result->set_model_digest(outcome->modelDigest.toString());
  result->set_cache_hit(outcome->cacheHit);
  result->set_code_cache_hit(outcome->codeCacheHit);
  result->set_seconds(outcome->seconds);
  result->set_job_id(jobId);
  for (const auto &[op, count] : outcome->opCounts)
    (*result->mutable_op_counts())[op] = count;
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
  for (size_t offset = 0; offset < bytes.size() || offset == 0; offset += kChunkBytes) {
    if (context->IsCancelled())
      return grpc::Status::CANCELLED;
    flowc::v1::ArtifactChunk chunk;
    chunk.set_data(std::string(bytes.substr(offset, kChunkBytes)));
    chunk.set_offset(offset);
    chunk.set_total_size(bytes.size());
    if (!writer->Write(chunk))
      return grpc::Status::CANCELLED;
    if (bytes.empty())
      break;
  }
  spdlog::info("fetch artifact={} bytes={}", request->digest(), bytes.size());
  return grpc::Status::OK;
}

} // namespace flowc::daemon
