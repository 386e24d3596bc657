#include "gpu/CudaCodegen.h"

#include "flowc/runtime/GpuAbi.h"

#include "llvm/IR/Constants.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Module.h"

#include <algorithm>
#include <filesystem>

namespace flowc::compiler {

namespace {

/// Where the loader of a kernel's cubins lives once out of the constructors.
std::string loadFunctionName(const std::string &symbol) { return symbol + ".gpu_load"; }
std::string unloadFunctionName(const std::string &symbol) {
  return symbol + ".gpu_unload";
}

llvm::Function *declareVoidFunction(llvm::Module &module, const std::string &name) {
  auto *type = llvm::FunctionType::get(llvm::Type::getVoidTy(module.getContext()), false);
  return llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage, name, module);
}

/// The functions of `llvm.global_ctors` / `llvm.global_dtors` (`global`),
/// in priority order, and the list removed: loading the code runs none.
std::vector<llvm::Function *> takeStructors(llvm::Module &module, const char *global) {
  std::vector<std::pair<uint64_t, llvm::Function *>> found;
  llvm::GlobalVariable *list = module.getGlobalVariable(global);
  if (!list)
    return {};
  if (auto *entries = llvm::dyn_cast_or_null<llvm::ConstantArray>(
          list->hasInitializer() ? list->getInitializer() : nullptr))
    for (llvm::Value *entry : entries->operands()) {
      auto *fields = llvm::dyn_cast<llvm::ConstantStruct>(entry);
      if (!fields || fields->getNumOperands() < 2)
        continue;
      auto *priority = llvm::dyn_cast<llvm::ConstantInt>(fields->getOperand(0));
      auto *function = llvm::dyn_cast<llvm::Function>(fields->getOperand(1));
      if (priority && function)
        found.emplace_back(priority->getZExtValue(), function);
    }
  list->eraseFromParent();
  std::stable_sort(found.begin(), found.end(),
                   [](const auto &a, const auto &b) { return a.first < b.first; });
  std::vector<llvm::Function *> functions;
  for (const auto &[priority, function] : found)
    functions.push_back(function);
  return functions;
}

/// Defines `name` as a hidden function calling each of `callees` in turn.
void defineSequence(llvm::Module &module, const std::string &name,
                    const std::vector<llvm::Function *> &callees) {
  llvm::Function *function = declareVoidFunction(module, name);
  function->setVisibility(llvm::GlobalValue::HiddenVisibility);
  llvm::IRBuilder<> builder(
      llvm::BasicBlock::Create(module.getContext(), "entry", function));
  for (llvm::Function *callee : callees)
    builder.CreateCall(callee);
  builder.CreateRetVoid();
}

llvm::ArrayType *gpuTableType(llvm::LLVMContext &context) {
  return llvm::ArrayType::get(llvm::PointerType::getUnqual(context),
                              runtime::kGpuFunctionCount);
}

/// The table, declared where a kernel calls through it; the graph's object
/// defines it (exported: the session fills it).
llvm::GlobalVariable *gpuTable(llvm::Module &module) {
  if (llvm::GlobalVariable *table = module.getGlobalVariable(runtime::kGpuTableSymbol))
    return table;
  llvm::ArrayType *type = gpuTableType(module.getContext());
  return new llvm::GlobalVariable(module, type, false, llvm::GlobalValue::ExternalLinkage,
                                  nullptr, runtime::kGpuTableSymbol);
}

/// Gives each GPU runtime function `module` declares a body that calls
/// the table's slot. Hidden and link-once: every object may define them.
Status defineRuntimeThunks(llvm::Module &module) {
  for (llvm::Function &function : module.functions()) {
    if (!function.isDeclaration())
      continue;
    llvm::StringRef name = function.getName();
    const char *const *slot = std::find(std::begin(runtime::kGpuFunctionNames),
                                        std::end(runtime::kGpuFunctionNames), name);
    if (slot == std::end(runtime::kGpuFunctionNames)) {
      if (name.starts_with("mgpu") || name.starts_with("_mlir_memref_to_llvm"))
        return unimplemented("generated CUDA code calls the GPU runtime function '" +
                             name.str() + "', which flowc's runtime does not provide");
      continue;
    }
    llvm::GlobalVariable *table = gpuTable(module);
    function.setLinkage(llvm::GlobalValue::LinkOnceODRLinkage);
    function.setVisibility(llvm::GlobalValue::HiddenVisibility);
    llvm::IRBuilder<> builder(
        llvm::BasicBlock::Create(module.getContext(), "entry", &function));
    llvm::Value *entry = builder.CreateConstInBoundsGEP2_64(
        gpuTableType(module.getContext()), table, 0,
        static_cast<uint64_t>(slot - std::begin(runtime::kGpuFunctionNames)));
    llvm::Value *callee =
        builder.CreateLoad(llvm::PointerType::getUnqual(module.getContext()), entry);
    llvm::SmallVector<llvm::Value *> arguments;
    for (llvm::Argument &argument : function.args())
      arguments.push_back(&argument);
    llvm::CallInst *call =
        builder.CreateCall(function.getFunctionType(), callee, arguments);
    if (function.getReturnType()->isVoidTy())
      builder.CreateRetVoid();
    else
      builder.CreateRet(call);
  }
  return Status::ok();
}

void defineInt64(llvm::Module &module, const char *name, int64_t value) {
  auto *i64 = llvm::Type::getInt64Ty(module.getContext());
  new llvm::GlobalVariable(module, i64, true, llvm::GlobalValue::ExternalLinkage,
                           llvm::ConstantInt::get(i64, value), name);
}

} // namespace

Expected<std::string> cudaToolkitPath() {
#ifdef FLOWC_CUDA_TOOLKIT_DIR
  std::string root = FLOWC_CUDA_TOOLKIT_DIR;
  std::error_code error;
  if (!std::filesystem::exists(root + "/bin/ptxas", error))
    return unimplemented("the cuda targets need the CUDA toolkit this flowc was built "
                         "with, and " +
                         root + "/bin/ptxas is gone");
  return root;
#else
  return unimplemented("this flowc was built without the CUDA toolkit (CMake found no "
                       "ptxas and libdevice; see docs/cuda.md): the cuda targets are "
                       "left out");
#endif
}

std::string cudaToolkitVersion() {
#ifdef FLOWC_CUDA_VERSION
  return "CUDA " FLOWC_CUDA_VERSION;
#else
  return "no CUDA";
#endif
}

Status bindGpuKernel(llvm::Module &module, const std::string &symbol) {
  std::vector<llvm::Function *> loads = takeStructors(module, "llvm.global_ctors");
  std::vector<llvm::Function *> unloads = takeStructors(module, "llvm.global_dtors");
  defineSequence(module, loadFunctionName(symbol), loads);
  defineSequence(module, unloadFunctionName(symbol), unloads);
  return defineRuntimeThunks(module);
}

Status bindGpuGraph(llvm::Module &module, const std::vector<std::string> &kernelSymbols,
                    Target target) {
  llvm::ArrayType *type = gpuTableType(module.getContext());
  new llvm::GlobalVariable(module, type, false, llvm::GlobalValue::ExternalLinkage,
                           llvm::Constant::getNullValue(type), runtime::kGpuTableSymbol);
  defineInt64(module, runtime::kGpuCapabilitySymbol, cudaComputeCapability(target));
  defineInt64(module, runtime::kGpuAbiSymbol, runtime::kGpuAbiVersion);
  std::vector<llvm::Function *> loads;
  std::vector<llvm::Function *> unloads;
  for (const std::string &symbol : kernelSymbols) {
    loads.push_back(declareVoidFunction(module, loadFunctionName(symbol)));
    unloads.insert(unloads.begin(),
                   declareVoidFunction(module, unloadFunctionName(symbol)));
  }
  for (llvm::Function *function : loads)
    function->setVisibility(llvm::GlobalValue::HiddenVisibility);
  for (llvm::Function *function : unloads)
    function->setVisibility(llvm::GlobalValue::HiddenVisibility);
  defineSequence(module, runtime::kGpuLoadSymbol, loads);
  defineSequence(module, runtime::kGpuUnloadSymbol, unloads);
  // The session calls these two by name.
  module.getFunction(runtime::kGpuLoadSymbol)
      ->setVisibility(llvm::GlobalValue::DefaultVisibility);
  module.getFunction(runtime::kGpuUnloadSymbol)
      ->setVisibility(llvm::GlobalValue::DefaultVisibility);
  return defineRuntimeThunks(module);
}

} // namespace flowc::compiler
