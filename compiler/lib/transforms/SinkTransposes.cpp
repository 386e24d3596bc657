// flowc-sink-transposes: see Passes.td.
#include "Passes.h"
#include "TosaElementwise.h"

#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/Dialect/Tosa/Utils/ConversionUtils.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include "llvm/ADT/STLExtras.h"

namespace flowc::compiler {

#define GEN_PASS_DEF_SINKTRANSPOSESPASS
#include "flowc/compiler/Passes.h.inc"

namespace {

using mlir::Operation;
using mlir::Value;

/// The importer's NHWC -> NCHW transpose after a convolution or pooling.
constexpr int32_t kToNchw[] = {0, 3, 1, 2};

/// The input of `value` if it is a transpose by kToNchw.
Value nhwcSourceOf(Value value) {
  auto transpose = value.getDefiningOp<mlir::tosa::TransposeOp>();
  if (!transpose || transpose.getPermsAttr().asArrayRef() != llvm::ArrayRef(kToNchw))
    return {};
  return transpose.getInput1();
}

/// A static rank-4 tensor type.
mlir::RankedTensorType rank4(Value value) {
  mlir::RankedTensorType type = staticTensorType(value);
  return type && type.getRank() == 4 ? type : nullptr;
}

/// `type` as the NHWC tensor that kToNchw turns into it.
mlir::RankedTensorType toNhwc(mlir::RankedTensorType type) {
  llvm::SmallVector<int64_t> shape(4);
  for (int i = 0; i < 4; ++i)
    shape[kToNchw[i]] = type.getDimSize(i);
  return mlir::RankedTensorType::get(shape, type.getElementType());
}

/// Whether `type`'s NHWC form holds the same bytes in the same order, so
/// that a reshape is the transpose: its channels are one, or its height and
/// width are (a per-channel vector [1, C, 1, 1], a per-example gate
/// [N, C, 1, 1]).
bool keepsByteOrder(mlir::RankedTensorType type) {
  return type.getDimSize(1) == 1 || (type.getDimSize(2) == 1 && type.getDimSize(3) == 1);
}

/// The NHWC form of `operand`, an NCHW operand beside a sunk transpose: the
/// transpose's input, or a reshape where that holds the same bytes.
/// Null when getting it would cost a transpose of its own.
Value nhwcOperand(mlir::PatternRewriter &rewriter, mlir::Location loc, Value operand) {
  if (Value source = nhwcSourceOf(operand))
    return source;
  mlir::RankedTensorType type = rank4(operand);
  if (!type || !keepsByteOrder(type))
    return {};
  mlir::RankedTensorType nhwc = toNhwc(type);
  return mlir::tosa::ReshapeOp::create(
      rewriter, loc, nhwc, operand,
      mlir::tosa::getTosaConstShape(rewriter, loc, nhwc.getShape()));
}

/// Replaces `op` by `sunk` (its NHWC twin) transposed back to NCHW.
void replaceWithTransposed(mlir::PatternRewriter &rewriter, Operation *op,
                           Operation *sunk) {
  rewriter.replaceOpWithNewOp<mlir::tosa::TransposeOp>(
      op, op->getResult(0).getType(), sunk->getResult(0),
      rewriter.getDenseI32ArrayAttr(kToNchw));
}

/// elementwise(transpose(x), y, ...) -> transpose(elementwise(x, y', ...)).
/// Operands of another rank (a product's shift) stay as they are.
struct SinkThroughElementwise : mlir::RewritePattern {
  SinkThroughElementwise(mlir::MLIRContext *context, llvm::Statistic &sunk)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, context), sunk(sunk) {}

  mlir::LogicalResult matchAndRewrite(Operation *op,
                                      mlir::PatternRewriter &rewriter) const override {
    if (!isTosaElementwise(op))
      return mlir::failure();
    mlir::RankedTensorType resultType = rank4(op->getResult(0));
    bool transposed = llvm::any_of(op->getOperands(), [](Value operand) {
      return nhwcSourceOf(operand) != nullptr;
    });
    if (!resultType || !transposed)
      return mlir::failure();
    // Every same-rank operand must come cheaply in NHWC, or nothing moves.
    // (A transpose that only moves unit dimensions is canonicalized into a
    // reshape, so a per-example gate [N, C, 1, 1] arrives as one.)
    for (Value operand : op->getOperands()) {
      mlir::RankedTensorType type = rank4(operand);
      bool sameRank = mlir::cast<mlir::ShapedType>(operand.getType()).getRank() == 4;
      if (sameRank && !nhwcSourceOf(operand) && (!type || !keepsByteOrder(type)))
        return mlir::failure();
    }
    llvm::SmallVector<Value> operands;
    for (Value operand : op->getOperands()) {
      bool sameRank = mlir::cast<mlir::ShapedType>(operand.getType()).getRank() == 4;
      operands.push_back(sameRank ? nhwcOperand(rewriter, op->getLoc(), operand)
                                  : operand);
    }
    Operation *sunkOp =
        rebuildOp(rewriter, op, operands, toNhwc(resultType), op->getAttrs());
    replaceWithTransposed(rewriter, op, sunkOp);
    ++sunk;
    return mlir::success();
  }

  llvm::Statistic &sunk;
};

/// concat(transpose(x1), transpose(x2), ...) along NCHW axis a ->
/// transpose(concat(x1, x2, ...) along the NHWC axis of a).
struct SinkThroughConcat : mlir::OpRewritePattern<mlir::tosa::ConcatOp> {
  SinkThroughConcat(mlir::MLIRContext *context, llvm::Statistic &sunk)
      : OpRewritePattern(context), sunk(sunk) {}

  mlir::LogicalResult matchAndRewrite(mlir::tosa::ConcatOp concat,
                                      mlir::PatternRewriter &rewriter) const override {
    mlir::RankedTensorType resultType = rank4(concat.getOutput());
    if (!resultType)
      return mlir::failure();
    llvm::SmallVector<Value> sources;
    for (Value input : concat.getInput1()) {
      Value source = nhwcSourceOf(input);
      if (!source)
        return mlir::failure();
      sources.push_back(source);
    }
    auto sunkOp = mlir::tosa::ConcatOp::create(
        rewriter, concat.getLoc(), toNhwc(resultType), sources,
        rewriter.getI32IntegerAttr(kToNchw[concat.getAxis()]));
    replaceWithTransposed(rewriter, concat, sunkOp);
    ++sunk;
    return mlir::success();
  }

  llvm::Statistic &sunk;
};

/// reduce(transpose(x)) along NCHW axis a -> transpose(reduce(x) along the
/// NHWC axis of a); TOSA's reductions keep the rank.
template <typename ReduceOp>
struct SinkThroughReduction : mlir::OpRewritePattern<ReduceOp> {
  SinkThroughReduction(mlir::MLIRContext *context, llvm::Statistic &sunk)
      : mlir::OpRewritePattern<ReduceOp>(context), sunk(sunk) {}

  mlir::LogicalResult matchAndRewrite(ReduceOp reduce,
                                      mlir::PatternRewriter &rewriter) const override {
    Value source = nhwcSourceOf(reduce.getInput());
    mlir::RankedTensorType resultType = rank4(reduce.getOutput());
    if (!source || !resultType)
      return mlir::failure();
    llvm::SmallVector<mlir::NamedAttribute> attributes(reduce->getAttrs());
    for (mlir::NamedAttribute &attribute : attributes)
      if (attribute.getName() == reduce.getAxisAttrName())
        attribute.setValue(rewriter.getI32IntegerAttr(kToNchw[reduce.getAxis()]));
    Operation *sunkOp =
        rebuildOp(rewriter, reduce, {source}, toNhwc(resultType), attributes);
    replaceWithTransposed(rewriter, reduce, sunkOp);
    ++sunk;
    return mlir::success();
  }

  llvm::Statistic &sunk;
};

struct SinkTransposesPass : impl::SinkTransposesPassBase<SinkTransposesPass> {
  void runOnOperation() override {
    mlir::MLIRContext *context = &getContext();
    mlir::RewritePatternSet patterns(context);
    patterns.add<SinkThroughElementwise, SinkThroughConcat,
                 SinkThroughReduction<mlir::tosa::ReduceSumOp>,
                 SinkThroughReduction<mlir::tosa::ReduceMaxOp>,
                 SinkThroughReduction<mlir::tosa::ReduceMinOp>,
                 SinkThroughReduction<mlir::tosa::ReduceProductOp>>(context,
                                                                    transposesSunk);
    // Transposes of transposes fold as they meet.
    mlir::tosa::TransposeOp::getCanonicalizationPatterns(patterns, context);
    // An optimization: IR that did not settle within the driver's rounds is
    // still correct, only less sunk.
    (void)mlir::applyPatternsGreedily(getOperation(), std::move(patterns));
  }
};

} // namespace

} // namespace flowc::compiler
