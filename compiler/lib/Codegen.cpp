// Graph IR -> native code. The lowering runs in three stages, built in
// Pipelines.cpp; between the second and the third, the loop nests are cut into kernel
// modules that are lowered, compiled (on threads) and cached each on its own. LLVM
// optimizes for the host CPU and the system linker joins the objects into a shared
// object. Weights stay function arguments throughout, so no object carries weight data.
#include "flowc/compiler/Compiler.h"
#include "flowc/compiler/GraphIr.h"
#include "flowc/compiler/dialect/FlowcDialect.h"
#include "flowc/compiler/PassObserver.h"

#include "DerivedWeights.h"
#include "LibraryKernels.h"
#include "LoopSearch.h"
#include "MemoryPlan.h"
#include "Partition.h"
#include "Pipelines.h"
#include "Registration.h"
#include "gpu/CudaCodegen.h"

#include "flowc/support/MappedFile.h"
#include "flowc/support/PhysicalMemory.h"
#include "flowc/support/Subprocess.h"

#include "mlir/Bytecode/BytecodeReader.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Export.h"

#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/SubtargetFeature.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <stdexcept>

namespace flowc::compiler {

namespace {

void initializeLlvmOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

/// Defines `void <name>(void **args)` in `callee`'s module, which unpacks
/// the argument array and calls `callee` with it.
void defineUnpackingEntry(llvm::Function *callee, const char *name) {
  llvm::Module &module = *callee->getParent();
  llvm::LLVMContext &ctx = module.getContext();
  auto *ptrType = llvm::PointerType::getUnqual(ctx);
  auto *entryType = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptrType}, false);
  auto *entry =
      llvm::Function::Create(entryType, llvm::GlobalValue::ExternalLinkage, name, module);
  llvm::IRBuilder<> builder(llvm::BasicBlock::Create(ctx, "entry", entry));
  llvm::SmallVector<llvm::Value *> args;
  for (unsigned i = 0; i < callee->arg_size(); ++i) {
    llvm::Value *slot = builder.CreateConstGEP1_64(ptrType, entry->getArg(0), i);
    args.push_back(builder.CreateLoad(ptrType, slot));
  }
  builder.CreateCall(callee, args);
  builder.CreateRetVoid();
}

/// Adds `void flowc_entry(void **args)` that unpacks the argument array and
/// calls the graph function, so the runtime needs one signature for all
/// models.
Status addEntryPoint(llvm::Module &module) {
  llvm::Function *graph = module.getFunction("main");
  if (!graph)
    return internalError("lowered module has no @main");
  graph->setName("flowc_graph");
  graph->setLinkage(llvm::GlobalValue::InternalLinkage);
  defineUnpackingEntry(graph, kEntrySymbol);
  return Status::ok();
}

/// Tells the runtime how large an arena to pass (see KernelAbi.h).
void defineArenaSize(llvm::Module &module, uint64_t bytes) {
  if (bytes == 0)
    return;
  auto *i64 = llvm::Type::getInt64Ty(module.getContext());
  new llvm::GlobalVariable(module, i64, true, llvm::GlobalValue::ExternalLinkage,
                           llvm::ConstantInt::get(i64, bytes),
                           runtime::kArenaBytesSymbol);
}

/// Surrounds @main's kernel calls with profile marks (KernelAbi.h) and
/// returns what `flowc_profile_calls` says of them.
std::string markKernelCalls(mlir::ModuleOp module, const std::vector<KernelModule> &loops,
                            const std::vector<LibraryKernel> &library,
                            const std::map<std::string, std::vector<int32_t>> &nodes) {
  std::set<std::string> kernels;
  for (const KernelModule &kernel : loops)
    kernels.insert(kernel.symbol);
  // A library function is called once; a loop kernel may be called from
  // many places, so only its calls' own locations say which nodes it ran.
  std::map<std::string, std::vector<int32_t>> libraryNodes;
  std::map<std::string, size_t> sites;
  for (size_t site = 0; site < library.size(); ++site) {
    kernels.insert(library[site].function);
    sites[library[site].function] = site;
    if (auto found = nodes.find(library[site].function); found != nodes.end())
      libraryNodes[library[site].function] = found->second;
  }
  nlohmann::json calls = nlohmann::json::array();
  for (const ProfiledCall &call : addProfileMarks(module, kernels, libraryNodes)) {
    nlohmann::json entry = {
        {"kernel", call.callee}, {"nodes", call.nodes}, {"bytes", call.bytes}};
    if (auto site = sites.find(call.callee); site != sites.end()) {
      entry["site"] = site->second;
      entry["kind"] = runtime::kernelKindName(library[site->second].kind);
    }
    calls.push_back(std::move(entry));
  }
  return calls.dump();
}

/// Defines the profile hook (null until a session sets it), the calls'
/// description, and the body of the mark the lowering declared.
void defineProfileMarks(llvm::Module &module, const std::string &calls) {
  llvm::LLVMContext &ctx = module.getContext();
  auto *ptrType = llvm::PointerType::getUnqual(ctx);
  auto *hook = new llvm::GlobalVariable(
      module, ptrType, false, llvm::GlobalValue::ExternalLinkage,
      llvm::ConstantPointerNull::get(ptrType), runtime::kProfileHookSymbol);
  llvm::Constant *text = llvm::ConstantDataArray::getString(ctx, calls, true);
  new llvm::GlobalVariable(module, text->getType(), true,
                           llvm::GlobalValue::ExternalLinkage, text,
                           runtime::kProfileCallsSymbol);
  llvm::Function *mark = module.getFunction(runtime::kProfileMarkFunction);
  if (!mark)
    return;
  mark->setLinkage(llvm::GlobalValue::InternalLinkage);
  auto *entry = llvm::BasicBlock::Create(ctx, "entry", mark);
  auto *notify = llvm::BasicBlock::Create(ctx, "notify", mark);
  auto *done = llvm::BasicBlock::Create(ctx, "done", mark);
  llvm::IRBuilder<> builder(entry);
  llvm::Value *target = builder.CreateLoad(ptrType, hook);
  builder.CreateCondBr(builder.CreateIsNull(target), done, notify);
  builder.SetInsertPoint(notify);
  builder.CreateCall(mark->getFunctionType(), target, {mark->getArg(0)});
  builder.CreateBr(done);
  builder.SetInsertPoint(done);
  builder.CreateRetVoid();
}

Expected<std::unique_ptr<llvm::TargetMachine>> createTargetMachine(const CodeTarget &code,
                                                                   int optLevel) {
  initializeLlvmOnce();
  llvm::Triple triple(code.triple);
  std::string error;
  const llvm::Target *target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target)
    return unavailable("no LLVM target for " + triple.str() + ": " + error);
  auto level = optLevel <= 0   ? llvm::CodeGenOptLevel::None
               : optLevel == 1 ? llvm::CodeGenOptLevel::Less
               : optLevel == 2 ? llvm::CodeGenOptLevel::Default
                               : llvm::CodeGenOptLevel::Aggressive;
  std::unique_ptr<llvm::TargetMachine> machine(
      target->createTargetMachine(triple, code.cpu, code.features, llvm::TargetOptions(),
                                  llvm::Reloc::PIC_, std::nullopt, level));
  if (!machine)
    return unavailable("cannot create a target machine for " + triple.str() + " (" +
                       code.cpu + ")");
  return machine;
}

void optimizeModule(llvm::Module &module, llvm::TargetMachine &machine, int optLevel) {
  if (optLevel <= 0)
    return;
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder builder(&machine);
  builder.registerModuleAnalyses(mam);
  builder.registerCGSCCAnalyses(cgam);
  builder.registerFunctionAnalyses(fam);
  builder.registerLoopAnalyses(lam);
  builder.crossRegisterProxies(lam, fam, cgam, mam);
  auto level = optLevel == 1   ? llvm::OptimizationLevel::O1
               : optLevel == 2 ? llvm::OptimizationLevel::O2
                               : llvm::OptimizationLevel::O3;
  builder.buildPerModuleDefaultPipeline(level).run(module, mam);
}

Expected<std::string> emitObject(llvm::Module &module, llvm::TargetMachine &machine) {
  llvm::SmallVector<char, 0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager pm;
  if (machine.addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::ObjectFile))
    return unavailable("the LLVM target cannot emit object files");
  pm.run(module);
  return std::string(buffer.begin(), buffer.end());
}

/// Collects MLIR diagnostics into a string for error messages.
struct DiagnosticCollector {
  explicit DiagnosticCollector(mlir::MLIRContext &context)
      : handler(&context, [this](mlir::Diagnostic &diag) {
          text += diag.str() + "\n";
          return mlir::success();
        }) {}
  /// The diagnostics without the trailing newline.
  std::string message() const {
    std::string trimmed = text;
    while (!trimmed.empty() && trimmed.back() == '\n')
      trimmed.pop_back();
    return trimmed;
  }
  std::string text;
  mlir::ScopedDiagnosticHandler handler;
};

/// Remembers the first pass that failed, so that a failure names its pass
/// even when the pass emitted no diagnostic.
class FailedPassRecorder final : public mlir::PassInstrumentation {
public:
  explicit FailedPassRecorder(std::string &name) : name_(name) {}
  void runAfterPassFailed(mlir::Pass *pass, mlir::Operation *) override {
    if (name_.empty())
      name_ = pass->getArgument().str();
  }

private:
  std::string &name_;
};

/// Runs `pm` on `module`; on failure, Internal: "<what> failed in <pass>:
/// <the diagnostics>".
Status runStage(mlir::PassManager &pm, mlir::ModuleOp module,
                const DiagnosticCollector &diagnostics, const std::string &what) {
  std::string failedPass;
  pm.addInstrumentation(std::make_unique<FailedPassRecorder>(failedPass));
  if (mlir::succeeded(pm.run(module)))
    return Status::ok();
  std::string detail = diagnostics.message();
  return internalError(what + " failed" +
                       (failedPass.empty() ? "" : " in " + failedPass) + ": " +
                       (detail.empty() ? "no diagnostic" : detail));
}

/// One object file of the shared object: @main's module or a kernel's.
struct ObjectUnit {
  std::string name;
  /// Each unit has its own LLVM context, so units compile on threads.
  std::unique_ptr<llvm::LLVMContext> context;
  std::unique_ptr<llvm::Module> module;
  /// Set when compiled, or when taken from the kernel cache.
  std::string object;
  /// The kernel cache key of a kernel compiled here.
  std::string kernelKey;
};

Expected<ObjectUnit> translateUnit(mlir::ModuleOp module, std::string name,
                                   const DiagnosticCollector &diagnostics) {
  ObjectUnit unit;
  unit.name = std::move(name);
  unit.context = std::make_unique<llvm::LLVMContext>();
  unit.module = mlir::translateModuleToLLVMIR(module, *unit.context, unit.name);
  if (!unit.module)
    return internalError("translation of " + unit.name +
                         " to LLVM IR failed: " + diagnostics.text);
  return unit;
}

/// A constant the object would hold: a quarter of the memory, the cap of
/// import's folding. The object is built in memory, so a bigger one (a
/// splat the graph broadcasts to terabytes) would exhaust it byte by byte.
uint64_t codeConstantLimit() { return physicalMemory().value_or(uint64_t{4} << 30) / 4; }

Status checkConstantSizes(const ObjectUnit &unit) {
  const llvm::DataLayout &layout = unit.module->getDataLayout();
  uint64_t limit = codeConstantLimit();
  for (const llvm::GlobalVariable &global : unit.module->globals()) {
    if (!global.hasInitializer())
      continue;
    uint64_t bytes = layout.getTypeAllocSize(global.getValueType()).getKnownMinValue();
    if (bytes > limit)
      return resourceExhausted(unit.name + ": its constant '" + global.getName().str() +
                               "' would be " + std::to_string(bytes) +
                               " bytes of code, over the limit of " +
                               std::to_string(limit) + " bytes (RAM / 4)");
  }
  return Status::ok();
}

Status compileUnit(ObjectUnit &unit, const CodeTarget &target, int optLevel) {
  FLOWC_ASSIGN_OR_RETURN(auto machine, createTargetMachine(target, optLevel));
  unit.module->setDataLayout(machine->createDataLayout());
  unit.module->setTargetTriple(machine->getTargetTriple());
  FLOWC_RETURN_IF_ERROR(checkConstantSizes(unit));
  optimizeModule(*unit.module, *machine, optLevel);
  FLOWC_ASSIGN_OR_RETURN(unit.object, emitObject(*unit.module, *machine));
  unit.module.reset();
  return Status::ok();
}

/// What a kernel's object depends on besides its IR: the target and the
/// options of the lowering it goes through (stage 3 and LLVM).
std::string kernelKey(const CompileOptions &options, const CodeTarget &target,
                      const KernelModule &kernel) {
  // A CUDA kernel's object also holds a cubin: its chip and the ptxas
  // that assembled it.
  std::string device =
      isCudaTarget(options.target)
          ? std::string(";") + targetName(options.target) + ";" + cudaToolkitVersion()
          : "";
  return "flowc.loop-kernel.v1\n" + target.description() + device +
         "\nopt=" + std::to_string(options.optLevel) +
         (usesOpenMp(options) ? ";parallel" : "") + "\n" + kernel.text;
}

/// Kernels are linked into the same shared object as @main: no need to
/// export them, and calls to them need no PLT.
void hideSymbol(llvm::Module &module, const std::string &symbol) {
  if (llvm::Function *function = module.getFunction(symbol)) {
    function->setVisibility(llvm::GlobalValue::HiddenVisibility);
    function->setDSOLocal(true);
  }
}

/// `diag`'s message with its attribute and type arguments left out.
std::string textArguments(const mlir::Diagnostic &diag) {
  std::string text;
  llvm::raw_string_ostream os(text);
  for (const mlir::DiagnosticArgument &argument : diag.getArguments()) {
    switch (argument.getKind()) {
    case mlir::DiagnosticArgument::DiagnosticArgumentKind::String:
      os << argument.getAsString();
      break;
    case mlir::DiagnosticArgument::DiagnosticArgumentKind::Integer:
      os << argument.getAsInteger();
      break;
    case mlir::DiagnosticArgument::DiagnosticArgumentKind::Unsigned:
      os << argument.getAsUnsigned();
      break;
    case mlir::DiagnosticArgument::DiagnosticArgumentKind::Double:
      os << argument.getAsDouble();
      break;
    case mlir::DiagnosticArgument::DiagnosticArgumentKind::Attribute:
    case mlir::DiagnosticArgument::DiagnosticArgumentKind::Type:
      os << "<...>";
      break;
    }
  }
  return text;
}

Expected<mlir::OwningOpRef<mlir::ModuleOp>> parseGraph(mlir::MLIRContext &context,
                                                       const std::string &irBytecode) {
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(irBytecode, "graph.mlirbc");
  auto sourceMgr = std::make_shared<llvm::SourceMgr>();
  sourceMgr->AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  // Read, then verify. While bytes are read, a diagnostic can carry an
  // attribute the reader half-built from damaged bytes, which MLIR's printer
  // crashes on: only its text arguments are kept.
  mlir::ParserConfig config(&context, /*verifyAfterParse=*/false);
  std::string readError;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  {
    mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
      if (readError.empty())
        readError = textArguments(diag);
      return mlir::success();
    });
    module = mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, config);
  }
  if (!module)
    return dataLoss("graph IR bytecode does not parse" +
                    (readError.empty() ? "" : ": " + readError));
  // The flowc dialect's verifier says which op and attribute are malformed.
  DiagnosticCollector diagnostics(context);
  if (mlir::failed(mlir::verify(*module))) {
    // The first diagnostics say where; a damaged graph can produce pages.
    std::string why = diagnostics.message().substr(0, 400);
    std::replace(why.begin(), why.end(), '\n', ' ');
    return dataLoss("graph IR does not verify" + (why.empty() ? "" : ": " + why));
  }
  return module;
}

/// `--print-ir-after`: the module after each pass whose argument matches
/// (or every pass for "all"), as text; remembers every pass that ran so an
/// unknown name can be reported with the ones that exist.
struct IrPrinter {
  explicit IrPrinter(std::string pass) : pass(std::move(pass)), stream(text) {}

  void attach(mlir::PassManager &pm) {
    pm.enableIRPrinting([](mlir::Pass *, mlir::Operation *) { return false; },
                        [this](mlir::Pass *candidate, mlir::Operation *) {
                          std::string name = candidate->getArgument().str();
                          if (std::find(seen.begin(), seen.end(), name) == seen.end())
                            seen.push_back(name);
                          bool match = pass == "all" || name == pass;
                          matched = matched || match;
                          return match;
                        },
                        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false,
                        /*printAfterOnlyOnFailure=*/false, stream);
  }

  Status finish() {
    if (matched)
      return Status::ok();
    std::string names;
    for (const std::string &name : seen)
      names += (names.empty() ? "" : ", ") + name;
    return invalidArgument("--print-ir-after: no pass named '" + pass +
                           "' ran; the pipeline has: " + names);
  }

  std::string pass;
  std::string text;
  llvm::raw_string_ostream stream;
  std::vector<std::string> seen;
  bool matched = false;
};

/// Reports each pass's wall time to a PassObserver. A pass nested on
/// functions runs once per function inside an adaptor: its runs are
/// summed and reported when the adaptor ends, under the nested pass's
/// name, so the observer sees pipeline steps, not one event per function.
/// The codegen contexts run passes on one thread (Threading::DISABLED).
class PassTimer final : public mlir::PassInstrumentation {
public:
  explicit PassTimer(const PassObserver &observer) : observer_(observer) {}

  void runBeforePass(mlir::Pass *pass, mlir::Operation *op) override {
    starts_.push_back({pass, op, Clock::now()});
  }
  void runAfterPass(mlir::Pass *pass, mlir::Operation *op) override { end(pass, op); }
  void runAfterPassFailed(mlir::Pass *pass, mlir::Operation *op) override {
    end(pass, op);
  }

private:
  using Clock = std::chrono::steady_clock;
  struct Start {
    mlir::Pass *pass;
    mlir::Operation *op;
    Clock::time_point at;
  };
  struct Nested {
    std::string name;
    double seconds = 0;
  };

  static std::string nameOf(mlir::Pass *pass) {
    std::string argument = pass->getArgument().str();
    if (!argument.empty())
      return argument;
    // A pass without a registered argument: its type's name, unqualified.
    std::string name = pass->getName().str();
    size_t colon = name.rfind("::");
    return colon == std::string::npos ? name : name.substr(colon + 2);
  }

  void end(mlir::Pass *pass, mlir::Operation *op) {
    auto start = std::find_if(starts_.rbegin(), starts_.rend(), [&](const Start &s) {
      return s.pass == pass && s.op == op;
    });
    if (start == starts_.rend())
      return;
    double seconds = std::chrono::duration<double>(Clock::now() - start->at).count();
    starts_.erase(std::next(start).base());
    if (op->getParentOp()) {
      std::string name = nameOf(pass);
      auto same = std::find_if(nested_.begin(), nested_.end(),
                               [&](const Nested &n) { return n.name == name; });
      if (same == nested_.end())
        nested_.push_back({name, seconds});
      else
        same->seconds += seconds;
      return;
    }
    if (nested_.empty()) {
      observer_(nameOf(pass), seconds);
      return;
    }
    for (const Nested &n : nested_)
      observer_(n.name, n.seconds);
    nested_.clear();
  }

  const PassObserver &observer_;
  std::vector<Start> starts_;
  std::vector<Nested> nested_;
};

} // namespace

Status CompileOptions::validate() const {
  if (std::string_view(targetName(target)) == "unknown")
    return invalidArgument("unknown target " +
                           std::to_string(static_cast<int64_t>(target)) +
                           " (supported: " + targetNames() + ")");
  if (isCudaTarget(target))
    FLOWC_RETURN_IF_ERROR(cudaToolkitPath().status());
  if (optLevel < 0 || optLevel > 3)
    return invalidArgument("optimization level " + std::to_string(optLevel) +
                           " is out of range 0..3");
  if (precision != Precision::Fp32 && precision != Precision::Bf16 &&
      precision != Precision::Fp16)
    return invalidArgument("unknown precision " +
                           std::to_string(static_cast<int64_t>(precision)) +
                           " (supported: " + precisionNames() + ")");
  if (precision == Precision::Fp16 && !isCudaTarget(target))
    return invalidArgument("precision fp16 is for the cuda targets' tensor cores; the "
                           "CPU's library kernels compute in fp32 or bf16");
  // bfloat16 tensor cores came with Ampere.
  if (precision == Precision::Bf16 && isCudaTarget(target) &&
      cudaComputeCapability(target) < 80)
    return invalidArgument(std::string("precision bf16 needs sm_80 or newer; ") +
                           targetName(target) +
                           " has no bfloat16 tensor cores: use fp16");
  if (precision != Precision::Fp32 && optLevel == 0)
    return invalidArgument(std::string("precision ") + precisionName(precision) +
                           " needs library kernels, which -O0 does not use");
  for (const std::string &pass : disabledPasses)
    if (!llvm::is_contained(optionalPassNames(), pass)) {
      std::string known;
      for (const std::string &name : optionalPassNames())
        known += (known.empty() ? "" : ", ") + name;
      return invalidArgument("cannot disable pass '" + pass +
                             "' (optional passes: " + known + ")");
    }
  return Status::ok();
}

std::string CompileOptions::canonical() const {
  std::string text = std::string("target=") + targetName(target) +
                     ";opt=" + std::to_string(optLevel) +
                     ";precision=" + precisionName(precision);
  std::vector<std::string> disabled = disabledPasses;
  std::sort(disabled.begin(), disabled.end());
  disabled.erase(std::unique(disabled.begin(), disabled.end()), disabled.end());
  for (const std::string &pass : disabled)
    text += ";no-" + pass;
  return text;
}

const CodeTarget &CodeTarget::host() {
  // The host does not change while the process runs; every cache key asks.
  static const CodeTarget target = [] {
    CodeTarget host;
    host.triple = llvm::sys::getProcessTriple();
    host.cpu = llvm::sys::getHostCPUName().str();
    // Sorted: this is part of cache keys, and a hash map's order is no contract.
    std::vector<std::string> features;
    for (const auto &feature : llvm::sys::getHostCPUFeatures())
      features.push_back((feature.second ? "+" : "-") + feature.first().str());
    std::sort(features.begin(), features.end(),
              [](const std::string &a, const std::string &b) {
                return a.compare(1, std::string::npos, b, 1, std::string::npos) < 0;
              });
    for (const std::string &feature : features)
      host.features += (host.features.empty() ? "" : ",") + feature;
    return host;
  }();
  return target;
}

std::string CodeTarget::description() const {
  std::string text = triple + ";" + cpu;
  std::string_view rest = features;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view feature = rest.substr(0, comma);
    if (!feature.empty() && feature[0] == '+')
      text += ";" + std::string(feature);
    rest = comma == std::string_view::npos ? "" : rest.substr(comma + 1);
  }
  return text;
}

std::string hostTargetDescription() {
  static const std::string description = CodeTarget::host().description();
  return description;
}

Expected<std::string> printGraphIr(const std::string &irBytecode) {
  mlir::DialectRegistry registry;
  registerFlowcDialects(registry);
  mlir::MLIRContext context(registry, mlir::MLIRContext::Threading::DISABLED);
  FLOWC_ASSIGN_OR_RETURN(auto module, parseGraph(context, irBytecode));
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  return text;
}

/// A statically shaped tensor of an element type the runtime can bind, as
/// a TensorInfo; InvalidArgument naming `what` otherwise.
static Expected<TensorInfo> describeBoundType(mlir::Type type, const std::string &what,
                                              bool isUnsigned) {
  std::string text;
  llvm::raw_string_ostream(text) << type;
  auto tensor = mlir::dyn_cast<mlir::RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return invalidArgument(what + " has type " + text +
                           "; expected a statically shaped tensor");
  mlir::Type element = tensor.getElementType();
  TensorInfo info;
  info.shape.assign(tensor.getShape().begin(), tensor.getShape().end());
  info.dtype = element.isF32()                 ? DType::F32
               : element.isF64()               ? DType::F64
               : element.isF16()               ? DType::F16
               : element.isBF16()              ? DType::BF16
               : element.isSignlessInteger(64) ? DType::I64
               : element.isSignlessInteger(32) ? DType::I32
               : element.isSignlessInteger(16) ? DType::I16
               : element.isSignlessInteger(8)  ? DType::I8
               : element.isSignlessInteger(1)  ? DType::Bool
               : element.isUnsignedInteger(64) ? DType::U64
               : element.isUnsignedInteger(32) ? DType::U32
               : element.isUnsignedInteger(16) ? DType::U16
               : element.isUnsignedInteger(8)  ? DType::U8
                                               : DType::Undefined;
  if (info.dtype == DType::Undefined)
    return invalidArgument(what + " has element type " + text +
                           ", which flowc cannot bind");
  if (isUnsigned) {
    if (info.dtype != DType::I8)
      return invalidArgument(what + " is marked " +
                             FlowcDialect::UnsignedAttrHelper::getNameStr().str() +
                             " but has type " + text + "; only i8 holds uint8");
    info.dtype = DType::U8;
  }
  return info;
}

/// @main's run-time checks (kChecksAttr): what each says, its last results;
/// InvalidArgument when the attribute is not an array of strings, names
/// more checks than there are results, or a check's result is not a
/// tensor<1xi1>.
static Expected<std::vector<std::string>> readChecks(mlir::func::FuncOp main) {
  mlir::Attribute attribute = main->getAttr(kChecksAttr);
  if (!attribute)
    return std::vector<std::string>{};
  auto array = mlir::dyn_cast<mlir::ArrayAttr>(attribute);
  if (!array)
    return invalidArgument(std::string("@main's ") + kChecksAttr +
                           " is not an array of strings");
  unsigned results = main.getNumResults();
  if (array.size() > results)
    return invalidArgument(std::string("@main's ") + kChecksAttr + " names " +
                           std::to_string(array.size()) + " checks, but @main has " +
                           std::to_string(results) + " results");
  std::vector<std::string> checks;
  unsigned first = results - array.size();
  for (unsigned i = 0; i < array.size(); ++i) {
    auto message = mlir::dyn_cast<mlir::StringAttr>(array[i]);
    if (!message)
      return invalidArgument(std::string("@main's ") + kChecksAttr + "[" +
                             std::to_string(i) + "] is not a string");
    auto type = mlir::dyn_cast<mlir::RankedTensorType>(main.getResultTypes()[first + i]);
    if (!type || type.getShape() != llvm::ArrayRef<int64_t>{1} ||
        !type.getElementType().isSignlessInteger(1))
      return invalidArgument("@main result " + std::to_string(first + i) +
                             ", a check, is not a tensor<1xi1>");
    checks.push_back(message.str());
  }
  return checks;
}

/// Tells the runtime what the code's checks say (KernelAbi.h).
static void defineChecks(llvm::Module &module, const std::vector<std::string> &checks) {
  if (checks.empty())
    return;
  llvm::Constant *text = llvm::ConstantDataArray::getString(
      module.getContext(), nlohmann::json(checks).dump(), true);
  new llvm::GlobalVariable(module, text->getType(), true,
                           llvm::GlobalValue::ExternalLinkage, text,
                           runtime::kChecksSymbol);
}

Expected<GraphSignature> readGraphSignature(const std::string &irBytecode) {
  mlir::DialectRegistry registry;
  registerFlowcDialects(registry);
  mlir::MLIRContext context(registry, mlir::MLIRContext::Threading::DISABLED);
  // parseGraph's own handlers take every diagnostic of the read and verify.
  FLOWC_ASSIGN_OR_RETURN(auto module, parseGraph(context, irBytecode));
  auto main = module->lookupSymbol<mlir::func::FuncOp>("main");
  if (!main)
    return invalidArgument("graph IR has no func.func @main");
  GraphSignature signature;
  for (unsigned i = 0; i < main.getNumArguments(); ++i) {
    std::string what = "@main argument " + std::to_string(i);
    FLOWC_ASSIGN_OR_RETURN(
        TensorInfo info,
        describeBoundType(
            main.getArgument(i).getType(), what,
            main.getArgAttr(i, FlowcDialect::UnsignedAttrHelper::getNameStr()) !=
                nullptr));
    auto key = main.getArgAttrOfType<mlir::StringAttr>(i, "flowc.weight");
    if (key) {
      info.name = key.str();
      signature.weights.push_back(std::move(info));
      continue;
    }
    // The entry point binds inputs, then weights: an input after a weight
    // would be bound to the wrong buffer.
    if (!signature.weights.empty())
      return invalidArgument(what +
                             " is an input after weight arguments; inputs come first");
    signature.inputs.push_back(std::move(info));
  }
  FLOWC_ASSIGN_OR_RETURN(signature.checks, readChecks(main));
  for (unsigned i = 0; i < main.getNumResults() - signature.checks.size(); ++i) {
    FLOWC_ASSIGN_OR_RETURN(
        TensorInfo info,
        describeBoundType(
            main.getResultTypes()[i], "@main result " + std::to_string(i),
            main.getResultAttr(i, FlowcDialect::UnsignedAttrHelper::getNameStr()) !=
                nullptr));
    signature.outputs.push_back(std::move(info));
  }
  return signature;
}

namespace {

/// MLIR context for one compile step: the codegen dialects, no threads (the
/// steps themselves run in parallel).
struct CodegenContext {
  CodegenContext() : context(makeRegistry(), mlir::MLIRContext::Threading::DISABLED) {}
  static mlir::DialectRegistry makeRegistry() {
    mlir::DialectRegistry registry;
    registerFlowcDialects(registry);
    return registry;
  }
  mlir::MLIRContext context;
};

Expected<CompilePlan> planUnguarded(const std::string &irBytecode,
                                    const CompileOptions &options,
                                    const CodeTarget &target, IrPrinter *printer,
                                    const PassObserver &observer) {
  FLOWC_RETURN_IF_ERROR(options.validate());
  CodegenContext codegen;
  mlir::MLIRContext &context = codegen.context;
  DiagnosticCollector diagnostics(context);
  FLOWC_ASSIGN_OR_RETURN(auto module, parseGraph(context, irBytecode));
  auto main = module->lookupSymbol<mlir::func::FuncOp>("main");
  if (!main)
    return invalidArgument("graph IR has no func.func @main");
  FLOWC_ASSIGN_OR_RETURN(std::vector<std::string> checks, readChecks(main));

  // Each pipeline owns its instrumentations; one timer serves all three.
  auto watch = [&](mlir::PassManager &pm) {
    if (observer)
      pm.addInstrumentation(std::make_unique<PassTimer>(observer));
  };
  mlir::PassManager bufferize(&context);
  buildBufferizePipeline(bufferize, options);
  watch(bufferize);
  if (printer)
    printer->attach(bufferize);
  FLOWC_RETURN_IF_ERROR(runStage(bufferize, *module, diagnostics, "lowering to buffers"));
  CompilePlan plan;
  plan.weights = collectCodeWeights(*module);
  std::vector<LibraryKernel> libraryKernels = collectLibraryKernels(*module);
  // Weights packed at link time are in oneDNN's layouts, for the CPU; the
  // GPU's kernels read the graph's and repack on the device.
  if (!isCudaTarget(options.target))
    plan.weights.kernelWeights = collectKernelWeights(*module, libraryKernels);
  plan.weights.librarySites = librarySitesOf(libraryKernels);
  uint64_t arenaBytes = plannedArenaBytes(*module);
  mlir::PassManager prepare(&context);
  buildPrepareLoopsPipeline(prepare, options);
  watch(prepare);
  if (printer)
    printer->attach(prepare);
  FLOWC_RETURN_IF_ERROR(runStage(prepare, *module, diagnostics, "preparing loop nests"));
  std::vector<KernelModule> kernels = splitKernelModules(*module);
  std::map<std::string, std::vector<int32_t>> nodes = kernelSourceNodes(*module);
  for (size_t site = 0; site < libraryKernels.size(); ++site)
    plan.weights.librarySites[site].nodes = nodes[libraryKernels[site].function];
  dropLibraryKernelBodies(*module);
  std::string profileCalls = markKernelCalls(*module, kernels, libraryKernels, nodes);

  mlir::PassManager lower(&context);
  buildLowerToLlvmPipeline(lower, options);
  watch(lower);
  if (printer)
    printer->attach(lower);
  FLOWC_RETURN_IF_ERROR(runStage(lower, *module, diagnostics, "lowering to LLVM"));
  auto llvmStart = std::chrono::steady_clock::now();
  FLOWC_ASSIGN_OR_RETURN(ObjectUnit graph, translateUnit(*module, "graph", diagnostics));
  FLOWC_RETURN_IF_ERROR(addEntryPoint(*graph.module));
  defineArenaSize(*graph.module, arenaBytes);
  FLOWC_RETURN_IF_ERROR(bindLibraryKernels(*graph.module, libraryKernels));
  defineProfileMarks(*graph.module, profileCalls);
  defineChecks(*graph.module, checks);
  if (isCudaTarget(options.target)) {
    std::vector<std::string> symbols;
    for (const KernelModule &kernel : kernels)
      symbols.push_back(kernel.symbol);
    FLOWC_RETURN_IF_ERROR(bindGpuGraph(*graph.module, symbols, options.target));
  }
  for (const KernelModule &kernel : kernels) {
    hideSymbol(*graph.module, kernel.symbol);
    plan.kernels.push_back({kernel.symbol, kernelKey(options, target, kernel),
                            kernel.text, kernel.callSites});
    plan.weights.loopKernels.push_back(
        {kernel.symbol, kernel.callSites, nodes[kernel.symbol]});
  }
  FLOWC_RETURN_IF_ERROR(compileUnit(graph, target, options.optLevel));
  if (observer)
    observer("llvm-codegen",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - llvmStart)
                 .count());
  plan.graphObject = std::move(graph.object);
  plan.linksOpenMp = usesOpenMp(options);
  return plan;
}

/// The lowering `kernel.candidate` asks for; InvalidArgument naming the
/// kernel and the candidate when it is malformed or asks for what
/// `options` leave out.
Expected<LoopCandidate> kernelCandidate(const PlannedKernel &kernel,
                                        const CompileOptions &options) {
  auto bad = [&](const std::string &why) {
    return invalidArgument("kernel " + kernel.symbol + ": candidate '" +
                           kernel.candidate + "': " + why);
  };
  Expected<LoopCandidate> candidate = parseLoopCandidate(kernel.candidate);
  if (!candidate)
    return bad(candidate.status().message());
  if (candidate->parallelDims && !usesOpenMp(options))
    return bad("sets parallel dimensions, but this compile has no parallel loops "
               "(-O0 or flowc-parallelize-loops disabled)");
  return candidate;
}

Expected<std::string> compileKernelUnguarded(const PlannedKernel &kernel,
                                             const CompileOptions &options,
                                             const CodeTarget &target,
                                             IrPrinter *printer) {
  FLOWC_RETURN_IF_ERROR(options.validate());
  FLOWC_ASSIGN_OR_RETURN(LoopCandidate candidate, kernelCandidate(kernel, options));
  CodegenContext codegen;
  mlir::MLIRContext &context = codegen.context;
  DiagnosticCollector diagnostics(context);
  mlir::ParserConfig config(&context);
  auto module = mlir::parseSourceString<mlir::ModuleOp>(kernel.text, config);
  if (!module)
    return invalidArgument("kernel " + kernel.symbol +
                           ": its IR does not parse: " + diagnostics.text);
  bool cuda = isCudaTarget(options.target);
  mlir::PassManager lower(&context);
  if (cuda) {
    FLOWC_ASSIGN_OR_RETURN(std::string toolkit, cudaToolkitPath());
    buildLowerKernelToCudaPipeline(lower, options, toolkit);
  } else {
    buildLowerToLlvmPipeline(lower, options, candidate);
  }
  if (printer)
    printer->attach(lower);
  FLOWC_RETURN_IF_ERROR(
      runStage(lower, *module, diagnostics,
               "lowering kernel " + kernel.symbol + (cuda ? " to CUDA" : " to LLVM")));
  FLOWC_ASSIGN_OR_RETURN(ObjectUnit unit,
                         translateUnit(*module, kernel.symbol, diagnostics));
  hideSymbol(*unit.module, kernel.symbol);
  // CUDA: the cubin loads leave the constructors and the GPU runtime calls
  // go through the session's table. CPU: the candidate's loop hints, in
  // LLVM IR, where every loop of the kernel is a natural loop (OpenMP's
  // outlined bodies included), before LLVM's loop passes read them.
  if (cuda)
    FLOWC_RETURN_IF_ERROR(bindGpuKernel(*unit.module, kernel.symbol));
  else
    annotateInnermostLoops(*unit.module, candidate);
  FLOWC_RETURN_IF_ERROR(compileUnit(unit, target, options.optLevel));
  return std::move(unit.object);
}

/// Runs `step`, turning running out of memory into this compile's failure
/// rather than the process's: MLIR and LLVM allocate as the IR asks.
template <typename Step>
auto guarded(const std::string &what, Step &&step) -> decltype(step()) {
  try {
    return step();
  } catch (const std::bad_alloc &) {
  } catch (const std::length_error &) {
  }
  return resourceExhausted("out of memory while compiling " + what);
}

/// The objects of the plan's kernels, from `cache` or compiled: on threads
/// (each with its own contexts), or one after another while printing IR.
Expected<std::vector<std::string>>
kernelObjects(const CompilePlan &plan, const CompileOptions &options,
              const CodeTarget &target, IrPrinter *printer, KernelObjectCache *cache,
              CompileReport &report) {
  std::vector<std::string> objects(plan.kernels.size());
  std::vector<size_t> missing;
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    if (cache)
      if (std::optional<std::string> object = cache->lookup(plan.kernels[i].cacheKey())) {
        objects[i] = std::move(*object);
        ++report.cachedLoopKernels;
        continue;
      }
    missing.push_back(i);
  }
  std::vector<Expected<std::string>> compiled(missing.size(), std::string());
  auto compile = [&](size_t m) {
    const PlannedKernel &kernel = plan.kernels[missing[m]];
    compiled[m] = guarded("kernel " + kernel.symbol, [&] {
      return compileKernelUnguarded(kernel, options, target, printer);
    });
  };
  if (printer || missing.size() <= 1) {
    for (size_t m = 0; m < missing.size(); ++m)
      compile(m);
  } else {
    llvm::DefaultThreadPool pool(llvm::hardware_concurrency());
    for (size_t m = 0; m < missing.size(); ++m)
      pool.async([&, m] { compile(m); });
    pool.wait();
  }
  for (size_t m = 0; m < missing.size(); ++m) {
    if (!compiled[m])
      return compiled[m].status();
    objects[missing[m]] = std::move(*compiled[m]);
    if (cache)
      cache->store(plan.kernels[missing[m]].cacheKey(), objects[missing[m]]);
  }
  return objects;
}

} // namespace

Expected<CompilePlan> planCompile(const std::string &irBytecode,
                                  const CompileOptions &options,
                                  const CodeTarget &target) {
  return planCompile(irBytecode, options, target, PassObserver());
}

Expected<CompilePlan> planCompile(const std::string &irBytecode,
                                  const CompileOptions &options, const CodeTarget &target,
                                  const PassObserver &observer) {
  return guarded("the graph", [&] {
    return planUnguarded(irBytecode, options, target, nullptr, observer);
  });
}

Expected<std::string> compileKernel(const PlannedKernel &kernel,
                                    const CompileOptions &options,
                                    const CodeTarget &target) {
  return guarded("kernel " + kernel.symbol, [&] {
    return compileKernelUnguarded(kernel, options, target, nullptr);
  });
}

Expected<std::string> measureEntryObject(const std::string &kernelSymbol,
                                         unsigned arguments, const CodeTarget &target) {
  llvm::LLVMContext context;
  llvm::Module module("measure", context);
  auto *ptrType = llvm::PointerType::getUnqual(context);
  llvm::SmallVector<llvm::Type *> parameters(arguments, ptrType);
  auto *kernelType =
      llvm::FunctionType::get(llvm::Type::getVoidTy(context), parameters, false);
  auto *kernel = llvm::Function::Create(kernelType, llvm::GlobalValue::ExternalLinkage,
                                        kernelSymbol, module);
  // compileKernel hides the kernel's symbol: the entry reaches it inside the
  // shared object.
  kernel->setVisibility(llvm::GlobalValue::HiddenVisibility);
  kernel->setDSOLocal(true);
  defineUnpackingEntry(kernel, kMeasureEntrySymbol);
  FLOWC_ASSIGN_OR_RETURN(auto machine, createTargetMachine(target, 1));
  module.setDataLayout(machine->createDataLayout());
  module.setTargetTriple(machine->getTargetTriple());
  return emitObject(module, *machine);
}

Expected<std::string> linkSharedObject(const CompilePlan &plan,
                                       const std::vector<std::string> &kernelObjects,
                                       const std::string &workDir) {
  if (kernelObjects.size() != plan.kernels.size())
    return invalidArgument("link: " + std::to_string(kernelObjects.size()) +
                           " kernel objects for a plan of " +
                           std::to_string(plan.kernels.size()) + " kernels");
  std::string libraryPath = workDir + "/graph.so";
  std::vector<std::string> link = {"cc", "-shared", "-o", libraryPath};
  auto addObject = [&](const std::string &name, const std::string &object) -> Status {
    std::string path = workDir + "/" + name + ".o";
    FLOWC_RETURN_IF_ERROR(writeFileAtomically(path, object));
    link.push_back(path);
    return Status::ok();
  };
  FLOWC_RETURN_IF_ERROR(addObject("graph", plan.graphObject));
  for (size_t i = 0; i < plan.kernels.size(); ++i)
    FLOWC_RETURN_IF_ERROR(addObject(plan.kernels[i].symbol, kernelObjects[i]));
  link.push_back("-lm");
  // Parallel loops call LLVM's OpenMP runtime (libomp), which the runtime
  // also loads for the library kernels: one thread pool for both.
  if (plan.linksOpenMp)
    link.push_back("-l:" + std::string(runtime::kOpenMpLibrary));
  FLOWC_RETURN_IF_ERROR(runProgram(link).withContext("link"));
  return readFileToString(libraryPath);
}

Expected<std::string> compileToSharedObject(const std::string &irBytecode,
                                            const CompileOptions &options,
                                            const std::string &workDir,
                                            CompileReport *report,
                                            KernelObjectCache *kernelCache) {
  CompileReport ownReport;
  if (!report)
    report = &ownReport;
  std::optional<IrPrinter> printer;
  if (!options.printIrAfter.empty())
    printer.emplace(options.printIrAfter);
  IrPrinter *print = printer ? &*printer : nullptr;
  const CodeTarget &target = CodeTarget::host();
  FLOWC_ASSIGN_OR_RETURN(CompilePlan plan, guarded("the graph", [&] {
                           return planUnguarded(irBytecode, options, target, print,
                                                PassObserver());
                         }));
  report->weights = plan.weights;
  report->loopKernels = static_cast<int>(plan.kernels.size());
  for (const PlannedKernel &kernel : plan.kernels)
    report->loopKernelCalls += kernel.callSites;
  // Printing the IR shows every kernel's lowering, so none comes from the
  // cache then.
  FLOWC_ASSIGN_OR_RETURN(std::vector<std::string> objects,
                         kernelObjects(plan, options, target, print,
                                       print ? nullptr : kernelCache, *report));
  if (printer) {
    FLOWC_RETURN_IF_ERROR(printer->finish());
    report->printedIr = std::move(printer->text);
  }
  return linkSharedObject(plan, objects, workDir);
}

} // namespace flowc::compiler
