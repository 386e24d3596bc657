// Search on the runtime's side: the candidates of a tunable library kernel
// (a convolution, a matrix product) and their timing on this machine, on
// random data of the kernel's shapes (never a model's weights). A candidate
// is a short text, part of the kernel's tuning key; the artifact's plan
// names the one each site runs (Plan::tuned), and a site with none runs the
// first candidate, the default.
//
// A library kernel's candidate is `field(;field)*`, fields in this order:
//   layout=L    conv: `any` (the library's blocked activation layouts, with
//               reorders from and to the graph's), `nhwc` or `nchw` (plain
//               activations, offered when the graph has that layout);
//               matmul: `any` (a constant B packed as the library prefers)
//               or `plain` (B read as the graph has it).
//   algo=A      conv only: `winograd` (the library's Winograd kernels, 3x3
//               with unit strides, in its blocked layouts; AVX-512 only in
//               oneDNN 2.6) or `direct`; absent: direct.
//   impl=NAME   the oneDNN implementation (its impl_info_str(), e.g.
//               `jit:avx2`, `brg:avx512_core`, `gemm:jit`); the first of
//               that name the library lists for the layout. Absent: the
//               library's first.
//   threads=N   OpenMP threads the kernel runs on (never more than the
//               session's); absent: the session's. Offered for small
//               kernels, where fork and join cost more than they win.
// e.g. `layout=nhwc;impl=jit:avx2`, `layout=any;impl=jit:avx2;threads=1` or
// `layout=any;algo=winograd;impl=jit_wino_4x3:avx512_core`. The default is
// the first candidate listed (Kernels.cpp's defaultConv: Winograd where it
// pays, else the library's NHWC kernel between NHWC buffers, else
// `layout=any;impl=<the library's first>`). A site whose candidate this
// machine's library cannot build (an artifact moved to another CPU) runs the
// default after one warning.
#pragma once

#include "flowc/runtime/KernelAbi.h"
#include "flowc/runtime/Session.h"
#include "flowc/support/Measure.h"
#include "flowc/support/Status.h"

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flowc::runtime {

/// A library kernel's tuning signature, "library.conv2d:1,64,56,...": its
/// kind and every word of its params. Search (CPU and CUDA) and CUDA
/// sessions name the same kernel alike.
std::string librarySignature(KernelKind kind, const std::vector<int64_t> &params);

/// Whether search has candidates for kernels of `kind`.
bool isTunable(KernelKind kind);

/// The candidates of a `kind` kernel with `params` on this CPU, in a
/// deterministic order (the same on every machine with the same CPU
/// features, core count and library build); the first is the default. At
/// most 8. Empty for a kind that is not tunable; InvalidArgument for params
/// of the wrong count or that the library refuses. Thread-safe.
Expected<std::vector<std::string>> libraryCandidates(KernelKind kind,
                                                     const std::vector<int64_t> &params);

/// What a library kernel's timing depends on besides the CPU ("onednn
/// 2.6.3 cpu_runtime omp isa 0x7": the version, its threading runtime and
/// the instruction set it lets itself use): part of a tuning record's key.
std::string libraryVersions();

/// Times `candidates` of the kernel against each other
/// (measureInterleaved) on random inputs and weights of its shapes (a
/// fixed seed; never a model's weights). Each candidate's primitive is
/// made and its weights packed once, before the timing, as a session does;
/// a candidate whose output then differs from the first candidate's (beyond
/// the rounding of its precision), or whose kernel fails, is left out with
/// a warning: its timing has 0 samples and it is never the best.
/// InvalidArgument for no candidates or one that is not one of
/// libraryCandidates'; the library's error when the first candidate fails.
/// The caller pins (pinMeasurementThreads). Not thread-safe with other
/// measurements in the process: they would share the cores.
Expected<Measurement> measureLibraryKernel(KernelKind kind,
                                           const std::vector<int64_t> &params,
                                           const std::vector<std::string> &candidates,
                                           const MeasureOptions &options);

/// Runs `candidate` of a `kind` kernel with `params` once on `buffers` (the
/// kernel's buffers in KernelAbi.h's order, output last, dense fp32 of the
/// params' shapes), through the site code a session runs and that
/// measureLibraryKernel times: for tests that check each candidate's
/// result. InvalidArgument for a candidate not in libraryCandidates or the
/// wrong number of buffers; Internal when the library fails. Thread-safe
/// (each call makes its own primitive).
Status runLibraryCandidate(KernelKind kind, const std::vector<int64_t> &params,
                           const std::string &candidate,
                           const std::vector<void *> &buffers);

/// Pins this thread and the OpenMP threads kernels run on to one core each,
/// so that a measurement's threads do not migrate between its samples: the
/// cores they may run on now, in turn (thread i on the i-th, modulo their
/// count). Pinning again keeps the same cores. The pinning lasts for the
/// threads' lives: call it in a process that measures, before measuring,
/// from the measuring thread. Internal naming the thread and core when
/// the affinity call fails.
Status pinMeasurementThreads();

// GPU library kernels -------------------------------------------------------
//
// A CUDA convolution's or matrix product's candidate is one configuration
// of its library, as text (docs/cuda.md, "Trial-run search"):
//   conv2d  `cudnn:engine=E;knobs=T:V,T:V` - cuDNN's engine (its global
//           index) and knob choices (knob type : value, by type; none:
//           `knobs=`);
//   matmul  `cublaslt:algo=A;tile=T;stages=S;splitk=K;reduction=R;
//           swizzle=W;custom=C;inner=I;cluster=L` - cuBLASLt's algorithm
//           id and its configuration attributes.
// Sessions time them in trial runs, and tuning records keyed by the GPU
// (gpuTuningDevice) keep the fastest, so that later sessions skip the trials.
//
// Either may end in `;split=columns/K` or `;split=rows/K`: a tensor-parallel
// split of the site over a group of K GPUs (docs/cuda.md, "Tensor-parallel
// splits"). Its records are keyed by the group (gpuGroupTuningDevice), so
// one-GPU sessions and compiles never read them, and a one-GPU session
// given one (by the plan or a record) sets it aside with a warning.

/// A GPU candidate's trial: one warm-up call, then this many timed calls;
/// its record's time is their mean.
inline constexpr int kGpuTrialRuns = 3;

/// How a convolution or matrix product is split over a group of GPUs:
/// each device holds 1/ways of the weight and computes its part.
struct TensorSplit {
  enum class Axis {
    /// The output features (a product's n, a convolution's output
    /// channels): each device computes its slice of the result, then an
    /// all-gather gives every device the whole result.
    Columns,
    /// The reduction (a product's k, a convolution's input channels): each
    /// device computes a partial sum over its slice of the input, then an
    /// all-reduce adds them (bias, residual and activation after the sum).
    Rows,
  };
  Axis axis = Axis::Columns;
  /// Devices of the group, 2 to kMaxSplitWays.
  int64_t ways = 2;
};

inline constexpr int64_t kMaxSplitWays = 64;

/// A GPU candidate, parsed.
struct GpuCandidate {
  enum class Library { Cudnn, CublasLt };
  Library library = Library::Cudnn;
  /// cuDNN's engine global index, or cuBLASLt's algorithm id.
  int64_t id = 0;
  /// cuDNN: (knob type, value), by type, each type once.
  std::vector<std::pair<int64_t, int64_t>> knobs;
  /// cuDNN: the engine runs the convolution's graph with its epilogue (bias,
  /// residual, ReLU) fused in, writing the fp32 result itself; otherwise the
  /// convolution alone, and the runtime's epilogue kernel after it.
  bool fusedEpilogue = false;
  /// cuBLASLt: tile, stages, splitk, reduction, swizzle, custom, inner,
  /// cluster.
  std::vector<int64_t> config;
  /// Tensor parallel: the site split over a group of GPUs.
  std::optional<TensorSplit> split;
};

/// The cuBLASLt configuration fields, in text order.
inline constexpr const char *kCublasLtConfigFields[] = {
    "tile", "stages", "splitk", "reduction", "swizzle", "custom", "inner", "cluster"};

std::string formatGpuCandidate(const GpuCandidate &candidate);
/// InvalidArgument naming what is wrong for anything formatGpuCandidate
/// does not write (a candidate comes from an artifact or a tuning import:
/// untrusted text): unknown library or field, fields out of order, values
/// that are not decimal integers below 2^31 (non-negative but for knob
/// values), repeated or unsorted knobs, more than 64 knobs, more than 1024
/// bytes.
Expected<GpuCandidate> parseGpuCandidate(std::string_view text);
/// Whether `text` is a candidate of a `kind` kernel for a plan on a group
/// of `devices` GPUs (a conv2d's is cuDNN's, a matmul's cuBLASLt's): one
/// without a split, or one split exactly `devices` ways. Every plan now is
/// for one GPU.
bool isGpuCandidateOf(KernelKind kind, std::string_view text, int64_t devices = 1);
/// Whether `split` fits a `kind` kernel of `params` (KernelAbi.h's words):
/// a convolution or product whose split axis `ways` divides, and for a
/// grouped convolution, columns only and its groups divisible too.
/// InvalidArgument saying what does not divide otherwise.
Status checkTensorSplit(KernelKind kind, const std::vector<int64_t> &params,
                        const TensorSplit &split);

/// What every GPU tuning device starts with.
inline constexpr const char *kGpuTuningDevicePrefix = "gpu ";
/// The device part of GPU tuning records: "gpu NVIDIA H200 sm_90", from
/// the GPU's name and compute capability (90 for sm_90).
std::string gpuTuningDevice(const std::string &name, int64_t capability);
/// The device part of records timed on a group of `devices` GPUs of one
/// kind (tensor-parallel splits): "gpu NVIDIA H200 sm_90 x4". Not a GPU
/// tuning device of any capability (isGpuTuningDeviceOf): one GPU's
/// sessions and compiles never read its records.
std::string gpuGroupTuningDevice(const std::string &name, int64_t capability,
                                 int64_t devices);
/// Whether `device` is a GPU tuning device of compute capability
/// `capability`.
bool isGpuTuningDeviceOf(std::string_view device, int64_t capability);
/// Device `ordinal`'s gpuTuningDevice; Unavailable without a GPU,
/// NotFound without that device.
Expected<std::string> localGpuTuningDevice(int ordinal = 0);
/// The gpuTuningDevice of every device of this machine, by ordinal;
/// Unavailable without a GPU.
Expected<std::vector<std::string>> localGpuTuningDevices();
/// The ordinal of this machine's first device that is `device` (a GPU
/// tuning device); nullopt when none is (or there is no GPU).
std::optional<int> localGpuOrdinal(std::string_view device);
/// The GPU tuning device a remote engine's workers offer, from how an
/// operator names it: "NVIDIA H200 sm_90" (the driver's name, then the
/// compute capability) -> "gpu NVIDIA H200 sm_90". InvalidArgument quoting
/// the text when it is not a name (printable, no comma, at most 128 bytes)
/// followed by " sm_NN".
Expected<std::string> parseGpuName(std::string_view text);
/// parseGpuName of each of `names`, each device once, in order; the first
/// bad name's InvalidArgument.
Expected<std::vector<std::string>> parseGpuNames(const std::vector<std::string> &names);
/// What follows the prefix of a GPU tuning device ("NVIDIA H200 sm_90"):
/// the value of the `gpu` platform property a task measuring on it needs.
std::string_view gpuNameOf(std::string_view device);
/// Times the GPU candidates of a conv2d or matmul kernel with `params` on
/// device `ordinal` as a session's first call does (up to `trials` of the
/// library's candidates, each a warm-up and three timed runs), on random
/// data of its shapes (a fixed seed; never a model's weights): a measure
/// task's work. The choice has every candidate's timing. InvalidArgument
/// for another kind or params that are not the kind's, Unavailable without
/// a GPU or the libraries, NotFound without device `ordinal`, the kernel's
/// failure otherwise.
Expected<GpuKernelChoice> measureGpuLibraryKernel(KernelKind kind,
                                                  const std::vector<int64_t> &params,
                                                  int trials, int ordinal = 0);

/// What a GPU record's time covers, part of its key: 2 since a
/// convolution's trial times its epilogue too (fused into cuDNN's graph,
/// or the runtime's kernel after it); 1 timed cuDNN's call alone.
inline constexpr int64_t kGpuTrialsVersion = 2;

/// The versions part of GPU tuning records: "cuDNN 9.19.0, cuBLASLt
/// 13.1.0; kernel abi 2; trials 2", as the libraries on this machine report
/// themselves; Unavailable without them (needs no GPU).
Expected<std::string> gpuTuningVersions();

} // namespace flowc::runtime
