// flowc-copies-to-linalg: see Passes.td.
#include "Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"

namespace flowc::compiler {

#define GEN_PASS_DEF_COPIESTOLINALGPASS
#include "flowc/compiler/Passes.h.inc"

namespace {

struct CopiesToLinalgPass : impl::CopiesToLinalgPassBase<CopiesToLinalgPass> {
  void runOnOperation() override {
    llvm::SmallVector<mlir::memref::CopyOp> copies;
    getOperation().walk([&](mlir::memref::CopyOp copy) { copies.push_back(copy); });
    for (mlir::memref::CopyOp copy : copies) {
      mlir::OpBuilder builder(copy);
      mlir::linalg::CopyOp::create(builder, copy.getLoc(), copy.getSource(),
                                   copy.getTarget());
      copy.erase();
    }
  }
};

} // namespace

} // namespace flowc::compiler
