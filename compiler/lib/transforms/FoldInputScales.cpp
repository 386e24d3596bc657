// flowc-fold-input-scales: see Passes.td.
#include "Passes.h"
#include "TosaElementwise.h"

#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include "llvm/ADT/STLExtras.h"

namespace flowc::compiler {

#define GEN_PASS_DEF_FOLDINPUTSCALESPASS
#include "flowc/compiler/Passes.h.inc"

namespace {

using mlir::Value;

/// Whether `factor` holds one f32 value per channel of an NHWC tensor with
/// `channels` channels, the same for every example: [1, 1, 1, C].
bool isChannelFactor(Value factor, int64_t channels) {
  mlir::RankedTensorType type = staticTensorType(factor);
  return type && type.getElementType().isF32() && type.getRank() == 4 &&
         type.getShape() == llvm::ArrayRef<int64_t>({1, 1, 1, channels});
}

/// Whether scaling the weights (O x KH x KW x C values, multiplied and then
/// repacked by the convolution) touches no more than scaling the input
/// (N x H x W x C): at 7 x 7 pixels, EfficientNet-B0's projections have
/// 192-320 outputs, and there scaling the input is the cheaper.
bool isWeightSideCheaper(mlir::RankedTensorType input, mlir::RankedTensorType weights) {
  int64_t perChannelWeights =
      weights.getDimSize(0) * weights.getDimSize(1) * weights.getDimSize(2);
  int64_t perChannelInputs =
      input.getDimSize(0) * input.getDimSize(1) * input.getDimSize(2);
  return perChannelWeights <= perChannelInputs;
}

/// conv2d(x * g, w, b) -> conv2d(x, w * g, b) for a per-input-channel g.
struct FoldInputScale : mlir::OpRewritePattern<mlir::tosa::Conv2DOp> {
  FoldInputScale(mlir::MLIRContext *context, llvm::Statistic &folded)
      : OpRewritePattern(context), folded(folded) {}

  mlir::LogicalResult matchAndRewrite(mlir::tosa::Conv2DOp conv,
                                      mlir::PatternRewriter &rewriter) const override {
    auto scaled = conv.getInput().getDefiningOp<mlir::tosa::MulOp>();
    mlir::RankedTensorType inputType = staticTensorType(conv.getInput());
    mlir::RankedTensorType weightType = staticTensorType(conv.getWeight());
    if (!scaled || !scaled->hasOneUse() || !inputType || !weightType ||
        !inputType.getElementType().isF32() || inputType.getRank() != 4)
      return mlir::failure();
    int64_t channels = inputType.getDimSize(3);
    Value x = scaled.getInput1(), factor = scaled.getInput2();
    if (!isChannelFactor(factor, channels))
      std::swap(x, factor);
    if (!isChannelFactor(factor, channels) || staticTensorType(x) != inputType ||
        !isWeightSideCheaper(inputType, weightType))
      return mlir::failure();
    // Weights [O, KH, KW, C] times [1, 1, 1, C]: the same shift operand.
    auto weights = mlir::tosa::MulOp::create(rewriter, conv.getLoc(), weightType,
                                             conv.getWeight(), factor, scaled.getShift());
    rewriter.modifyOpInPlace(conv, [&] {
      conv.getInputMutable().assign(x);
      conv.getWeightMutable().assign(weights);
    });
    rewriter.eraseOp(scaled);
    ++folded;
    return mlir::success();
  }

  llvm::Statistic &folded;
};

struct FoldInputScalesPass : impl::FoldInputScalesPassBase<FoldInputScalesPass> {
  void runOnOperation() override {
    mlir::RewritePatternSet patterns(&getContext());
    patterns.add<FoldInputScale>(&getContext(), scalesFolded);
    // An optimization: IR that did not settle within the driver's rounds is
    // still correct.
    (void)mlir::applyPatternsGreedily(getOperation(), std::move(patterns));
  }
};

} // namespace

} // namespace flowc::compiler
