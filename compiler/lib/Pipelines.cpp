// Every lowering pipeline flowc runs, built from CompileOptions. The graph
// goes TOSA -> linalg on tensors -> buffers (stage 1), is cut into loop
// kernels (stage 2), and each module is lowered to the LLVM dialect
// (stage 3); Codegen runs the stages and compiles the result. Each stage
// below says why it runs where it does.
#include "Pipelines.h"

#include "LibraryKernels.h"
#include "transforms/Passes.h"

#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/TosaToLinalg/TosaToLinalg.h"
#include "mlir/Dialect/Bufferization/Pipelines/Passes.h"
#include "mlir/Dialect/Bufferization/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/Linalg/Passes.h"
#include "mlir/Dialect/MemRef/Transforms/Passes.h"
#include "mlir/Dialect/Tosa/Transforms/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <algorithm>
#include <iterator>

namespace flowc::compiler {

namespace {

/// The passes -O1..-O3 add and `--disable-pass` can leave out.
enum class OptionalPass {
  DeriveWeights,
  SinkTransposes,
  ReduceTransposes,
  FoldInputScales,
  OutlineLibraryKernels,
  DistributeOverConcat,
  FuseElementwiseOps,
  EliminateEmptyTensors,
  WriteOutputsInPlace,
  PlanActivationMemory,
  ApproximateMath,
  PartitionKernels,
  ParallelizeLoops,
};

/// One create function per OptionalPass, in its order: the only list of
/// optional passes. Their names are the passes' own arguments.
using CreatePass = std::unique_ptr<mlir::Pass> (*)();
constexpr CreatePass kOptionalPasses[] = {
    createDeriveWeightsPass,
    createSinkTransposesPass,
    mlir::tosa::createTosaReduceTransposes,
    createFoldInputScalesPass,
    [] { return createOutlineLibraryKernelsPass(); },
    createDistributeOverConcatPass,
    createFuseElementwiseOpsPass,
    mlir::bufferization::createEmptyTensorEliminationPass,
    createWriteOutputsInPlacePass,
    createPlanActivationMemoryPass,
    createApproximateMathPass,
    createPartitionKernelsPass,
    createParallelizeLoopsPass,
};
static_assert(std::size(kOptionalPasses) ==
                  static_cast<size_t>(OptionalPass::ParallelizeLoops) + 1,
              "one create function per OptionalPass");

/// Whether `pass` is for the CPU only: the weight rewrite that pays only
/// for oneDNN's kernels, and OpenMP loops. Library kernels are outlined
/// for both: on a CUDA target they run in cuDNN, cuBLASLt and the
/// runtime's own GPU kernels.
bool cpuOnly(OptionalPass pass) {
  return pass == OptionalPass::FoldInputScales || pass == OptionalPass::ParallelizeLoops;
}

/// Whether an optional pass runs: -O1 and up, unless disabled or not for
/// the target. On a CUDA target every loop nest is a kernel of its own
/// (each a GPU launch), whatever the level.
bool enabled(const CompileOptions &options, OptionalPass pass) {
  bool cuda = isCudaTarget(options.target);
  if (cuda && cpuOnly(pass))
    return false;
  if (cuda && pass == OptionalPass::PartitionKernels)
    return true;
  const std::string &name = optionalPassNames()[static_cast<size_t>(pass)];
  return options.optLevel >= 1 &&
         std::find(options.disabledPasses.begin(), options.disabledPasses.end(), name) ==
             options.disabledPasses.end();
}

/// Buffers -> the LLVM dialect, for host code: @main's, and a kernel's
/// after its loops have gone to the GPU. `deviceAllocations`: the graph's
/// temporaries are device memory, allocated through the GPU runtime table
/// (GpuAbi.h) under the names MLIR's generic allocation functions have.
void addHostLowering(mlir::OpPassManager &pm, bool deviceAllocations) {
  pm.addPass(mlir::createLowerAffinePass());
  pm.addPass(mlir::createSCFToControlFlowPass());
  pm.addPass(mlir::memref::createExpandStridedMetadataPass());
  mlir::FinalizeMemRefToLLVMConversionPassOptions memrefToLlvm;
  memrefToLlvm.useGenericFunctions = deviceAllocations;
  pm.addPass(mlir::createFinalizeMemRefToLLVMConversionPass(memrefToLlvm));
  pm.addPass(mlir::createConvertMathToLLVMPass());
  // What LLVM has no intrinsic for (erf, ...) becomes a libm call.
  pm.addPass(mlir::createConvertMathToLibmPass());
  pm.addPass(mlir::createArithToLLVMConversionPass());
  pm.addPass(mlir::createConvertControlFlowToLLVMPass());
  // Bare pointers: the ABI is one dense buffer per argument.
  mlir::ConvertFuncToLLVMPassOptions funcToLlvm;
  funcToLlvm.useBarePtrCallConv = true;
  pm.addPass(mlir::createConvertFuncToLLVMPass(funcToLlvm));
}

} // namespace

const std::vector<std::string> &optionalPassNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> argumentNames;
    for (CreatePass create : kOptionalPasses)
      argumentNames.push_back(create()->getArgument().str());
    return argumentNames;
  }();
  return names;
}

bool usesOpenMp(const CompileOptions &options) {
  return enabled(options, OptionalPass::ParallelizeLoops);
}

void buildBufferizePipeline(mlir::OpPassManager &pm, const CompileOptions &options) {
  // Graph-level cleanups first, while ops still carry graph semantics:
  // folding cancels the NCHW<->NHWC transposes between neighbouring layers.
  pm.addPass(mlir::createCanonicalizerPass());
  pm.addPass(mlir::createCSEPass());
  // -O0 keeps every op in generated code: the reference the library
  // kernels are checked against.
  if (enabled(options, OptionalPass::DeriveWeights)) {
    // BatchNorm into convolutions; arithmetic on weights alone leaves the
    // code, computed once by whoever binds the weights.
    pm.addPass(createDeriveWeightsPass());
    pm.addPass(mlir::createCanonicalizerPass());
  }
  if (enabled(options, OptionalPass::SinkTransposes)) {
    // Layout: the NCHW views of convolution and pooling results move down
    // through concatenations and per-channel arithmetic (BatchNorm ahead
    // of a convolution) to the next convolution's NHWC view, and cancel.
    pm.addPass(createSinkTransposesPass());
    pm.addPass(mlir::createCanonicalizerPass());
  }
  if (enabled(options, OptionalPass::ReduceTransposes)) {
    // Layout: transposes move through elementwise ops and cancel, so
    // activations stay NHWC between convolutions.
    pm.addNestedPass<mlir::func::FuncOp>(mlir::tosa::createTosaReduceTransposes());
    pm.addPass(mlir::createCanonicalizerPass());
  }
  // Once the layout is NHWC: a squeeze-and-excitation gate scales the next
  // convolution's weights instead of its input.
  if (enabled(options, OptionalPass::FoldInputScales))
    pm.addPass(createFoldInputScalesPass());
  // On TOSA, after the layout is settled: a kernel absorbs the transposes
  // and the epilogue around it, which linalg would have split into loops.
  // cuda's runtime has no integer matrix product: its body runs there.
  if (isCudaTarget(options.target))
    pm.addPass(createInlineLibraryCallsPass(InlineLibraryCallsPassOptions{
        runtime::kernelKindName(runtime::KernelKind::IntegerMatMul)}));
  if (enabled(options, OptionalPass::OutlineLibraryKernels))
    pm.addPass(createOutlineLibraryKernelsPass(options.precision));
  else
    pm.addPass(createInlineLibraryCallsPass());
  // Nor an integer convolution: its quantized TOSA convolution runs as loops.
  if (isCudaTarget(options.target))
    pm.addPass(createInlineLibraryCallsPass(InlineLibraryCallsPassOptions{
        runtime::kernelKindName(runtime::KernelKind::IntegerConv2d)}));
  // After outlining, so that no kernel's epilogue is split: per-channel
  // arithmetic after a concatenation runs on each input where it lies.
  if (enabled(options, OptionalPass::DistributeOverConcat))
    pm.addPass(createDistributeOverConcatPass());
  // Bufferizing a concatenation in place costs the cube of its inputs.
  pm.addPass(createCopyWideConcatsPass());
  // Named linalg ops (conv, matmul, pooling) before the elementwise
  // conversion, which would otherwise claim their operands.
  pm.addNestedPass<mlir::func::FuncOp>(mlir::tosa::createTosaToLinalgNamed());
  pm.addNestedPass<mlir::func::FuncOp>(mlir::tosa::createTosaToLinalg());
  pm.addNestedPass<mlir::func::FuncOp>(mlir::createTosaToArithPass());
  pm.addNestedPass<mlir::func::FuncOp>(mlir::createTosaToTensorPass());
  pm.addPass(mlir::createCanonicalizerPass());
  // Chains of elementwise ops become one loop nest: one pass over memory.
  if (enabled(options, OptionalPass::FuseElementwiseOps))
    pm.addPass(createFuseElementwiseOpsPass());
  // Last on tensors: one buffer per result from here on.
  pm.addPass(createDistinctResultsPass());
  // AMP on cuda: what only convolutions write and read stays in 16 bits.
  if (isCudaTarget(options.target) && options.precision != Precision::Fp32)
    pm.addPass(createMarkSixteenBitBuffersPass());
  // One-Shot Bufferize models func.call, not flowc.library_call.
  pm.addPass(createLowerLibraryCallsPass());
  // A loop nest whose result is inserted into a concatenation writes into
  // its slice of the concatenated buffer, instead of a buffer copied there.
  bool inPlaceConcat = enabled(options, OptionalPass::EliminateEmptyTensors);
  if (inPlaceConcat)
    pm.addPass(mlir::bufferization::createEmptyTensorEliminationPass());
  // Identity layouts at the boundary: the runtime passes dense row-major
  // buffers as bare pointers.
  mlir::bufferization::OneShotBufferizePassOptions bufferize;
  bufferize.bufferizeFunctionBoundaries = true;
  bufferize.functionBoundaryTypeConversion =
      mlir::bufferization::LayoutMapOption::IdentityLayoutMap;
  pm.addPass(mlir::bufferization::createOneShotBufferizePass(bufferize));
  // Results become caller-provided output buffers. Since MLIR 22 public
  // functions are left alone unless asked, which would silently shift the ABI.
  mlir::bufferization::BufferResultsToOutParamsPassOptions outParams;
  outParams.modifyPublicFunctions = true;
  outParams.hoistStaticAllocs = true;
  pm.addPass(mlir::bufferization::createBufferResultsToOutParamsPass(outParams));
  // It hoists only a result that is the allocation itself; one returned
  // through reshapes (a kernel's [rows, n] result) would be copied at the end.
  if (enabled(options, OptionalPass::WriteOutputsInPlace))
    pm.addPass(createWriteOutputsInPlacePass());
  // Each slice written in place is then copied onto itself: equal subviews
  // merge and the copies fold away. Not before the out-params: CSE would
  // merge the copies that give a value returned twice a buffer per result.
  if (inPlaceConcat) {
    pm.addPass(mlir::createCSEPass());
    pm.addPass(mlir::createCanonicalizerPass());
  }
  // Constants a library kernel reads must be device memory: their copies
  // are activations like any other, which the arena then holds (code that
  // allocates while it runs is never captured in a CUDA graph).
  if (isCudaTarget(options.target))
    pm.addNestedPass<mlir::func::FuncOp>(createCopyConstantsToDevicePass());
  // Once every buffer is an allocation or an argument, and before stage 2's
  // deallocation: the allocations it plans are views then, never freed.
  if (enabled(options, OptionalPass::PlanActivationMemory))
    pm.addPass(createPlanActivationMemoryPass());
}

void buildPrepareLoopsPipeline(mlir::OpPassManager &pm, const CompileOptions &options) {
  // Before anything lowers copies: memref.copy would need MLIR's runner
  // library at run time.
  pm.addPass(createCopiesToLinalgPass());
  // On linalg bodies, before partitioning: each kernel's IR, which is its
  // cache key, holds the polynomials.
  if (enabled(options, OptionalPass::ApproximateMath))
    pm.addPass(createApproximateMathPass());
  // Frees every temporary the graph allocates, on every path.
  mlir::bufferization::BufferDeallocationPipelineOptions dealloc;
  mlir::bufferization::buildBufferDeallocationPipeline(pm, dealloc);
  // Each loop nest becomes a kernel of its own, lowered and cached on its
  // own (the kernel cache); identical nests share one.
  if (enabled(options, OptionalPass::PartitionKernels))
    pm.addPass(createPartitionKernelsPass());
}

void buildLowerToLlvmPipeline(mlir::OpPassManager &pm, const CompileOptions &options,
                              const LoopCandidate &candidate) {
  bool parallel = usesOpenMp(options);
  if (parallel) {
    // Large loop nests run on the runtime's threads, as OpenMP worksharing
    // loops (the same OpenMP runtime as the library kernels).
    pm.addNestedPass<mlir::func::FuncOp>(mlir::createConvertLinalgToParallelLoopsPass());
    ParallelizeLoopsPassOptions parallelize;
    if (candidate.parallelDims)
      parallelize.parallelDims = static_cast<int>(*candidate.parallelDims);
    pm.addPass(createParallelizeLoopsPass(parallelize));
    pm.addPass(mlir::createConvertSCFToOpenMPPass());
    // Drops the alloca scopes the conversion wraps loop bodies in (they hold
    // no allocas here), which must not span the blocks scf-to-cf makes.
    pm.addPass(mlir::createCanonicalizerPass());
  } else {
    pm.addNestedPass<mlir::func::FuncOp>(mlir::createConvertLinalgToLoopsPass());
  }
  // @main of a CUDA compile holds no loops (every nest is a kernel), only
  // views of device buffers and calls.
  addHostLowering(pm, isCudaTarget(options.target));
  // After func-to-llvm: this pass converts functions too, without bare
  // pointers.
  if (parallel)
    pm.addPass(mlir::createConvertOpenMPToLLVMPass());
  pm.addPass(mlir::createConvertIndexToLLVMPass());
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
}

void buildLowerKernelToCudaPipeline(mlir::OpPassManager &pm,
                                    const CompileOptions &options,
                                    const std::string &toolkitPath) {
  // One thread per output element (reductions run inside each thread),
  // mapped onto blocks and threads and outlined into a GPU module.
  pm.addNestedPass<mlir::func::FuncOp>(mlir::createConvertLinalgToParallelLoopsPass());
  pm.addNestedPass<mlir::func::FuncOp>(createMapLoopsToGpuPass());
  pm.addNestedPass<mlir::func::FuncOp>(mlir::createGpuMapParallelLoopsPass());
  pm.addNestedPass<mlir::func::FuncOp>(mlir::createConvertParallelLoopToGpuPass());
  pm.addPass(mlir::createGpuKernelOutliningPass());
  pm.addPass(mlir::createLowerAffinePass());
  pm.addPass(mlir::createCanonicalizerPass());
  // The device side: NVVM, then PTX through LLVM's NVPTX backend and a
  // cubin through the toolkit's ptxas (which checks the PTX), embedded.
  mlir::GpuNVVMAttachTargetOptions attach;
  attach.chip = cudaChip(options.target);
  attach.optLevel = 3;
  pm.addPass(mlir::createGpuNVVMAttachTarget(attach));
  mlir::OpPassManager &device = pm.nest<mlir::gpu::GPUModuleOp>();
  device.addPass(mlir::createSCFToControlFlowPass());
  device.addPass(mlir::memref::createExpandStridedMetadataPass());
  // Memrefs cross the launch as bare pointers on both sides: the host
  // passes one pointer per buffer (its shapes are static), and a kernel
  // expecting descriptors would read past the launch's parameters.
  mlir::ConvertGpuOpsToNVVMOpsOptions toNvvm;
  toNvvm.indexBitwidth = 64;
  toNvvm.useBarePtrCallConv = true;
  device.addPass(mlir::createConvertGpuOpsToNVVMOps(toNvvm));
  device.addPass(mlir::createReconcileUnrealizedCastsPass());
  mlir::GpuModuleToBinaryPassOptions toBinary;
  toBinary.toolkitPath = toolkitPath;
  toBinary.compilationTarget = "bin";
  pm.addPass(mlir::createGpuModuleToBinaryPass(toBinary));
  // The host side: the kernel's function keeps the bare-pointer ABI and
  // launches through the GPU runtime functions (GpuAbi.h).
  addHostLowering(pm, /*deviceAllocations=*/true);
  mlir::GpuToLLVMConversionPassOptions toLlvm;
  toLlvm.hostBarePtrCallConv = true;
  toLlvm.kernelBarePtrCallConv = true;
  pm.addPass(mlir::createGpuToLLVMConversionPass(toLlvm));
  pm.addPass(mlir::createConvertIndexToLLVMPass());
  pm.addPass(mlir::createReconcileUnrealizedCastsPass());
}

} // namespace flowc::compiler
