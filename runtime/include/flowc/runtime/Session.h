// Executes an artifact: loads its code object and runs the graph. CPU code
// binds the packed weights in place (no copy) and connects its library
// kernels; CUDA code (flowc/runtime/GpuAbi.h) gets the weights uploaded to
// its GPU once and the graph's buffers in device memory. Replicas run CUDA
// code on several GPUs of the machine, its weights read once.
#pragma once

#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/Tensor.h"

#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace flowc::runtime {

class KernelContext;
struct KernelContextDeleter {
  void operator()(KernelContext *context) const;
};
class GpuContext;
struct GpuContextDeleter {
  void operator()(GpuContext *context) const;
};

struct SessionOptions {
  /// Threads library kernels use; 0 keeps the process default (all cores).
  int threads = 0;
  /// Time each kernel call of every run (Session::profile). Unavailable
  /// for code without profile marks (KernelAbi.h).
  bool profile = false;
  /// CUDA code: trial-run search. On its first call each convolution and
  /// matrix product times up to this many of cuDNN's or cuBLASLt's
  /// candidates on the GPU and keeps the fastest; 1 keeps the libraries'
  /// first choice.
  int gpuTrials = 8;
  /// CUDA code: the driver's ordinal of the device it runs on.
  int gpuDevice = 0;
  /// CUDA code: the tuning record's candidate (Tuning.h's GPU candidates)
  /// for a library kernel signature on this GPU, asked on each
  /// convolution's and product's first call. A candidate found there, or
  /// else in the plan (Plan::tuned), runs without trial runs when the
  /// library lists it for the kernel; one it does not list is set aside
  /// with a warning. Empty: no records.
  std::function<std::optional<std::string>(const std::string &signature)> gpuRecord = {};
};

/// CUDA code: what a convolution or matrix product site runs and why.
struct GpuKernelChoice {
  enum class Source {
    /// Only one candidate ran (--gpu-trials 1, or the library listed one).
    Library,
    /// The fastest of the trial runs.
    Trials,
    /// SessionOptions::gpuRecord's candidate.
    Record,
    /// The plan's (Plan::tuned).
    Plan,
  };
  int64_t site = -1;
  /// "conv2d" or "matmul".
  std::string kind;
  /// runtime::librarySignature of the site's kernel.
  std::string signature;
  /// The GPU candidate it runs; empty when the library cannot describe its
  /// configuration (it then is never recorded).
  std::string candidate;
  Source source = Source::Library;
  /// A convolution whose plan runs its epilogue (bias, residual, ReLU)
  /// inside cuDNN's graph, with no epilogue kernel after it.
  bool fusedEpilogue = false;
  /// Each candidate the first call timed, and its milliseconds per call
  /// (infinity: it failed): the trial runs, or the only candidate timed
  /// alone; empty with --gpu-trials 1 and for a record's or the plan's.
  std::vector<std::pair<std::string, double>> timings;
};

const char *gpuChoiceSourceName(GpuKernelChoice::Source source);

/// One kernel call of the graph, over the runs a profiling session made.
struct KernelCallTiming {
  /// The callee: a loop kernel's symbol or a library kernel's function.
  std::string kernel;
  /// A library call's site and kind (kernelKindName); -1 and "loops" for a
  /// generated loop kernel.
  int64_t site = -1;
  std::string kind = "loops";
  /// Graph nodes it computes (indices in graph order).
  std::vector<int32_t> nodes;
  /// Bytes of the buffers it is passed, each once (at most what it reads
  /// and writes); nullopt for code compiled before the count.
  std::optional<uint64_t> bytes;
  /// What ran: the library's implementation (oneDNN's impl_info_str), or
  /// "generated".
  std::string implementation = "generated";
  uint64_t calls = 0;
  double seconds = 0;
};

struct RunProfile {
  uint64_t runs = 0;
  /// Wall time of those runs in the generated code, kernels included.
  double seconds = 0;
  /// In the graph's call order.
  std::vector<KernelCallTiming> calls;
};

struct ProfileRecorder;

/// How the replicas of CUDA code on several GPUs got their weights.
struct ReplicaWeights {
  /// "NCCL 2.28.9": broadcast from the first device with that NCCL;
  /// "upload": each device from the artifact (NCCL could not be loaded);
  /// empty: nothing to copy (one device, or no weights).
  std::string method;
  /// Bytes each device holds (the weights' block, alignment included).
  uint64_t bytes = 0;
  /// Copying them to the devices after the first (NCCL: the broadcast,
  /// until every device has them).
  double seconds = 0;
  /// NCCL: making its communicators over the devices, before the copy.
  double setupSeconds = 0;
};

class Session;

/// CUDA code on several GPUs: a session per device, the first device's
/// first.
struct Replicas {
  std::vector<std::unique_ptr<Session>> sessions;
  ReplicaWeights weights;
};

class Session {
public:
  ~Session();

  /// Loads the artifact's code. Unavailable if the code object cannot be
  /// loaded on this host or needs a kernel this runtime lacks, DataLoss if
  /// it lacks the entry symbol. CUDA code is also Unavailable without an
  /// NVIDIA GPU (one line saying why), NotFound for a gpuDevice the driver
  /// does not see, FailedPrecondition when compiled for another GPU ABI or
  /// another compute capability than its device's, Unavailable without the
  /// cuDNN and cuBLASLt its library kernels call, and ResourceExhausted when
  /// its weights do not fit in device memory.
  static Expected<std::unique_ptr<Session>> create(std::shared_ptr<Artifact> artifact,
                                                   SessionOptions options = {});

  /// CUDA code on each of `devices` (the driver's ordinals, distinct; the
  /// first one's session first), for running inputs in parallel on a
  /// machine's GPUs. The weights are read from the artifact once, uploaded
  /// to the first device, and broadcast from there to the others through
  /// NCCL (Replicas::weights says how they went). Each session runs as
  /// create() made it: `options.gpuDevice` is ignored. InvalidArgument for
  /// no devices, a repeated one or CPU code; create()'s errors otherwise.
  static Expected<Replicas> createReplicas(std::shared_ptr<Artifact> artifact,
                                           SessionOptions options,
                                           const std::vector<int> &devices);

  const Plan &plan() const { return artifact_->plan(); }

  /// Bytes of the activation arena allocated for this session, in device
  /// memory for CUDA code (0: the code allocates its temporaries itself, as
  /// -O0 code does).
  uint64_t arenaBytes() const { return arenaBytes_; }
  /// Library kernel call sites (convolutions, matrix products) in the code.
  int64_t libraryKernelSites() const;
  /// Library kernel sites made so far (on their first run) that read their
  /// weights in place from the artifact's packed weights.
  int64_t prepackedWeightsInUse() const;
  /// CUDA code: whether runs replay a CUDA graph of the graph's launches
  /// (captured on the second run; not for code that allocates temporaries
  /// while it runs, nor while profiling). False for CPU code.
  bool replaysGpuGraph() const;
  /// CUDA code: the choices of the convolution and product sites made so
  /// far (on their first run), by site. Empty for CPU code.
  std::vector<GpuKernelChoice> gpuKernelChoices() const;

  /// Runs the graph once. `inputs` maps every plan input name to a tensor of
  /// exactly its shape (InvalidArgument otherwise). Returns outputs in plan
  /// order. Not thread-safe: one run at a time per session.
  Expected<std::vector<Tensor>> run(const std::map<std::string, Tensor> &inputs);

  /// Runs the graph once on caller memory: `inputs[i]` holds plan().inputs[i]
  /// and the code writes plan().outputs[i] into `outputs[i]`, each buffer
  /// dense, of exactly its spec's size, aligned to its element size, and
  /// each output overlapping no input and no other output: results are
  /// written as soon as they are computed (the caller checks; this does
  /// not: the C API and run() do). A bool input byte other than 0 or 1 is
  /// InvalidArgument naming the input and the element (readNpy turns
  /// numpy's non-zero bytes into 1). A run whose
  /// values the graph does not accept (a Gather index out of range) fails
  /// with InvalidArgument naming the node; its outputs are then
  /// unspecified, but no read or write left their buffers. For CUDA code
  /// the buffers are host memory too, copied to and from the device; the
  /// run's first CUDA error is its result (Internal, Unavailable or
  /// ResourceExhausted, naming the CUDA call). Not thread-safe.
  Status runInPlace(const std::vector<const void *> &inputs,
                    const std::vector<void *> &outputs);

  /// What the runs since creation spent per kernel call; empty unless the
  /// session was created with `profile`.
  RunProfile profile() const;

private:
  /// Prepares CPU code: library kernels, thread count and arena.
  Status bindHost();
  /// create(), its weights uploaded unless `uploadWeights` is false (CUDA
  /// code only: the replicas').
  static Expected<std::unique_ptr<Session>> createWith(std::shared_ptr<Artifact> artifact,
                                                       SessionOptions options,
                                                       bool uploadWeights);
  /// Prepares CUDA code on options_.gpuDevice (Gpu.h's bindGpu).
  Status bindDevice(bool uploadWeights);
  Status startProfiling();
  void applyThreads() const;
  Status allocateArena();
  /// Calls the entry on `args`, timing the run when profiling.
  void callEntry(void **args);
  /// Reads what the code's run-time checks say (KernelAbi.h's
  /// kChecksSymbol) and makes their flags; DataLoss when it is malformed.
  Status readChecks();
  /// The first check the last run failed, as InvalidArgument naming it.
  Status takeFailedCheck();

  Session(std::shared_ptr<Artifact> artifact, void *library, void (*entry)(void **),
          SessionOptions options)
      : artifact_(std::move(artifact)), library_(library), entry_(entry),
        options_(options) {}

  std::shared_ptr<Artifact> artifact_;
  void *library_;
  void (*entry_)(void **);
  SessionOptions options_;
  uint64_t arenaBytes_ = 0;
  std::unique_ptr<std::byte, void (*)(void *)> arena_{nullptr, std::free};
  /// What each run-time check says when it fails, and its flag, which the
  /// code sets (one byte; a word each, so no two share one).
  std::vector<std::string> checks_;
  std::vector<uint64_t> checkFlags_;
  std::shared_ptr<ProfileRecorder> profile_;
  /// Declared last: destroyed before the code they serve is unloaded.
  std::unique_ptr<KernelContext, KernelContextDeleter> kernels_;
  /// CUDA code's device state (null for CPU code).
  std::unique_ptr<GpuContext, GpuContextDeleter> gpu_;
};

} // namespace flowc::runtime
