// The outline pass: each match of a kernel pattern moves into a private
// function and @main calls it through flowc.library_call; the lowering
// of those calls to func.call before bufferization; and what later steps
// read back from the kernel functions.
#include "LibraryKernels.h"
#include "Matchers.h"
#include "MemoryPlan.h"
#include "transforms/Passes.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Pass/Pass.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <map>

namespace flowc::compiler {

#define GEN_PASS_DEF_OUTLINELIBRARYKERNELSPASS
#define GEN_PASS_DEF_INLINELIBRARYCALLSPASS
#define GEN_PASS_DEF_LOWERLIBRARYCALLSPASS
#define GEN_PASS_DEF_MARKSIXTEENBITBUFFERSPASS
#include "flowc/compiler/Passes.h.inc"

namespace {

using library::Candidate;
using mlir::Operation;
using mlir::Value;
using runtime::KernelKind;

/// Operands the kernel body needs besides its inputs must be constants it
/// can clone (zero points, shapes); anything else means the match is wrong.
bool closedOverConstants(const Candidate &candidate) {
  llvm::SmallPtrSet<Operation *, 8> absorbed(candidate.ops.begin(), candidate.ops.end());
  for (Operation *op : candidate.ops)
    for (Value operand : op->getOperands()) {
      if (llvm::is_contained(candidate.inputs, operand))
        continue;
      Operation *producer = operand.getDefiningOp();
      if (!producer || (!absorbed.contains(producer) &&
                        !producer->hasTrait<mlir::OpTrait::ConstantLike>()))
        return false;
    }
  return true;
}

/// Moves the candidate into `@name` and calls it with a flowc.library_call
/// where its result was made.
void outline(mlir::ModuleOp module, mlir::func::FuncOp main, Candidate &candidate,
             const std::string &name, llvm::DenseSet<Operation *> &erased) {
  llvm::sort(candidate.ops,
             [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
  mlir::MLIRContext *context = module.getContext();
  mlir::OpBuilder builder(context);
  llvm::SmallVector<mlir::Type> argTypes;
  for (Value input : candidate.inputs)
    argTypes.push_back(input.getType());
  builder.setInsertionPoint(main);
  auto function = mlir::func::FuncOp::create(
      builder, candidate.result.getLoc(), name,
      builder.getFunctionType(argTypes, {candidate.result.getType()}));
  function.setPrivate();
  // The runtime kernel writes only its output buffer: bufferization must
  // not place the result in an argument's buffer.
  for (unsigned i = 0; i < argTypes.size(); ++i)
    function.setArgAttr(i, mlir::bufferization::BufferizationDialect::kWritableAttrName,
                        builder.getBoolAttr(false));

  mlir::Block *body = function.addEntryBlock();
  builder.setInsertionPointToStart(body);
  mlir::IRMapping mapping;
  for (auto [input, arg] : llvm::zip(candidate.inputs, body->getArguments()))
    mapping.map(input, arg);
  for (Operation *op : candidate.ops) {
    // Constants are cloned at every use, even one that is also an input
    // (CSE can make a zero bias and a zero point one value): lowering needs
    // zero points to be constants.
    mlir::IRMapping operands = mapping;
    for (Value operand : op->getOperands()) {
      Operation *producer = operand.getDefiningOp();
      if (producer && producer->hasTrait<mlir::OpTrait::ConstantLike>())
        operands.map(operand, builder.clone(*producer)->getResult(0));
    }
    Operation *clone = builder.clone(*op, operands);
    mapping.map(op->getResults(), clone->getResults());
  }
  mlir::func::ReturnOp::create(builder, candidate.result.getLoc(),
                               mapping.lookup(candidate.result));

  builder.setInsertionPoint(candidate.ops.back());
  std::vector<int64_t> words = std::visit(
      [](const auto &params) { return runtime::paramWords(params); }, candidate.params);
  auto call = LibraryCallOp::create(builder, candidate.result.getLoc(),
                                    candidate.result.getType(),
                                    static_cast<LibraryKernelKind>(candidate.kind),
                                    function.getSymName(), words, candidate.inputs,
                                    /*arg_attrs=*/nullptr, /*res_attrs=*/nullptr);
  candidate.result.replaceAllUsesWith(call.getResult());
  for (Operation *op : llvm::reverse(candidate.ops))
    if (op->use_empty()) {
      erased.insert(op);
      op->erase();
    }
}

struct OutlineLibraryKernelsPass
    : impl::OutlineLibraryKernelsPassBase<OutlineLibraryKernelsPass> {
  using OutlineLibraryKernelsPassBase::OutlineLibraryKernelsPassBase;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    auto main = module.lookupSymbol<mlir::func::FuncOp>("main");
    if (!main || main.isExternal())
      return;
    llvm::SmallVector<Operation *> roots;
    main.walk([&](Operation *op) {
      if (library::isKernelRoot(op))
        roots.push_back(op);
    });
    int site = 0;
    // A root can be absorbed by an earlier match (a softmax's sum).
    llvm::DenseSet<Operation *> erased;
    for (Operation *root : roots) {
      if (erased.contains(root))
        continue;
      std::optional<Candidate> candidate = library::matchKernel(root);
      if (!candidate || !closedOverConstants(*candidate))
        continue;
      // Pooling compares and averages in the buffers' type.
      if (auto *conv = std::get_if<runtime::Conv2dParams>(&candidate->params))
        conv->precision = precision.getValue();
      if (auto *matmul = std::get_if<runtime::MatMulParams>(&candidate->params))
        matmul->precision = precision.getValue();
      epilogueOpsFused += candidate->ops.size() - 1;
      outline(module, main, *candidate, "flowc_kernel_" + std::to_string(site++), erased);
      ++kernelsOutlined;
    }
    markConstantOperands(main);
  }

  /// The importer's integer products learn here, once weights are settled,
  /// whether their B is a weight: the runtime then converts it once.
  static void markConstantOperands(mlir::func::FuncOp main) {
    main.walk([](LibraryCallOp call) {
      if (static_cast<KernelKind>(call.getKind()) != KernelKind::IntegerMatMul)
        return;
      auto p = *runtime::paramsFromWords<runtime::IntegerMatMulParams>(call.getParams());
      p.constantB = library::isConstantOrigin(call.getInputs()[1]);
      call.setParams(runtime::paramWords(p));
    });
  }
};

/// The convolution params of `call`, if it calls a convolution.
std::optional<runtime::Conv2dParams> convParams(LibraryCallOp call) {
  if (static_cast<KernelKind>(call.getKind()) != KernelKind::Conv2d)
    return std::nullopt;
  return runtime::paramsFromWords<runtime::Conv2dParams>(call.getParams());
}

/// Whether `use` reads a convolution's result as a convolution of
/// `precision` reads its source or its residual (not its weights or bias).
bool readsAsActivation(mlir::OpOperand &use, Precision precision) {
  auto reader = mlir::dyn_cast<LibraryCallOp>(use.getOwner());
  std::optional<runtime::Conv2dParams> p = reader ? convParams(reader) : std::nullopt;
  if (!p || p->precision != precision)
    return false;
  unsigned input = use.getOperandNumber();
  return input == 0 || (p->hasResidual && input == 3);
}

void updateConvParams(LibraryCallOp call,
                      llvm::function_ref<void(runtime::Conv2dParams &)> update) {
  runtime::Conv2dParams p = *convParams(call);
  update(p);
  call.setParams(runtime::paramWords(p));
}

struct MarkSixteenBitBuffersPass
    : impl::MarkSixteenBitBuffersPassBase<MarkSixteenBitBuffersPass> {
  void runOnOperation() override {
    llvm::SmallVector<LibraryCallOp> writers;
    getOperation().walk([&](LibraryCallOp call) {
      std::optional<runtime::Conv2dParams> p = convParams(call);
      if (p && p->precision != Precision::Fp32 && !call.getResult().use_empty())
        writers.push_back(call);
    });
    for (LibraryCallOp writer : writers) {
      Precision precision = convParams(writer)->precision;
      if (!llvm::all_of(writer.getResult().getUses(), [&](mlir::OpOperand &use) {
            return readsAsActivation(use, precision);
          }))
        continue;
      updateConvParams(writer, [](auto &p) { p.sixteenBitDestination = 1; });
      for (mlir::OpOperand &use : writer.getResult().getUses()) {
        bool source = use.getOperandNumber() == 0;
        updateConvParams(mlir::cast<LibraryCallOp>(use.getOwner()), [&](auto &p) {
          (source ? p.sixteenBitSource : p.sixteenBitResidual) = 1;
        });
      }
      ++buffersNarrowed;
    }
  }
};

/// Each flowc.library_call becomes a func.call of its callee, which takes
/// the kind and params as flowc.kernel and flowc.kernel_params: One-Shot
/// Bufferize models func.call, and the steps after it read the kernels
/// off their functions.
struct LowerLibraryCallsPass : impl::LowerLibraryCallsPassBase<LowerLibraryCallsPass> {
  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    mlir::SymbolTable symbols(module);
    llvm::SmallVector<LibraryCallOp> calls;
    module.walk([&](LibraryCallOp call) { calls.push_back(call); });
    for (LibraryCallOp call : calls) {
      // The verifier made sure the callee is a function of the call's type.
      auto callee = symbols.lookup<mlir::func::FuncOp>(call.getCallee());
      mlir::OpBuilder builder(call);
      callee->setAttr(kKernelKindAttr,
                      builder.getStringAttr(stringifyLibraryKernelKind(call.getKind())));
      callee->setAttr(kKernelParamsAttr, call.getParamsAttr());
      auto lowered =
          mlir::func::CallOp::create(builder, call.getLoc(), callee, call.getInputs());
      call.getResult().replaceAllUsesWith(lowered.getResult(0));
      call.erase();
      ++callsLowered;
    }
  }
};

struct InlineLibraryCallsPass : impl::InlineLibraryCallsPassBase<InlineLibraryCallsPass> {
  using InlineLibraryCallsPassBase::InlineLibraryCallsPassBase;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    mlir::SymbolTable symbols(module);
    llvm::SmallVector<LibraryCallOp> calls;
    module.walk([&](LibraryCallOp call) {
      if (kind.empty() || stringifyLibraryKernelKind(call.getKind()) == kind)
        calls.push_back(call);
    });
    llvm::SetVector<mlir::func::FuncOp> callees;
    for (LibraryCallOp call : calls) {
      auto callee = symbols.lookup<mlir::func::FuncOp>(call.getCallee());
      mlir::Block &body = callee.getBody().front();
      mlir::IRMapping mapping;
      mapping.map(body.getArguments(), call.getInputs());
      mlir::OpBuilder builder(call);
      for (Operation &op : body.without_terminator())
        builder.clone(op, mapping);
      Value result = mapping.lookup(body.getTerminator()->getOperand(0));
      call.getResult().replaceAllUsesWith(result);
      call.erase();
      callees.insert(callee);
      ++callsInlined;
    }
    for (mlir::func::FuncOp callee : callees)
      if (mlir::SymbolTable::symbolKnownUseEmpty(callee, module))
        callee.erase();
  }
};

/// The kind and params of `function`'s kernel: on the function once the
/// calls are lowered, on its flowc.library_call before.
std::optional<std::pair<KernelKind, mlir::DenseI64ArrayAttr>>
kernelOf(mlir::func::FuncOp function, const std::map<std::string, LibraryCallOp> &calls) {
  auto kind = function->getAttrOfType<mlir::StringAttr>(kKernelKindAttr);
  auto params = function->getAttrOfType<mlir::DenseI64ArrayAttr>(kKernelParamsAttr);
  if (kind && params) {
    std::optional<LibraryKernelKind> known = symbolizeLibraryKernelKind(kind.getValue());
    if (!known)
      return std::nullopt;
    return std::make_pair(static_cast<KernelKind>(*known), params);
  }
  auto found = calls.find(function.getSymName().str());
  if (found == calls.end())
    return std::nullopt;
  LibraryCallOp call = found->second;
  return std::make_pair(static_cast<KernelKind>(call.getKind()), call.getParamsAttr());
}

} // namespace

std::unique_ptr<mlir::Pass> createOutlineLibraryKernelsPass(Precision precision) {
  OutlineLibraryKernelsPassOptions options;
  options.precision = precision;
  return std::make_unique<OutlineLibraryKernelsPass>(options);
}

std::vector<LibraryKernel> collectLibraryKernels(mlir::ModuleOp module) {
  std::map<std::string, LibraryCallOp> calls;
  module.walk([&](LibraryCallOp call) { calls[call.getCallee().str()] = call; });
  std::vector<LibraryKernel> kernels;
  // Sites in function order: the outline pass creates them in site order.
  for (auto function : module.getOps<mlir::func::FuncOp>()) {
    auto kernel = kernelOf(function, calls);
    if (!kernel)
      continue;
    llvm::ArrayRef<int64_t> words = kernel->second.asArrayRef();
    kernels.push_back(
        LibraryKernel{function.getSymName().str(),
                      kernel->first,
                      {words.begin(), words.end()},
                      // Inputs, then one output once results became out-parameters.
                      function.getNumArguments() + function.getNumResults()});
  }
  return kernels;
}

std::vector<KernelWeight>
collectKernelWeights(mlir::ModuleOp module, const std::vector<LibraryKernel> &kernels) {
  std::vector<KernelWeight> weights;
  auto main = module.lookupSymbol<mlir::func::FuncOp>("main");
  if (!main || main.isExternal())
    return weights;
  std::map<std::string, mlir::func::CallOp> calls;
  main.walk([&](mlir::func::CallOp call) { calls[call.getCallee().str()] = call; });
  for (size_t site = 0; site < kernels.size(); ++site) {
    const LibraryKernel &kernel = kernels[site];
    auto conv = kernel.kind == KernelKind::Conv2d
                    ? runtime::paramsFromWords<runtime::Conv2dParams>(kernel.params)
                    : std::nullopt;
    auto matmul = kernel.kind == KernelKind::MatMul
                      ? runtime::paramsFromWords<runtime::MatMulParams>(kernel.params)
                      : std::nullopt;
    auto integer =
        kernel.kind == KernelKind::IntegerMatMul
            ? runtime::paramsFromWords<runtime::IntegerMatMulParams>(kernel.params)
            : std::nullopt;
    auto integerConv =
        kernel.kind == KernelKind::IntegerConv2d
            ? runtime::paramsFromWords<runtime::IntegerConv2dParams>(kernel.params)
            : std::nullopt;
    bool constant = (conv && conv->constantWeights) || (matmul && matmul->constantB) ||
                    (integer && integer->constantB) ||
                    (integerConv && integerConv->constantWeights);
    auto call = calls.find(kernel.function);
    if (!constant || call == calls.end() || call->second.getNumOperands() < 2)
      continue;
    auto argument = mlir::dyn_cast<mlir::BlockArgument>(
        bufferBehindReshapes(call->second.getOperand(1)));
    if (!argument || argument.getOwner()->getParentOp() != main)
      continue;
    auto key = main.getArgAttrOfType<mlir::StringAttr>(
        argument.getArgNumber(), FlowcDialect::WeightAttrHelper::getNameStr());
    if (!key)
      continue;
    weights.push_back(KernelWeight{static_cast<int64_t>(site), 1, key.str(),
                                   static_cast<int64_t>(kernel.kind), kernel.params});
  }
  return weights;
}

std::vector<LibrarySite> librarySitesOf(const std::vector<LibraryKernel> &kernels) {
  std::vector<LibrarySite> sites;
  for (size_t site = 0; site < kernels.size(); ++site)
    sites.push_back(LibrarySite{static_cast<int64_t>(site),
                                static_cast<int64_t>(kernels[site].kind),
                                kernels[site].params});
  return sites;
}

void dropLibraryKernelBodies(mlir::ModuleOp module) {
  for (auto function : module.getOps<mlir::func::FuncOp>())
    if (function->hasAttr(kKernelKindAttr) && !function.isExternal())
      function.eraseBody();
}

} // namespace flowc::compiler
