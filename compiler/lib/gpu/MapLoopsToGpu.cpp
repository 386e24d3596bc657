// flowc-map-loops-to-gpu: see Passes.td.
#include "transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"
#include "mlir/Dialect/SCF/Utils/Utils.h"
#include "mlir/Dialect/Utils/StaticValueUtils.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <algorithm>
#include <numeric>

namespace flowc::compiler {

#define GEN_PASS_DEF_MAPLOOPSTOGPUPASS
#include "flowc/compiler/Passes.h.inc"

namespace {

/// Whether `op`, at the top of a kernel's host function, would touch
/// device memory if it stayed on the host: loops and reads or writes of
/// buffers. Views, constants and index arithmetic stay on the host.
bool touchesDeviceMemory(mlir::Operation *op) {
  if (op->hasTrait<mlir::OpTrait::IsTerminator>())
    return false;
  if (op->getNumRegions() > 0)
    return true;
  auto effects = llvm::dyn_cast<mlir::MemoryEffectOpInterface>(op);
  if (!effects)
    return !mlir::isPure(op);
  return effects.hasEffect<mlir::MemoryEffects::Read>() ||
         effects.hasEffect<mlir::MemoryEffects::Write>();
}

/// Runs `op` inside a one-iteration parallel loop: a launch of one thread.
void wrapInOneIteration(mlir::RewriterBase &rewriter, mlir::Operation *op) {
  mlir::Location loc = op->getLoc();
  rewriter.setInsertionPoint(op);
  mlir::Value zero = mlir::arith::ConstantIndexOp::create(rewriter, loc, 0);
  mlir::Value one = mlir::arith::ConstantIndexOp::create(rewriter, loc, 1);
  auto loop = mlir::scf::ParallelOp::create(rewriter, loc, mlir::ValueRange{zero},
                                            mlir::ValueRange{one}, mlir::ValueRange{one});
  op->moveBefore(loop.getBody()->getTerminator());
}

struct MapLoopsToGpuPass : impl::MapLoopsToGpuPassBase<MapLoopsToGpuPass> {
  using MapLoopsToGpuPassBase::MapLoopsToGpuPassBase;

  void runOnOperation() override {
    mlir::func::FuncOp function = getOperation();
    if (function.isExternal())
      return;
    mlir::IRRewriter rewriter(&getContext());
    llvm::SmallVector<mlir::Operation *> tops;
    for (mlir::Operation &op : function.getBody().front())
      tops.push_back(&op);
    for (mlir::Operation *op : tops) {
      if (!touchesDeviceMemory(op))
        continue;
      if (op->getNumResults() > 0) {
        op->emitError("flowc-map-loops-to-gpu: a loop nest that yields values to the "
                      "host cannot run on the GPU");
        return signalPassFailure();
      }
      auto loop = llvm::dyn_cast<mlir::scf::ParallelOp>(op);
      if (!loop || !loop.getInitVals().empty()) {
        wrapInOneIteration(rewriter, op);
        continue;
      }
      // One dimension over every output element: tiled by the block size
      // afterwards, neighbouring threads take neighbouring elements of the
      // innermost dimension.
      if (loop.getNumLoops() > 1) {
        std::vector<unsigned> all(loop.getNumLoops());
        std::iota(all.begin(), all.end(), 0u);
        mlir::collapseParallelLoops(rewriter, loop, {all});
      }
    }
    // Blocks of `blockSize` threads, the last one guarded: tiles of a fixed
    // size (no min bound), which the launch needs as a constant.
    llvm::SmallVector<mlir::scf::ParallelOp> loops;
    for (mlir::Operation &op : function.getBody().front())
      if (auto loop = llvm::dyn_cast<mlir::scf::ParallelOp>(op))
        loops.push_back(loop);
    for (mlir::scf::ParallelOp loop : loops) {
      int64_t threads = blockSize;
      std::optional<int64_t> lower = mlir::getConstantIntValue(loop.getLowerBound()[0]);
      std::optional<int64_t> upper = mlir::getConstantIntValue(loop.getUpperBound()[0]);
      std::optional<int64_t> step = mlir::getConstantIntValue(loop.getStep()[0]);
      // A small nest gets one block of just its elements.
      if (lower && upper && step && *step > 0)
        threads = std::clamp<int64_t>((*upper - *lower + *step - 1) / *step, 1, threads);
      mlir::scf::tileParallelLoop(loop, {threads}, /*noMinMaxBounds=*/true);
    }
  }
};

} // namespace

} // namespace flowc::compiler
