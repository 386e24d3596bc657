// flowc-distinct-results: see Passes.td.
#include "Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

#include "llvm/ADT/SmallPtrSet.h"

namespace flowc::compiler {

#define GEN_PASS_DEF_DISTINCTRESULTSPASS
#include "flowc/compiler/Passes.h.inc"

namespace {

struct DistinctResultsPass : impl::DistinctResultsPassBase<DistinctResultsPass> {
  void runOnOperation() override {
    getOperation().walk([&](mlir::func::ReturnOp ret) {
      llvm::SmallPtrSet<mlir::Value, 8> seen;
      mlir::OpBuilder builder(ret);
      for (mlir::OpOperand &result : ret->getOpOperands()) {
        auto type = mlir::dyn_cast<mlir::RankedTensorType>(result.get().getType());
        if (!type || seen.insert(result.get()).second)
          continue;
        mlir::Value init = mlir::tensor::EmptyOp::create(
            builder, ret.getLoc(), type.getShape(), type.getElementType());
        result.set(mlir::linalg::CopyOp::create(builder, ret.getLoc(), result.get(), init)
                       ->getResult(0));
        ++resultsCopied;
      }
    });
  }
};

} // namespace

} // namespace flowc::compiler
