// What the TOSA-level layout passes (flowc-sink-transposes,
// flowc-distribute-over-concat, flowc-fold-input-scales) share: static
// tensor types, which ops are elementwise, and rebuilding one on new
// operands.
#pragma once

#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/PatternMatch.h"

namespace flowc::compiler {

/// `value`'s type if it is a ranked tensor of static shape, else null.
inline mlir::RankedTensorType staticTensorType(mlir::Value value) {
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(value.getType());
  return type && type.hasStaticShape() ? type : nullptr;
}

/// Whether `op` computes each result element from the operand elements at
/// the same (broadcast) index: TOSA's elementwise ops, a product (whose
/// shift operand is a scalar) and a cast.
inline bool isTosaElementwise(mlir::Operation *op) {
  return (op->hasTrait<mlir::OpTrait::tosa::TosaElementwiseOperator>() ||
          mlir::isa<mlir::tosa::MulOp, mlir::tosa::CastOp>(op)) &&
         op->getNumResults() == 1 && op->getNumRegions() == 0;
}

/// `op` rebuilt on `operands` with `resultType` and `attributes`, at the
/// rewriter's insertion point.
inline mlir::Operation *rebuildOp(mlir::PatternRewriter &rewriter, mlir::Operation *op,
                                  mlir::ValueRange operands, mlir::Type resultType,
                                  llvm::ArrayRef<mlir::NamedAttribute> attributes) {
  mlir::OperationState state(op->getLoc(), op->getName(), operands, {resultType},
                             attributes);
  return rewriter.create(state);
}

} // namespace flowc::compiler
