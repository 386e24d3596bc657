// The contract between CUDA code objects (targets cuda:sm_*) and the
// runtime.
//
// A CUDA code object is a host shared object like a CPU one: `flowc_entry`
// takes the same arguments (inputs, weights, outputs, checks, arena), but every
// buffer is device memory. Each loop kernel's host side launches its GPU
// kernel (a cubin embedded in the object) through the GPU runtime functions
// MLIR's gpu-to-llvm lowering calls (mgpuLaunchKernel, ...). In the code
// object each of those functions is a thunk through `flowc_gpu_table`, in
// GpuFunction order, and the graph's temporaries outside the arena are
// allocated through it too.
//
// A session loads the code, checks `flowc_gpu_abi` and
// `flowc_gpu_capability` against its device, fills the table, then calls
// `flowc_gpu_load()` (every kernel's cubin is loaded into the session's
// context) and, before unloading the code, `flowc_gpu_unload()`. Loading
// the code runs none of this: a machine without a GPU can open and inspect
// a CUDA artifact.
//
// Streams: mgpuStreamCreate answers the session's stream, on which every
// launch of a run is queued in order; mgpuStreamSynchronize and
// mgpuStreamDestroy on it do nothing, and the session synchronizes once at
// the end of the run. Errors of the void functions are kept by the session
// and returned by the run (the rest of the run's launches are skipped).
#pragma once

#include <cstddef>
#include <cstdint>

namespace flowc::runtime {

inline constexpr const char *kGpuTableSymbol = "flowc_gpu_table";
inline constexpr const char *kGpuLoadSymbol = "flowc_gpu_load";
inline constexpr const char *kGpuUnloadSymbol = "flowc_gpu_unload";
/// int64: the compute capability the cubins are for (90 for sm_90).
inline constexpr const char *kGpuCapabilitySymbol = "flowc_gpu_capability";
/// int64: the version of this header the code was compiled against.
inline constexpr const char *kGpuAbiSymbol = "flowc_gpu_abi";
inline constexpr int64_t kGpuAbiVersion = 1;

/// The table's slots. Each function's C signature is below; the names are
/// the symbols MLIR's lowering calls.
enum class GpuFunction : int64_t {
  ModuleLoad = 0,
  ModuleUnload,
  ModuleGetFunction,
  LaunchKernel,
  StreamCreate,
  StreamDestroy,
  StreamSynchronize,
  /// The graph's temporaries (memref.alloc outside the arena).
  MemAlloc,
  AlignedMemAlloc,
  MemFree,
};
inline constexpr int64_t kGpuFunctionCount = 10;
inline constexpr const char *kGpuFunctionNames[kGpuFunctionCount] = {
    "mgpuModuleLoad",
    "mgpuModuleUnload",
    "mgpuModuleGetFunction",
    "mgpuLaunchKernel",
    "mgpuStreamCreate",
    "mgpuStreamDestroy",
    "mgpuStreamSynchronize",
    "_mlir_memref_to_llvm_alloc",
    "_mlir_memref_to_llvm_aligned_alloc",
    "_mlir_memref_to_llvm_free",
};

/// The cubin `data` of `bytes` bytes, loaded: a CUmodule.
using GpuModuleLoad = void *(*)(void *data, uint64_t bytes);
using GpuModuleUnload = void (*)(void *module);
/// The kernel `name` (NUL-terminated) of a loaded module: a CUfunction.
using GpuModuleGetFunction = void *(*)(void *module, const char *name);
/// cuLaunchKernel's arguments; `params` holds `paramCount` pointers.
using GpuLaunchKernel = void (*)(void *function, int64_t gridX, int64_t gridY,
                                 int64_t gridZ, int64_t blockX, int64_t blockY,
                                 int64_t blockZ, int32_t sharedBytes, void *stream,
                                 void **params, void **extra, uint64_t paramCount);
using GpuStreamCreate = void *(*)();
using GpuStreamDestroy = void (*)(void *stream);
using GpuStreamSynchronize = void (*)(void *stream);
/// Device memory of `bytes` bytes (aligned for any element type).
using GpuMemAlloc = void *(*)(uint64_t bytes);
/// Device memory of `bytes` bytes aligned to `alignment` (at most 256, which
/// every device allocation is).
using GpuAlignedMemAlloc = void *(*)(uint64_t alignment, uint64_t bytes);
using GpuMemFree = void (*)(void *pointer);

} // namespace flowc::runtime
