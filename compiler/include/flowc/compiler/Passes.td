// flowc's own passes, in the order the pipelines run them (see
// compiler/lib/Pipelines.cpp). mlir-tblgen -gen-pass-decls turns each entry
// into an options struct, a `impl::<Name>Base` class and a create function;
// each pass is implemented in one file that exports only that function.
// The argument is the pass's public name: `--disable-pass`, `--print-ir-after`,
// progress events and `flowc-opt` all use it.
#ifndef FLOWC_COMPILER_PASSES
#define FLOWC_COMPILER_PASSES

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Stage 1: TOSA graph -> buffers
//===----------------------------------------------------------------------===//

def DeriveWeightsPass : Pass<"flowc-derive-weights", "::mlir::ModuleOp"> {
  let summary = "Fold per-channel affines into convolutions; bind values "
                "computed from weights only as derived weights";
  let description = [{
    Runs on the TOSA graph. A per-channel affine `y * s + t` after a
    convolution (the importer's BatchNormalization), with `s` and `t`
    computed from weights, folds into the convolution: weights `w * s`, bias
    `b * s + t`. Then every value computed from weights only that the rest of
    the graph reads becomes a new `@main` argument tagged `flowc.weight`
    (`flowc.derived/N`), with `flowc.recipe` (the MLIR text of a module whose
    `@derive` computes it) and `flowc.recipe_inputs` (the source weights).
    Weight arguments nothing reads any more are dropped. The code therefore
    still holds no weight values; whoever binds the weights evaluates the
    recipes.
  }];
  let dependentDialects = ["::mlir::tosa::TosaDialect"];
  let statistics = [
    Statistic<"affinesFolded", "affines-folded",
              "Per-channel affines folded into a convolution">,
    Statistic<"weightsDerived", "weights-derived",
              "Values computed from weights bound as derived weights">,
    Statistic<"weightsDropped", "weights-dropped",
              "Weight arguments dropped because nothing reads them">
  ];
}

def SinkTransposesPass : Pass<"flowc-sink-transposes", "::mlir::ModuleOp"> {
  let summary = "Move NHWC -> NCHW transposes below concatenations, "
                "elementwise ops and reductions, where they cancel";
  let description = [{
    Runs on the TOSA graph, before `tosa-reduce-transposes`. The importer
    turns every convolution's and pooling's NHWC result back into ONNX's
    NCHW. A transpose by [0, 3, 1, 2] feeding a concatenation (every input
    transposed alike: the axis is permuted), an elementwise op (its other
    operands transposed alike, or tensors whose NHWC form holds the same
    bytes, read through a reshape: splats, per-channel vectors, per-example
    gates [N, C, 1, 1]) or a reduction moves below it, so the op
    computes in NHWC and the transpose meets the next convolution's NCHW ->
    NHWC transpose, with which it cancels. Upstream's pass stops at
    concatenations and at operands that are graph weights (BatchNorm ahead
    of a convolution, as DenseNet has it), which left those convolutions,
    pools and concatenations in NCHW with a layout change on each side.
  }];
  let dependentDialects = ["::mlir::tosa::TosaDialect"];
  let statistics = [
    Statistic<"transposesSunk", "transposes-sunk",
              "Ops a transpose moved below">
  ];
}

def FoldInputScalesPass : Pass<"flowc-fold-input-scales", "::mlir::ModuleOp"> {
  let summary = "Scale a convolution's weights, not its input, by a "
                "per-channel factor computed at run time";
  let description = [{
    Runs on the TOSA graph, after the layout passes. A convolution whose
    NHWC input is `x * g`, with `g` one factor per input channel shared by
    the batch ([1, 1, 1, C]: a squeeze-and-excitation gate) and the product
    read by nothing else, convolves `x` with its weights times `g` instead.
    Zero padding stays zero either way, so the result is the same up to
    rounding; the product then touches the weights (O x KH x KW x C values)
    instead of the activation (N x H x W x C), and the convolution's weights
    are repacked on each run, which at these sizes costs microseconds. Only
    where the weights have no more values per channel than the input
    (O x KH x KW <= N x H x W); elsewhere scaling the input is cheaper.
  }];
  let dependentDialects = ["::mlir::tosa::TosaDialect"];
  let statistics = [
    Statistic<"scalesFolded", "scales-folded",
              "Input scales moved onto a convolution's weights">
  ];
}

def OutlineLibraryKernelsPass
    : Pass<"flowc-outline-library-kernels", "::mlir::ModuleOp"> {
  let summary = "Outline convolutions, products, pooling and normalizations "
                "into library-kernel calls";
  let description = [{
    Runs on the TOSA graph. Each convolution or matrix product, with the
    layout changes it can absorb (NCHW<->NHWC transposes, transposed
    weights) and its epilogue (bias, residual add, activation), each max or
    average pooling, softmax over the last axis and layer normalization
    becomes a private function, called from `@main` through a
    `flowc.library_call` with the kernel's kind and its ABI params struct.
    The body keeps the exact TOSA semantics, so it bufferizes like any
    other function and fixes the kernel's buffer ABI; before the lowering
    to LLVM the body is replaced by a call into the runtime's kernel table.
    The importer's integer products learn whether their B is a weight.
  }];
  // library/Outline.cpp owns the pass; its create function takes the
  // precision the pipeline compiles for.
  let constructor = "::flowc::compiler::createOutlineLibraryKernelsPass()";
  let dependentDialects = [
    "::mlir::bufferization::BufferizationDialect",
    "::flowc::compiler::FlowcDialect"
  ];
  let options = [
    Option<"precision", "precision", "::flowc::Precision",
           /*default=*/"::flowc::Precision::Fp32",
           "Arithmetic of the library kernels",
           [{::llvm::cl::values(
             clEnumValN(::flowc::Precision::Fp32, "fp32",
                        "fp32 inputs, weights and accumulation"),
             clEnumValN(::flowc::Precision::Bf16, "bf16",
                        "inputs and weights rounded to bfloat16, fp32 accumulation")
           )}]>
  ];
  let statistics = [
    Statistic<"kernelsOutlined", "kernels-outlined",
              "Library kernels outlined">,
    Statistic<"epilogueOpsFused", "epilogue-ops-fused",
              "Ops absorbed into a kernel besides its root (layout changes, "
              "bias, residual, activation)">
  ];
}

def DistributeOverConcatPass
    : Pass<"flowc-distribute-over-concat", "::mlir::ModuleOp"> {
  let summary = "Apply elementwise ops to each input of a concatenation "
                "they alone read";
  let description = [{
    Runs on the TOSA graph, after library kernels are outlined. An
    elementwise op whose operand is a concatenation that nothing else reads
    becomes one op per input of the concatenation (other operands sliced
    along the axis, or read whole where they broadcast along it), and the
    concatenation moves below them. DenseNet's BatchNorm + ReLU after each
    concatenation of all earlier features then reads each feature map where
    its convolution wrote it, and with `eliminate-empty-tensors` each piece
    writes straight into its slice of the concatenated buffer: the copy
    into the concatenation goes.
  }];
  let dependentDialects = ["::mlir::tosa::TosaDialect"];
  let statistics = [
    Statistic<"opsDistributed", "ops-distributed",
              "Elementwise ops applied per concatenated input">
  ];
}

def LowerLibraryCallsPass
    : Pass<"flowc-lower-library-calls", "::mlir::ModuleOp"> {
  let summary = "Turn flowc.library_call ops into func.call, the kernel's kind "
                "and params onto the callee";
  let description = [{
    Runs last on tensors, right before One-Shot Bufferize, which models
    `func.call` and not `flowc.library_call`. Each call's kind and params
    move onto its callee as `flowc.kernel` and `flowc.kernel_params`, where
    the steps after bufferization (the memory plan, the kernel weights, the
    LLVM thunks) read them. Not optional: the code needs it whenever the
    outline pass ran.
  }];
  let statistics = [
    Statistic<"callsLowered", "calls-lowered", "Library calls lowered">
  ];
}

def InlineLibraryCallsPass
    : Pass<"flowc-inline-library-calls", "::mlir::ModuleOp"> {
  let summary = "Put each flowc.library_call's TOSA body back in its place";
  let description = [{
    The importer calls some kernels itself (TopK's selection) instead of
    leaving a pattern for the outline pass. Where the outline pass does not
    run (-O0, or `--disable-pass flowc-outline-library-kernels`), this
    pass replaces each such call with its callee's body, so that the code
    is generated loops throughout, the reference the kernels are checked
    against. With `kind`, only calls of that kind: a target whose runtime
    lacks the kernel (cuda's, the integer matrix product) runs the body.
  }];
  let options = [
    Option<"kind", "kind", "std::string", /*default=*/"\"\"",
           "Inline only the calls of this kind (e.g. integer_matmul); "
           "empty: every call">
  ];
  let statistics = [
    Statistic<"callsInlined", "calls-inlined", "Library calls inlined">
  ];
}

def MarkSixteenBitBuffersPass
    : Pass<"flowc-mark-16-bit-buffers", "::mlir::ModuleOp"> {
  let summary = "AMP on cuda: convolution results that only convolutions "
                "read stay in 16 bits";
  let description = [{
    Runs on the library calls of an AMP (`fp16`, `bf16`) compile for a cuda
    target, last on tensors, right before flowc-lower-library-calls. A
    convolution whose result only convolutions of its precision read (as
    their source or their residual) writes that result in the 16-bit type
    (`sixteenBitDestination`), and its readers read it so
    (`sixteenBitSource`, `sixteenBitResidual`): the buffer between them
    holds half the bytes, and the next convolution reads it as cuDNN
    wants it instead of rounding an fp32 copy first. The epilogue (bias,
    residual, ReLU) still computes in fp32; a result that anything else
    reads (pooling, a generated kernel, the graph's output) stays fp32.
  }];
  let statistics = [
    Statistic<"buffersNarrowed", "buffers-narrowed",
              "Convolution results kept in 16 bits">
  ];
}

def FuseElementwiseOpsPass
    : Pass<"linalg-fuse-elementwise-ops", "::mlir::ModuleOp"> {
  let summary = "Fuse chains of elementwise linalg ops into loop nests of "
                "bounded size";
  let description = [{
    Upstream's elementwise fusion and its companion foldings (reshape
    propagation by expansion, constant folding, canonicalization), with
    fusion bounded: a single-use producer fuses into its consumer only while
    the fused nest holds at most 64 payload ops. Fusing a chain of N ops into
    one nest costs N^2, so upstream's unbounded pass takes minutes on a
    10,000-op chain; a nest this long already does far more arithmetic per
    element than the pass over memory it saves. Replaces upstream's pass of
    the same name, which is the public `--disable-pass` name.
  }];
  let dependentDialects = [
    "::mlir::affine::AffineDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

def DistinctResultsPass : Pass<"flowc-distinct-results", "::mlir::ModuleOp"> {
  let summary = "Copy results that a function returns more than once";
  let description = [{
    A value a function returns more than once (two graph outputs of one
    tensor, or two that CSE merged) gets a `linalg.copy` per extra result:
    each output has a buffer of its own, and
    `buffer-results-to-out-params` (which crashes on a repeated result) sees
    distinct values.
  }];
  let dependentDialects = [
    "::mlir::linalg::LinalgDialect",
    "::mlir::tensor::TensorDialect"
  ];
  let statistics = [
    Statistic<"resultsCopied", "results-copied",
              "Repeated results given a copy of their own">
  ];
}

def CopyWideConcatsPass : Pass<"flowc-copy-wide-concats", "::mlir::ModuleOp"> {
  let summary = "Join a concatenation of many inputs by copies, not in place";
  let description = [{
    `tosa.concat` lowers to a chain of `tensor.insert_slice`s into one
    tensor, which empty-tensor elimination and One-Shot Bufferize's alias
    analysis make one alias set: their cost grows with the cube of the
    inputs (128 computed inputs took 24 s to compile, 2.4 s joined by
    copies). A concatenation of more than `max-in-place` inputs becomes
    one `tensor.concat`, which bufferizes to a buffer and a copy per input
    at linear cost. Narrower ones (every torchvision DenseNet's, up to 49
    inputs; attention heads') keep their inputs written in place.
  }];
  let options = [
    Option<"maxInPlace", "max-in-place", "unsigned", /*default=*/"64",
           "The most inputs a concatenation may have and be joined in place">
  ];
  let dependentDialects = ["::mlir::tensor::TensorDialect"];
  let statistics = [
    Statistic<"concatsCopied", "concats-copied", "Concatenations joined by copies">
  ];
}

def WriteOutputsInPlacePass
    : Pass<"flowc-write-outputs-in-place", "::mlir::ModuleOp"> {
  let summary = "A result reaching an output through reshapes is computed "
                "in the output buffer";
  let description = [{
    Runs right after `buffer-results-to-out-params`, which computes a
    result in its caller-provided output buffer only when the returned
    value is the allocation itself. A result returned through reshapes
    (`memref.expand_shape`, `memref.collapse_shape`: a kernel's [rows, n]
    result that is the graph's [1, heads, tokens, dim] output) is
    otherwise computed in a buffer of its own and copied into the output
    at the end: a second pass over the whole tensor (an LLM decode step's
    KV cache, every step). Here the allocation becomes a view of the
    output buffer and the copy goes.

    Only when nothing can tell the difference: the allocation has a static
    shape and an identity layout, lies in the copy's block, and nothing
    uses it or a view of it after the copy; the output argument has no
    other use. Outputs must not overlap inputs (the runtime's contract).
  }];
  let dependentDialects = ["::mlir::memref::MemRefDialect"];
  let statistics = [
    Statistic<"outputsWrittenInPlace", "outputs-written-in-place",
              "Output copies removed">
  ];
}

def PlanActivationMemoryPass
    : Pass<"flowc-plan-activation-memory", "::mlir::ModuleOp"> {
  let summary = "Place @main's temporary buffers in one activation arena";
  let description = [{
    Runs on bufferized IR (results already out-parameters). Every static
    `memref.alloc` of `@main` becomes a `memref.view` into a new last
    argument, `memref<Nxi8>`, at an offset chosen so that buffers whose
    lifetimes overlap never share bytes; N is recorded in
    `flowc.arena_bytes`. An output that a library kernel writes over a
    residual that dies there shares the residual's buffer. Dynamically
    shaped allocations are left alone.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::memref::MemRefDialect"
  ];
  let statistics = [
    Statistic<"buffersPlanned", "buffers-planned",
              "Allocations turned into views of the arena">,
    Statistic<"arenaBytes", "arena-bytes", "Bytes of the planned arena">
  ];
}

//===----------------------------------------------------------------------===//
// Stage 2: loop nests on buffers -> kernels
//===----------------------------------------------------------------------===//

def CopiesToLinalgPass : Pass<"flowc-copies-to-linalg", "::mlir::ModuleOp"> {
  let summary = "Rewrite memref.copy as linalg.copy";
  let description = [{
    Copies into strided views (padding) bufferize to `memref.copy`, whose
    LLVM lowering calls a helper from MLIR's runner library. `linalg.copy`
    lowers to plain loops, so generated code needs only libc and libm.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def ApproximateMathPass : Pass<"flowc-approximate-math", "::mlir::ModuleOp"> {
  let summary = "Replace exp, erf and tanh by vectorizable polynomial "
                "approximations";
  let description = [{
    `math.exp`, `math.erf` and `math.tanh` become polynomials of arithmetic
    ops, which LLVM vectorizes, instead of scalar libm calls (softmax, GELU,
    attention).
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::math::MathDialect"
  ];
}

def PartitionKernelsPass : Pass<"flowc-partition-kernels", "::mlir::ModuleOp"> {
  let summary = "Outline each loop nest of @main into a kernel function "
                "named by a hash of its IR";
  let description = [{
    Each loop nest of `@main` (one linalg op on buffers) becomes a private
    function tagged `flowc.loop_kernel`, named `flowc_loops_<hash>` after a
    hash of its IR alone, and is called from `@main`. Identical nests (the
    repeated layers of a transformer) share one function. Each function is
    later moved into a module of its own, lowered, compiled and cached on
    its own. Ops whose operands the bare-pointer ABI cannot pass (dynamic
    shapes or strides) stay in `@main`.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
  let statistics = [
    Statistic<"nestsOutlined", "nests-outlined",
              "Loop nests replaced by a kernel call">,
    Statistic<"kernelsCreated", "kernels-created",
              "Distinct kernel functions created">
  ];
}

//===----------------------------------------------------------------------===//
// Stage 3: buffers -> LLVM
//===----------------------------------------------------------------------===//

def ParallelizeLoopsPass : Pass<"flowc-parallelize-loops", "::mlir::ModuleOp"> {
  let summary = "Choose the loop nests that run on the runtime's threads";
  let description = [{
    After linalg lowers to `scf.parallel`, each outermost parallel nest of a
    function that does enough work (at least 2^14 iterations, counting
    nested loops) keeps its leading dimensions parallel and runs its
    innermost dimension as a sequential loop, so LLVM still vectorizes it;
    every other `scf.parallel` becomes `scf.for`, as do nests inside
    library-kernel bodies and nests with dynamic bounds. MLIR's
    `convert-scf-to-openmp` then turns the remaining `scf.parallel` ops into
    OpenMP worksharing loops. A search candidate fixes the count of leading
    parallel dimensions for every nest instead (`parallel-dims`).
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::scf::SCFDialect"
  ];
  let options = [
    Option<"parallelDims", "parallel-dims", "int", /*default=*/"-1",
           "Leading dimensions of every outermost nest that run in parallel, "
           "whatever its size (0: all sequential); -1: decided per nest">
  ];
  let statistics = [
    Statistic<"nestsParallel", "nests-parallel",
              "Loop nests left parallel">,
    Statistic<"nestsSequential", "nests-sequential",
              "Parallel loop nests made sequential">
  ];
}

#endif // FLOWC_COMPILER_PASSES

def CopyConstantsToDevicePass : Pass<"flowc-copy-constants-to-device",
                                      "::mlir::func::FuncOp"> {
  let summary = "Give the device a copy of each constant buffer host code "
                "hands to a library kernel";
  let description = [{
    For the cuda targets, on buffers, before the activation arena is planned
    (which then holds the copies) and before deallocation:
    a constant global (`memref.get_global` of a `constant` global: a zero
    bias, a folded scale) is host memory, which a library kernel (cuDNN,
    cuBLASLt, the runtime's) cannot read. Each such read used by anything
    but a loop nest becomes a fresh buffer, filled by a loop nest (a
    `linalg.fill` for a splat, otherwise a copy of the global, which the
    kernel reads from its GPU module's copy), which the other users get
    instead. Loop nests keep reading the global: their kernels get its
    device copy (flowc-partition-kernels, flowc-map-loops-to-gpu).
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::arith::ArithDialect"];
  let statistics = [
    Statistic<"constantsCopied", "constants-copied",
              "Constant buffers given a device copy">
  ];
}

def MapLoopsToGpuPass : Pass<"flowc-map-loops-to-gpu", "::mlir::func::FuncOp"> {
  let summary = "Map each loop nest of a kernel onto GPU blocks and threads";
  let description = [{
    For the cuda targets, after `convert-linalg-to-parallel-loops`: each
    outermost `scf.parallel` of a function is collapsed into one dimension
    and tiled by `block-size`, and the tiles are mapped onto blocks (x) and
    their elements onto threads (x), so that `convert-parallel-loops-to-gpu`
    launches one thread per output element, with neighbouring threads on
    neighbouring elements (coalesced). Reduction dimensions stay sequential
    loops inside each thread. Any other loop or memory access at the top
    of the function (a reduction to one value; a 0-d copy, which is a load
    and a store), with the ops that use what it reads, is wrapped into a
    one-thread launch: host code never touches device memory.
  }];
  let options = [
    Option<"blockSize", "block-size", "int64_t", /*default=*/"256",
           "Threads per block">,
  ];
  let dependentDialects = ["::mlir::scf::SCFDialect", "::mlir::gpu::GPUDialect",
                           "::mlir::arith::ArithDialect"];
}
