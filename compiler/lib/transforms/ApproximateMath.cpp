// flowc-approximate-math: see Passes.td.
#include "Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace flowc::compiler {

#define GEN_PASS_DEF_APPROXIMATEMATHPASS
#include "flowc/compiler/Passes.h.inc"

namespace {

struct ApproximateMathPass : impl::ApproximateMathPassBase<ApproximateMathPass> {
  void runOnOperation() override {
    mlir::RewritePatternSet patterns(&getContext());
    mlir::populateMathPolynomialApproximationPatterns(patterns, [](llvm::StringRef name) {
      name.consume_front("math.");
      return name == "exp" || name == "erf" || name == "tanh";
    });
    if (mlir::failed(mlir::applyPatternsGreedily(getOperation(), std::move(patterns)))) {
      getOperation().emitError("flowc-approximate-math: the math approximation "
                               "patterns did not converge");
      signalPassFailure();
    }
  }
};

} // namespace

} // namespace flowc::compiler
