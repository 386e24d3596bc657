// linalg-fuse-elementwise-ops: see Passes.td.
#include "Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Transforms/Transforms.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Transforms/Transforms.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace flowc::compiler {

#define GEN_PASS_DEF_FUSEELEMENTWISEOPSPASS
#include "flowc/compiler/Passes.h.inc"

namespace {

/// Most payload ops one fused loop nest may hold. Fusing a producer into
/// its consumer clones both bodies, so fusing a chain of N ops into one
/// nest costs N^2 (a 10,000-op chain took minutes); nests of at most this
/// many ops keep the pass linear, and a nest this long already does far
/// more arithmetic per element than the one pass over memory it saves.
constexpr size_t kMaxFusedPayloadOps = 64;

size_t payloadOps(mlir::Operation *op) {
  auto linalgOp = mlir::dyn_cast_or_null<mlir::linalg::LinalgOp>(op);
  if (!linalgOp || linalgOp->getNumRegions() != 1 || linalgOp->getRegion(0).empty())
    return 0;
  return linalgOp->getRegion(0).front().getOperations().size();
}

/// Fuses a single-use producer into its consumer while the fused nest stays
/// within kMaxFusedPayloadOps.
bool fusionWithinBound(mlir::OpOperand *fused) {
  mlir::Operation *producer = fused->get().getDefiningOp();
  return producer && producer->hasOneUse() &&
         payloadOps(producer) + payloadOps(fused->getOwner()) <= kMaxFusedPayloadOps;
}

/// Upstream's elementwise fusion and its companion foldings, with fusion
/// bounded by fusionWithinBound (upstream's pass fuses without a bound).
struct FuseElementwiseOpsPass : impl::FuseElementwiseOpsPassBase<FuseElementwiseOpsPass> {
  void runOnOperation() override {
    mlir::MLIRContext *context = &getContext();
    mlir::RewritePatternSet patterns(context);
    mlir::linalg::populateElementwiseOpsFusionPatterns(patterns, fusionWithinBound);
    mlir::linalg::populateFoldReshapeOpsByExpansionPatterns(patterns, fusionWithinBound);
    mlir::tensor::populateBubbleUpExpandShapePatterns(patterns);
    mlir::affine::AffineApplyOp::getCanonicalizationPatterns(patterns, context);
    mlir::linalg::GenericOp::getCanonicalizationPatterns(patterns, context);
    mlir::tensor::ExpandShapeOp::getCanonicalizationPatterns(patterns, context);
    mlir::tensor::CollapseShapeOp::getCanonicalizationPatterns(patterns, context);
    context->getLoadedDialect<mlir::linalg::LinalgDialect>()->getCanonicalizationPatterns(
        patterns);
    mlir::linalg::populateConstantFoldLinalgOperations(patterns, fusionWithinBound);
    // Top-down: each op is visited after its producers, so a chain fuses in
    // one sweep. Not reaching a fixpoint leaves correct, less fused IR, as
    // upstream's pass accepts too.
    (void)mlir::applyPatternsGreedily(
        getOperation(), std::move(patterns),
        mlir::GreedyRewriteConfig().setUseTopDownTraversal());
  }
};

} // namespace

} // namespace flowc::compiler
