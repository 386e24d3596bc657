// The matchers behind library-kernel outlining: what one kernel absorbs
// around its root op. Shared by the per-kind patterns (Patterns.cpp) and
// the epilogue matcher (Epilogue.cpp); private to compiler/lib/library.
#pragma once

#include "flowc/runtime/KernelAbi.h"

#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/Value.h"

#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <variant>

namespace flowc::compiler::library {

/// A match ready to outline: the kernel's inputs (ABI order), the ops it
/// absorbs, the value it produces and the kind's params struct.
struct Candidate {
  runtime::KernelKind kind = runtime::KernelKind::Conv2d;
  llvm::SmallVector<mlir::Value> inputs;
  llvm::SmallVector<mlir::Operation *> ops;
  mlir::Value result;
  std::variant<runtime::Conv2dParams, runtime::MatMulParams, runtime::Pool2dParams,
               runtime::SoftmaxParams, runtime::LayerNormParams,
               runtime::IntegerConv2dParams>
      params;
};

/// What a kernel computes after its main op, in order.
struct Epilogue {
  mlir::Value bias;
  mlir::Value residual;
  runtime::Activation activation = runtime::Activation::None;
  float alpha = 0, beta = 0;
};

/// Whether `op` is an op a kernel can be rooted at (convolution, product,
/// pooling, and the reductions that start a softmax or layer norm).
bool isKernelRoot(mlir::Operation *op);

/// The kernel rooted at `root`, if its pattern matches (one pattern per
/// kind: Patterns.cpp).
std::optional<Candidate> matchKernel(mlir::Operation *root);

// Shared by the patterns (Epilogue.cpp).

llvm::ArrayRef<int64_t> shapeOf(mlir::Value value);
/// A static-shaped f32 tensor.
bool isF32Tensor(mlir::Value value);
/// A static-shaped tensor of `bits`-bit integers.
bool isIntegerTensor(mlir::Value value, unsigned bits);
/// `value`'s producer if it is a transpose by exactly `perms`.
mlir::tosa::TransposeOp transposeBy(mlir::Value value, llvm::ArrayRef<int32_t> perms);
/// A graph weight or constant, seen through layout changes: its buffer
/// never changes while a session lives, so the runtime packs it once.
bool isConstantOrigin(mlir::Value value);
/// The only user of `value`, if it has exactly one use.
mlir::Operation *soleUser(mlir::Value value);
/// The other operand of a binary `add` whose one operand is `value`.
mlir::Value otherAddend(mlir::tosa::AddOp add, mlir::Value value);
/// `value`'s only other factor if `op` is a `mul` of it by something else.
mlir::Value otherFactor(mlir::Operation *op, mlir::Value value);
/// The value of a splat f32 constant, if `value` is one.
std::optional<float> splatConstant(mlir::Value value);
/// A multiplier of ~`expected`: a splat constant, or the reciprocal of one.
bool isScale(mlir::Value value, float expected);

/// The layout in which a kernel reads `source`, an NHWC operand of TOSA's:
/// NCHW when `source` is the importer's NCHW -> NHWC transpose, which the
/// candidate then absorbs (`source` becomes the transpose's input).
runtime::ActivationLayout absorbSourceLayout(Candidate &candidate, mlir::Value &source);
/// Absorbs the importer's crop of a convolution's source (Epilogue.cpp).
void absorbSourceCrop(Candidate &candidate, mlir::Value &source,
                      llvm::ArrayRef<int64_t> output, llvm::ArrayRef<int64_t> kernel,
                      llvm::ArrayRef<int64_t> stride, llvm::ArrayRef<int64_t> dilation,
                      llvm::ArrayRef<int64_t> pad);
/// The layout in which a kernel writes its NHWC result: NCHW when the
/// result's only user transposes it back, which the candidate then absorbs.
runtime::ActivationLayout absorbDestinationLayout(Candidate &candidate);

/// The epilogue matcher: absorbs single-use successors of
/// `candidate.result`: a bias add (when `biasChannels` > 0: an addend of
/// shape [1, ..., 1, biasChannels]), a residual add of the same shape, then
/// an activation.
Epilogue absorbEpilogue(Candidate &candidate, int64_t biasChannels);
/// The epilogue's bias and residual, as the kernel's next inputs.
void appendEpilogueInputs(Candidate &candidate, const Epilogue &epilogue);

} // namespace flowc::compiler::library
