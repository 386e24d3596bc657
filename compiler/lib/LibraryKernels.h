// Library kernels: heavy ops leave generated code for the runtime's tuned
// implementations (oneDNN), behind the ABI of flowc/runtime/KernelAbi.h
// (one params struct per kernel kind). The code lives in library/:
// Patterns.cpp (one pattern per kind), Epilogue.cpp (the bias / residual /
// activation matcher they share), Outline.cpp (the passes) and
// LlvmBinding.cpp (the thunks).
//
// Three steps around the lowering pipeline:
//  1. On the TOSA graph, `createOutlineLibraryKernelsPass` outlines each
//     convolution or matrix product, with the layout changes it can absorb
//     (NCHW<->NHWC transposes, transposed weights) and its epilogue
//     (bias, residual add, activation), into a private function that @main
//     calls through `flowc.library_call` (its kind and params struct);
//     so does each pooling, softmax and layer normalization. The body keeps
//     the exact TOSA semantics, so the function bufferizes like any other
//     and fixes the kernel's buffer ABI.
//  2. Right before bufferization, flowc-lower-library-calls makes each
//     call a func.call and tags the callee with `flowc.kernel` and
//     `flowc.kernel_params`.
//  3. Before the lowering to LLVM, `dropLibraryKernelBodies` leaves
//     declarations; on the LLVM module, `bindLibraryKernels` gives each
//     tagged function a body that is a thunk into the runtime's kernel
//     table and defines the table symbols.
#pragma once

#include "flowc/compiler/Compiler.h"
#include "flowc/compiler/dialect/FlowcDialect.h"
#include "flowc/runtime/KernelAbi.h"
#include "flowc/support/Status.h"

#include <memory>
#include <string>
#include <vector>

namespace llvm {
class Module;
}
namespace mlir {
class ModuleOp;
class Pass;
} // namespace mlir

namespace flowc::compiler {

/// Attributes of an outlined kernel function (declared and verified by the
/// flowc dialect).
inline constexpr llvm::StringLiteral kKernelKindAttr =
    FlowcDialect::KernelAttrHelper::getNameStr();
inline constexpr llvm::StringLiteral kKernelParamsAttr =
    FlowcDialect::KernelParamsAttrHelper::getNameStr();

/// One outlined kernel, in call-site order.
struct LibraryKernel {
  std::string function;
  runtime::KernelKind kind;
  std::vector<int64_t> params;
  /// Buffers the runtime kernel expects: inputs then the output.
  unsigned bufferCount = 0;
};

/// Precision::Bf16: the kernels compute in bfloat16 (fp32 buffers, fp32
/// accumulation).
std::unique_ptr<mlir::Pass>
createOutlineLibraryKernelsPass(Precision precision = Precision::Fp32);

/// The kernels of `module` in site order (after outlining, from the
/// flowc.library_call ops or, once lowered, the tagged functions, at any
/// later stage that still has func.func ops).
std::vector<LibraryKernel> collectLibraryKernels(mlir::ModuleOp module);

/// The constant weights the kernels read (a convolution's filter, a
/// product's constant B), each traced through reshapes to the @main weight
/// argument it is. Call on bufferized IR, with collectLibraryKernels' list.
std::vector<KernelWeight> collectKernelWeights(mlir::ModuleOp module,
                                               const std::vector<LibraryKernel> &kernels);

/// The call sites of collectLibraryKernels' list, for search.
std::vector<LibrarySite> librarySitesOf(const std::vector<LibraryKernel> &kernels);

/// Makes each kernel function a declaration: once bufferized, its body has
/// fixed the kernel's buffer ABI, and bindLibraryKernels replaces it anyway,
/// so lowering it to LLVM would be wasted work.
void dropLibraryKernelBodies(mlir::ModuleOp module);

/// Gives each kernel function a body that calls the runtime kernel and
/// defines the symbols KernelAbi.h names. Internal if a function's
/// lowered signature does not match the kernel's buffer count.
Status bindLibraryKernels(llvm::Module &module,
                          const std::vector<LibraryKernel> &kernels);

} // namespace flowc::compiler
