// The GPU side of the runtime: the CUDA driver, loaded when first asked for
// (dlopen of libcuda.so.1, never linked), and the device state of sessions
// that run CUDA code (flowc/runtime/GpuAbi.h). Nothing here needs the CUDA
// toolkit to build, and a host without the driver or a GPU gets Unavailable
// with the reason, never a crash: the runtime builds and runs everywhere.
#pragma once

#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/Session.h"
#include "flowc/support/Status.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace flowc::runtime {

/// The GPU sessions run on: what messages name and what keys may hold.
struct GpuDevice {
  /// The driver's device ordinal (SessionOptions::gpuDevice).
  int ordinal = 0;
  /// "NVIDIA H200".
  std::string name;
  /// Compute capability as targets spell it: 90 for sm_90.
  int64_t capability = 0;
  uint64_t totalMemoryBytes = 0;
  /// cuDriverGetVersion's number: 12040 for CUDA 12.4.
  int driverVersion = 0;

  /// "device 0 (NVIDIA H200)", for messages about this device.
  std::string label() const;
  /// "device 0 (NVIDIA H200, sm_90, 139.8 GiB, CUDA driver 12.4)".
  std::string description() const;
};

/// Device `ordinal`, after loading the driver and cuInit on the first
/// call. The driver stays loaded for the life of the process, and the
/// answer (the devices or why there are none) is the same for every later
/// call. Thread-safe. Unavailable when libcuda.so.1 cannot be loaded, lacks
/// a function this runtime calls, cuInit fails, or there is no device;
/// NotFound, naming the devices, when there is no device `ordinal`.
Expected<GpuDevice> openGpu(int ordinal = 0);

/// Every device the driver sees, device 0 first (as openGpu: Unavailable
/// with the reason when there is none).
Expected<std::vector<GpuDevice>> listGpus();

/// Whether the loaded code object `library` is CUDA code (defines
/// flowc_gpu_table).
bool isGpuCode(void *library);

/// A session's device state (declared in Session.h): its context, stream,
/// device buffers and the first error of the run in progress. One run at a
/// time, like the session that owns it.
using GpuContextPtr = std::unique_ptr<GpuContext, GpuContextDeleter>;

/// Prepares CUDA code `library` of `artifact` to run on device
/// `options.gpuDevice` (NotFound when there is none such): checks
/// its GPU ABI and capability, fills its function table and loads its
/// kernels, opens its library kernels (cuDNN, cuBLASLt: gpu/LibraryKernels.h,
/// choosing their candidates as `options` say) if it calls any, uploads the
/// weights (through fixed-size pinned staging, so host memory does not grow with them)
/// and allocates the arena and the input and output buffers on the device. DataLoss when
/// the code lacks a GPU symbol, FailedPrecondition for another GPU or kernel ABI or
/// another capability than the device's, Unavailable without a GPU or the CUDA libraries,
/// Unimplemented when this runtime was built without them, ResourceExhausted when device
/// memory runs out, Internal for other CUDA errors. `uploadWeights` false
/// leaves the weights' buffers for copyGpuWeights to fill. The code's
/// `checks` (KernelAbi.h's kChecksSymbol) get a one-byte buffer each after
/// the outputs, which runOnGpu copies back like them.
Expected<GpuContextPtr> bindGpu(void *library, const Artifact &artifact,
                                const SessionOptions &options, size_t checks,
                                bool uploadWeights = true);

/// Gives each of `replicas` (bound from `artifact` without uploading their
/// weights, each on a device of its own) the weights `source` holds: one
/// NCCL broadcast from its device; when NCCL cannot be loaded, each
/// uploads them from the artifact (and a warning says why). Errors name
/// the NCCL or CUDA call.
Expected<ReplicaWeights> copyGpuWeights(GpuContext &source,
                                        const std::vector<GpuContext *> &replicas,
                                        const Artifact &artifact);

/// Bytes of the activation arena `gpu` holds on the device (0: none).
uint64_t gpuArenaBytes(const GpuContext &gpu);

/// CUDA graphs: from its second run a session captures the entry's
/// launches into a graph and replays it, one launch per run, unless its
/// code allocates temporaries while it runs (their addresses would be
/// baked in) or the capture fails (it then launches directly, and says so
/// once in the log). `allowed` false (profiling: its marks synchronize)
/// drops a captured graph and launches directly.
void allowGpuGraphs(GpuContext &gpu, bool allowed);
/// Whether runs of `gpu` replay a captured graph.
bool replaysGpuGraph(const GpuContext &gpu);
/// The choices of its convolution and product sites so far, by site.
std::vector<GpuKernelChoice> gpuKernelChoices(const GpuContext &gpu);

/// Runs the graph once on the device: copies `inputs` (plan order, host
/// memory) to the device, calls `callEntry` with the entry's device
/// arguments, waits for the launches and copies the outputs, then the
/// checks' flags, into `outputs` (host memory). The first CUDA error of the run is its
/// result, as Unavailable, ResourceExhausted or Internal naming the CUDA call.
Status runOnGpu(GpuContext &gpu, const std::vector<const void *> &inputs,
                const std::vector<void *> &outputs,
                const std::function<void(void **)> &callEntry);

/// Waits for the launches queued so far by the run in progress on this
/// thread; a no-op outside runOnGpu. A failure is kept as the run's result.
void synchronizeActiveGpu();

} // namespace flowc::runtime
