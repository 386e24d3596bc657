// Library kernels of CUDA code (KernelAbi.h's kinds, on the device):
// convolutions through cuDNN's graph API, matrix products through
// cuBLASLt, and pooling, softmax and layer normalization in the runtime's
// own kernels (Helpers.cu), which also do the layout changes and the
// epilogue steps the libraries do not fuse. cuDNN and cuBLASLt are opened
// with dlopen when a session first needs them, never linked: the runtime
// runs CPU code on machines without them.
#pragma once

#include "flowc/runtime/KernelAbi.h"
#include "flowc/runtime/Session.h"
#include "flowc/support/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace flowc::runtime::gpu {

/// What library kernels need of the session they run in (Gpu.cpp's
/// GpuContext). Calls are made with the session's context current.
class DeviceServices {
public:
  virtual ~DeviceServices() = default;
  /// The session's stream (a CUstream): every call queues on it.
  virtual void *stream() const = 0;
  /// Device memory for the session's lifetime; null, with the failure
  /// kept, when the device has none left.
  virtual void *allocate(uint64_t bytes, const std::string &what) = 0;
  /// The functions of a loaded image (cubin or fat binary); null, with the
  /// failure kept, when it does not load.
  virtual void *loadModule(const void *image, const std::string &what) = 0;
  virtual void *moduleFunction(void *module, const char *name) = 0;
  /// Queues `function` on `blocks` blocks of `threads` threads.
  virtual void launch(void *function, uint64_t blocks, uint64_t threads,
                      void **params) = 0;
  /// Waits for everything queued on the stream; false, with the failure
  /// kept, when it failed.
  virtual bool synchronize() = 0;
  /// Keeps `status` as the run's failure (the first one wins).
  virtual void fail(Status status) = 0;
  virtual bool failed() const = 0;
  /// "device 0 (NVIDIA H200)", for messages.
  virtual std::string label() const = 0;
};

class LibraryKernels;
struct LibraryKernelsDeleter {
  void operator()(LibraryKernels *kernels) const;
};
using LibraryKernelsPtr = std::unique_ptr<LibraryKernels, LibraryKernelsDeleter>;

/// How convolutions and products choose their candidate on their first
/// call: a tuning record's, else the plan's, when the library lists it for
/// the kernel; else trial runs of up to `trials` of the library's
/// candidates (cuDNN's engine configurations, cuBLASLt's heuristic
/// results, in the libraries' order), the fastest kept; `trials` <= 1
/// keeps the libraries' first.
struct LibraryTuning {
  int trials = 8;
  /// By site: the plan's candidate (Plan::tuned); empty for none.
  std::vector<std::string> planned;
  /// SessionOptions::gpuRecord.
  std::function<std::optional<std::string>(const std::string &signature)> record;
  /// Whether trial runs of a fused convolution graph may try engines that
  /// compile their kernel when the plan is made (NVRTC, up to seconds
  /// each): a measure task's search may spend that; a session's first call
  /// does not, though it runs one that a record or the plan names.
  bool compiledFusion = false;
};

/// The library kernels of CUDA code `path`, which calls `sites` kernels of
/// the kinds in mask `kinds` (KernelAbi.h's flowc_kernel_kinds): opens
/// cuDNN and cuBLASLt if it calls those kinds, and loads the runtime's own
/// kernels. Unavailable when a library cannot be opened, Unimplemented
/// when this runtime was built without the CUDA toolkit's headers.
Expected<LibraryKernelsPtr> openLibraryKernels(DeviceServices &device, int64_t kinds,
                                               int64_t sites, LibraryTuning tuning,
                                               const std::string &path);

/// The choices of the convolution and product sites made so far, by site.
std::vector<GpuKernelChoice> kernelChoices(const LibraryKernels &kernels);

/// Fills the code's `flowc_kernel_table` (kKernelKindCount slots) and its
/// `flowc_kernel_context` with `kernels`' functions and state.
void fillKernelTable(LibraryKernels &kernels, void **table, void **context);

/// What cuDNN makes of a convolution's operation graphs, built as a
/// session builds them but with no device (cuDNN checks a graph's pieces
/// without one; only its engines need the GPU): the convolution alone, and
/// with its epilogue (bias, residual, ReLU) fused when that epilogue is one
/// the runtime fuses (nullopt otherwise). Each is ok or cuDNN's refusal.
struct ConvGraphCheck {
  Status alone;
  std::optional<Status> fused;
};
Expected<ConvGraphCheck> checkConvGraphs(const Conv2dParams &params);

/// "cuDNN 9.19.0, cuBLASLt 13.1.0" as the libraries on this machine report
/// themselves, opening them if needed; Unavailable naming what is missing.
/// Needs no GPU.
Expected<std::string> libraryVersions();

} // namespace flowc::runtime::gpu
