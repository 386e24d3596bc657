// The C API over Artifact and Session (flowc/runtime/c_api.h). Every entry
// point validates its arguments, catches what C++ may throw, and turns a
// Status into a code plus this thread's last-error message.
#include "flowc/runtime/c_api.h"
#include "flowc/cache/Digest.h"
#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/Session.h"
#include "flowc/runtime/Tensor.h"
#include "flowc/support/Format.h"
#include "flowc/support/Logging.h"
#include "flowc/support/Status.h"

#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <unistd.h>
#include <vector>

using flowc::Expected;
using flowc::Status;
using flowc::StatusCode;
namespace runtime = flowc::runtime;

struct flowc_artifact {
  std::shared_ptr<runtime::Artifact> artifact;
  /// C views of the plan's specs; their strings point into the plan.
  std::vector<flowc_tensor_info> inputs, outputs;
  std::string metadata;
};

struct flowc_session {
  std::unique_ptr<runtime::Session> session;
  /// Session::run is one at a time; Python threads release the GIL in
  /// ctypes calls, so the handle serializes them itself.
  std::mutex mutex;
};

namespace {

thread_local std::string lastError;

flowc_status fail(const Status &status) {
  lastError = status.message();
  return static_cast<flowc_status>(status.code());
}

flowc_status nullArgument(const char *function, const char *argument) {
  return fail(
      flowc::invalidArgument(std::string(function) + ": '" + argument + "' is NULL"));
}

/// Runs `body`, turning what escapes it into a status: no exception may
/// cross into C.
template <typename Body> flowc_status guarded(const char *function, Body &&body) {
  try {
    Status status = body();
    return status.isOk() ? FLOWC_OK : fail(status);
  } catch (const std::bad_alloc &) {
    return fail(flowc::resourceExhausted(std::string(function) + ": out of memory"));
  } catch (const std::exception &error) {
    return fail(flowc::internalError(std::string(function) + ": " + error.what()));
  }
}

/// A thin artifact's weights, mapped from `cacheDir` or the cache recorded
/// in its metadata (as `flowc run` finds them).
runtime::ExternalWeightSource cacheWeights(std::string cacheDir) {
  return [cacheDir](const std::string &digest,
                    const nlohmann::json &metadata) -> Expected<flowc::MappedFile> {
    // The artifact is untrusted input: only a well-formed digest names a
    // file, and only inside a cache.
    auto parsed = flowc::cache::Digest::parse(digest);
    if (!parsed)
      return flowc::dataLoss("'" + digest + "' is not a weight digest");
    std::vector<std::string> dirs = {cacheDir};
    if (auto recorded = metadata.find("weights_cache");
        recorded != metadata.end() && recorded->is_string() &&
        recorded->get<std::string>() != cacheDir)
      dirs.push_back(recorded->get<std::string>());
    std::string looked;
    for (const std::string &dir : dirs) {
      std::string file = flowc::cache::blobPathUnder(dir, *parsed);
      if (::access(file.c_str(), R_OK) == 0)
        return flowc::MappedFile::open(file);
      looked += (looked.empty() ? "" : ", ") + dir;
    }
    return flowc::notFound("weight " + digest + " is not in the cache (looked in " +
                           looked +
                           "; evicted? submit the model again, or without thin)");
  };
}

std::vector<flowc_tensor_info>
tensorInfos(const std::vector<runtime::TensorSpec> &specs) {
  std::vector<flowc_tensor_info> infos;
  for (const runtime::TensorSpec &spec : specs)
    infos.push_back({spec.name.c_str(), spec.dtype.c_str(), spec.shape.size(),
                     spec.shape.data(), spec.byteSize()});
  return infos;
}

flowc_status tensorInfo(const char *function, const flowc_artifact *artifact,
                        size_t index, flowc_tensor_info *out, bool input) {
  if (!artifact)
    return nullArgument(function, "artifact");
  if (!out)
    return nullArgument(function, "out");
  const std::vector<flowc_tensor_info> &infos =
      input ? artifact->inputs : artifact->outputs;
  if (index >= infos.size())
    return fail(flowc::invalidArgument(std::string(function) + ": index " +
                                       std::to_string(index) + " is out of range (" +
                                       std::to_string(infos.size()) +
                                       (input ? " inputs)" : " outputs)")));
  *out = infos[index];
  return FLOWC_OK;
}

/// Whether the byte ranges [a, a + aBytes) and [b, b + bBytes) share a byte.
bool overlaps(const void *a, uint64_t aBytes, const void *b, uint64_t bBytes) {
  auto first = reinterpret_cast<uintptr_t>(a);
  auto second = reinterpret_cast<uintptr_t>(b);
  return aBytes > 0 && bBytes > 0 && first < second + bBytes && second < first + aBytes;
}

/// Refuses an output buffer that overlaps an input or another output. The
/// code writes a result into its output buffer as soon as it is computed,
/// while later kernels still read the inputs.
Status checkSeparate(const runtime::Plan &plan, const std::vector<const void *> &inputs,
                     const std::vector<void *> &outputs) {
  for (size_t o = 0; o < outputs.size(); ++o) {
    uint64_t bytes = plan.outputs[o].byteSize();
    std::string what = "output '" + plan.outputs[o].name + "' overlaps ";
    for (size_t i = 0; i < inputs.size(); ++i)
      if (overlaps(outputs[o], bytes, inputs[i], plan.inputs[i].byteSize()))
        return flowc::invalidArgument(what + "input '" + plan.inputs[i].name +
                                      "': outputs need memory of their own");
    for (size_t other = 0; other < o; ++other)
      if (overlaps(outputs[o], bytes, outputs[other], plan.outputs[other].byteSize()))
        return flowc::invalidArgument(what + "output '" + plan.outputs[other].name +
                                      "': outputs need memory of their own");
  }
  return Status::ok();
}

/// OK when `tensor` is a buffer for `spec`: same dtype, shape and size,
/// data present and aligned. `what` names it ("input 'x'").
Status checkTensor(const flowc_tensor &tensor, const runtime::TensorSpec &spec,
                   const std::string &what) {
  if (!tensor.dtype)
    return flowc::invalidArgument(what + ": dtype is NULL");
  if (spec.dtype != tensor.dtype)
    return flowc::invalidArgument(what + " is " + tensor.dtype + ", the model expects " +
                                  spec.dtype);
  if (tensor.rank > 0 && !tensor.shape)
    return flowc::invalidArgument(what + ": shape is NULL for rank " +
                                  std::to_string(tensor.rank));
  std::vector<int64_t> shape(tensor.shape, tensor.shape + tensor.rank);
  if (shape != spec.shape)
    return flowc::invalidArgument(what + " has shape " + flowc::shapeString(shape) +
                                  ", the model expects " +
                                  flowc::shapeString(spec.shape));
  if (tensor.byte_size != spec.byteSize())
    return flowc::invalidArgument(what + " has " + std::to_string(tensor.byte_size) +
                                  " bytes, a " + spec.dtype + " tensor of shape " +
                                  flowc::shapeString(spec.shape) + " has " +
                                  std::to_string(spec.byteSize()));
  if (!tensor.data && spec.byteSize() > 0)
    return flowc::invalidArgument(what + ": data is NULL");
  size_t element = runtime::dtypeBytes(spec.dtype);
  if (element > 1 && reinterpret_cast<uintptr_t>(tensor.data) % element != 0)
    return flowc::invalidArgument(what + ": data is not aligned to its " +
                                  std::to_string(element) + "-byte elements");
  return Status::ok();
}

} // namespace

extern "C" {

int flowc_c_api_version(void) { return FLOWC_C_API_VERSION; }

const char *flowc_last_error(void) { return lastError.c_str(); }

const char *flowc_status_name(int status) {
  if (status < 0 || status > static_cast<int>(StatusCode::PermissionDenied))
    return "Unknown";
  return flowc::statusCodeName(static_cast<StatusCode>(status));
}

flowc_status flowc_artifact_open(const char *path, const char *cache_dir,
                                 flowc_verification verification, flowc_artifact **out) {
  constexpr const char *function = "flowc_artifact_open";
  // The runtime's warnings (a plan candidate that cannot run here, a CUDA
  // graph not captured) go to stderr, as flowc's commands print them, not
  // into the host's stdout (a notebook cell's output, a program's answer).
  flowc::logWarningsToStderr("flowc", /*keepHostLogger=*/true);
  if (!out)
    return nullArgument(function, "out");
  *out = nullptr;
  if (!path)
    return nullArgument(function, "path");
  if (verification != FLOWC_VERIFY_DIGESTS && verification != FLOWC_VERIFY_BOUNDS_ONLY)
    return fail(flowc::invalidArgument(std::string(function) + ": verification " +
                                       std::to_string(static_cast<int>(verification)) +
                                       " is neither FLOWC_VERIFY_DIGESTS nor "
                                       "FLOWC_VERIFY_BOUNDS_ONLY"));
  return guarded(function, [&]() -> Status {
    runtime::OpenOptions options;
    options.verification = verification == FLOWC_VERIFY_DIGESTS
                               ? runtime::Verification::Digests
                               : runtime::Verification::BoundsOnly;
    if (cache_dir)
      options.external = cacheWeights(cache_dir);
    FLOWC_ASSIGN_OR_RETURN(auto artifact, runtime::Artifact::open(path, options));
    auto handle = std::make_unique<flowc_artifact>();
    handle->artifact = std::move(artifact);
    handle->inputs = tensorInfos(handle->artifact->plan().inputs);
    handle->outputs = tensorInfos(handle->artifact->plan().outputs);
    handle->metadata = handle->artifact->metadata().dump();
    *out = handle.release();
    return Status::ok();
  });
}

void flowc_artifact_close(flowc_artifact *artifact) { delete artifact; }

flowc_status flowc_artifact_input_count(const flowc_artifact *artifact, size_t *out) {
  if (!artifact)
    return nullArgument("flowc_artifact_input_count", "artifact");
  if (!out)
    return nullArgument("flowc_artifact_input_count", "out");
  *out = artifact->inputs.size();
  return FLOWC_OK;
}

flowc_status flowc_artifact_output_count(const flowc_artifact *artifact, size_t *out) {
  if (!artifact)
    return nullArgument("flowc_artifact_output_count", "artifact");
  if (!out)
    return nullArgument("flowc_artifact_output_count", "out");
  *out = artifact->outputs.size();
  return FLOWC_OK;
}

flowc_status flowc_artifact_input(const flowc_artifact *artifact, size_t index,
                                  flowc_tensor_info *out) {
  return tensorInfo("flowc_artifact_input", artifact, index, out, true);
}

flowc_status flowc_artifact_output(const flowc_artifact *artifact, size_t index,
                                   flowc_tensor_info *out) {
  return tensorInfo("flowc_artifact_output", artifact, index, out, false);
}

flowc_status flowc_artifact_metadata(const flowc_artifact *artifact, const char **out) {
  if (!artifact)
    return nullArgument("flowc_artifact_metadata", "artifact");
  if (!out)
    return nullArgument("flowc_artifact_metadata", "out");
  *out = artifact->metadata.c_str();
  return FLOWC_OK;
}

namespace {

flowc_status createSession(const char *function, flowc_artifact *artifact, int threads,
                           int gpuDevice, flowc_session **out) {
  if (!out)
    return nullArgument(function, "out");
  *out = nullptr;
  if (!artifact)
    return nullArgument(function, "artifact");
  return guarded(function, [&]() -> Status {
    if (gpuDevice < 0)
      return flowc::invalidArgument("GPU device " + std::to_string(gpuDevice) +
                                    " is negative");
    runtime::SessionOptions options;
    options.threads = threads;
    options.gpuDevice = gpuDevice;
    FLOWC_ASSIGN_OR_RETURN(auto session,
                           runtime::Session::create(artifact->artifact, options));
    auto handle = std::make_unique<flowc_session>();
    handle->session = std::move(session);
    *out = handle.release();
    return Status::ok();
  });
}

} // namespace

flowc_status flowc_session_create(flowc_artifact *artifact, int threads,
                                  flowc_session **out) {
  return createSession("flowc_session_create", artifact, threads, 0, out);
}

flowc_status flowc_session_create_on_gpu(flowc_artifact *artifact, int threads,
                                         int gpu_device, flowc_session **out) {
  return createSession("flowc_session_create_on_gpu", artifact, threads, gpu_device, out);
}

void flowc_session_close(flowc_session *session) { delete session; }

flowc_status flowc_session_run(flowc_session *session, const flowc_tensor *inputs,
                               size_t input_count, const flowc_tensor *outputs,
                               size_t output_count) {
  constexpr const char *function = "flowc_session_run";
  if (!session)
    return nullArgument(function, "session");
  if (!inputs && input_count > 0)
    return nullArgument(function, "inputs");
  if (!outputs && output_count > 0)
    return nullArgument(function, "outputs");
  return guarded(function, [&]() -> Status {
    const runtime::Plan &plan = session->session->plan();
    if (output_count != plan.outputs.size())
      return flowc::invalidArgument(std::to_string(output_count) +
                                    " output buffers given, the model has " +
                                    std::to_string(plan.outputs.size()) + " outputs");
    // Inputs by name: each plan input exactly once (no count check first:
    // what is unknown, twice or missing is named instead).
    std::vector<const void *> inputBuffers(plan.inputs.size(), nullptr);
    std::vector<bool> given(plan.inputs.size(), false);
    for (size_t i = 0; i < input_count; ++i) {
      if (!inputs[i].name)
        return flowc::invalidArgument("input " + std::to_string(i) + ": name is NULL");
      std::string name = inputs[i].name;
      size_t index = 0;
      while (index < plan.inputs.size() && plan.inputs[index].name != name)
        ++index;
      if (index == plan.inputs.size())
        return flowc::invalidArgument("the model has no input named '" + name + "'");
      if (given[index])
        return flowc::invalidArgument("input '" + name + "' is given twice");
      FLOWC_RETURN_IF_ERROR(
          checkTensor(inputs[i], plan.inputs[index], "input '" + name + "'"));
      given[index] = true;
      inputBuffers[index] = inputs[i].data;
    }
    for (size_t index = 0; index < plan.inputs.size(); ++index)
      if (!given[index])
        return flowc::invalidArgument("missing input '" + plan.inputs[index].name +
                                      "' of shape " +
                                      flowc::shapeString(plan.inputs[index].shape));
    std::vector<void *> outputBuffers;
    for (size_t i = 0; i < output_count; ++i) {
      const runtime::TensorSpec &spec = plan.outputs[i];
      if (outputs[i].name && spec.name != outputs[i].name)
        return flowc::invalidArgument("output " + std::to_string(i) + " is '" +
                                      spec.name + "', not '" + outputs[i].name + "'");
      FLOWC_RETURN_IF_ERROR(checkTensor(outputs[i], spec, "output '" + spec.name + "'"));
      outputBuffers.push_back(outputs[i].data);
    }
    FLOWC_RETURN_IF_ERROR(checkSeparate(plan, inputBuffers, outputBuffers));
    std::lock_guard lock(session->mutex);
    return session->session->runInPlace(inputBuffers, outputBuffers);
  });
}

} // extern "C"
