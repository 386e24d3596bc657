#include "ParallelLoops.h"
#include "LibraryKernels.h"
#include "transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"

#include <optional>

namespace flowc::compiler {

#define GEN_PASS_DEF_PARALLELIZELOOPSPASS
#include "flowc/compiler/Passes.h.inc"

namespace {

std::optional<int64_t> staticTripCount(mlir::Value lower, mlir::Value upper,
                                       mlir::Value step) {
  auto constant = [](mlir::Value value) -> std::optional<int64_t> {
    if (auto op = value.getDefiningOp<mlir::arith::ConstantIndexOp>())
      return op.value();
    return std::nullopt;
  };
  auto lo = constant(lower), hi = constant(upper), st = constant(step);
  if (!lo || !hi || !st || *st <= 0)
    return std::nullopt;
  return *hi > *lo ? (*hi - *lo + *st - 1) / *st : 0;
}

/// Iterations of `loop` and every loop nested in it; nullopt when a bound
/// is not a constant (such nests stay sequential: no way to tell the work).
std::optional<int64_t> nestIterations(mlir::Operation *loop) {
  int64_t own = 1;
  if (auto parallel = mlir::dyn_cast<mlir::scf::ParallelOp>(loop)) {
    for (unsigned i = 0; i < parallel.getNumLoops(); ++i) {
      auto count = staticTripCount(parallel.getLowerBound()[i],
                                   parallel.getUpperBound()[i], parallel.getStep()[i]);
      if (!count)
        return std::nullopt;
      own *= *count;
    }
  } else if (auto forOp = mlir::dyn_cast<mlir::scf::ForOp>(loop)) {
    auto count =
        staticTripCount(forOp.getLowerBound(), forOp.getUpperBound(), forOp.getStep());
    if (!count)
      return std::nullopt;
    own = *count;
  }
  // The largest nested nest stands for the body's work.
  int64_t inner = 1;
  for (mlir::Region &region : loop->getRegions())
    for (mlir::Operation &op : region.getOps()) {
      if (!mlir::isa<mlir::scf::ParallelOp, mlir::scf::ForOp>(op))
        continue;
      std::optional<int64_t> nested = nestIterations(&op);
      if (!nested)
        return std::nullopt;
      inner = std::max(inner, *nested);
    }
  return own * inner;
}

/// Replaces `loop` by an scf.parallel over its first `parallelDims`
/// dimensions (none: no scf.parallel at all) around sequential scf.for
/// loops over the rest; returns the new scf.parallel, if any.
mlir::scf::ParallelOp splitParallelLoop(mlir::scf::ParallelOp loop,
                                        unsigned parallelDims) {
  mlir::OpBuilder builder(loop);
  mlir::Location loc = loop.getLoc();
  auto lower = loop.getLowerBound(), upper = loop.getUpperBound(), step = loop.getStep();
  mlir::Block *body = loop.getBody();
  auto buildSequential = [&](mlir::OpBuilder &b, mlir::IRMapping &mapping) {
    mlir::scf::buildLoopNest(
        b, loc, lower.drop_front(parallelDims), upper.drop_front(parallelDims),
        step.drop_front(parallelDims),
        [&](mlir::OpBuilder &nested, mlir::Location, mlir::ValueRange ivs) {
          for (auto [i, iv] : llvm::enumerate(ivs))
            mapping.map(body->getArgument(parallelDims + i), iv);
          for (mlir::Operation &op : body->without_terminator())
            nested.clone(op, mapping);
        });
  };
  mlir::scf::ParallelOp parallel;
  if (parallelDims == 0) {
    mlir::IRMapping mapping;
    buildSequential(builder, mapping);
  } else {
    parallel = mlir::scf::ParallelOp::create(
        builder, loc, lower.take_front(parallelDims), upper.take_front(parallelDims),
        step.take_front(parallelDims),
        [&](mlir::OpBuilder &b, mlir::Location, mlir::ValueRange ivs) {
          mlir::IRMapping mapping;
          for (auto [i, iv] : llvm::enumerate(ivs))
            mapping.map(body->getArgument(i), iv);
          buildSequential(b, mapping);
        });
  }
  loop.erase();
  return parallel;
}

/// How many leading dimensions of `loop`, an outermost nest, run in
/// parallel by default (defaultParallelDims); 0 for dynamic bounds.
unsigned parallelDimsFor(mlir::scf::ParallelOp loop) {
  std::optional<int64_t> iterations = nestIterations(loop);
  if (!iterations)
    return 0;
  llvm::SmallVector<int64_t> trips;
  for (unsigned i = 0; i < loop.getNumLoops(); ++i)
    trips.push_back(*staticTripCount(loop.getLowerBound()[i], loop.getUpperBound()[i],
                                     loop.getStep()[i]));
  return defaultParallelDims(trips, *iterations);
}

struct ParallelizeLoopsPass : impl::ParallelizeLoopsPassBase<ParallelizeLoopsPass> {
  using ParallelizeLoopsPassBase::ParallelizeLoopsPassBase;

  void runOnOperation() override {
    // Outermost nests first: each is kept whole, split, or made sequential.
    llvm::SmallVector<mlir::scf::ParallelOp> outermost;
    getOperation().walk<mlir::WalkOrder::PreOrder>([&](mlir::scf::ParallelOp loop) {
      outermost.push_back(loop);
      return mlir::WalkResult::skip();
    });
    for (mlir::scf::ParallelOp loop : outermost)
      decide(loop);
    // Then every nest not kept parallel, innermost first (so no loop in
    // the list is erased by rebuilding another).
    llvm::SmallVector<mlir::scf::ParallelOp> rest;
    getOperation().walk<mlir::WalkOrder::PostOrder>([&](mlir::scf::ParallelOp loop) {
      if (!loop->removeAttr(kKeptAttr) && loop.getNumReductions() == 0)
        rest.push_back(loop);
    });
    for (mlir::scf::ParallelOp loop : rest)
      splitParallelLoop(loop, 0);
    nestsSequential += rest.size();
  }

  static constexpr llvm::StringLiteral kKeptAttr = "flowc.parallel";

  void decide(mlir::scf::ParallelOp loop) {
    // Loops with reductions come from elsewhere than linalg; OpenMP's own
    // reduction lowering handles them as they are.
    if (loop.getNumReductions() > 0)
      return;
    auto function = loop->getParentOfType<mlir::func::FuncOp>();
    // Kernel bodies are replaced by library calls.
    if (!function || function->hasAttr(kKernelKindAttr))
      return;
    // A candidate's count holds for every nest, whatever its size.
    unsigned dims = parallelDims >= 0 ? std::min(static_cast<unsigned>(parallelDims),
                                                 loop.getNumLoops())
                                      : parallelDimsFor(loop);
    if (dims == 0)
      return;
    if (dims < loop.getNumLoops())
      loop = splitParallelLoop(loop, dims);
    loop->setAttr(kKeptAttr, mlir::UnitAttr::get(loop.getContext()));
    ++nestsParallel;
  }
};

} // namespace

unsigned defaultParallelDims(std::span<const int64_t> trips, int64_t iterations) {
  if (trips.empty() || iterations < kMinParallelIterations)
    return 0;
  unsigned dims = trips.size();
  if (dims == 1)
    return 1;
  int64_t outer = 1;
  for (unsigned i = 0; i + 1 < dims; ++i)
    outer *= trips[i];
  return outer > 1 ? dims - 1 : dims;
}

} // namespace flowc::compiler
