#include "Partition.h"
#include "SourceNodes.h"
#include "transforms/Passes.h"

#include "flowc/runtime/KernelAbi.h"

#include "mlir/Conversion/LLVMCommon/TypeConverter.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/RegionUtils.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/xxhash.h"

#include <map>
#include <optional>
#include <set>

namespace flowc::compiler {

#define GEN_PASS_DEF_PARTITIONKERNELSPASS
#include "flowc/compiler/Passes.h.inc"

namespace {

std::string printed(mlir::Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os);
  return text;
}

/// Whether a kernel gets `value` by cloning its producer: a constant, or a
/// read of a constant global (its module then gets the global: a kernel on
/// a GPU cannot read the host's copy).
bool isConstant(mlir::Value value) {
  mlir::Operation *producer = value.getDefiningOp();
  if (!producer)
    return false;
  if (auto read = mlir::dyn_cast<mlir::memref::GetGlobalOp>(producer))
    return static_cast<bool>(constantGlobalOf(read));
  return producer->hasTrait<mlir::OpTrait::ConstantLike>();
}

/// What a kernel made of `op` receives: buffers become arguments (in order
/// of first use), constants are cloned into it. Empty when a value is
/// neither a constant nor a buffer the bare-pointer ABI can pass.
struct Captures {
  llvm::SetVector<mlir::Value> arguments;
  llvm::SetVector<mlir::Value> constants;
};

std::optional<Captures> capturesOf(mlir::Operation *op) {
  llvm::SetVector<mlir::Value> used(op->getOperands().begin(), op->getOperands().end());
  llvm::SetVector<mlir::Value> above;
  mlir::getUsedValuesDefinedAbove(op->getRegions(), above);
  used.insert(above.begin(), above.end());
  Captures captures;
  for (mlir::Value value : used) {
    if (isConstant(value)) {
      captures.constants.insert(value);
      continue;
    }
    auto buffer = mlir::dyn_cast<mlir::MemRefType>(value.getType());
    if (!buffer || !mlir::LLVMTypeConverter::canConvertToBarePtr(buffer))
      return std::nullopt;
    captures.arguments.insert(value);
  }
  return captures;
}

/// A loop nest worth a kernel: a linalg op on buffers (after bufferization
/// linalg ops have no results).
bool isLoopNest(mlir::Operation &op) {
  return mlir::isa<mlir::linalg::LinalgOp>(op) && op.getNumResults() == 0;
}

/// `kernel` named after a hash of its IR; identical IR, identical name.
std::string kernelSymbol(mlir::func::FuncOp kernel) {
  std::string text = printed(kernel);
  std::string symbol;
  llvm::raw_string_ostream(symbol)
      << kLoopKernelPrefix << llvm::format_hex_no_prefix(llvm::xxh3_64bits(text), 16);
  return symbol;
}

struct PartitionKernelsPass : impl::PartitionKernelsPassBase<PartitionKernelsPass> {
  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    auto main = module.lookupSymbol<mlir::func::FuncOp>("main");
    if (!main || main.isExternal())
      return;
    mlir::SymbolTable symbols(module);
    llvm::SmallVector<mlir::Operation *> nests;
    for (mlir::Block &block : main.getBody())
      for (mlir::Operation &op : block)
        if (isLoopNest(op))
          nests.push_back(&op);
    for (mlir::Operation *nest : nests)
      outline(nest, symbols);
  }

  void outline(mlir::Operation *nest, mlir::SymbolTable &symbols) {
    std::optional<Captures> captures = capturesOf(nest);
    if (!captures)
      return;
    mlir::MLIRContext *context = &getContext();
    llvm::SmallVector<mlir::Type> argumentTypes;
    for (mlir::Value value : captures->arguments)
      argumentTypes.push_back(value.getType());
    // Unknown locations: where a nest came from must not make two identical
    // kernels differ.
    mlir::Location unknown = mlir::UnknownLoc::get(context);
    auto kernel = mlir::func::FuncOp::create(
        unknown, "kernel", mlir::FunctionType::get(context, argumentTypes, {}));
    kernel.setPrivate();
    mlir::Block *entry = kernel.addEntryBlock();
    auto body = mlir::OpBuilder::atBlockBegin(entry);
    mlir::IRMapping mapping;
    for (auto [index, value] : llvm::enumerate(captures->arguments))
      mapping.map(value, entry->getArgument(index));
    for (mlir::Value constant : captures->constants)
      mapping.map(constant, body.clone(*constant.getDefiningOp())->getResult(0));
    body.clone(*nest, mapping);
    mlir::func::ReturnOp::create(body, unknown);
    kernel.walk([&](mlir::Operation *op) { op->setLoc(unknown); });

    std::string symbol = kernelSymbol(kernel);
    if (symbols.lookup(symbol)) {
      kernel.erase();
    } else {
      kernel.setName(symbol);
      kernel->setAttr(kLoopKernelAttr, mlir::UnitAttr::get(context));
      symbols.insert(kernel);
      ++kernelsCreated;
    }
    ++nestsOutlined;
    // The call keeps where the nest came from, which the kernel's body no
    // longer says: every node its ops were made of.
    std::set<int32_t> nodes;
    addSourceNodes(nest, nodes);
    llvm::SmallVector<mlir::Location> sources;
    for (int32_t node : nodes)
      sources.push_back(nodeLocation(context, node));
    mlir::OpBuilder builder(nest);
    mlir::func::CallOp::create(builder, mlir::FusedLoc::get(context, sources), symbol,
                               mlir::TypeRange{}, captures->arguments.getArrayRef());
    nest->erase();
  }
};

} // namespace

std::map<std::string, std::vector<int32_t>> kernelSourceNodes(mlir::ModuleOp module) {
  std::map<std::string, std::set<int32_t>> found;
  auto main = module.lookupSymbol<mlir::func::FuncOp>("main");
  if (!main || main.isExternal())
    return {};
  main.walk([&](mlir::func::CallOp call) {
    std::set<int32_t> &nodes = found[call.getCallee().str()];
    addSourceNodes(call.getLoc(), nodes);
    if (auto callee = module.lookupSymbol<mlir::func::FuncOp>(call.getCallee()))
      if (!callee.isExternal())
        addSourceNodes(callee.getOperation(), nodes);
  });
  std::map<std::string, std::vector<int32_t>> sources;
  for (auto &[function, nodes] : found)
    sources[function].assign(nodes.begin(), nodes.end());
  return sources;
}

namespace {

/// Bytes of `call`'s distinct buffer operands of static shape (an i1
/// element is a byte in memory).
uint64_t operandBytes(mlir::func::CallOp call) {
  llvm::SmallPtrSet<mlir::Value, 8> seen;
  uint64_t bytes = 0;
  for (mlir::Value operand : call.getOperands()) {
    auto type = mlir::dyn_cast<mlir::MemRefType>(operand.getType());
    if (!type || !type.hasStaticShape() || !seen.insert(operand).second)
      continue;
    uint64_t elementBytes = (type.getElementTypeBitWidth() + 7) / 8;
    bytes += static_cast<uint64_t>(type.getNumElements()) * elementBytes;
  }
  return bytes;
}

} // namespace

std::vector<ProfiledCall>
addProfileMarks(mlir::ModuleOp module, const std::set<std::string> &kernels,
                const std::map<std::string, std::vector<int32_t>> &calleeNodes) {
  auto main = module.lookupSymbol<mlir::func::FuncOp>("main");
  if (!main || main.isExternal())
    return {};
  llvm::SmallVector<mlir::func::CallOp> calls;
  for (mlir::Block &block : main.getBody())
    for (mlir::Operation &op : block)
      if (auto call = mlir::dyn_cast<mlir::func::CallOp>(op);
          call && kernels.count(call.getCallee().str()))
        calls.push_back(call);
  if (calls.empty())
    return {};
  mlir::MLIRContext *context = module.getContext();
  // Unknown locations: a mark computes no node.
  mlir::Location unknown = mlir::UnknownLoc::get(context);
  auto builder = mlir::OpBuilder::atBlockEnd(module.getBody());
  auto mark = mlir::func::FuncOp::create(
      builder, unknown, runtime::kProfileMarkFunction,
      mlir::FunctionType::get(context, {builder.getI64Type()}, {}));
  mark.setPrivate();
  auto emit = [&](int64_t event) {
    auto value = mlir::arith::ConstantOp::create(builder, unknown,
                                                 builder.getI64IntegerAttr(event));
    mlir::func::CallOp::create(builder, unknown, mark, mlir::ValueRange{value});
  };
  std::vector<ProfiledCall> profiled;
  for (auto [index, call] : llvm::enumerate(calls)) {
    std::set<int32_t> nodes;
    addSourceNodes(call.getLoc(), nodes);
    if (auto found = calleeNodes.find(call.getCallee().str()); found != calleeNodes.end())
      nodes.insert(found->second.begin(), found->second.end());
    profiled.push_back(
        {call.getCallee().str(), {nodes.begin(), nodes.end()}, operandBytes(call)});
    builder.setInsertionPoint(call);
    emit(2 * static_cast<int64_t>(index));
    builder.setInsertionPointAfter(call);
    emit(2 * static_cast<int64_t>(index) + 1);
  }
  return profiled;
}

mlir::memref::GlobalOp constantGlobalOf(mlir::memref::GetGlobalOp read) {
  auto global = mlir::SymbolTable::lookupNearestSymbolFrom<mlir::memref::GlobalOp>(
      read, read.getNameAttr());
  return global && global.getConstant() && global.getInitialValue() ? global : nullptr;
}

std::vector<KernelModule> splitKernelModules(mlir::ModuleOp module) {
  std::map<std::string, int> callSites;
  module.walk([&](mlir::func::CallOp call) { ++callSites[call.getCallee().str()]; });
  std::vector<KernelModule> kernels;
  for (auto function : module.getOps<mlir::func::FuncOp>()) {
    if (!function->hasAttr(kLoopKernelAttr))
      continue;
    KernelModule kernel;
    kernel.symbol = function.getName().str();
    kernel.callSites = callSites[kernel.symbol];
    kernel.module = mlir::ModuleOp::create(function.getLoc());
    // The constant globals it reads come along, data and all.
    std::set<std::string> globals;
    function.walk([&](mlir::memref::GetGlobalOp read) {
      if (auto global = constantGlobalOf(read);
          global && globals.insert(global.getSymName().str()).second)
        kernel.module->push_back(global.clone());
    });
    auto definition = function.clone();
    definition->removeAttr(kLoopKernelAttr);
    definition.setPublic();
    kernel.module->push_back(definition);
    kernel.text = printed(*kernel.module);
    function->removeAttr(kLoopKernelAttr);
    function.eraseBody();
    kernels.push_back(std::move(kernel));
  }
  return kernels;
}

} // namespace flowc::compiler
