// The LLVM side of library kernels: each kernel function's body becomes a
// thunk into the runtime's kernel table, and the code object defines the
// symbols KernelAbi.h names.
#include "LibraryKernels.h"

#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Module.h"

namespace flowc::compiler {

namespace {

/// Where the runtime's kernel table and context live in the code object.
struct KernelSymbols {
  llvm::GlobalVariable *table;
  llvm::GlobalVariable *context;
};

KernelSymbols defineKernelSymbols(llvm::Module &module,
                                  const std::vector<LibraryKernel> &kernels) {
  llvm::LLVMContext &ctx = module.getContext();
  auto *ptrType = llvm::PointerType::getUnqual(ctx);
  auto *i64 = llvm::Type::getInt64Ty(ctx);
  auto *tableType = llvm::ArrayType::get(ptrType, runtime::kKernelKindCount);
  auto *table = new llvm::GlobalVariable(
      module, tableType, false, llvm::GlobalValue::ExternalLinkage,
      llvm::Constant::getNullValue(tableType), runtime::kKernelTableSymbol);
  auto *context = new llvm::GlobalVariable(
      module, ptrType, false, llvm::GlobalValue::ExternalLinkage,
      llvm::Constant::getNullValue(ptrType), runtime::kKernelContextSymbol);
  int64_t kinds = 0;
  for (const LibraryKernel &kernel : kernels)
    kinds |= int64_t{1} << static_cast<int64_t>(kernel.kind);
  new llvm::GlobalVariable(module, i64, true, llvm::GlobalValue::ExternalLinkage,
                           llvm::ConstantInt::get(i64, kinds),
                           runtime::kKernelKindsSymbol);
  new llvm::GlobalVariable(module, i64, true, llvm::GlobalValue::ExternalLinkage,
                           llvm::ConstantInt::get(i64, kernels.size()),
                           runtime::kKernelSitesSymbol);
  new llvm::GlobalVariable(module, i64, true, llvm::GlobalValue::ExternalLinkage,
                           llvm::ConstantInt::get(i64, runtime::kKernelAbiVersion),
                           runtime::kKernelAbiSymbol);
  return {table, context};
}

/// `function(buffers...)` becomes
/// `table[kind](context, site, params, {buffers...})`.
void emitThunk(llvm::Function &function, const LibraryKernel &kernel, int64_t site,
               const KernelSymbols &symbols) {
  llvm::Module &module = *function.getParent();
  llvm::LLVMContext &ctx = module.getContext();
  auto *ptrType = llvm::PointerType::getUnqual(ctx);
  auto *i64 = llvm::Type::getInt64Ty(ctx);
  auto *paramsType = llvm::ArrayType::get(i64, kernel.params.size());
  llvm::SmallVector<llvm::Constant *> values;
  for (int64_t value : kernel.params)
    values.push_back(llvm::ConstantInt::get(i64, value));
  auto *params = new llvm::GlobalVariable(
      module, paramsType, true, llvm::GlobalValue::PrivateLinkage,
      llvm::ConstantArray::get(paramsType, values), kernel.function + ".params");

  function.deleteBody();
  function.setLinkage(llvm::GlobalValue::InternalLinkage);
  llvm::IRBuilder<> builder(llvm::BasicBlock::Create(ctx, "entry", &function));
  auto *buffersType = llvm::ArrayType::get(ptrType, function.arg_size());
  llvm::Value *buffers = builder.CreateAlloca(buffersType);
  for (unsigned i = 0; i < function.arg_size(); ++i)
    builder.CreateStore(function.getArg(i),
                        builder.CreateConstInBoundsGEP2_64(buffersType, buffers, 0, i));
  llvm::Value *slot = builder.CreateConstInBoundsGEP2_64(
      symbols.table->getValueType(), symbols.table, 0, static_cast<int64_t>(kernel.kind));
  llvm::Value *callee = builder.CreateLoad(ptrType, slot);
  llvm::Value *context = builder.CreateLoad(ptrType, symbols.context);
  auto *calleeType = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx),
                                             {ptrType, i64, ptrType, ptrType}, false);
  builder.CreateCall(calleeType, callee,
                     {context, llvm::ConstantInt::get(i64, site), params, buffers});
  builder.CreateRetVoid();
}

} // namespace

Status bindLibraryKernels(llvm::Module &module,
                          const std::vector<LibraryKernel> &kernels) {
  if (kernels.empty())
    return Status::ok();
  KernelSymbols symbols = defineKernelSymbols(module, kernels);
  for (size_t site = 0; site < kernels.size(); ++site) {
    const LibraryKernel &kernel = kernels[site];
    llvm::Function *function = module.getFunction(kernel.function);
    if (!function)
      return internalError("lowered module lost kernel function @" + kernel.function);
    if (function->arg_size() != kernel.bufferCount ||
        !function->getReturnType()->isVoidTy())
      return internalError("kernel @" + kernel.function + " lowered to " +
                           std::to_string(function->arg_size()) +
                           " arguments, expected " + std::to_string(kernel.bufferCount) +
                           " buffers");
    emitThunk(*function, kernel, static_cast<int64_t>(site), symbols);
  }
  return Status::ok();
}

} // namespace flowc::compiler
