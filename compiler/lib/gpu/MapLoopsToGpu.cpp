// flowc-map-loops-to-gpu: see Passes.td.
#include "Partition.h"
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

/// The last top-level op of the run that starts at `first`: a value the
/// run defines (a scalar read from device memory) is used only inside it.
mlir::Operation *endOfRun(mlir::Operation *first) {
  mlir::Block *block = first->getBlock();
  mlir::Operation *last = first;
  for (mlir::Operation *op = first;; op = op->getNextNode()) {
    for (mlir::Value result : op->getResults())
      for (mlir::Operation *user : result.getUsers()) {
        mlir::Operation *top = block->findAncestorOpInBlock(*user);
        if (top && last->isBeforeInBlock(top))
          last = top;
      }
    if (op == last)
      return last;
  }
}

/// Runs the ops from `first` to `last` (top-level, in order) inside a
/// one-iteration parallel loop: a launch of one thread.
void wrapInOneIteration(mlir::RewriterBase &rewriter, mlir::Operation *first,
                        mlir::Operation *last) {
  mlir::Location loc = first->getLoc();
  rewriter.setInsertionPoint(first);
  mlir::Value zero = mlir::arith::ConstantIndexOp::create(rewriter, loc, 0);
  mlir::Value one = mlir::arith::ConstantIndexOp::create(rewriter, loc, 1);
  auto loop = mlir::scf::ParallelOp::create(rewriter, loc, mlir::ValueRange{zero},
                                            mlir::ValueRange{one}, mlir::ValueRange{one});
  mlir::Operation *terminator = loop.getBody()->getTerminator();
  for (mlir::Operation *op = first, *next = nullptr; op; op = next) {
    next = op == last ? nullptr : op->getNextNode();
    op->moveBefore(terminator);
  }
}

struct MapLoopsToGpuPass : impl::MapLoopsToGpuPassBase<MapLoopsToGpuPass> {
  using MapLoopsToGpuPassBase::MapLoopsToGpuPassBase;

  void runOnOperation() override {
    mlir::func::FuncOp function = getOperation();
    if (function.isExternal())
      return;
    mlir::IRRewriter rewriter(&getContext());
    mlir::Block &body = function.getBody().front();
    for (mlir::Operation *op = &body.front(), *next = nullptr; op; op = next) {
      next = op->getNextNode();
      if (!touchesDeviceMemory(op))
        continue;
      auto loop = llvm::dyn_cast<mlir::scf::ParallelOp>(op);
      if (!loop || !loop.getInitVals().empty()) {
        // With the ops that use what it reads (a 0-d copy is a load and a
        // store, no loop).
        mlir::Operation *last = endOfRun(op);
        if (last->hasTrait<mlir::OpTrait::IsTerminator>()) {
          op->emitError("flowc-map-loops-to-gpu: a value read from device memory "
                        "is returned to the host");
          return signalPassFailure();
        }
        next = last->getNextNode();
        wrapInOneIteration(rewriter, op, last);
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
    sinkConstantGlobals(function);
  }

  /// Reads of constant globals move into the loops that use them: inside,
  /// they are the GPU module's copy of the global (outlining brings the
  /// symbol along); outside, the kernel would get the host's address.
  static void sinkConstantGlobals(mlir::func::FuncOp function) {
    mlir::Block &body = function.getBody().front();
    for (auto read :
         llvm::make_early_inc_range(body.getOps<mlir::memref::GetGlobalOp>())) {
      if (!constantGlobalOf(read))
        continue;
      llvm::SmallVector<mlir::scf::ParallelOp> users;
      for (mlir::Operation *user : read->getUsers())
        if (auto loop = llvm::dyn_cast_or_null<mlir::scf::ParallelOp>(
                body.findAncestorOpInBlock(*user));
            loop && !llvm::is_contained(users, loop))
          users.push_back(loop);
      for (mlir::scf::ParallelOp loop : users) {
        auto builder = mlir::OpBuilder::atBlockBegin(loop.getBody());
        mlir::Operation *inside = builder.clone(*read);
        read.getResult().replaceUsesWithIf(
            inside->getResult(0),
            [&](mlir::OpOperand &use) { return loop->isProperAncestor(use.getOwner()); });
      }
      if (read->use_empty())
        read->erase();
    }
  }
};

} // namespace

} // namespace flowc::compiler
