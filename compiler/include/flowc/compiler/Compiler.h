// The compiler's public API: ONNX -> weight-free MLIR graph IR (bytecode),
// and graph IR -> a native shared object whose weights are arguments.
#pragma once

#include "flowc/compiler/OnnxModel.h"
#include "flowc/support/Measure.h"
#include "flowc/support/Status.h"
#include "flowc/support/Target.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowc::compiler {

/// What a compile is asked for. Every field is part of the code cache key.
struct CompileOptions {
  Target target = Target::Cpu;
  /// 0: every op in generated loops, the reference. 1..3: library kernels
  /// for convolutions and matrix products, fusion, layout, the activation
  /// arena; LLVM's optimization level of the generated code.
  int optLevel = 2;
  /// Library kernels' arithmetic (bf16 needs -O1 or more); generated code
  /// stays fp32.
  Precision precision = Precision::Fp32;
  /// Optional passes left out, for debugging (names as optionalPassNames()).
  std::vector<std::string> disabledPasses;
  /// Prints the module after each pass of this name ("all": every pass)
  /// into the compile report's `printedIr`. Changes no code, so it is
  /// not part of the canonical options.
  std::string printIrAfter;

  /// InvalidArgument naming the bad field.
  Status validate() const;
  /// Canonical text of the options, hashed into action keys.
  std::string canonical() const;
};

/// A weight the graph refers to by key; the bytes stay in the source file.
struct WeightRef {
  std::string key; ///< Resource key in the IR (the ONNX tensor name).
  TensorInfo info;
  std::string_view bytes;
  /// Owns `bytes` when the importer computed them (folded constants); views
  /// into the model file otherwise.
  std::shared_ptr<const std::string> storage;
};

/// What one ONNX node reads and writes, recorded by the importer for
/// static profiles (`flowc inspect`). Shapes are the inferred static ones.
struct NodeRecord {
  std::string name;
  std::string opType;
  std::vector<TensorInfo> inputs; ///< Empty names for omitted optional inputs.
  std::vector<TensorInfo> outputs;
  /// Elements of initializers this node is the first to read.
  uint64_t parameterCount = 0;
  /// Computed at import time (shape arithmetic, Constant): no kernel runs.
  bool folded = false;
};

/// The weight-free graph IR of a model plus what is needed to bind it.
struct ImportedGraph {
  /// MLIR bytecode of the graph module. Weights are arguments of @main
  /// tagged `flowc.weight = "<key>"`: no weight data and no digest is in
  /// the IR, so identical graphs with new weights share code.
  std::string irBytecode;
  std::vector<TensorInfo> inputs;
  std::vector<TensorInfo> outputs;
  /// In argument order, after the inputs.
  std::vector<WeightRef> weights;
  std::map<std::string, int> opCounts;
  /// Every node in graph order.
  std::vector<NodeRecord> nodes;

  /// Elements and bytes over all weights (what `inspect` calls parameters).
  uint64_t parameterCount() const {
    uint64_t count = 0;
    for (const WeightRef &weight : weights)
      count += static_cast<uint64_t>(weight.info.elementCount());
    return count;
  }
  /// Index in `weights` of the weight named `key`.
  std::optional<size_t> weightIndex(const std::string &key) const {
    for (size_t i = 0; i < weights.size(); ++i)
      if (weights[i].key == key)
        return i;
    return std::nullopt;
  }
  uint64_t parameterBytes() const {
    uint64_t bytes = 0;
    for (const WeightRef &weight : weights)
      bytes += weight.bytes.size();
    return bytes;
  }
};

/// Bytes the importer may take for the constants it computes from a model
/// (ConstantOfShape, Range, Expand, Shape arithmetic, masks): min(physical
/// RAM / 4, max(1 GiB, 4 x the bytes of the model's initializers)). Enough
/// for any real shape subgraph; a model asking for more is refused before
/// the memory is taken.
uint64_t foldedConstantLimit(const OnnxModel &model);

/// Bounds on what an import may take.
struct ImportLimits {
  /// Bytes for all constants computed at import; 0: foldedConstantLimit.
  uint64_t foldedBytes = 0;
};

/// Imports an ONNX model into TOSA-based graph IR with static shapes.
/// Errors name the model, node and op: Unimplemented for an unsupported op
/// or attribute value, InvalidArgument for malformed attributes, shapes or
/// types (strides, pads, axes, permutations, indices, sizes),
/// ResourceExhausted when folding needs more than `limits` allow or memory
/// runs out. Thread-safe: each call owns its MLIR context.
Expected<ImportedGraph> importOnnx(const OnnxModel &model,
                                   const ImportLimits &limits = {});

/// The name of the ABI entry point of generated code:
/// `void flowc_entry(void **args)` with args = inputs, weights, outputs as
/// dense row-major buffers.
inline constexpr const char *kEntrySymbol = "flowc_entry";

/// A weight the code reads that is computed from the model's weights (a
/// BatchNorm folded into its convolution, a BatchNorm's scale and shift):
/// `recipe` is the MLIR text of a module whose `@derive` takes the source
/// weights named by `inputs` and returns it. Code never holds its values;
/// whoever binds the code evaluates it (evaluateDerivedWeight), once per
/// distinct input contents.
struct DerivedWeight {
  std::string key;
  std::string recipe;
  std::vector<std::string> inputs;
  TensorInfo info;
};

/// A weight a library kernel reads as a constant, which the runtime's
/// kernel may want in a layout of its own: whoever binds the code can pack
/// it ahead (runtime::packKernelWeight) instead of every session repacking.
struct KernelWeight {
  /// The kernel's call site and which of its buffers.
  int64_t site = 0;
  int64_t buffer = 0;
  /// The weight bound there (graph or derived weight key).
  std::string key;
  /// runtime::KernelKind and the kernel's parameters (KernelAbi.h).
  int64_t kind = 0;
  std::vector<int64_t> params;
};

/// A library kernel call site: what search tunes (runtime/Tuning.h).
struct LibrarySite {
  int64_t site = 0;
  /// runtime::KernelKind and the kernel's parameters (KernelAbi.h).
  int64_t kind = 0;
  std::vector<int64_t> params;
  /// The graph nodes (ImportedGraph::nodes indices) it computes.
  std::vector<int32_t> nodes = {};
};

/// A loop kernel of compiled code and the graph nodes (ImportedGraph::nodes
/// indices) its calls compute: for the model page, never part of a key
/// (where a nest came from does not change its object).
struct LoopKernelSource {
  std::string symbol;
  int callSites = 0;
  std::vector<int32_t> nodes;
};

/// The weights compiled code binds, in argument order after its inputs:
/// keys of the graph's weights (those the code still reads) and of derived
/// weights; and which of them library kernels read as constants.
struct CodeWeights {
  std::vector<std::string> keys;
  std::vector<DerivedWeight> derived;
  std::vector<KernelWeight> kernelWeights;
  /// Every library kernel call site, in site order.
  std::vector<LibrarySite> librarySites;
  /// Every loop kernel, in plan order.
  std::vector<LoopKernelSource> loopKernels = {};

  const DerivedWeight *findDerived(const std::string &key) const {
    for (const DerivedWeight &weight : derived)
      if (weight.key == key)
        return &weight;
    return nullptr;
  }
};

/// The bytes of a derived weight from its source weights' bytes (dense
/// float32, in `weight.inputs` order). InvalidArgument when the recipe or
/// the inputs do not fit.
Expected<std::string> evaluateDerivedWeight(const DerivedWeight &weight,
                                            const std::vector<std::string_view> &inputs);

/// The passes -O1..-O3 add, each of which `disabledPasses` can leave out,
/// in pipeline order.
const std::vector<std::string> &optionalPassNames();

/// Where the objects of partitioned kernels are kept between compiles (the
/// worker's kernel cache). A kernel's object depends only on `key`, the
/// canonical text of its compile (its IR, the target, the lowering
/// options); whoever implements this adds its own build id. Lookups and
/// stores are made from the compiling thread.
class KernelObjectCache {
public:
  virtual ~KernelObjectCache() = default;
  /// The object stored under `key`; nullopt on a miss (also when the cache
  /// cannot answer: the kernel is then compiled).
  virtual std::optional<std::string> lookup(const std::string &key) = 0;
  /// Keeps `object` under `key`; failing to is not the compile's failure.
  virtual void store(const std::string &key, const std::string &object) = 0;
};

/// What a compile reports besides the object.
struct CompileReport {
  /// What the code binds after its inputs.
  CodeWeights weights;
  /// The IR options.printIrAfter asked for.
  std::string printedIr;
  /// Loop kernels @main calls, the distinct ones among them (each compiled
  /// on its own), and the distinct ones taken from the kernel cache.
  int loopKernelCalls = 0;
  int loopKernels = 0;
  int cachedLoopKernels = 0;
};

/// The CPU generated code is for. The daemon's machine runs the code, so
/// a compile task on another machine (a remote worker with another CPU)
/// compiles for this target, not for its own host.
struct CodeTarget {
  std::string triple;
  std::string cpu;
  /// LLVM subtarget features, each enabled (+) or disabled (-), sorted.
  std::string features;

  /// The CPU this process runs on.
  static const CodeTarget &host();
  /// What cache keys hash: triple, CPU and the enabled features.
  std::string description() const;
};

/// One partitioned loop kernel of a planned compile: compiled on its own
/// (compileKernel), possibly elsewhere, and cached by `key`.
struct PlannedKernel {
  std::string symbol;
  /// The kernel cache key: the target, the lowering options and `text`.
  std::string key;
  /// Its module's MLIR text before the LLVM lowering.
  std::string text;
  /// Calls of it in @main.
  int callSites = 0;
  /// The search candidate it is lowered with (loopKernelCandidates); empty:
  /// the default lowering.
  std::string candidate = {};

  /// What its object depends on: `key` and the candidate.
  std::string cacheKey() const {
    return candidate.empty() ? key : key + "\ncandidate=" + candidate;
  }
};

/// The search candidates of a planned loop kernel, in a deterministic order;
/// the first is the default (an empty PlannedKernel::candidate lowers the
/// same way). A candidate is a short text ("parallel=1;vector=8").
std::vector<std::string> loopKernelCandidates(const PlannedKernel &kernel,
                                              const CompileOptions &options);

/// Compiles each of `candidates` of `kernel` for this host (in `workDir`)
/// and times them against each other (measureInterleaved) on random data of
/// the kernel's buffers' shapes (the caller pins the threads). The first
/// candidate is the reference: a later one that fails to build or whose
/// results differ from it beyond a float tolerance gets 0 samples
/// (`dropped`) and a warning. InvalidArgument for a candidate that is not
/// one of loopKernelCandidates'; the first candidate's build error as it is.
Expected<Measurement> measureLoopKernel(const PlannedKernel &kernel,
                                        const std::vector<std::string> &candidates,
                                        const CompileOptions &options,
                                        const MeasureOptions &measure,
                                        const std::string &workDir);

/// A compile after the graph passes and the partition: @main's object,
/// what the code binds, and the kernels still to compile.
struct CompilePlan {
  CodeWeights weights;
  std::string graphObject;
  std::vector<PlannedKernel> kernels;
  /// The code calls the OpenMP runtime (parallel loops): linked with libomp.
  bool linksOpenMp = false;
};

/// Stage 1 and 2 of the lowering, the partition, and @main's object for
/// `target`. Thread-safe (own MLIR and LLVM contexts).
Expected<CompilePlan> planCompile(const std::string &irBytecode,
                                  const CompileOptions &options,
                                  const CodeTarget &target);

/// Stage 3 and LLVM for one planned kernel: its object for `target`. The
/// object depends only on PlannedKernel::key. Thread-safe.
Expected<std::string> compileKernel(const PlannedKernel &kernel,
                                    const CompileOptions &options,
                                    const CodeTarget &target);

/// Links @main's object and the kernels' objects (in plan order) into a
/// shared object in `workDir`; returns its bytes.
Expected<std::string> linkSharedObject(const CompilePlan &plan,
                                       const std::vector<std::string> &kernelObjects,
                                       const std::string &workDir);

/// Lowers graph IR bytecode (TOSA -> linalg -> loops -> LLVM) and links a
/// shared object for the host CPU in `workDir`. Returns its bytes. With
/// `options.printIrAfter`, the IR after each matching pass goes to
/// `report->printedIr` (InvalidArgument if no pass has that name), and the
/// kernel cache is not consulted (every kernel is lowered and printed).
/// With `kernelCache`, partitioned kernels compiled before are reused and
/// new ones stored. Thread-safe: each call owns its MLIR and LLVM contexts
/// (and compiles the kernels it misses on threads of its own).
Expected<std::string> compileToSharedObject(const std::string &irBytecode,
                                            const CompileOptions &options,
                                            const std::string &workDir,
                                            CompileReport *report = nullptr,
                                            KernelObjectCache *kernelCache = nullptr);

/// Target description hashed into cache keys (CPU name and features).
std::string hostTargetDescription();

/// Human-readable MLIR of graph bytecode (for `flowc inspect --ir`).
Expected<std::string> printGraphIr(const std::string &irBytecode);

} // namespace flowc::compiler
