// flowc-distribute-over-concat: see Passes.td.
#include "Passes.h"
#include "TosaElementwise.h"

#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/Dialect/Tosa/Utils/ConversionUtils.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace flowc::compiler {

#define GEN_PASS_DEF_DISTRIBUTEOVERCONCATPASS
#include "flowc/compiler/Passes.h.inc"

namespace {

using mlir::Operation;
using mlir::Value;

/// More inputs than this and the per-input kernels cost more in calls and
/// compile time than the copy they save.
constexpr size_t kMaxInputs = 128;

/// The concatenation among `op`'s operands that only `op` reads, whose
/// shape is the result's (no broadcast of it).
mlir::tosa::ConcatOp soleConcatOperand(Operation *op, mlir::RankedTensorType resultType) {
  mlir::tosa::ConcatOp found;
  for (Value operand : op->getOperands()) {
    auto concat = operand.getDefiningOp<mlir::tosa::ConcatOp>();
    if (!concat)
      continue;
    if (found || !concat->hasOneUse())
      return {};
    found = concat;
  }
  if (!found || found.getInput1().size() > kMaxInputs)
    return {};
  auto concatType = staticTensorType(found.getOutput());
  if (!concatType || concatType.getShape() != resultType.getShape())
    return {};
  return found;
}

/// Whether `operand` can be read per input of a concatenation along
/// `axis`: whole where it broadcasts along the axis, sliced where it spans
/// it. Operands of another rank (a product's shift) are read whole.
bool isDistributable(Value operand, mlir::RankedTensorType resultType, int64_t axis) {
  auto type = mlir::dyn_cast<mlir::ShapedType>(operand.getType());
  if (!type || type.getRank() != resultType.getRank())
    return true;
  return type.hasStaticShape() && (type.getDimSize(axis) == 1 ||
                                   type.getDimSize(axis) == resultType.getDimSize(axis));
}

/// `operand`'s part for the input at [offset, offset + size) along `axis`.
Value partOf(mlir::PatternRewriter &rewriter, mlir::Location loc, Value operand,
             mlir::RankedTensorType resultType, int64_t axis, int64_t offset,
             int64_t size) {
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(operand.getType());
  if (!type || type.getRank() != resultType.getRank() || type.getDimSize(axis) == 1)
    return operand;
  llvm::SmallVector<int64_t> start(type.getRank(), 0), sizes(type.getShape());
  start[axis] = offset;
  sizes[axis] = size;
  return mlir::tosa::SliceOp::create(
      rewriter, loc, mlir::RankedTensorType::get(sizes, type.getElementType()), operand,
      mlir::tosa::getTosaConstShape(rewriter, loc, start),
      mlir::tosa::getTosaConstShape(rewriter, loc, sizes));
}

/// elementwise(concat(x1, x2, ...), y) ->
/// concat(elementwise(x1, y1), elementwise(x2, y2), ...).
struct DistributeElementwise : mlir::RewritePattern {
  DistributeElementwise(mlir::MLIRContext *context, llvm::Statistic &distributed)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, context),
        distributed(distributed) {}

  mlir::LogicalResult matchAndRewrite(Operation *op,
                                      mlir::PatternRewriter &rewriter) const override {
    if (!isTosaElementwise(op))
      return mlir::failure();
    mlir::RankedTensorType resultType = staticTensorType(op->getResult(0));
    if (!resultType)
      return mlir::failure();
    mlir::tosa::ConcatOp concat = soleConcatOperand(op, resultType);
    if (!concat)
      return mlir::failure();
    int64_t axis = concat.getAxis();
    for (Value operand : op->getOperands())
      if (operand != concat.getOutput() && !isDistributable(operand, resultType, axis))
        return mlir::failure();

    llvm::SmallVector<Value> parts;
    int64_t offset = 0;
    for (Value input : concat.getInput1()) {
      int64_t size = mlir::cast<mlir::ShapedType>(input.getType()).getDimSize(axis);
      llvm::SmallVector<Value> operands;
      for (Value operand : op->getOperands())
        operands.push_back(operand == concat.getOutput()
                               ? input
                               : partOf(rewriter, op->getLoc(), operand, resultType, axis,
                                        offset, size));
      llvm::SmallVector<int64_t> shape(resultType.getShape());
      shape[axis] = size;
      parts.push_back(
          rebuildOp(rewriter, op, operands,
                    mlir::RankedTensorType::get(shape, resultType.getElementType()),
                    op->getAttrs())
              ->getResult(0));
      offset += size;
    }
    rewriter.replaceOpWithNewOp<mlir::tosa::ConcatOp>(op, resultType, parts,
                                                      concat.getAxisAttr());
    rewriter.eraseOp(concat);
    ++distributed;
    return mlir::success();
  }

  llvm::Statistic &distributed;
};

struct DistributeOverConcatPass
    : impl::DistributeOverConcatPassBase<DistributeOverConcatPass> {
  void runOnOperation() override {
    mlir::RewritePatternSet patterns(&getContext());
    patterns.add<DistributeElementwise>(&getContext(), opsDistributed);
    // An optimization: IR that did not settle within the driver's rounds is
    // still correct, only less distributed.
    (void)mlir::applyPatternsGreedily(getOperation(), std::move(patterns));
  }
};

} // namespace

} // namespace flowc::compiler
