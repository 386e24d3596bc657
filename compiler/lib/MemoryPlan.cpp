#include "MemoryPlan.h"
#include "LibraryKernels.h"
#include "transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <optional>

namespace flowc::compiler {

#define GEN_PASS_DEF_PLANACTIVATIONMEMORYPASS
#include "flowc/compiler/Passes.h.inc"

uint64_t assignArenaOffsets(const std::vector<BufferLifetime> &buffers,
                            std::vector<uint64_t> &offsets) {
  auto aligned = [](uint64_t bytes) {
    return (bytes + runtime::kArenaAlignment - 1) / runtime::kArenaAlignment *
           runtime::kArenaAlignment;
  };
  std::vector<size_t> order(buffers.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return buffers[a].bytes > buffers[b].bytes;
  });
  offsets.assign(buffers.size(), 0);
  std::vector<size_t> placed;
  uint64_t arena = 0;
  for (size_t index : order) {
    const BufferLifetime &buffer = buffers[index];
    // Byte ranges of placed buffers alive at the same time, by offset.
    std::vector<std::pair<uint64_t, uint64_t>> busy;
    for (size_t other : placed)
      if (buffers[other].first <= buffer.last && buffer.first <= buffers[other].last)
        busy.emplace_back(offsets[other], offsets[other] + aligned(buffers[other].bytes));
    std::sort(busy.begin(), busy.end());
    uint64_t offset = 0;
    for (const auto &[begin, end] : busy) {
      if (offset + aligned(buffer.bytes) <= begin)
        break;
      offset = std::max(offset, end);
    }
    offsets[index] = offset;
    arena = std::max(arena, offset + aligned(buffer.bytes));
    placed.push_back(index);
  }
  return arena;
}

namespace {

/// Whole bytes per element, or 0 for types the plan leaves alone (i1's
/// storage size is the lowering's business).
uint64_t elementBytes(mlir::Type type) {
  unsigned bits = type.isIntOrFloat() ? type.getIntOrFloatBitWidth() : 0;
  return bits % 8 == 0 ? bits / 8 : 0;
}

/// The position in `block` of the op that is or contains `op`.
int64_t positionIn(mlir::Block &block, mlir::Operation *op,
                   const llvm::DenseMap<mlir::Operation *, int64_t> &positions) {
  while (op && op->getBlock() != &block)
    op = op->getParentOp();
  return op ? positions.lookup(op) : 0;
}

/// The last position at which `alloc`'s buffer is used, through any value
/// derived from it: an op that takes the buffer and yields a memref may
/// yield a view of it, so its results count as the buffer too.
int64_t lastUse(mlir::memref::AllocOp alloc, mlir::Block &block,
                const llvm::DenseMap<mlir::Operation *, int64_t> &positions) {
  int64_t last = positions.lookup(alloc);
  llvm::SmallVector<mlir::Value> pending = {alloc.getResult()};
  llvm::DenseSet<mlir::Value> seen = {alloc.getResult()};
  while (!pending.empty()) {
    mlir::Value value = pending.pop_back_val();
    for (mlir::Operation *user : value.getUsers()) {
      last = std::max(last, positionIn(block, user, positions));
      for (mlir::Value result : user->getResults())
        if (mlir::isa<mlir::BaseMemRefType>(result.getType()) &&
            seen.insert(result).second)
          pending.push_back(result);
    }
  }
  return last;
}

/// The first position at which `alloc`'s buffer is used other than by
/// reshapes of it.
int64_t firstUse(mlir::memref::AllocOp alloc, mlir::Block &block,
                 const llvm::DenseMap<mlir::Operation *, int64_t> &positions) {
  int64_t first = std::numeric_limits<int64_t>::max();
  llvm::SmallVector<mlir::Value> pending = {alloc.getResult()};
  while (!pending.empty()) {
    mlir::Value value = pending.pop_back_val();
    for (mlir::Operation *user : value.getUsers()) {
      if (mlir::isa<mlir::memref::ExpandShapeOp, mlir::memref::CollapseShapeOp>(user)) {
        pending.push_back(user->getResult(0));
        continue;
      }
      first = std::min(first, positionIn(block, user, positions));
    }
  }
  return first;
}

/// The operand of `call` that is the residual its library kernel adds onto
/// its output (the last operand), if it runs one that does.
std::optional<unsigned> residualOperand(mlir::func::CallOp call, mlir::ModuleOp module) {
  auto callee = module.lookupSymbol<mlir::func::FuncOp>(call.getCallee());
  if (!callee)
    return std::nullopt;
  auto kind = callee->getAttrOfType<mlir::StringAttr>(kKernelKindAttr);
  auto params = callee->getAttrOfType<mlir::DenseI64ArrayAttr>(kKernelParamsAttr);
  if (!kind || !params)
    return std::nullopt;
  std::optional<unsigned> index;
  // Buffers as KernelAbi.h orders them.
  if (kind.getValue() == runtime::kernelKindName(runtime::KernelKind::Conv2d))
    // A residual of another element type than the result's cannot share its
    // bytes: each element would overwrite its neighbours' before they are read.
    if (auto conv = runtime::paramsFromWords<runtime::Conv2dParams>(params.asArrayRef());
        conv && conv->hasResidual &&
        conv->sixteenBitResidual == conv->sixteenBitDestination)
      index = 3;
  if (kind.getValue() == runtime::kernelKindName(runtime::KernelKind::MatMul))
    if (auto matmul =
            runtime::paramsFromWords<runtime::MatMulParams>(params.asArrayRef());
        matmul && matmul->hasResidual)
      index = 2 + (matmul->hasBias != 0);
  if (!index || *index + 1 >= call.getNumOperands())
    return std::nullopt;
  return index;
}

/// Union-find over planned buffers: members of one group share bytes.
struct BufferGroups {
  explicit BufferGroups(size_t count) : parent(count) {
    std::iota(parent.begin(), parent.end(), 0);
  }
  size_t find(size_t index) {
    while (parent[index] != index)
      index = parent[index] = parent[parent[index]];
    return index;
  }
  std::vector<size_t> parent;
};

/// Add-to-output (OneFlow's name): a convolution or product whose residual
/// dies at the call writes its output over the residual, so the kernel's
/// `sum` post-op adds onto it in place instead of after a copy. Groups each
/// such output with its residual's buffer.
void shareResidualBuffers(mlir::Block &block, mlir::ModuleOp module,
                          const std::vector<mlir::memref::AllocOp> &allocs,
                          const std::vector<BufferLifetime> &lifetimes,
                          const llvm::DenseMap<mlir::Operation *, int64_t> &positions,
                          BufferGroups &groups) {
  llvm::DenseMap<mlir::Operation *, size_t> indexOf;
  for (size_t i = 0; i < allocs.size(); ++i)
    indexOf[allocs[i]] = i;
  auto planned = [&](mlir::Value value) -> std::optional<size_t> {
    auto alloc = bufferBehindReshapes(value).getDefiningOp<mlir::memref::AllocOp>();
    auto found = alloc ? indexOf.find(alloc) : indexOf.end();
    if (found == indexOf.end())
      return std::nullopt;
    return found->second;
  };
  for (auto call : block.getOps<mlir::func::CallOp>()) {
    std::optional<unsigned> residualIndex = residualOperand(call, module);
    if (!residualIndex)
      continue;
    unsigned count = call.getNumOperands();
    std::optional<size_t> residual = planned(call.getOperand(*residualIndex));
    std::optional<size_t> output = planned(call.getOperand(count - 1));
    if (!residual || !output || *residual == *output)
      continue;
    int64_t at = positions.lookup(call);
    // The residual must die here, the output must not be touched before
    // the kernel writes it, and the kernel must not read the residual's
    // bytes as anything else (its source).
    if (lifetimes[*residual].last != at ||
        lifetimes[*output].bytes != lifetimes[*residual].bytes)
      continue;
    bool readElsewhere = false;
    for (unsigned i = 0; i + 1 < count; ++i)
      readElsewhere = readElsewhere ||
                      (i != *residualIndex && planned(call.getOperand(i)) == residual);
    if (readElsewhere || firstUse(allocs[*output], block, positions) < at)
      continue;
    groups.parent[groups.find(*output)] = groups.find(*residual);
  }
}

struct PlanActivationMemoryPass
    : impl::PlanActivationMemoryPassBase<PlanActivationMemoryPass> {
  void runOnOperation() override {
    auto main = getOperation().lookupSymbol<mlir::func::FuncOp>("main");
    if (!main || main.isExternal() || !main.getBody().hasOneBlock())
      return;
    // A second arena argument would shift the ABI the runtime binds.
    if (main->hasAttr(kArenaBytesAttr)) {
      main.emitOpError("already has an activation arena (")
          << kArenaBytesAttr << "); the memory plan runs once";
      return signalPassFailure();
    }
    mlir::Block &block = main.getBody().front();
    llvm::DenseMap<mlir::Operation *, int64_t> positions;
    int64_t position = 0;
    for (mlir::Operation &op : block)
      positions[&op] = position++;

    std::vector<mlir::memref::AllocOp> allocs;
    std::vector<BufferLifetime> lifetimes;
    for (auto alloc : block.getOps<mlir::memref::AllocOp>()) {
      mlir::MemRefType type = alloc.getType();
      uint64_t bytes = elementBytes(type.getElementType());
      if (!type.hasStaticShape() || !type.getLayout().isIdentity() || bytes == 0 ||
          type.getMemorySpace())
        continue;
      allocs.push_back(alloc);
      lifetimes.push_back({bytes * static_cast<uint64_t>(type.getNumElements()),
                           positions.lookup(alloc), lastUse(alloc, block, positions)});
    }
    if (allocs.empty())
      return;
    // Buffers grouped by add-to-output are placed as one, alive from the
    // first member's allocation to the last member's last use.
    BufferGroups groups(allocs.size());
    shareResidualBuffers(block, getOperation(), allocs, lifetimes, positions, groups);
    std::vector<size_t> slotOf(allocs.size());
    std::vector<BufferLifetime> slots;
    llvm::DenseMap<size_t, size_t> slotOfRoot;
    for (size_t i = 0; i < allocs.size(); ++i) {
      auto [entry, added] = slotOfRoot.try_emplace(groups.find(i), slots.size());
      if (added)
        slots.push_back(lifetimes[i]);
      BufferLifetime &slot = slots[entry->second];
      slot.bytes = std::max(slot.bytes, lifetimes[i].bytes);
      slot.first = std::min(slot.first, lifetimes[i].first);
      slot.last = std::max(slot.last, lifetimes[i].last);
      slotOf[i] = entry->second;
    }
    std::vector<uint64_t> slotOffsets;
    uint64_t arenaBytes = assignArenaOffsets(slots, slotOffsets);
    std::vector<uint64_t> offsets(allocs.size());
    for (size_t i = 0; i < allocs.size(); ++i)
      offsets[i] = slotOffsets[slotOf[i]];

    mlir::OpBuilder builder(main.getContext());
    auto arenaType = mlir::MemRefType::get({static_cast<int64_t>(arenaBytes)},
                                           builder.getIntegerType(8));
    if (mlir::failed(
            main.insertArgument(main.getNumArguments(), arenaType, {}, main.getLoc()))) {
      main.emitOpError("cannot take the activation arena as a new argument");
      signalPassFailure();
      return;
    }
    mlir::Value arena = block.getArguments().back();
    main->setAttr(kArenaBytesAttr, builder.getI64IntegerAttr(arenaBytes));
    this->arenaBytes = arenaBytes;
    buffersPlanned += allocs.size();
    for (size_t i = 0; i < allocs.size(); ++i) {
      builder.setInsertionPoint(allocs[i]);
      mlir::Location loc = allocs[i].getLoc();
      mlir::Value offset = mlir::arith::ConstantIndexOp::create(
          builder, loc, static_cast<int64_t>(offsets[i]));
      mlir::Value view = mlir::memref::ViewOp::create(builder, loc, allocs[i].getType(),
                                                      arena, offset, mlir::ValueRange{});
      allocs[i].replaceAllUsesWith(view);
      allocs[i].erase();
    }
  }
};

} // namespace

mlir::Value bufferBehindReshapes(mlir::Value value) {
  while (mlir::Operation *producer = value.getDefiningOp()) {
    if (!mlir::isa<mlir::memref::ExpandShapeOp, mlir::memref::CollapseShapeOp>(producer))
      break;
    value = producer->getOperand(0);
  }
  return value;
}

uint64_t plannedArenaBytes(mlir::ModuleOp module) {
  auto main = module.lookupSymbol<mlir::func::FuncOp>("main");
  if (!main)
    return 0;
  auto bytes = main->getAttrOfType<mlir::IntegerAttr>(kArenaBytesAttr);
  return bytes ? static_cast<uint64_t>(bytes.getInt()) : 0;
}

} // namespace flowc::compiler
