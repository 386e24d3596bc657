// Search over the lowering of partitioned loop kernels: the candidates of a
// kernel (LoopSearch.h has their grammar), the loop hints they put on its
// LLVM IR, and trial runs that time them against each other on random data
// of the kernel's buffers.
#include "LoopSearch.h"

#include "ParallelLoops.h"
#include "Pipelines.h"
#include "Registration.h"

#include "flowc/support/Measure.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include "llvm/Analysis/LoopInfo.h"
#include "llvm/IR/Constants.h"
#include "llvm/IR/Dominators.h"
#include "llvm/IR/Metadata.h"
#include "llvm/IR/Module.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <filesystem>
#include <memory>
#include <random>

namespace flowc::compiler {

namespace {

/// Kernels with fewer iterations (nested loops counted) have only the
/// default: no lowering choice is worth a measurement there.
constexpr int64_t kMinSearchIterations = 4096;
/// What one kernel's search measures at most.
constexpr size_t kMaxLoopCandidates = 6;

struct CandidateKey {
  std::string_view name;
  unsigned min;
  unsigned max;
  bool powerOfTwo;
};

/// In the grammar's (and the canonical text's) order.
constexpr CandidateKey kCandidateKeys[] = {
    {"parallel", 0, 16, false},
    {"vector", 2, 64, true},
    {"interleave", 1, 16, false},
    {"unroll", 1, 64, false},
};

/// The slot of `candidate` that `key` sets.
template <typename Candidate> auto &slot(Candidate &candidate, std::string_view key) {
  if (key == "vector")
    return candidate.vectorWidth;
  if (key == "interleave")
    return candidate.interleave;
  return candidate.unroll;
}

} // namespace

std::string LoopCandidate::text() const {
  std::string text;
  auto item = [&](std::string_view key, unsigned value) {
    text += (text.empty() ? "" : ";") + std::string(key) + "=" + std::to_string(value);
  };
  if (parallelDims)
    item("parallel", *parallelDims);
  for (std::string_view key : {"vector", "interleave", "unroll"})
    if (unsigned value = slot(*this, key))
      item(key, value);
  return text.empty() ? kDefaultCandidate : text;
}

Expected<LoopCandidate> parseLoopCandidate(std::string_view text) {
  LoopCandidate candidate;
  if (text.empty() || text == kDefaultCandidate)
    return candidate;
  std::vector<std::string_view> seen;
  while (!text.empty()) {
    size_t semicolon = text.find(';');
    std::string_view item = text.substr(0, semicolon);
    text = semicolon == std::string_view::npos ? "" : text.substr(semicolon + 1);
    size_t equals = item.find('=');
    if (equals == std::string_view::npos)
      return invalidArgument("item '" + std::string(item) + "' is not key=value");
    std::string_view key = item.substr(0, equals), value = item.substr(equals + 1);
    const CandidateKey *known =
        std::find_if(std::begin(kCandidateKeys), std::end(kCandidateKeys),
                     [&](const CandidateKey &k) { return k.name == key; });
    if (known == std::end(kCandidateKeys))
      return invalidArgument("unknown key '" + std::string(key) +
                             "' (known: parallel, vector, interleave, unroll)");
    if (std::find(seen.begin(), seen.end(), key) != seen.end())
      return invalidArgument("key '" + std::string(key) + "' is given twice");
    seen.push_back(key);
    unsigned number = 0;
    auto [end, error] =
        std::from_chars(value.data(), value.data() + value.size(), number);
    if (error != std::errc() || end != value.data() + value.size() || value.empty())
      return invalidArgument(std::string(key) + "=" + std::string(value) +
                             ": not a number");
    if (number < known->min || number > known->max ||
        (known->powerOfTwo && (number & (number - 1)) != 0))
      return invalidArgument(std::string(key) + "=" + std::string(value) + ": must be " +
                             (known->powerOfTwo ? "a power of two " : "") + "in [" +
                             std::to_string(known->min) + ", " +
                             std::to_string(known->max) + "]");
    if (key == "parallel")
      candidate.parallelDims = number;
    else
      slot(candidate, key) = number;
  }
  return candidate;
}

void annotateInnermostLoops(llvm::Module &module, const LoopCandidate &candidate) {
  if (!candidate.annotatesLoops())
    return;
  llvm::LLVMContext &context = module.getContext();
  auto hint = [&](const char *name, llvm::Constant *value) -> llvm::Metadata * {
    return llvm::MDNode::get(context, {llvm::MDString::get(context, name),
                                       llvm::ConstantAsMetadata::get(value)});
  };
  auto count = [&](unsigned value) {
    return llvm::ConstantInt::get(llvm::Type::getInt32Ty(context), value);
  };
  llvm::SmallVector<llvm::Metadata *> hints;
  if (candidate.vectorWidth) {
    hints.push_back(hint("llvm.loop.vectorize.width", count(candidate.vectorWidth)));
    hints.push_back(hint("llvm.loop.vectorize.enable",
                         llvm::ConstantInt::getTrue(llvm::Type::getInt1Ty(context))));
  }
  if (candidate.interleave)
    hints.push_back(hint("llvm.loop.interleave.count", count(candidate.interleave)));
  if (candidate.unroll)
    hints.push_back(hint("llvm.loop.unroll.count", count(candidate.unroll)));
  for (llvm::Function &function : module) {
    if (function.isDeclaration())
      continue;
    llvm::DominatorTree dominators(function);
    llvm::LoopInfo loops(dominators);
    for (llvm::Loop *loop : loops.getLoopsInPreorder()) {
      if (!loop->isInnermost())
        continue;
      // A loop ID is a distinct node whose first operand is itself.
      llvm::SmallVector<llvm::Metadata *> operands = {nullptr};
      if (llvm::MDNode *existing = loop->getLoopID())
        for (unsigned i = 1; i < existing->getNumOperands(); ++i)
          operands.push_back(existing->getOperand(i));
      operands.append(hints.begin(), hints.end());
      llvm::MDNode *id = llvm::MDNode::getDistinct(context, operands);
      id->replaceOperandWith(0, id);
      loop->setLoopID(id);
    }
  }
}

namespace {

/// What a kernel's loop nest looks like, for choosing its candidates.
struct NestShape {
  /// Trip counts of the nest's loops, outermost first.
  std::vector<int64_t> trips;
  /// How many of the outermost loops are parallel (the scf.parallel that
  /// ParallelLoops splits).
  unsigned leadingParallel = 0;
  /// The innermost loop reduces (LLVM keeps its order unless told).
  bool innermostReduction = false;
  int64_t iterations = 1;
};

struct KernelContext {
  KernelContext() : context(makeRegistry(), mlir::MLIRContext::Threading::DISABLED) {}
  static mlir::DialectRegistry makeRegistry() {
    mlir::DialectRegistry registry;
    registerFlowcDialects(registry);
    return registry;
  }
  mlir::MLIRContext context;
};

/// The kernel's public function in its parsed module.
Expected<mlir::func::FuncOp> kernelFunction(mlir::ModuleOp module,
                                            const PlannedKernel &kernel) {
  auto function = module.lookupSymbol<mlir::func::FuncOp>(kernel.symbol);
  if (!function || function.isExternal())
    return invalidArgument("kernel " + kernel.symbol + ": its IR defines no @" +
                           kernel.symbol);
  return function;
}

/// The shape of the kernel's loop nest: its one linalg op's static loop
/// ranges; nullopt when it has none, several, or dynamic ranges.
std::optional<NestShape> nestShape(const PlannedKernel &kernel) {
  KernelContext owned;
  auto module = mlir::parseSourceString<mlir::ModuleOp>(
      kernel.text, mlir::ParserConfig(&owned.context));
  if (!module)
    return std::nullopt;
  Expected<mlir::func::FuncOp> function = kernelFunction(*module, kernel);
  if (!function)
    return std::nullopt;
  llvm::SmallVector<mlir::linalg::LinalgOp> nests;
  function->walk([&](mlir::linalg::LinalgOp op) { nests.push_back(op); });
  if (nests.size() != 1)
    return std::nullopt;
  NestShape shape;
  for (int64_t trip : nests[0].getStaticLoopRanges()) {
    if (mlir::ShapedType::isDynamic(trip))
      return std::nullopt;
    shape.trips.push_back(trip);
    shape.iterations *= trip;
  }
  llvm::SmallVector<mlir::utils::IteratorType> iterators =
      nests[0].getIteratorTypesArray();
  for (mlir::utils::IteratorType type : iterators) {
    if (type != mlir::utils::IteratorType::parallel)
      break;
    ++shape.leadingParallel;
  }
  shape.innermostReduction =
      !iterators.empty() && iterators.back() == mlir::utils::IteratorType::reduction;
  return shape;
}

} // namespace

std::vector<std::string> loopKernelCandidates(const PlannedKernel &kernel,
                                              const CompileOptions &options) {
  std::vector<std::string> candidates = {kDefaultCandidate};
  // The candidates are CPU lowerings (threads, vector width); a CUDA
  // kernel's search is its launch shape, not one of these.
  if (options.optLevel < 1 || isCudaTarget(options.target))
    return candidates;
  std::optional<NestShape> nest = nestShape(kernel);
  if (!nest || nest->trips.empty() || nest->iterations < kMinSearchIterations)
    return candidates;
  auto add = [&](const LoopCandidate &candidate) {
    std::string text = candidate.text();
    if (candidates.size() < kMaxLoopCandidates &&
        std::find(candidates.begin(), candidates.end(), text) == candidates.end())
      candidates.push_back(std::move(text));
  };
  // Threads: none (a fork-join can cost more than a small nest's work), the
  // outermost dimensions up to the first that has more than one iteration
  // (fewer, larger chunks), and all but the innermost whatever the size;
  // each unless it is what the default does.
  if (usesOpenMp(options) && nest->leadingParallel > 0) {
    std::span<const int64_t> trips(nest->trips.data(), nest->leadingParallel);
    unsigned chosen = defaultParallelDims(trips, nest->iterations);
    unsigned outer = 1;
    while (outer < trips.size() && trips[outer - 1] == 1)
      ++outer;
    unsigned allButInnermost =
        defaultParallelDims(trips, std::max(nest->iterations, kMinParallelIterations));
    for (unsigned dims : {0u, outer, allButInnermost}) {
      LoopCandidate threads;
      threads.parallelDims = dims;
      if (dims != chosen)
        add(threads);
    }
  }
  // Vector width of the innermost loops: LLVM's cost model picks one for
  // plain loops (8 f32 lanes on AVX2, which forcing 8 only repeats) but
  // will not reorder a floating-point reduction unless told to; wider than
  // the trip count is pointless.
  int64_t innermost = nest->trips.back();
  std::array<unsigned, 2> widths = {4, 16};
  if (nest->innermostReduction)
    widths = {8, 16};
  for (unsigned width : widths) {
    LoopCandidate vector;
    vector.vectorWidth = width;
    if (innermost >= width)
      add(vector);
  }
  LoopCandidate unrolled;
  unrolled.unroll = 4;
  if (innermost >= 4)
    add(unrolled);
  return candidates;
}

namespace {

enum class ElementKind { Float, Half, BFloat, Integer };

/// One argument buffer of a kernel, as its memref type describes it.
struct BufferSpec {
  ElementKind kind = ElementKind::Float;
  /// Bytes of one element.
  size_t elementBytes = 4;
  /// Elements the strided layout spans (offset included).
  size_t elements = 0;
};

Expected<std::vector<BufferSpec>> kernelBuffers(const PlannedKernel &kernel) {
  KernelContext owned;
  auto module = mlir::parseSourceString<mlir::ModuleOp>(
      kernel.text, mlir::ParserConfig(&owned.context));
  if (!module)
    return invalidArgument("kernel " + kernel.symbol + ": its IR does not parse");
  FLOWC_ASSIGN_OR_RETURN(mlir::func::FuncOp function, kernelFunction(*module, kernel));
  std::vector<BufferSpec> buffers;
  for (auto [index, type] : llvm::enumerate(function.getArgumentTypes())) {
    std::string what = "kernel " + kernel.symbol + " argument " + std::to_string(index);
    auto memref = mlir::dyn_cast<mlir::MemRefType>(type);
    llvm::SmallVector<int64_t> strides;
    int64_t offset = 0;
    if (!memref || !memref.hasStaticShape() ||
        mlir::failed(memref.getStridesAndOffset(strides, offset)) ||
        mlir::ShapedType::isDynamic(offset) ||
        llvm::any_of(strides, mlir::ShapedType::isDynamic))
      return invalidArgument(what + " is not a statically shaped strided buffer");
    mlir::Type element = memref.getElementType();
    BufferSpec buffer;
    if (element.isF32() || element.isF64()) {
      buffer.kind = ElementKind::Float;
    } else if (element.isF16()) {
      buffer.kind = ElementKind::Half;
    } else if (element.isBF16()) {
      buffer.kind = ElementKind::BFloat;
    } else if (element.isIntOrIndex()) {
      buffer.kind = ElementKind::Integer;
    } else {
      return invalidArgument(what + " has an element type trial runs cannot fill");
    }
    // i1 is stored a byte per element; index as 64 bits.
    unsigned bits = element.isIndex() ? 64 : element.getIntOrFloatBitWidth();
    buffer.elementBytes = std::max(1u, (bits + 7) / 8);
    buffer.elements = memref.getNumElements() == 0 ? 0 : static_cast<size_t>(offset) + 1;
    if (buffer.elements)
      for (auto [size, stride] : llvm::zip(memref.getShape(), strides))
        buffer.elements += static_cast<size_t>((size - 1) * stride);
    buffers.push_back(buffer);
  }
  return buffers;
}

uint32_t floatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float bitsFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

/// IEEE half from a float in the half's range (truncating: this is random
/// data).
uint16_t halfBits(float value) {
  uint32_t bits = floatBits(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = bits & 0x7fffff;
  if (exponent <= 0) {
    if (exponent < -10)
      return sign;
    return sign | static_cast<uint16_t>((mantissa | 0x800000) >> (14 - exponent));
  }
  return sign | static_cast<uint16_t>(exponent << 10) |
         static_cast<uint16_t>(mantissa >> 13);
}

double halfValue(uint16_t bits) {
  int exponent = (bits >> 10) & 0x1f;
  int mantissa = bits & 0x3ff;
  double magnitude = exponent == 0    ? std::ldexp(mantissa, -24)
                     : exponent == 31 ? (mantissa ? NAN : INFINITY)
                                      : std::ldexp(1024 + mantissa, exponent - 25);
  return (bits & 0x8000) ? -magnitude : magnitude;
}

/// Buffers of 64-byte aligned memory, as the kernel's arguments.
struct Buffers {
  struct Free {
    void operator()(std::byte *bytes) const { std::free(bytes); }
  };
  std::vector<std::unique_ptr<std::byte[], Free>> owned;
  std::vector<size_t> sizes;
  std::vector<void *> pointers;

  explicit Buffers(const std::vector<BufferSpec> &specs) {
    for (const BufferSpec &spec : specs) {
      size_t bytes = spec.elements * spec.elementBytes;
      size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
      owned.emplace_back(static_cast<std::byte *>(std::aligned_alloc(64, rounded)));
      sizes.push_back(bytes);
      pointers.push_back(owned.back().get());
    }
  }
  bool allocated() const {
    return std::all_of(owned.begin(), owned.end(),
                       [](const auto &p) { return p != nullptr; });
  }
  void copyFrom(const Buffers &other) {
    for (size_t i = 0; i < owned.size(); ++i)
      std::memcpy(pointers[i], other.pointers[i], sizes[i]);
  }
};

/// Floats uniform in [-1, 1] (fixed seed: every measurement of a kernel
/// runs on the same data); integer buffers zero, so that an index read from
/// one stays in bounds.
void fillRandom(Buffers &buffers, const std::vector<BufferSpec> &specs) {
  std::mt19937 generator(0x5eed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (size_t i = 0; i < specs.size(); ++i) {
    std::byte *bytes = static_cast<std::byte *>(buffers.pointers[i]);
    std::memset(bytes, 0, buffers.sizes[i]);
    const BufferSpec &spec = specs[i];
    for (size_t e = 0; e < spec.elements && spec.kind != ElementKind::Integer; ++e) {
      float value = uniform(generator);
      std::byte *at = bytes + e * spec.elementBytes;
      if (spec.kind == ElementKind::Float && spec.elementBytes == 8) {
        double wide = value;
        std::memcpy(at, &wide, 8);
      } else if (spec.kind == ElementKind::Float) {
        std::memcpy(at, &value, 4);
      } else {
        uint16_t narrow = spec.kind == ElementKind::Half
                              ? halfBits(value)
                              : static_cast<uint16_t>(floatBits(value) >> 16);
        std::memcpy(at, &narrow, 2);
      }
    }
  }
}

double elementValue(const std::byte *at, const BufferSpec &spec) {
  if (spec.kind == ElementKind::Float && spec.elementBytes == 8) {
    double value;
    std::memcpy(&value, at, 8);
    return value;
  }
  if (spec.kind == ElementKind::Float) {
    float value;
    std::memcpy(&value, at, 4);
    return value;
  }
  uint16_t bits;
  std::memcpy(&bits, at, 2);
  return spec.kind == ElementKind::Half ? halfValue(bits)
                                        : bitsFloat(static_cast<uint32_t>(bits) << 16);
}

/// Where `actual` differs from `expected` beyond what reordering float
/// arithmetic explains (integers exactly); empty when nowhere.
std::string firstDifference(const Buffers &actual, const Buffers &expected,
                            const std::vector<BufferSpec> &specs) {
  for (size_t i = 0; i < specs.size(); ++i) {
    const auto *a = static_cast<const std::byte *>(actual.pointers[i]);
    const auto *e = static_cast<const std::byte *>(expected.pointers[i]);
    const BufferSpec &spec = specs[i];
    if (spec.kind == ElementKind::Integer) {
      if (std::memcmp(a, e, actual.sizes[i]) != 0)
        return "buffer " + std::to_string(i) + " (integers) differs";
      continue;
    }
    // Half-width floats keep 11 or 8 bits: a reordered sum moves by more.
    double tolerance = spec.kind == ElementKind::Float ? 1e-3 : 3e-2;
    for (size_t n = 0; n < spec.elements; ++n) {
      double x = elementValue(a + n * spec.elementBytes, spec);
      double y = elementValue(e + n * spec.elementBytes, spec);
      if ((std::isnan(x) && std::isnan(y)) || x == y)
        continue;
      if (std::fabs(x - y) <= tolerance * (1.0 + std::fabs(y)))
        continue;
      return "buffer " + std::to_string(i) + " element " + std::to_string(n) + " is " +
             std::to_string(x) + ", the default's " + std::to_string(y);
    }
  }
  return "";
}

using MeasureEntry = void (*)(void **);

/// The candidates' shared objects, loaded; unloaded and removed at scope
/// exit.
struct LoadedCandidates {
  std::vector<void *> handles;
  std::vector<std::string> directories;
  ~LoadedCandidates() {
    for (void *handle : handles)
      if (handle)
        dlclose(handle);
    std::error_code ignored;
    for (const std::string &directory : directories)
      std::filesystem::remove_all(directory, ignored);
  }
};

/// Compiles `candidate` of `kernel` for the host, links it with the
/// measurement entry in a fresh directory under `workDir`, and loads it.
/// A fresh directory, not a fixed name: dlopen would hand back a library of
/// the same path that is still loaded.
Expected<MeasureEntry>
loadCandidate(const PlannedKernel &kernel, const std::string &candidate,
              const CompileOptions &options, const std::string &entryObject,
              const std::string &workDir, LoadedCandidates &loaded) {
  PlannedKernel variant = kernel;
  variant.candidate = candidate;
  FLOWC_ASSIGN_OR_RETURN(std::string object,
                         compileKernel(variant, options, CodeTarget::host()));
  std::string pattern = workDir + "/measure.XXXXXX";
  if (!mkdtemp(pattern.data()))
    return errnoStatus(errno, "creating a directory under '" + workDir + "'");
  loaded.directories.push_back(pattern);
  CompilePlan plan;
  plan.graphObject = entryObject;
  plan.kernels = {variant};
  plan.linksOpenMp = usesOpenMp(options);
  FLOWC_RETURN_IF_ERROR(linkSharedObject(plan, {object}, pattern).status());
  std::string library = pattern + "/graph.so";
  void *handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return unavailable("cannot load '" + library + "': " + dlerror());
  loaded.handles.push_back(handle);
  auto entry = reinterpret_cast<MeasureEntry>(dlsym(handle, kMeasureEntrySymbol));
  if (!entry)
    return internalError("'" + library + "' has no " + kMeasureEntrySymbol);
  return entry;
}

} // namespace

Expected<Measurement> measureLoopKernel(const PlannedKernel &kernel,
                                        const std::vector<std::string> &candidates,
                                        const CompileOptions &options,
                                        const MeasureOptions &measure,
                                        const std::string &workDir) {
  if (candidates.empty())
    return invalidArgument("kernel " + kernel.symbol + ": no candidates to measure");
  std::vector<std::string> known = loopKernelCandidates(kernel, options);
  for (const std::string &candidate : candidates) {
    if (candidate.empty() ||
        std::find(known.begin(), known.end(), candidate) != known.end())
      continue;
    std::string list;
    for (const std::string &name : known)
      list += (list.empty() ? "" : ", ") + name;
    return invalidArgument("kernel " + kernel.symbol + ": candidate '" + candidate +
                           "' is not one of its candidates (" + list + ")");
  }
  FLOWC_ASSIGN_OR_RETURN(std::vector<BufferSpec> specs, kernelBuffers(kernel));
  FLOWC_ASSIGN_OR_RETURN(std::string entryObject,
                         measureEntryObject(kernel.symbol,
                                            static_cast<unsigned>(specs.size()),
                                            CodeTarget::host()));
  Buffers pristine(specs), reference(specs), working(specs);
  if (!pristine.allocated() || !reference.allocated() || !working.allocated())
    return resourceExhausted("kernel " + kernel.symbol +
                             ": cannot allocate its buffers for trial runs");
  fillRandom(pristine, specs);

  // Each candidate runs once on the same data; the first (the reference)
  // must load, a later one that fails or computes something else is left
  // out with a warning.
  LoadedCandidates loaded;
  std::vector<MeasureEntry> entries(candidates.size(), nullptr);
  for (size_t i = 0; i < candidates.size(); ++i) {
    Expected<MeasureEntry> entry =
        loadCandidate(kernel, candidates[i], options, entryObject, workDir, loaded);
    if (!entry && i == 0)
      return entry.status().withContext("measuring kernel " + kernel.symbol);
    if (!entry) {
      spdlog::warn("measuring kernel {}: candidate '{}' left out: {}", kernel.symbol,
                   candidates[i], entry.status().toString());
      continue;
    }
    working.copyFrom(pristine);
    (*entry)(working.pointers.data());
    if (i == 0) {
      reference.copyFrom(working);
    } else if (std::string difference = firstDifference(working, reference, specs);
               !difference.empty()) {
      spdlog::warn("measuring kernel {}: candidate '{}' left out: its result differs "
                   "from the default's ({})",
                   kernel.symbol, candidates[i], difference);
      continue;
    }
    entries[i] = *entry;
  }

  std::vector<size_t> timed;
  std::vector<std::string> names;
  std::vector<std::function<void()>> runs;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!entries[i])
      continue;
    timed.push_back(i);
    names.push_back(candidates[i]);
    runs.push_back([&working, entry = entries[i]] { entry(working.pointers.data()); });
  }
  working.copyFrom(pristine);
  Measurement timing = measureInterleaved(names, runs, measure);
  Measurement result = timing;
  result.timings.assign(candidates.size(), CandidateTiming());
  for (size_t i = 0; i < candidates.size(); ++i) {
    result.timings[i].candidate = candidates[i];
    result.timings[i].dropped = true;
  }
  for (size_t t = 0; t < timed.size(); ++t)
    result.timings[timed[t]] = timing.timings[t];
  result.best = timed[timing.best];
  return result;
}

} // namespace flowc::compiler
