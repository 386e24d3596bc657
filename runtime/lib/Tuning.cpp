#include "flowc/runtime/Tuning.h"

#include "Kernels.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <omp.h>
#include <random>
#include <sched.h>

namespace flowc::runtime {

namespace {

/// Measurements draw their data from this seed: the same kernel is timed
/// on the same numbers everywhere.
constexpr uint32_t kMeasureSeed = 20261202;
/// A buffer of more floats is no kernel search should allocate.
constexpr size_t kMaxBufferFloats = size_t{1} << 30;

} // namespace

Expected<std::vector<size_t>> bufferFloats(KernelKind kind,
                                           const std::vector<int64_t> &words) {
  std::vector<int64_t> counts;
  if (auto conv = kind == KernelKind::Conv2d ? paramsFromWords<Conv2dParams>(words)
                                             : std::nullopt) {
    int64_t destination =
        conv->batch * conv->outChannels * conv->outHeight * conv->outWidth;
    counts = {conv->batch * conv->inChannels * conv->inHeight * conv->inWidth,
              conv->outChannels *
                  (conv->inChannels / std::max<int64_t>(conv->groups, 1)) *
                  conv->kernelHeight * conv->kernelWidth,
              conv->outChannels};
    if (conv->hasResidual)
      counts.push_back(destination);
    counts.push_back(destination);
  } else if (auto matmul = kind == KernelKind::MatMul
                               ? paramsFromWords<MatMulParams>(words)
                               : std::nullopt) {
    int64_t destination = matmul->batch * matmul->m * matmul->n;
    counts = {matmul->batch * matmul->m * matmul->k,
              matmul->batch * matmul->k * matmul->n};
    if (matmul->hasBias)
      counts.push_back(matmul->n);
    if (matmul->hasResidual)
      counts.push_back(destination);
    if (matmul->hasMask)
      counts.push_back((matmul->maskRows ? matmul->m : 1) *
                       (matmul->maskColumns ? matmul->n : 1));
    counts.push_back(destination);
  } else {
    return invalidArgument(std::string("a ") + kernelKindName(kind) +
                           " kernel with these params cannot be measured");
  }
  std::vector<size_t> sizes;
  for (int64_t count : counts) {
    if (count <= 0 || static_cast<uint64_t>(count) > kMaxBufferFloats)
      return invalidArgument(std::string("a ") + kernelKindName(kind) +
                             " kernel buffer of " + std::to_string(count) +
                             " floats cannot be measured");
    sizes.push_back(static_cast<size_t>(count));
  }
  return sizes;
}

namespace {

/// The candidates of one kernel as the sites of one kernel context, run
/// the way a session runs them (each site's primitive made on its first
/// run, constant weights packed then): what measuring and
/// runLibraryCandidate share.
class CandidateRunner {
public:
  /// InvalidArgument for a candidate that is not one of
  /// libraryCandidates', or a kind that is not tunable.
  static Expected<CandidateRunner> create(KernelKind kind,
                                          const std::vector<int64_t> &params,
                                          const std::vector<std::string> &candidates) {
    if (!isTunable(kind))
      return invalidArgument(std::string(kernelKindName(kind)) +
                             " kernels have no search candidates");
    FLOWC_ASSIGN_OR_RETURN(std::vector<std::string> known,
                           libraryCandidates(kind, params));
    for (const std::string &candidate : candidates)
      if (std::find(known.begin(), known.end(), candidate) == known.end())
        return invalidArgument("'" + candidate + "' is not a candidate of this " +
                               kernelKindName(kind) + " kernel on this machine");
    try {
      return CandidateRunner(kind, params, makeKernelContext(candidates));
    } catch (const dnnl::error &error) {
      return internalError(std::string("no CPU engine for search: ") + error.what());
    }
  }

  /// Runs candidate `index` once on `buffers`; the kernel's failure, if any.
  Status run(size_t index, void **buffers) {
    kernelFunction(kind_)(context_.get(), static_cast<int64_t>(index), params_.data(),
                          buffers);
    return takeKernelFailure(*context_);
  }

private:
  CandidateRunner(KernelKind kind, std::vector<int64_t> params, KernelContextPtr context)
      : kind_(kind), params_(std::move(params)), context_(std::move(context)) {}

  KernelKind kind_;
  std::vector<int64_t> params_;
  KernelContextPtr context_;
};

/// The largest difference between `output` and `reference`, relative to
/// the largest magnitude of `reference`; infinite where either is not a
/// number.
double relativeDifference(const std::vector<float> &output,
                          const std::vector<float> &reference) {
  double scale = 0, difference = 0;
  for (size_t i = 0; i < output.size(); ++i) {
    double delta = std::abs(static_cast<double>(output[i]) - reference[i]);
    if (std::isnan(delta))
      return INFINITY;
    difference = std::max(difference, delta);
    scale = std::max(scale, std::abs(static_cast<double>(reference[i])));
  }
  return difference / std::max(scale, 1e-30);
}

/// How far a candidate may differ from the default and still compute the
/// same thing: summation order in fp32; bf16 inputs are rounded alike by
/// every candidate, but implementations may round intermediates.
double tolerance(KernelKind kind, const std::vector<int64_t> &words) {
  Precision precision = Precision::Fp32;
  if (auto conv = kind == KernelKind::Conv2d ? paramsFromWords<Conv2dParams>(words)
                                             : std::nullopt)
    precision = conv->precision;
  if (auto matmul = kind == KernelKind::MatMul ? paramsFromWords<MatMulParams>(words)
                                               : std::nullopt)
    precision = matmul->precision;
  return precision == Precision::Bf16 ? 1e-2 : 1e-4;
}

} // namespace

std::string libraryVersions() {
  const dnnl_version_t *version = dnnl_version();
  std::string runtime = version->cpu_runtime == DNNL_RUNTIME_OMP          ? "omp"
                        : version->cpu_runtime == DNNL_RUNTIME_TBB        ? "tbb"
                        : version->cpu_runtime == DNNL_RUNTIME_SEQ        ? "seq"
                        : version->cpu_runtime == DNNL_RUNTIME_THREADPOOL ? "threadpool"
                                                                          : "other";
  // The instruction set the library lets itself use (DNNL_MAX_CPU_ISA can
  // lower it): its implementations, and so the candidates, follow it.
  char isa[16];
  std::snprintf(isa, sizeof isa, "0x%x",
                static_cast<unsigned>(dnnl_get_effective_cpu_isa()));
  return "onednn " + std::to_string(version->major) + "." +
         std::to_string(version->minor) + "." + std::to_string(version->patch) +
         " cpu_runtime " + runtime + " isa " + isa;
}

Status runLibraryCandidate(KernelKind kind, const std::vector<int64_t> &params,
                           const std::string &candidate,
                           const std::vector<void *> &buffers) {
  FLOWC_ASSIGN_OR_RETURN(std::vector<size_t> sizes, bufferFloats(kind, params));
  if (buffers.size() != sizes.size())
    return invalidArgument(
        std::string("a ") + kernelKindName(kind) + " kernel with these params has " +
        std::to_string(sizes.size()) + " buffers, not " + std::to_string(buffers.size()));
  FLOWC_ASSIGN_OR_RETURN(CandidateRunner runner,
                         CandidateRunner::create(kind, params, {candidate}));
  std::vector<void *> arguments = buffers;
  return runner.run(0, arguments.data());
}

Expected<Measurement> measureLibraryKernel(KernelKind kind,
                                           const std::vector<int64_t> &params,
                                           const std::vector<std::string> &candidates,
                                           const MeasureOptions &options) {
  if (candidates.empty())
    return invalidArgument("no candidates to measure");
  FLOWC_ASSIGN_OR_RETURN(CandidateRunner runner,
                         CandidateRunner::create(kind, params, candidates));
  FLOWC_ASSIGN_OR_RETURN(std::vector<size_t> sizes, bufferFloats(kind, params));
  // Random inputs and weights of the kernel's shapes, never a model's.
  std::mt19937 random(kMeasureSeed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::vector<float>> inputs(sizes.size() - 1);
  for (size_t i = 0; i + 1 < sizes.size(); ++i) {
    inputs[i].resize(sizes[i]);
    for (float &value : inputs[i])
      value = uniform(random);
  }
  // Each candidate writes its own output: the outputs are compared.
  std::vector<std::vector<float>> outputs(candidates.size(),
                                          std::vector<float>(sizes.back()));
  std::vector<std::vector<void *>> arguments(candidates.size());
  for (size_t c = 0; c < candidates.size(); ++c) {
    for (std::vector<float> &input : inputs)
      arguments[c].push_back(input.data());
    arguments[c].push_back(outputs[c].data());
  }
  // One run of each, outside the timing: it makes the primitive and packs
  // the weights, as a session's first run does, and gives the output that
  // must match the default's. A wrong kernel must never win.
  double allowed = tolerance(kind, params);
  std::vector<size_t> agreeing;
  for (size_t c = 0; c < candidates.size(); ++c) {
    Status status = runner.run(c, arguments[c].data());
    if (!status.isOk() && c == 0)
      return status;
    if (!status.isOk()) {
      spdlog::warn("{} candidate '{}' left out of the measurement: {}",
                   kernelKindName(kind), candidates[c], status.message());
      continue;
    }
    double difference = c == 0 ? 0 : relativeDifference(outputs[c], outputs[0]);
    if (difference > allowed) {
      spdlog::warn("{} candidate '{}' left out of the measurement: its output differs "
                   "from '{}' by {:.3g} of the largest value (at most {:.0e})",
                   kernelKindName(kind), candidates[c], candidates[0], difference,
                   allowed);
      continue;
    }
    agreeing.push_back(c);
  }
  std::vector<std::string> names;
  std::vector<std::function<void()>> runs;
  Status failure = Status::ok();
  for (size_t c : agreeing) {
    names.push_back(candidates[c]);
    runs.push_back([&, c] {
      Status status = runner.run(c, arguments[c].data());
      if (failure.isOk() && !status.isOk())
        failure = std::move(status);
    });
  }
  Measurement measured = measureInterleaved(names, runs, options);
  FLOWC_RETURN_IF_ERROR(failure);
  // In the candidates' order; those left out were not measured.
  Measurement result = measured;
  result.timings.clear();
  for (size_t c = 0, next = 0; c < candidates.size(); ++c) {
    if (next < agreeing.size() && agreeing[next] == c) {
      if (next == measured.best)
        result.best = c;
      result.timings.push_back(measured.timings[next++]);
      continue;
    }
    CandidateTiming leftOut;
    leftOut.candidate = candidates[c];
    result.timings.push_back(leftOut);
  }
  return result;
}

Status pinMeasurementThreads() {
  int threads = omp_get_max_threads();
  std::vector<int> errors(static_cast<size_t>(threads), 0);
  // The cores this thread and the pool may use now, all of them together:
  // pinning again (each thread then allows one) spreads them alike.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
#pragma omp parallel num_threads(threads)
  {
    cpu_set_t own;
    CPU_ZERO(&own);
    if (sched_getaffinity(0, sizeof own, &own) != 0) {
      errors[static_cast<size_t>(omp_get_thread_num())] = errno;
    } else {
#pragma omp critical
      CPU_OR(&allowed, &allowed, &own);
    }
  }
  std::vector<int> cores;
  for (int core = 0; core < CPU_SETSIZE; ++core)
    if (CPU_ISSET(core, &allowed))
      cores.push_back(core);
  if (cores.empty())
    return internalError("pinning measurement threads: no core is allowed (" +
                         std::string(std::strerror(errors[0])) + ")");
    // The calling thread is the team's thread 0: it gets the first core.
#pragma omp parallel num_threads(threads)
  {
    int thread = omp_get_thread_num();
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cores[static_cast<size_t>(thread) % cores.size()], &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0)
      errors[static_cast<size_t>(thread)] = errno;
  }
  for (int thread = 0; thread < threads; ++thread)
    if (errors[static_cast<size_t>(thread)] != 0)
      return internalError(
          "pinning measurement thread " + std::to_string(thread) + " to core " +
          std::to_string(cores[static_cast<size_t>(thread) % cores.size()]) +
          " failed: " + std::strerror(errors[static_cast<size_t>(thread)]));
  return Status::ok();
}

} // namespace flowc::runtime
