#include "CompilerService.h"

#include "GrpcStatus.h"

#include "flowc/compiler/Profile.h"
#include "flowc/worker/Reproducer.h"
#include "flowc/support/MappedFile.h"

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

void setOpProfile(flowc::v1::OpProfile *out, const compiler::OpProfile &row) {
  out->set_op_type(row.opType);
  out->set_count(row.count);
  out->set_folded(row.folded);
  out->set_parameters(row.parameters);
  out->set_flops(row.flops);
  out->set_activation_bytes(row.activationBytes);
  out->set_estimated(row.estimated);
}

/// Sends `bytes` in chunks of at most kChunkBytes (one empty chunk when
/// there are none), each labelled by `label`; false when the client went
/// away. Shared by artifacts and reproducer files.
template <typename Chunk, typename Label>
bool streamChunks(grpc::ServerContext *context, grpc::ServerWriter<Chunk> *writer,
                  std::string_view bytes, const Label &label) {
  for (size_t offset = 0; offset < bytes.size() || offset == 0; offset += kChunkBytes) {
    if (context->IsCancelled())
      return false;
    Chunk chunk;
    label(chunk);
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

bool streamFile(grpc::ServerContext *context,
                grpc::ServerWriter<flowc::v1::ReproChunk> *writer,
                const std::string &file, std::string_view bytes) {
  return streamChunks(context, writer, bytes,
                      [&](flowc::v1::ReproChunk &chunk) { chunk.set_file(file); });
}

/// Options from a request: an empty target is "cpu", an empty precision
/// "fp32". InvalidArgument
/// naming the bad field.
Expected<compiler::CompileOptions> compileOptions(const std::string &target, int optLevel,
                                                  const std::string &precision) {
  compiler::CompileOptions options;
  if (!target.empty())
    options.target = target;
  options.optLevel = optLevel;
  if (!precision.empty())
    options.precision = precision;
  FLOWC_RETURN_IF_ERROR(options.validate());
  return options;
}

/// The request's input shapes; InvalidArgument on a repeated name.
Expected<compiler::InputShapes>
inputShapesOf(const google::protobuf::RepeatedPtrField<flowc::v1::InputShape> &fields) {
  compiler::InputShapes shapes;
  for (const flowc::v1::InputShape &field : fields)
    if (!shapes
             .emplace(field.name(),
                      std::vector<int64_t>(field.dims().begin(), field.dims().end()))
             .second)
      return invalidArgument("input '" + field.name() + "' is given two shapes");
  return shapes;
}

/// A client on this machine: it can read the cache's files itself.
bool isLocalPeer(const grpc::ServerContext &context) {
  return context.peer().starts_with("unix:");
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
  auto shapes = inputShapesOf(request->input_shapes());
  if (!shapes)
    return toGrpcStatus(shapes.status());
  auto ingested = worker::ingestModel(request->model_path(), *shapes);
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
  compiler::GraphProfile profile =
      compiler::profileGraph(ingested->graph, &ingested->model);
  for (const compiler::OpProfile &row : profile.ops)
    setOpProfile(response->add_profile(), row);
  setOpProfile(response->mutable_profile_total(), profile.total);
  spdlog::info("inspect model={} model_digest={}", request->model_path(),
               response->model_digest());
  return grpc::Status::OK;
}

grpc::Status CompilerService::Repro(grpc::ServerContext *context,
                                    const flowc::v1::ReproRequest *request,
                                    grpc::ServerWriter<flowc::v1::ReproChunk> *writer) {
  if (Status valid = requireAbsolute(request->model_path()); !valid)
    return toGrpcStatus(valid);
  auto options =
      compileOptions(request->target(), request->opt_level(), request->precision());
  if (!options)
    return toGrpcStatus(options.status());
  auto shapes = inputShapesOf(request->input_shapes());
  if (!shapes)
    return toGrpcStatus(shapes.status());
  auto ingested = worker::ingestModel(request->model_path(), *shapes);
  if (!ingested) {
    spdlog::warn("repro model={} status={}", request->model_path(),
                 ingested.status().toString());
    return toGrpcStatus(ingested.status());
  }
  std::string manifest = worker::makeReproManifest(
      *ingested, *options, {FLOWC_BUILD_ID, compiler::hostTargetDescription()});
  // The IR first: a client that writes files as they complete then never
  // leaves a manifest without its graph.
  if (!streamFile(context, writer, worker::kReproGraphFile, ingested->graph.irBytecode) ||
      !streamFile(context, writer, worker::kReproManifestFile, manifest))
    return grpc::Status::CANCELLED;
  spdlog::info("repro model={} model_digest={} ir_bytes={} manifest_bytes={}",
               request->model_path(), ingested->modelDigest.toString(),
               ingested->graph.irBytecode.size(), manifest.size());
  return grpc::Status::OK;
}

grpc::Status CompilerService::Submit(grpc::ServerContext *context,
                                     const flowc::v1::SubmitRequest *request,
                                     grpc::ServerWriter<flowc::v1::SubmitEvent> *writer) {
  worker::CompileRequest compile;
  compile.modelPath = request->model_path();
  if (Status valid = requireAbsolute(compile.modelPath); !valid)
    return toGrpcStatus(valid);
  auto shapes = inputShapesOf(request->input_shapes());
  if (!shapes)
    return toGrpcStatus(shapes.status());
  compile.inputShapes = std::move(*shapes);
  auto options =
      compileOptions(request->target(), request->opt_level(), request->precision());
  if (!options)
    return toGrpcStatus(options.status());
  compile.options = *options;
  compile.options.disabledPasses.assign(request->disabled_passes().begin(),
                                        request->disabled_passes().end());
  compile.options.printIrAfter = request->print_ir_after();
  compile.kind =
      request->thin() ? worker::ArtifactKind::Thin : worker::ArtifactKind::Packed;
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
  result->set_kernels_compiled(outcome->kernelsCompiled);
  result->set_kernels_reused(outcome->kernelsReused);
  // Artifacts are adopted as files; one stored inline by an older flowc has
  // none, and the client, finding none, streams it.
  if (request->want_local_path() && isLocalPeer(*context))
    result->set_artifact_path(context_.cache->blobPath(outcome->artifactDigest));
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
  if (!streamChunks(context, writer, bytes, [](flowc::v1::ArtifactChunk &) {}))
    return grpc::Status::CANCELLED;
  spdlog::info("fetch artifact={} bytes={}", request->digest(), bytes.size());
  return grpc::Status::OK;
}

} // namespace flowc::daemon
