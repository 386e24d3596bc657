#include "flowc/worker/WorkerProtocol.h"

#include "flowc/compiler/Profile.h"
#include "flowc/support/ErrorFields.h"
#include "flowc/worker/Reproducer.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <unistd.h>

namespace flowc::worker {

namespace {

constexpr size_t kChunkBytes = 1 << 20;

std::string frameHeader(uint32_t size) {
  std::string header(4, '\0');
  for (int i = 0; i < 4; ++i)
    header[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  return header;
}

uint32_t frameSize(const char *header) {
  uint32_t size = 0;
  for (int i = 0; i < 4; ++i)
    size |= uint32_t{static_cast<unsigned char>(header[i])} << (8 * i);
  return size;
}

Status writeAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR)
      continue;
    if (written < 0)
      return errnoStatus(errno, "cannot write to the worker pipe");
    bytes.remove_prefix(static_cast<size_t>(written));
  }
  return Status::ok();
}

/// Reads exactly `size` bytes; the count read before end of file otherwise.
Expected<size_t> readAll(int fd, char *out, size_t size) {
  size_t done = 0;
  while (done < size) {
    ssize_t got = ::read(fd, out + done, size - done);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return errnoStatus(errno, "cannot read the worker pipe");
    if (got == 0)
      break;
    done += static_cast<size_t>(got);
  }
  return done;
}

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

void addFileChunks(std::vector<flowc::v1::ReproChunk> &chunks, const std::string &file,
                   std::string_view bytes) {
  for (size_t offset = 0; offset < bytes.size() || offset == 0; offset += kChunkBytes) {
    flowc::v1::ReproChunk &chunk = chunks.emplace_back();
    chunk.set_file(file);
    chunk.set_data(std::string(bytes.substr(offset, kChunkBytes)));
    chunk.set_offset(offset);
    chunk.set_total_size(bytes.size());
    if (bytes.empty())
      break;
  }
}

/// A TaskResult frame as the task's outcome, checked against the task.
Expected<TaskOutcome> outcomeOf(const flowc::v1::TaskResult &result, const Task &task) {
  if (result.has_error())
    return statusOf(result.error());
  TaskOutcome outcome{{}, result.executor()};
  for (const std::string &text : result.outputs()) {
    FLOWC_ASSIGN_OR_RETURN(cache::Digest digest, cache::Digest::parse(text));
    outcome.outputs.push_back(digest);
  }
  if (outcome.outputs.size() != task.outputs.size())
    return internalError("the daemon returned " + std::to_string(outcome.outputs.size()) +
                         " outputs for a task of " + std::to_string(task.outputs.size()));
  return outcome;
}

} // namespace

Status writeFrame(int fd, const google::protobuf::MessageLite &message) {
  std::string bytes;
  if (!message.SerializeToString(&bytes))
    return internalError("cannot serialize a worker message");
  if (bytes.size() > kMaxFrameBytes)
    return internalError("a worker message of " + std::to_string(bytes.size()) +
                         " bytes is over the frame limit");
  return writeAll(fd, frameHeader(static_cast<uint32_t>(bytes.size())) + bytes);
}

Expected<bool> readFrame(int fd, google::protobuf::MessageLite &message) {
  char header[4];
  FLOWC_ASSIGN_OR_RETURN(size_t got, readAll(fd, header, sizeof header));
  if (got == 0)
    return false;
  if (got < sizeof header)
    return dataLoss("the worker pipe ended inside a frame header");
  uint32_t size = frameSize(header);
  if (size > kMaxFrameBytes)
    return dataLoss("a worker frame of " + std::to_string(size) +
                    " bytes is over the limit");
  std::string bytes(size, '\0');
  FLOWC_ASSIGN_OR_RETURN(got, readAll(fd, bytes.data(), size));
  if (got < size)
    return dataLoss("the worker pipe ended inside a frame");
  if (!message.ParseFromString(bytes))
    return dataLoss("a worker frame does not parse");
  return true;
}

Expected<std::vector<flowc::v1::WorkerReply>> takeFrames(std::string &buffer) {
  std::vector<flowc::v1::WorkerReply> replies;
  size_t offset = 0;
  while (buffer.size() - offset >= 4) {
    uint32_t size = frameSize(buffer.data() + offset);
    if (size > kMaxFrameBytes)
      return dataLoss("a worker frame of " + std::to_string(size) +
                      " bytes is over the limit");
    if (buffer.size() - offset - 4 < size)
      break;
    if (!replies.emplace_back().ParseFromArray(buffer.data() + offset + 4,
                                               static_cast<int>(size)))
      return dataLoss("a worker frame does not parse");
    offset += 4 + size;
  }
  buffer.erase(0, offset);
  return replies;
}

void toProto(const CompileResult &result, flowc::v1::CompileResult &out) {
  out.set_artifact_digest(result.artifactDigest.toString());
  out.set_model_digest(result.modelDigest.toString());
  out.set_cache_hit(result.cacheHit);
  out.set_code_cache_hit(result.codeCacheHit);
  out.set_seconds(result.seconds);
  out.set_kernels_compiled(result.kernelsCompiled);
  out.set_kernels_reused(result.kernelsReused);
  for (const auto &[op, count] : result.opCounts)
    (*out.mutable_op_counts())[op] = count;
  out.set_answered_by(result.answeredBy);
  out.set_explain(result.explain);
  toProto(result.remote, *out.mutable_remote());
  flowc::v1::SearchSummary &search = *out.mutable_search();
  search.set_tunable_kernels(result.search.tunableKernels);
  search.set_tuned_kernels(result.search.tunedKernels);
  search.set_measured_kernels(result.search.measuredKernels);
  search.set_candidates_measured(result.search.candidatesMeasured);
  search.set_seconds(result.search.seconds);
  search.set_budget_ended(result.search.budgetEnded);
}

void toProto(const ProgressEvent &event, flowc::v1::Progress &out) {
  out.set_stage(event.stage);
  // The detail quotes paths, which need not be UTF-8 (proto3 strings must).
  out.set_detail(validUtf8(event.detail));
  out.set_pass(event.pass);
  out.set_kernel(event.kernel);
  out.set_kernel_index(event.kernelIndex);
  out.set_kernel_count(event.kernelCount);
  out.set_kernel_cached(event.kernelCached);
  out.set_seconds(event.seconds);
  out.set_executor(event.executor);
  for (const auto &[kind, counts] : event.cache) {
    flowc::v1::LookupCounts &wire = (*out.mutable_cache())[kind];
    wire.set_hits(counts.hits);
    wire.set_misses(counts.misses);
  }
  out.set_bytes_hashed(event.bytesHashed);
  out.set_eta_seconds(event.etaSeconds);
}

void toProto(const RemoteTierCounters &counters, flowc::v1::RemoteCacheCounters &out) {
  out.set_hits(counters.hits);
  out.set_misses(counters.misses);
  out.set_uploads(counters.uploads);
  out.set_blobs_uploaded(counters.blobsUploaded);
  out.set_bytes_uploaded(counters.bytesUploaded);
  out.set_bytes_downloaded(counters.bytesDownloaded);
  out.set_errors(counters.errors);
  out.set_data_loss(counters.dataLoss);
  out.set_too_large(counters.tooLarge);
  out.set_too_large_bytes(counters.tooLargeBytes);
  out.set_bad_signatures(counters.badSignatures);
  out.set_last_error(counters.lastError);
}

Expected<RemoteTierOptions> fromProto(const flowc::v1::RemoteCacheConfig &config) {
  RemoteTierOptions options;
  options.client.url = config.url();
  options.client.instance = config.instance();
  for (const flowc::v1::Header &header : config.headers())
    options.client.headers.emplace_back(header.name(), header.value());
  options.client.caFile = config.ca_file();
  options.client.clientCertFile = config.client_cert_file();
  options.client.clientKeyFile = config.client_key_file();
  if (config.timeout_ms())
    options.client.timeout = std::chrono::milliseconds(config.timeout_ms());
  options.readOnly = config.read_only();
  if (config.upload_weights() == "never")
    options.uploadWeights = UploadWeights::Never;
  else if (!config.upload_weights().empty() && config.upload_weights() != "missing")
    return invalidArgument("remote cache: upload_weights '" + config.upload_weights() +
                           "' is not missing or never");
  options.signKeyFile = config.sign_key_file();
  options.trustKeyFiles.assign(config.trust_key_files().begin(),
                               config.trust_key_files().end());
  FLOWC_RETURN_IF_ERROR(options.client.validate());
  return options;
}

Expected<flowc::v1::InspectResponse> inspectModel(const std::string &path,
                                                  const compiler::InputShapes &shapes) {
  FLOWC_ASSIGN_OR_RETURN(IngestedModel ingested, ingestModel(path, shapes));
  flowc::v1::InspectResponse response;
  response.set_model_digest(ingested.modelDigest.toString());
  response.set_ir_digest(ingested.irDigest.toString());
  response.set_opset(ingested.model.opsetVersion);
  response.set_producer(ingested.model.producer);
  for (const auto &input : ingested.graph.inputs)
    setTensorInfo(response.add_inputs(), input);
  for (const auto &output : ingested.graph.outputs)
    setTensorInfo(response.add_outputs(), output);
  for (const auto &[op, count] : ingested.graph.opCounts)
    (*response.mutable_op_counts())[op] = count;
  response.set_parameters(ingested.graph.parameterCount());
  response.set_parameter_bytes(ingested.graph.parameterBytes());
  response.set_weights(static_cast<uint32_t>(ingested.graph.weights.size()));
  compiler::GraphProfile profile =
      compiler::profileGraph(ingested.graph, &ingested.model);
  for (const compiler::OpProfile &row : profile.ops)
    setOpProfile(response.add_profile(), row);
  setOpProfile(response.mutable_profile_total(), profile.total);
  return response;
}

Expected<std::vector<flowc::v1::ReproChunk>>
reproChunks(const std::string &path, const compiler::CompileOptions &options,
            const compiler::InputShapes &shapes, const std::string &buildId) {
  FLOWC_ASSIGN_OR_RETURN(IngestedModel ingested, ingestModel(path, shapes));
  std::string manifest =
      makeReproManifest(ingested, options, {buildId, compiler::hostTargetDescription()});
  std::vector<flowc::v1::ReproChunk> chunks;
  addFileChunks(chunks, kReproGraphFile, ingested.graph.irBytecode);
  addFileChunks(chunks, kReproManifestFile, manifest);
  return chunks;
}

flowc::v1::WorkerReply errorReply(const Status &status) {
  flowc::v1::WorkerReply reply;
  reply.mutable_error()->set_code(static_cast<int32_t>(status.code()));
  // Proto3 strings must be UTF-8, or the frame does not parse at the
  // daemon: a message may quote a hostile model's names.
  reply.mutable_error()->set_message(validUtf8(status.message()));
  return reply;
}

Status statusOf(const flowc::v1::WorkerError &error) {
  int code = error.code();
  if (code <= static_cast<int>(StatusCode::Ok) ||
      code > static_cast<int>(StatusCode::Cancelled))
    return internalError("the worker failed with unknown status " + std::to_string(code) +
                         ": " + error.message());
  return Status(static_cast<StatusCode>(code), error.message());
}

flowc::v1::TaskRequest toProto(const Task &task, uint64_t id) {
  flowc::v1::TaskRequest request;
  request.set_id(id);
  request.set_kind(task.kind);
  request.set_name(task.name);
  for (const TaskInput &input : task.inputs) {
    flowc::v1::TaskFile *file = request.add_inputs();
    file->set_path(input.path);
    file->set_digest(input.digest.toString());
  }
  for (const std::string &output : task.outputs)
    request.add_outputs(output);
  request.set_cache_key(task.cacheKey);
  for (const auto &[name, value] : task.platform) {
    flowc::v1::Header *property = request.add_platform();
    property->set_name(name);
    property->set_value(value);
  }
  request.set_deadline_seconds(task.deadlineSeconds);
  return request;
}

Expected<Task> taskFromProto(const flowc::v1::TaskRequest &request) {
  Task task{request.kind(), request.name(), {}, {}, request.cache_key()};
  for (const flowc::v1::TaskFile &file : request.inputs()) {
    FLOWC_ASSIGN_OR_RETURN(cache::Digest digest, cache::Digest::parse(file.digest()));
    task.inputs.push_back({file.path(), digest});
  }
  task.outputs.assign(request.outputs().begin(), request.outputs().end());
  for (const flowc::v1::Header &property : request.platform()) {
    if (property.name().empty() || property.value().empty())
      return invalidArgument("task '" + request.name() +
                             "': a platform property with an empty name or value");
    task.platform.emplace_back(property.name(), property.value());
  }
  double deadline = request.deadline_seconds();
  if (!(deadline >= 0 && deadline <= kMaxTaskDeadlineSeconds))
    return invalidArgument("task '" + request.name() + "': deadline " +
                           std::to_string(deadline) + " s is not between 0 and " +
                           std::to_string(static_cast<int>(kMaxTaskDeadlineSeconds)));
  task.deadlineSeconds = deadline;
  return task;
}

std::vector<Expected<TaskOutcome>> DaemonTaskRunner::run(const std::vector<Task> &tasks,
                                                         const TaskListener &listener) {
  std::vector<Expected<TaskOutcome>> results(tasks.size(), TaskOutcome{});
  auto dispatched = std::chrono::steady_clock::now();
  uint64_t first = nextId_;
  for (const Task &task : tasks) {
    flowc::v1::WorkerReply reply;
    *reply.mutable_task_request() = toProto(task, nextId_++);
    if (Status sent = writeFrame(kWorkerReplyFd, reply); !sent)
      return std::vector<Expected<TaskOutcome>>(tasks.size(), sent);
  }
  // Results come back in the order tasks finish.
  for (size_t pending = tasks.size(); pending > 0; --pending) {
    flowc::v1::TaskResult result;
    auto read = readFrame(STDIN_FILENO, result);
    Status failed = !read    ? read.status()
                    : !*read ? unavailable("the daemon closed the task channel")
                             : Status::ok();
    if (!failed.isOk())
      return std::vector<Expected<TaskOutcome>>(tasks.size(), failed);
    if (result.id() < first || result.id() >= nextId_)
      return std::vector<Expected<TaskOutcome>>(
          tasks.size(), internalError("the daemon answered a task this job did not ask "
                                      "for (id " +
                                      std::to_string(result.id()) + ")"));
    size_t index = result.id() - first;
    results[index] = outcomeOf(result, tasks[index]);
    if (listener.done)
      listener.done(
          index, results[index],
          std::chrono::duration<double>(std::chrono::steady_clock::now() - dispatched)
              .count());
  }
  return results;
}

} // namespace flowc::worker
