// What a compile for a CUDA target adds to the CPU's codegen: the toolkit
// it assembles with, and the LLVM-level binding of kernels and graph to the
// runtime's GPU functions (flowc/runtime/GpuAbi.h).
#pragma once

#include "flowc/support/Status.h"
#include "flowc/support/Target.h"

#include <string>
#include <vector>

namespace llvm {
class Module;
} // namespace llvm

namespace flowc::compiler {

/// The CUDA toolkit this flowc was built with (ptxas, libdevice): its root
/// directory; Unimplemented naming what is missing when it was built
/// without one, or when it is gone.
Expected<std::string> cudaToolkitPath();
/// "CUDA 13.0.88": part of every CUDA kernel's cache key (ptxas made its
/// cubin).
std::string cudaToolkitVersion();

/// In a kernel's LLVM module, after MLIR's GPU lowering: the cubin loads
/// MLIR put in global constructors move into `<symbol>.gpu_load` and
/// `<symbol>.gpu_unload` (the session calls them once the GPU is set up),
/// and each GPU runtime function called becomes a thunk through the GPU
/// table. Unimplemented naming a runtime function the ABI lacks.
Status bindGpuKernel(llvm::Module &module, const std::string &symbol);

/// In the graph's LLVM module: the GPU table, `flowc_gpu_load` and
/// `flowc_gpu_unload` over every kernel's, the compute capability and the
/// ABI version, and thunks for the graph's own allocations.
Status bindGpuGraph(llvm::Module &module, const std::vector<std::string> &kernelSymbols,
                    Target target);

} // namespace flowc::compiler
