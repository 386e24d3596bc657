// flowc-copy-wide-concats: see Passes.td.
#include "Passes.h"

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/Builders.h"

namespace flowc::compiler {

#define GEN_PASS_DEF_COPYWIDECONCATSPASS
#include "flowc/compiler/Passes.h.inc"

namespace {

struct CopyWideConcatsPass : impl::CopyWideConcatsPassBase<CopyWideConcatsPass> {
  using Base::Base;

  void runOnOperation() override {
    llvm::SmallVector<mlir::tosa::ConcatOp> wide;
    getOperation().walk([&](mlir::tosa::ConcatOp concat) {
      if (concat.getInput1().size() > maxInPlace)
        wide.push_back(concat);
    });
    for (mlir::tosa::ConcatOp concat : wide) {
      mlir::OpBuilder builder(concat);
      auto joined = mlir::tensor::ConcatOp::create(
          builder, concat.getLoc(), concat.getType(),
          static_cast<uint64_t>(concat.getAxis()), concat.getInput1());
      concat.replaceAllUsesWith(joined.getResult());
      concat.erase();
      ++concatsCopied;
    }
  }
};

} // namespace

} // namespace flowc::compiler
