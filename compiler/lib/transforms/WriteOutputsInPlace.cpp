// flowc-write-outputs-in-place: see Passes.td.
#include "Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/Interfaces/ViewLikeInterface.h"

#include "llvm/ADT/SmallVector.h"

#include <numeric>

namespace flowc::compiler {

#define GEN_PASS_DEF_WRITEOUTPUTSINPLACEPASS
#include "flowc/compiler/Passes.h.inc"

namespace {

/// A dense row-major buffer of known size: one that any reshape of the same
/// element count can view.
bool isDenseStatic(mlir::MemRefType type) {
  return type.hasStaticShape() && type.getLayout().isIdentity() && type.getRank() > 0;
}

/// The allocation `value` views through reshapes only, or null.
mlir::memref::AllocOp reshapedAllocation(mlir::Value value) {
  while (mlir::Operation *op = value.getDefiningOp()) {
    if (auto expand = mlir::dyn_cast<mlir::memref::ExpandShapeOp>(op)) {
      value = expand.getSrc();
      continue;
    }
    if (auto collapse = mlir::dyn_cast<mlir::memref::CollapseShapeOp>(op)) {
      value = collapse.getSrc();
      continue;
    }
    return mlir::dyn_cast<mlir::memref::AllocOp>(op);
  }
  return nullptr;
}

/// Whether every use of `buffer` and of the views made of it happens
/// before `copy` in its block (nested uses count where their ancestor in
/// that block is). A use after the copy could write the buffer after the
/// output took its value.
bool usedOnlyBefore(mlir::Value buffer, mlir::Operation *copy) {
  llvm::SmallVector<mlir::Value> pending{buffer};
  while (!pending.empty()) {
    mlir::Value value = pending.pop_back_val();
    for (mlir::Operation *user : value.getUsers()) {
      mlir::Operation *inBlock = copy->getBlock()->findAncestorOpInBlock(*user);
      if (!inBlock)
        return false;
      if (inBlock != copy && !inBlock->isBeforeInBlock(copy))
        return false;
      if (auto view = mlir::dyn_cast<mlir::ViewLikeOpInterface>(user))
        if (view.getViewSource() == value)
          llvm::append_range(pending, user->getResults());
    }
  }
  return true;
}

/// `output` viewed as `type` (same element count): collapsed to one
/// dimension, then expanded to `type`'s shape.
mlir::Value viewAs(mlir::OpBuilder &builder, mlir::Location loc, mlir::Value output,
                   mlir::MemRefType type) {
  auto outputType = mlir::cast<mlir::MemRefType>(output.getType());
  if (outputType.getShape() == type.getShape())
    return output;
  auto group = [](int64_t rank) {
    mlir::ReassociationIndices all(rank);
    std::iota(all.begin(), all.end(), 0);
    return llvm::SmallVector<mlir::ReassociationIndices>{all};
  };
  mlir::Value flat = output;
  if (outputType.getRank() > 1)
    flat = mlir::memref::CollapseShapeOp::create(builder, loc, output,
                                                 group(outputType.getRank()));
  if (type.getRank() == 1)
    return flat;
  return mlir::memref::ExpandShapeOp::create(builder, loc, type.getShape(), flat,
                                             group(type.getRank()));
}

/// Erases `value`'s defining reshapes that nothing uses any more.
void eraseDeadReshapes(mlir::Value value) {
  while (mlir::Operation *op = value.getDefiningOp()) {
    if (!mlir::isa<mlir::memref::ExpandShapeOp, mlir::memref::CollapseShapeOp>(op) ||
        !op->use_empty())
      return;
    value = op->getOperand(0);
    op->erase();
  }
}

/// Computes the copied allocation in `copy`'s target instead, when the
/// target is an output argument and nothing can tell (Passes.td).
bool writeInPlace(mlir::memref::CopyOp copy) {
  auto output = mlir::dyn_cast<mlir::BlockArgument>(copy.getTarget());
  if (!output || !output.hasOneUse() ||
      !mlir::isa<mlir::func::FuncOp>(output.getOwner()->getParentOp()))
    return false;
  mlir::memref::AllocOp allocation = reshapedAllocation(copy.getSource());
  if (!allocation || allocation->getBlock() != copy->getBlock())
    return false;
  auto outputType = mlir::cast<mlir::MemRefType>(output.getType());
  mlir::MemRefType allocationType = allocation.getType();
  if (!isDenseStatic(outputType) || !isDenseStatic(allocationType) ||
      outputType.getMemorySpace() != allocationType.getMemorySpace() ||
      outputType.getElementType() != allocationType.getElementType() ||
      outputType.getNumElements() != allocationType.getNumElements())
    return false;
  if (!usedOnlyBefore(allocation.getResult(), copy))
    return false;
  mlir::OpBuilder builder(allocation);
  mlir::Value view = viewAs(builder, allocation.getLoc(), output, allocationType);
  allocation.getResult().replaceAllUsesWith(view);
  mlir::Value source = copy.getSource();
  copy->erase();
  eraseDeadReshapes(source);
  allocation->erase();
  return true;
}

struct WriteOutputsInPlacePass
    : impl::WriteOutputsInPlacePassBase<WriteOutputsInPlacePass> {
  void runOnOperation() override {
    llvm::SmallVector<mlir::memref::CopyOp> copies;
    getOperation().walk([&](mlir::memref::CopyOp copy) { copies.push_back(copy); });
    for (mlir::memref::CopyOp copy : copies)
      if (writeInPlace(copy))
        ++outputsWrittenInPlace;
  }
};

} // namespace

} // namespace flowc::compiler
