#include "Kernels.h"
#include "Selection.h"

#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/KernelAbi.h"
#include "flowc/runtime/PackedWeights.h"
#include "flowc/runtime/Tuning.h"

#include <oneapi/dnnl/dnnl.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <limits>
#include <map>
#include <numeric>
#include <omp.h>
#include <set>
#include <stdexcept>
#include <unordered_map>
#include <vector>

namespace flowc::runtime {

namespace {

using dnnl::memory;
using Dims = memory::dims;

/// One call site's state: its primitive and the memories it binds each
/// call, made on the site's first call.
struct Site {
  virtual ~Site() = default;
  /// Whether the site reads a weight packed at link time in place.
  virtual bool readsPrepacked() const { return false; }
  /// The library's name for what this site runs (`flowc run --profile`).
  std::string implementation;
  /// Appended to that name: how flowc uses the library's kernel.
  std::string note;
};

/// oneDNN's name for the implementation `primitive` runs, e.g.
/// "brg:avx512_core_amx" or "jit:avx2".
std::string implementationOf(const dnnl::primitive &primitive) {
  const char *info = nullptr;
  if (dnnl_primitive_desc_query(primitive.get_primitive_desc(), dnnl_query_impl_info_str,
                                0, &info) != dnnl_success ||
      !info)
    return "";
  return info;
}

} // namespace

/// A weight packed at link time, mapped from the artifact.
struct PrepackedWeight {
  const void *data = nullptr;
  size_t size = 0;
  std::string layout;
};

class KernelContext {
public:
  explicit KernelContext(int64_t siteCount)
      : engine(dnnl::engine::kind::cpu, 0), stream(engine), sites(siteCount),
        candidates(siteCount) {}

  /// The packed weight of buffer `buffer` of `site`, if the artifact has one.
  const PrepackedWeight *prepacked(int64_t site, int64_t buffer) const {
    auto found = prepackedWeights.find({site, buffer});
    return found == prepackedWeights.end() ? nullptr : &found->second;
  }

  /// The search candidate `site` runs (empty: the default).
  const std::string &candidate(int64_t site) const { return candidates.at(site); }

  dnnl::engine engine;
  dnnl::stream stream;
  std::vector<std::unique_ptr<Site>> sites;
  std::map<std::pair<int64_t, int64_t>, PrepackedWeight> prepackedWeights;
  /// Per site: the candidate the plan chose (Plan::tuned).
  std::vector<std::string> candidates;
  /// The first failure of a run; kernels cannot throw through generated code.
  Status failure = Status::ok();
};

void KernelContextDeleter::operator()(KernelContext *context) const { delete context; }

namespace {

memory::desc denseDesc(const Dims &dims, const Dims &strides,
                       memory::data_type type = memory::data_type::f32) {
  return memory::desc(dims, type, strides);
}

/// The type a kernel computes in: bf16 when asked (fp32 buffers are
/// reordered into it), fp32 otherwise.
memory::data_type computeType(Precision precision) {
  return precision == Precision::Bf16 ? memory::data_type::bf16 : memory::data_type::f32;
}

/// Row-major strides of `dims` visited in `order` (outermost first).
Dims stridesInOrder(const Dims &dims, const std::vector<int> &order) {
  Dims strides(dims.size(), 1);
  int64_t step = 1;
  for (auto it = std::rbegin(order); it != std::rend(order); ++it) {
    strides[*it] = step;
    step *= dims[*it];
  }
  return strides;
}

Dims activationStrides(const Dims &dims, ActivationLayout layout) {
  return layout == ActivationLayout::Nhwc ? stridesInOrder(dims, {0, 2, 3, 1})
                                          : stridesInOrder(dims, {0, 1, 2, 3});
}

/// The activation as oneDNN post-ops (after an optional residual sum).
dnnl::post_ops postOps(bool residual, Activation activation, int64_t alphaBits,
                       int64_t betaBits) {
  dnnl::post_ops ops;
  if (residual)
    ops.append_sum(1.0f);
  float alpha = paramFloat(alphaBits), beta = paramFloat(betaBits);
  switch (activation) {
  case Activation::None:
    break;
  case Activation::Clip:
    if (isRelu(activation, alphaBits, betaBits))
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    else
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip,
                         std::max(alpha, std::numeric_limits<float>::lowest()),
                         std::min(beta, std::numeric_limits<float>::max()));
    break;
  case Activation::Sigmoid:
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_logistic, 0.0f, 0.0f);
    break;
  case Activation::Tanh:
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_tanh, 0.0f, 0.0f);
    break;
  case Activation::Swish:
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_swish, 1.0f, 0.0f);
    break;
  case Activation::HardSwish:
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_hardswish, 0.0f, 0.0f);
    break;
  case Activation::GeluErf:
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
    break;
  case Activation::GeluTanh:
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_tanh, 0.0f, 0.0f);
    break;
  }
  return ops;
}

/// A description of `desc`'s layout precise enough that equal descriptions
/// mean equal bytes for equal contents: what packed artifact weights are
/// matched by.
std::string layoutOf(const memory::desc &desc) {
  const dnnl_memory_desc_t &md = desc.data;
  std::string text =
      "dnnl" + std::to_string(dnnl_version()->major) + "." +
      std::to_string(dnnl_version()->minor) + ";type" + std::to_string(md.data_type) +
      ";kind" + std::to_string(md.format_kind) + ";offset" + std::to_string(md.offset0) +
      ";extra" + std::to_string(md.extra.flags);
  auto list = [&](const char *name, const dnnl_dim_t *values, int count) {
    text += std::string(";") + name;
    for (int i = 0; i < count; ++i)
      text += (i ? "," : "") + std::to_string(values[i]);
  };
  list("dims", md.dims, md.ndims);
  list("padded", md.padded_dims, md.ndims);
  list("padoffsets", md.padded_offsets, md.ndims);
  if (md.format_kind == dnnl_blocked) {
    const dnnl_blocking_desc_t &blocking = md.format_desc.blocking;
    list("strides", blocking.strides, md.ndims);
    list("blocks", blocking.inner_blks, blocking.inner_nblks);
    list("indices", blocking.inner_idxs, blocking.inner_nblks);
  }
  if (md.format_kind == dnnl_format_kind_wino) {
    const dnnl_wino_desc_t &wino = md.format_desc.wino_desc;
    int64_t fields[] = {wino.wino_format, wino.r,         wino.alpha,
                        wino.ic,          wino.oc,        wino.ic_block,
                        wino.oc_block,    wino.ic2_block, wino.oc2_block};
    list("wino", fields, static_cast<int>(std::size(fields)));
    text +=
        ";scale" + std::to_string(wino.adj_scale) + ";size" + std::to_string(wino.size);
  }
  return text;
}

/// A buffer in the graph's layout, passed through one in the primitive's
/// preferred layout when the two differ (reorders made once).
struct ActivationPort {
  memory user, packed;
  dnnl::reorder toPacked, toUser;
  bool needsReorder = false;

  void init(const memory::desc &userDesc, const memory::desc &wanted,
            const dnnl::engine &engine, bool isOutput) {
    user = memory(userDesc, engine, DNNL_MEMORY_NONE);
    needsReorder = userDesc != wanted;
    if (!needsReorder)
      return;
    packed = memory(wanted, engine);
    toPacked = dnnl::reorder(user, packed);
    if (isOutput)
      toUser = dnnl::reorder(packed, user);
  }

  /// The memory the primitive reads (`load`: with the user's data in it).
  memory bind(void *data, bool load, dnnl::stream &stream) {
    user.set_data_handle(data);
    if (!needsReorder)
      return user;
    if (load)
      toPacked.execute(stream, user, packed);
    return packed;
  }

  void store(dnnl::stream &stream) {
    if (needsReorder)
      toUser.execute(stream, packed, user);
  }
};

/// Weights in the primitive's layout. Constant ones are repacked once; the
/// source pointer is remembered so a different buffer is repacked again.
struct PackedWeights {
  ActivationPort port;
  const void *source = nullptr;
  /// Packed at link time and read in place, when its layout is the one
  /// wanted here.
  memory prepacked;
  bool usesPrepacked = false;

  void init(const memory::desc &userDesc, const memory::desc &wanted,
            const dnnl::engine &engine, const PrepackedWeight *ahead) {
    if (ahead && ahead->size == wanted.get_size() && ahead->layout == layoutOf(wanted)) {
      // oneDNN only reads weights: the read-only mapping is never written.
      prepacked = memory(wanted, engine, const_cast<void *>(ahead->data));
      usesPrepacked = true;
      return;
    }
    port.init(userDesc, wanted, engine, false);
  }

  memory bind(void *data, bool constant, dnnl::stream &stream) {
    if (usesPrepacked)
      return prepacked;
    bool repack = !constant || data != source;
    source = data;
    return port.bind(data, repack, stream);
  }
};

/// Copies the residual into the destination: the sum post-op adds onto it.
void seedResidual(const void *residual, void *destination, size_t bytes) {
  if (residual != destination)
    std::memmove(destination, residual, bytes);
}

/// A search candidate (Tuning.h's grammar) as its fields.
struct Candidate {
  /// Conv: "any" (the library's blocked activations), "nhwc" or "nchw"
  /// (plain activations). Matmul: "any" (a constant B packed as the library
  /// prefers) or "plain" (B read as the graph has it).
  std::string layout = "any";
  /// The implementation's impl_info_str(); empty: the library's first.
  std::string impl;
  /// OpenMP threads the kernel runs on; 0: the session's.
  int threads = 0;
  /// Conv: the library's Winograd algorithm instead of its direct one.
  bool winograd = false;
};

/// Whether `a` and `b` ask for the same layout and algorithm (whatever
/// their implementation and threads).
bool isSameKind(const Candidate &a, const Candidate &b) {
  return a.layout == b.layout && a.winograd == b.winograd;
}

std::string candidateText(const Candidate &candidate) {
  std::string text = "layout=" + candidate.layout;
  if (candidate.winograd)
    text += ";algo=winograd";
  if (!candidate.impl.empty())
    text += ";impl=" + candidate.impl;
  if (candidate.threads > 0)
    text += ";threads=" + std::to_string(candidate.threads);
  return text;
}

/// Whether `word` can be a field's value: the grammar's separators cannot.
bool isCandidateWord(std::string_view word) {
  return !word.empty() && word.find_first_of(";= ") == std::string_view::npos;
}

/// The fields of `text`, a candidate of a `kind` kernel; InvalidArgument
/// naming the field at fault.
Expected<Candidate> parseCandidate(KernelKind kind, std::string_view text) {
  auto bad = [&](const std::string &why) {
    return invalidArgument(std::string(kernelKindName(kind)) + " candidate '" +
                           std::string(text) + "': " + why);
  };
  Candidate candidate;
  std::set<std::string, std::less<>> seen;
  for (size_t start = 0; start <= text.size();) {
    size_t end = std::min(text.find(';', start), text.size());
    std::string_view field = text.substr(start, end - start);
    start = end + 1;
    size_t equals = field.find('=');
    if (equals == std::string_view::npos || !isCandidateWord(field.substr(equals + 1)))
      return bad("field '" + std::string(field) + "' is not key=value");
    std::string key(field.substr(0, equals)), value(field.substr(equals + 1));
    if (!seen.insert(key).second)
      return bad("field '" + key + "' appears twice");
    if (key == "layout") {
      bool known = kind == KernelKind::Conv2d
                       ? value == "any" || value == "nhwc" || value == "nchw"
                       : value == "any" || value == "plain";
      if (!known)
        return bad("unknown layout '" + value + "'");
      candidate.layout = value;
    } else if (key == "algo" && kind == KernelKind::Conv2d) {
      if (value != "direct" && value != "winograd")
        return bad("unknown algo '" + value + "'");
      candidate.winograd = value == "winograd";
    } else if (key == "impl") {
      candidate.impl = value;
    } else if (key == "threads") {
      auto [last, error] =
          std::from_chars(value.data(), value.data() + value.size(), candidate.threads);
      if (error != std::errc() || last != value.data() + value.size() ||
          candidate.threads < 1 || candidate.threads > 4096)
        return bad("threads '" + value + "' is not a count from 1 to 4096");
    } else {
      return bad("unknown field '" + key + "'");
    }
  }
  return candidate;
}

/// Sets the OpenMP threads of the calling thread for the scope (0: leaves
/// them). A primitive fixes its partition when it is made, and some read
/// the count again when they run: both happen inside one.
class ThreadScope {
public:
  explicit ThreadScope(int threads) : saved_(threads > 0 ? omp_get_max_threads() : 0) {
    if (threads > 0)
      omp_set_num_threads(threads);
  }
  ~ThreadScope() {
    if (saved_ > 0)
      omp_set_num_threads(saved_);
  }
  ThreadScope(const ThreadScope &) = delete;
  ThreadScope &operator=(const ThreadScope &) = delete;

private:
  int saved_;
};

/// A candidate's threads, never more than the session runs on.
int effectiveThreads(int threads) {
  return threads > 0 ? std::min(threads, omp_get_max_threads()) : 0;
}

bool isReferenceImpl(std::string_view name) {
  return name.find("ref") != std::string_view::npos;
}

/// Moves `pd` to its first implementation named `impl` (empty: stays on
/// the library's first); false when it has none of that name.
template <typename PrimitiveDesc>
bool selectImpl(PrimitiveDesc &pd, const std::string &impl) {
  if (impl.empty())
    return true;
  do {
    if (impl == pd.impl_info_str())
      return true;
  } while (pd.next_impl());
  return false;
}

/// A primitive descriptor with the operation descriptor and attributes it
/// was made from: oneDNN 2's implementation iterator (next_impl) reads them
/// by pointer for as long as it iterates, so they live on the heap beside
/// it (a descriptor made in a function that returns would dangle).
template <typename Desc, typename PrimitiveDesc> struct Iterable {
  std::unique_ptr<Desc> desc;
  std::unique_ptr<dnnl::primitive_attr> attr;
  PrimitiveDesc pd;
};

/// `make()`'s primitive descriptor (an Iterable) moved to `candidate`'s
/// implementation; nullopt when the library has none of that name, or
/// refuses a layout other than its own choice or an algorithm other than
/// its direct one. A refusal of "any" by the direct algorithm (what ran
/// before search) is the kernel's own, and is thrown.
template <typename Make>
auto buildCandidate(const Candidate &candidate, Make make)
    -> std::optional<decltype(make())> {
  std::optional<decltype(make())> made;
  try {
    made = make();
  } catch (const dnnl::error &) {
    if (candidate.layout == "any" && !candidate.winograd)
      throw;
    return std::nullopt;
  }
  if (!selectImpl(made->pd, candidate.impl))
    return std::nullopt;
  return made;
}

/// A primitive descriptor and the threads its kernel runs on.
template <typename PrimitiveDesc> struct Chosen {
  PrimitiveDesc pd;
  int threads = 0;
};

/// The primitive of candidate `text`, built by `build(candidate)` (an
/// optional Iterable; nullopt: this library cannot build it here, on another
/// CPU or with another library build); empty text: `buildDefault()`, the
/// kernel's default Iterable. A candidate that cannot be built, or one that
/// does not parse, runs the default after one warning naming `what`: an
/// artifact moved to another machine still runs.
template <typename PrimitiveDesc, typename BuildDefault, typename Build>
Chosen<PrimitiveDesc> choosePrimitive(KernelKind kind, const std::string &what,
                                      const std::string &text, BuildDefault buildDefault,
                                      Build build) {
  if (!text.empty()) {
    Expected<Candidate> candidate = parseCandidate(kind, text);
    std::string why;
    if (candidate) {
      int threads = effectiveThreads(candidate->threads);
      ThreadScope scope(threads);
      if (auto made = build(*candidate))
        return {std::move(made->pd), threads};
      why = "this library has no such implementation on this CPU";
    } else {
      why = candidate.status().message();
    }
    spdlog::warn("{}: search's candidate '{}' cannot run here ({}); running the default",
                 what, text, why);
  }
  return {std::move(buildDefault().pd), 0};
}

/// A convolution site: its candidate's primitive, the layouts it wants and
/// the threads it runs on.
struct ConvSite : Site {
  dnnl::convolution_forward primitive;
  ActivationPort source, destination;
  PackedWeights weights;
  memory bias;
  size_t destinationBytes = 0;
  int threads = 0;

  bool readsPrepacked() const override { return weights.usesPrepacked; }
};

memory::desc anyLayout(const memory::desc &desc,
                       memory::data_type type = memory::data_type::f32) {
  return memory::desc(desc.dims(), type, memory::format_tag::any);
}

/// The weights of a convolution of `p`'s geometry (Conv2dParams or
/// IntegerConv2dParams) in its layout, of `type`.
template <typename Params>
memory::desc convWeightsDesc(const Params &p,
                             memory::data_type type = memory::data_type::f32) {
  int64_t groups = p.groups, kh = p.kernelHeight, kw = p.kernelWidth;
  ConvWeightLayout layout = p.weightLayout;
  if (groups == 1) {
    Dims dims = {p.outChannels, p.inChannels, kh, kw};
    return denseDesc(dims,
                     layout == ConvWeightLayout::Ohwi
                         ? stridesInOrder(dims, {0, 2, 3, 1})
                         : stridesInOrder(dims, {0, 1, 2, 3}),
                     type);
  }
  Dims dims = {groups, p.outChannels / groups, p.inChannels / groups, kh, kw};
  // Depthwise [kh, kw, channels, multiplier]: group-major channels.
  return denseDesc(dims,
                   layout == ConvWeightLayout::Hwcm
                       ? stridesInOrder(dims, {3, 4, 0, 1, 2})
                       : stridesInOrder(dims, {0, 1, 2, 3, 4}),
                   type);
}

/// A convolution's buffers as the graph has them.
struct ConvBuffers {
  Dims source, destination;
  memory::desc sourceDesc, weightsDesc, biasDesc, destinationDesc;
  memory::data_type type;
};

ConvBuffers convBuffers(const Conv2dParams &p) {
  ConvBuffers buffers;
  buffers.source = {p.batch, p.inChannels, p.inHeight, p.inWidth};
  buffers.destination = {p.batch, p.outChannels, p.outHeight, p.outWidth};
  buffers.weightsDesc = convWeightsDesc(p);
  buffers.sourceDesc =
      denseDesc(buffers.source, activationStrides(buffers.source, p.sourceLayout));
  buffers.destinationDesc = denseDesc(
      buffers.destination, activationStrides(buffers.destination, p.destinationLayout));
  buffers.biasDesc = denseDesc({p.outChannels}, {1});
  buffers.type = computeType(p.precision);
  return buffers;
}

using ConvIterable =
    Iterable<dnnl::convolution_forward::desc, dnnl::convolution_forward::primitive_desc>;
using MatMulIterable = Iterable<dnnl::matmul::desc, dnnl::matmul::primitive_desc>;

ConvIterable convPrimitive(const dnnl::engine &engine, const Conv2dParams &p,
                           const ConvBuffers &buffers, const memory::desc &wantedSource,
                           const memory::desc &wantedDestination, bool winograd) {
  ConvIterable made;
  made.attr = std::make_unique<dnnl::primitive_attr>();
  made.attr->set_post_ops(postOps(p.hasResidual != 0, p.activation, p.alpha, p.beta));
  made.desc = std::make_unique<dnnl::convolution_forward::desc>(
      dnnl::prop_kind::forward_inference,
      winograd ? dnnl::algorithm::convolution_winograd
               : dnnl::algorithm::convolution_direct,
      wantedSource, anyLayout(buffers.weightsDesc, buffers.type), buffers.biasDesc,
      wantedDestination, memory::dims{p.strideH, p.strideW},
      memory::dims{p.dilationH - 1, p.dilationW - 1}, memory::dims{p.padTop, p.padLeft},
      memory::dims{p.padBottom, p.padRight});
  made.pd = dnnl::convolution_forward::primitive_desc(*made.desc, *made.attr, engine);
  return made;
}

/// The activation layout `layout` asks of a convolution: the library's
/// choice ("any"), or plain NHWC / NCHW. The source is in the compute type
/// (bf16 rounding happens in its reorder), the destination fp32.
memory::desc convActivation(const Dims &dims, const std::string &layout,
                            memory::data_type type) {
  if (layout == "any")
    return memory::desc(dims, type, memory::format_tag::any);
  return denseDesc(dims,
                   activationStrides(dims, layout == "nhwc" ? ActivationLayout::Nhwc
                                                            : ActivationLayout::Nchw),
                   type);
}

/// Whether the library can reorder `from` into `to`: oneDNN 2.6 packs
/// Winograd weights from OIHW and HWIO only, not from OHWI (TOSA's own
/// order, which some graphs' weights keep).
bool canReorder(const dnnl::engine &engine, const memory::desc &from,
                const memory::desc &to) {
  try {
    dnnl::reorder::primitive_desc(engine, from, engine, to);
    return true;
  } catch (const dnnl::error &) {
    return false;
  }
}

/// `candidate`'s convolution, nullopt when the library has no such
/// implementation here (for Winograd, also when it cannot pack the graph's
/// weights for it). The default ("any", the library's first) is what
/// ran before search: blocked layouts with activation reorders; it throws
/// dnnl::error when the library refuses the convolution.
std::optional<ConvIterable> convCandidatePrimitive(const dnnl::engine &engine,
                                                   const Conv2dParams &p,
                                                   const ConvBuffers &buffers,
                                                   const Candidate &candidate) {
  auto made = buildCandidate(candidate, [&] {
    return convPrimitive(
        engine, p, buffers,
        convActivation(buffers.source, candidate.layout, buffers.type),
        convActivation(buffers.destination, candidate.layout, memory::data_type::f32),
        candidate.winograd);
  });
  if (made && candidate.winograd &&
      !canReorder(engine, buffers.weightsDesc, made->pd.weights_desc()))
    return std::nullopt;
  return made;
}

/// Whether the library's Winograd algorithm can compute the convolution:
/// a dense 3x3 one with unit strides and no dilation.
bool isWinogradShape(const Conv2dParams &p) {
  return p.groups == 1 && p.kernelHeight == 3 && p.kernelWidth == 3 && p.strideH == 1 &&
         p.strideW == 1 && p.dilationH == 1 && p.dilationW == 1;
}

/// Whether Winograd beats the direct kernels on `p` (oneDNN 2.6 has it on
/// AVX-512 only: F(2x2,3x3) at batch 1, F(4x4,3x3) above; fp32 only), by
/// conv_layout_bench on 2 threads and whole models (docs/search.md):
/// 1.3-1.8x on ResNet-50's 3x3 shapes, reorders included; slower within
/// DenseNet-121 on its 128-to-32 ones (the transforms and reorders cost
/// more than 32 output channels save) and, at batch 1, on ResNet-50's
/// 512-channel 7x7 ones (tiles padded, too little work per transform).
bool winogradPays(const Conv2dParams &p) {
  constexpr int64_t kMinChannels = 64, kMinPixels = 14 * 14;
  constexpr int64_t kMinSmallImageWork = int64_t{1} << 20;
  if (!isWinogradShape(p) || p.precision != Precision::Fp32 ||
      p.inChannels < kMinChannels || p.outChannels < kMinChannels)
    return false;
  return p.outHeight * p.outWidth >= kMinPixels ||
         p.batch * p.inChannels * p.outChannels >= kMinSmallImageWork;
}

/// What a convolution runs without a tuning record: the library's Winograd
/// kernel (in its blocked layouts, with a reorder on each side) where it
/// has one and winogradPays; else, between NHWC buffers, the library's own
/// NHWC kernel when it has one that is not its reference code, else its
/// choice of layout ("any"). With AVX2 that choice is a blocked layout with
/// a reorder on each side, slower in sum on ResNet-50's and DenseNet-121's
/// shapes (conv_layout_bench: 1.13x for NHWC, 1x1 convolutions 1.16-1.60x,
/// two 3x3 ones 3-6% slower); with AVX-512 the library picks NHWC itself.
/// The candidate and its primitive, built once; throws dnnl::error when the
/// library refuses the convolution.
std::pair<Candidate, ConvIterable> defaultConv(const dnnl::engine &engine,
                                               const Conv2dParams &p,
                                               const ConvBuffers &buffers) {
  Candidate winograd{"any", "", 0, true};
  if (winogradPays(p))
    if (auto made = convCandidatePrimitive(engine, p, buffers, winograd);
        made && !isReferenceImpl(made->pd.impl_info_str()))
      return {winograd, std::move(*made)};
  Candidate plain{"nhwc", "", 0};
  bool nhwc = p.sourceLayout == ActivationLayout::Nhwc &&
              p.destinationLayout == ActivationLayout::Nhwc;
  if (nhwc)
    if (auto made = convCandidatePrimitive(engine, p, buffers, plain);
        made && !isReferenceImpl(made->pd.impl_info_str()))
      return {plain, std::move(*made)};
  return {Candidate{}, *convCandidatePrimitive(engine, p, buffers, Candidate{})};
}

Chosen<dnnl::convolution_forward::primitive_desc>
chooseConv(const dnnl::engine &engine, const Conv2dParams &p, const ConvBuffers &buffers,
           const std::string &what, const std::string &candidate) {
  return choosePrimitive<dnnl::convolution_forward::primitive_desc>(
      KernelKind::Conv2d, what, candidate,
      [&] { return defaultConv(engine, p, buffers).second; },
      [&](const Candidate &c) { return convCandidatePrimitive(engine, p, buffers, c); });
}

std::string siteName(KernelKind kind, int64_t index) {
  return std::string(kernelKindName(kind)) + " kernel site " + std::to_string(index);
}

std::unique_ptr<ConvSite> createConv(KernelContext &context, int64_t index,
                                     const Conv2dParams &p) {
  // Only cuda code keeps buffers in 16 bits (AMP); oneDNN's are fp32 here.
  if (hasSixteenBitBuffers(p))
    throw std::invalid_argument("16-bit source, residual or destination buffers are "
                                "for cuda code, not the CPU's");
  ConvBuffers buffers = convBuffers(p);
  auto chosen = chooseConv(context.engine, p, buffers,
                           siteName(KernelKind::Conv2d, index), context.candidate(index));
  ThreadScope threads(chosen.threads);
  const auto &pd = chosen.pd;
  auto site = std::make_unique<ConvSite>();
  site->threads = chosen.threads;
  site->primitive = dnnl::convolution_forward(pd);
  site->source.init(buffers.sourceDesc, pd.src_desc(), context.engine, false);
  site->destination.init(buffers.destinationDesc, pd.dst_desc(), context.engine, true);
  site->weights.init(buffers.weightsDesc, pd.weights_desc(), context.engine,
                     p.constantWeights ? context.prepacked(index, 1) : nullptr);
  site->bias = memory(buffers.biasDesc, context.engine, DNNL_MEMORY_NONE);
  site->destinationBytes = buffers.destinationDesc.get_size();
  return site;
}

void runConv(KernelContext &context, ConvSite &site, const Conv2dParams &p,
             void **buffers) {
  ThreadScope threads(site.threads);
  bool residual = p.hasResidual != 0;
  void *out = buffers[residual ? 4 : 3];
  if (residual)
    seedResidual(buffers[3], out, site.destinationBytes);
  site.bias.set_data_handle(buffers[2]);
  memory source = site.source.bind(buffers[0], true, context.stream);
  memory destination = site.destination.bind(out, residual, context.stream);
  memory weights = site.weights.bind(buffers[1], p.constantWeights != 0, context.stream);
  site.primitive.execute(context.stream, {{DNNL_ARG_SRC, source},
                                          {DNNL_ARG_WEIGHTS, weights},
                                          {DNNL_ARG_BIAS, site.bias},
                                          {DNNL_ARG_DST, destination}});
  site.destination.store(context.stream);
}

struct MatMulSite : Site {
  dnnl::matmul primitive;
  memory bias, mask, destination;
  /// The mask's post-op argument (its index in the post-op list).
  int maskArgument = 0;
  ActivationPort a;
  PackedWeights b;
  size_t destinationBytes = 0;
  int threads = 0;

  bool readsPrepacked() const override { return b.usesPrepacked; }
};

/// A product's buffers as the graph has them.
struct MatMulBuffers {
  memory::desc aDesc, bDesc, biasDesc, cDesc, maskDesc;
  Dims aDims, aStrides, bDims, bStrides;
};

MatMulBuffers matmulBuffers(const MatMulParams &p) {
  int64_t batch = p.batch, m = p.m, n = p.n, k = p.k;
  // One product is described in 2-D: the library's 2-D kernels are faster
  // than its batched ones at batch 1.
  auto matrices = [&](int64_t count, int64_t rows, int64_t columns) {
    Dims dims = batch > 1 ? Dims{count} : Dims{};
    dims.push_back(rows);
    dims.push_back(columns);
    return dims;
  };
  Dims cDims = matrices(batch, m, n), biasDims = matrices(1, 1, n);
  MatMulBuffers buffers;
  buffers.aDims = matrices(batch, m, k);
  buffers.bDims = matrices(batch, k, n);
  std::vector<int> order(buffers.aDims.size());
  std::iota(order.begin(), order.end(), 0);
  std::vector<int> transposed = order;
  std::swap(transposed.end()[-1], transposed.end()[-2]);
  buffers.bStrides = stridesInOrder(buffers.bDims, p.transposedB ? transposed : order);
  buffers.aStrides = stridesInOrder(buffers.aDims, order);
  buffers.aDesc = denseDesc(buffers.aDims, buffers.aStrides);
  buffers.bDesc = denseDesc(buffers.bDims, buffers.bStrides);
  buffers.cDesc = denseDesc(cDims, stridesInOrder(cDims, order));
  if (p.hasBias)
    buffers.biasDesc = denseDesc(biasDims, stridesInOrder(biasDims, order));
  if (p.hasMask) {
    Dims maskDims = matrices(1, p.maskRows ? m : 1, p.maskColumns ? n : 1);
    buffers.maskDesc = denseDesc(maskDims, stridesInOrder(maskDims, order));
  }
  return buffers;
}

/// A product's post-ops: the residual's sum, the attention scale and mask,
/// then the activation.
dnnl::post_ops matmulPostOps(const MatMulParams &p, const MatMulBuffers &buffers) {
  dnnl::post_ops ops = postOps(p.hasResidual != 0, Activation::None, 0, 0);
  if (p.scale != 0)
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_linear, paramFloat(p.scale), 0.0f);
  if (p.hasMask)
    ops.append_binary(dnnl::algorithm::binary_add, buffers.maskDesc);
  dnnl::post_ops activation = postOps(false, p.activation, p.alpha, p.beta);
  for (int i = 0; i < activation.len(); ++i) {
    dnnl::algorithm algorithm;
    float scale, alpha, beta;
    activation.get_params_eltwise(i, scale, algorithm, alpha, beta);
    ops.append_eltwise(scale, algorithm, alpha, beta);
  }
  return ops;
}

/// `candidate`'s product, nullopt when the library has no such
/// implementation here. The default ("any", the library's first) is what
/// ran before search: a constant B repacked once into the library's
/// preferred layout; it throws dnnl::error when the library refuses the
/// product.
std::optional<MatMulIterable> matmulCandidatePrimitive(const dnnl::engine &engine,
                                                       const MatMulParams &p,
                                                       const MatMulBuffers &buffers,
                                                       const Candidate &candidate) {
  memory::data_type type = computeType(p.precision);
  memory::desc wantedB = p.constantB && candidate.layout == "any"
                             ? memory::desc(buffers.bDims, type, memory::format_tag::any)
                             : denseDesc(buffers.bDims, buffers.bStrides, type);
  memory::desc wantedA = denseDesc(buffers.aDims, buffers.aStrides, type);
  return buildCandidate(candidate, [&] {
    MatMulIterable made;
    made.desc = std::make_unique<dnnl::matmul::desc>(wantedA, wantedB, buffers.biasDesc,
                                                     buffers.cDesc);
    made.attr = std::make_unique<dnnl::primitive_attr>();
    made.attr->set_post_ops(matmulPostOps(p, buffers));
    made.pd = dnnl::matmul::primitive_desc(*made.desc, *made.attr, engine);
    return made;
  });
}

Chosen<dnnl::matmul::primitive_desc> chooseMatMul(const dnnl::engine &engine,
                                                  const MatMulParams &p,
                                                  const MatMulBuffers &buffers,
                                                  const std::string &what,
                                                  const std::string &candidate) {
  return choosePrimitive<dnnl::matmul::primitive_desc>(
      KernelKind::MatMul, what, candidate,
      [&] { return *matmulCandidatePrimitive(engine, p, buffers, Candidate{}); },
      [&](const Candidate &c) {
        return matmulCandidatePrimitive(engine, p, buffers, c);
      });
}

std::unique_ptr<MatMulSite> createMatMul(KernelContext &context, int64_t index,
                                         const MatMulParams &p) {
  MatMulBuffers buffers = matmulBuffers(p);
  auto chosen =
      chooseMatMul(context.engine, p, buffers, siteName(KernelKind::MatMul, index),
                   context.candidate(index));
  ThreadScope threads(chosen.threads);
  const auto &pd = chosen.pd;
  auto site = std::make_unique<MatMulSite>();
  site->threads = chosen.threads;
  site->primitive = dnnl::matmul(pd);
  site->a.init(buffers.aDesc, pd.src_desc(), context.engine, false);
  site->destination = memory(buffers.cDesc, context.engine, DNNL_MEMORY_NONE);
  if (p.hasBias)
    site->bias = memory(buffers.biasDesc, context.engine, DNNL_MEMORY_NONE);
  if (p.hasMask) {
    site->mask = memory(buffers.maskDesc, context.engine, DNNL_MEMORY_NONE);
    int postOp = (p.hasResidual != 0) + (p.scale != 0);
    site->maskArgument = DNNL_ARG_ATTR_MULTIPLE_POST_OP(postOp) | DNNL_ARG_SRC_1;
  }
  site->b.init(buffers.bDesc, pd.weights_desc(), context.engine,
               p.constantB ? context.prepacked(index, 1) : nullptr);
  site->destinationBytes = buffers.cDesc.get_size();
  return site;
}

void runMatMul(KernelContext &context, MatMulSite &site, const MatMulParams &p,
               void **buffers) {
  ThreadScope threads(site.threads);
  int next = 2;
  std::unordered_map<int, memory> args;
  if (p.hasBias) {
    site.bias.set_data_handle(buffers[next++]);
    args[DNNL_ARG_BIAS] = site.bias;
  }
  void *residual = p.hasResidual ? buffers[next++] : nullptr;
  if (p.hasMask) {
    site.mask.set_data_handle(buffers[next++]);
    args[site.maskArgument] = site.mask;
  }
  void *out = buffers[next];
  if (residual)
    seedResidual(residual, out, site.destinationBytes);
  site.destination.set_data_handle(out);
  args[DNNL_ARG_SRC] = site.a.bind(buffers[0], true, context.stream);
  args[DNNL_ARG_WEIGHTS] = site.b.bind(buffers[1], p.constantB != 0, context.stream);
  args[DNNL_ARG_DST] = site.destination;
  site.primitive.execute(context.stream, args);
}

/// Whether oneDNN's 8-bit products are exact here: with VNNI they sum in
/// int32. Without it, each pair of u8 x s8 products is summed in 16 bits
/// and saturates (255 * 127 * 2 > 32767), so the integer product runs in
/// float32 on such CPUs. Reads the effective ISA, which DNNL_MAX_CPU_ISA
/// can lower.
bool hasExactInt8Products() {
  constexpr uint32_t vnni = (dnnl_cpu_isa_avx512_core_vnni & ~dnnl_cpu_isa_avx512_core) |
                            (dnnl_cpu_isa_avx2_vnni & ~dnnl_cpu_isa_avx2);
  return (static_cast<uint32_t>(dnnl::get_effective_cpu_isa()) & vnni) != 0;
}

/// Element `i` of int8 or uint8 `data`.
int32_t byteAt(const void *data, bool isUnsigned, int64_t i) {
  return isUnsigned ? static_cast<const uint8_t *>(data)[i]
                    : static_cast<const int8_t *>(data)[i];
}

/// An integer product's site. The library multiplies A by Bs (B as int8:
/// uint8 B less 128, its zero points likewise) in int8 where that is exact,
/// with A's zero point as its own; in float32 elsewhere, of A - za. B's
/// zero points enter as sums afterwards:
///   (A - za)(Bs - zbs) = (A - za) Bs - zbs rowsum(A - za).
struct IntegerMatMulSite : Site {
  dnnl::matmul primitive;
  /// int8 products; otherwise float32 ones.
  bool bytes = true;
  memory a, destination, zeroA;
  int32_t zeroAValue = 0;
  /// Bs in the library's layout (packed at link, or converted from `bs`).
  PackedWeights b;
  void *bs = nullptr;
  /// Bs converted from a uint8 B, or widened to float32 without VNNI.
  std::vector<char> convertedB;
  std::vector<float> wideA, wideDestination;
  /// The B that `bs` was made from.
  const void *preparedFrom = nullptr;
  /// B's zero points as Bs's, one per column, read each call.
  std::vector<int32_t> zerosB;

  bool readsPrepacked() const override { return b.usesPrepacked; }
};

memory::data_type byteType(bool isUnsigned) {
  return isUnsigned ? memory::data_type::u8 : memory::data_type::s8;
}

/// The integer product's A, Bs and destination as the graph has them: bytes
/// and int32, or float32 (`bytes` false).
struct IntegerMatMulDescs {
  memory::desc a, b, c;
};

IntegerMatMulDescs integerMatMulDescs(const IntegerMatMulParams &p, bool bytes) {
  auto type = [&](memory::data_type byteType) {
    return bytes ? byteType : memory::data_type::f32;
  };
  return {memory::desc({p.m, p.k}, type(byteType(p.unsignedA)), memory::format_tag::ab),
          memory::desc({p.k, p.n}, type(memory::data_type::s8),
                       p.transposedB ? memory::format_tag::ba : memory::format_tag::ab),
          memory::desc({p.m, p.n}, type(memory::data_type::s32), memory::format_tag::ab)};
}

/// The integer product's primitive. A constant B is read in the library's
/// layout; another as it is.
dnnl::matmul::primitive_desc integerMatMulPrimitive(const dnnl::engine &engine,
                                                    const IntegerMatMulParams &p,
                                                    bool bytes) {
  IntegerMatMulDescs descs = integerMatMulDescs(p, bytes);
  memory::desc wantedB =
      p.constantB ? memory::desc({p.k, p.n}, descs.b.data_type(), memory::format_tag::any)
                  : descs.b;
  dnnl::primitive_attr attr;
  if (bytes && p.hasZeroA)
    attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(descs.a, wantedB, descs.c), attr,
                                      engine);
}

/// Writes Bs of `b` (k * n bytes) into `out`: int8 (uint8 less 128) when
/// `bytes`, float32 otherwise.
void convertIntegerB(const IntegerMatMulParams &p, bool bytes, const void *b, void *out) {
  for (int64_t i = 0; i < p.k * p.n; ++i) {
    int32_t value = byteAt(b, p.unsignedB, i) - 128 * static_cast<int32_t>(p.unsignedB);
    if (bytes)
      static_cast<int8_t *>(out)[i] = static_cast<int8_t>(value);
    else
      static_cast<float *>(out)[i] = static_cast<float>(value);
  }
}

std::unique_ptr<IntegerMatMulSite>
createIntegerMatMul(KernelContext &context, int64_t index, const IntegerMatMulParams &p) {
  auto site = std::make_unique<IntegerMatMulSite>();
  site->bytes = hasExactInt8Products();
  IntegerMatMulDescs descs = integerMatMulDescs(p, site->bytes);
  auto pd = integerMatMulPrimitive(context.engine, p, site->bytes);
  site->primitive = dnnl::matmul(pd);
  site->a = memory(descs.a, context.engine, DNNL_MEMORY_NONE);
  site->destination = memory(descs.c, context.engine, DNNL_MEMORY_NONE);
  if (site->bytes && p.hasZeroA)
    site->zeroA = memory(memory::desc({1}, memory::data_type::s32, memory::format_tag::a),
                         context.engine, &site->zeroAValue);
  site->b.init(descs.b, pd.weights_desc(), context.engine,
               p.constantB ? context.prepacked(index, 1) : nullptr);
  if (!site->b.usesPrepacked && (!site->bytes || p.unsignedB))
    site->convertedB.resize(descs.b.get_size());
  site->zerosB.resize(static_cast<size_t>(p.n));
  if (!site->bytes) {
    site->wideA.resize(static_cast<size_t>(p.m * p.k));
    site->wideDestination.resize(static_cast<size_t>(p.m * p.n));
    site->note = " (float32: no VNNI for exact int8 sums)";
  }
  return site;
}

/// Points the site at Bs (int8, or float32 without VNNI) made from `b`.
void prepareIntegerB(IntegerMatMulSite &site, const IntegerMatMulParams &p,
                     const void *b) {
  site.preparedFrom = b;
  site.bs = const_cast<void *>(b);
  if (site.b.usesPrepacked || (site.bytes && !p.unsignedB))
    return;
  site.bs = site.convertedB.data();
  convertIntegerB(p, site.bytes, b, site.bs);
}

/// Writes B's zero points as Bs's, one per column, into `shifted` (n
/// entries); whether any is not 0.
bool shiftZerosB(const IntegerMatMulParams &p, const void *zeros,
                 std::vector<int32_t> &shifted) {
  bool any = false;
  for (int64_t j = 0; j < p.n; ++j) {
    int32_t zero = zeros ? byteAt(zeros, p.unsignedB, p.zerosB == 1 ? 0 : j) : 0;
    shifted[static_cast<size_t>(j)] = zero - 128 * static_cast<int32_t>(p.unsignedB);
    any |= shifted[static_cast<size_t>(j)] != 0;
  }
  return any;
}

void runIntegerMatMul(KernelContext &context, IntegerMatMulSite &site,
                      const IntegerMatMulParams &p, void **buffers) {
  const void *a = buffers[0], *b = buffers[1];
  int next = 2;
  int32_t zeroA = p.hasZeroA ? byteAt(buffers[next++], p.unsignedA, 0) : 0;
  bool centeredB = shiftZerosB(p, p.zerosB ? buffers[next++] : nullptr, site.zerosB);
  auto *out = static_cast<int32_t *>(buffers[next]);
  bool repack = !p.constantB || b != site.preparedFrom;
  if (repack)
    prepareIntegerB(site, p, b);
  std::unordered_map<int, memory> args;
  if (site.bytes) {
    site.a.set_data_handle(const_cast<void *>(a));
    site.destination.set_data_handle(out);
    if (p.hasZeroA) {
      site.zeroAValue = zeroA;
      args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = site.zeroA;
    }
  } else {
    for (int64_t i = 0; i < p.m * p.k; ++i)
      site.wideA[static_cast<size_t>(i)] =
          static_cast<float>(byteAt(a, p.unsignedA, i) - zeroA);
    site.a.set_data_handle(site.wideA.data());
    site.destination.set_data_handle(site.wideDestination.data());
  }
  args[DNNL_ARG_SRC] = site.a;
  // Not PackedWeights::bind: a uint8 B converted anew lands in the same
  // buffer, which that would take for the constant it already holds.
  args[DNNL_ARG_WEIGHTS] = site.b.usesPrepacked
                               ? site.b.prepacked
                               : site.b.port.bind(site.bs, repack, context.stream);
  args[DNNL_ARG_DST] = site.destination;
  site.primitive.execute(context.stream, args);
  if (site.bytes && !centeredB)
    return;
  // The op's result is int32: a sum past its range wraps (unsigned
  // arithmetic, which wraps without undefined behaviour).
  for (int64_t i = 0; i < p.m; ++i) {
    uint32_t *line = reinterpret_cast<uint32_t *>(out + i * p.n);
    if (!site.bytes) {
      const float *wide = site.wideDestination.data() + i * p.n;
      for (int64_t j = 0; j < p.n; ++j)
        line[j] = static_cast<uint32_t>(static_cast<int64_t>(std::nearbyint(wide[j])));
    }
    if (!centeredB)
      continue;
    uint32_t row = 0;
    for (int64_t t = 0; t < p.k; ++t)
      row += static_cast<uint32_t>(byteAt(a, p.unsignedA, i * p.k + t) - zeroA);
    for (int64_t j = 0; j < p.n; ++j)
      line[j] -= static_cast<uint32_t>(site.zerosB[static_cast<size_t>(j)]) * row;
  }
}

/// An integer convolution's site. With VNNI the library convolves the int8
/// source, its zero point its own, with the int8 weights into int32. Without
/// it (hasExactInt8Products), in float32 of source - zero point and the
/// weights, rounded back to int32: exact while a sum stays below 2^24.
struct IntegerConvSite : Site {
  dnnl::convolution_forward primitive;
  /// int8 sums; otherwise float32 ones.
  bool bytes = true;
  ActivationPort source, destination;
  PackedWeights weights;
  memory zero;
  int32_t zeroValue = 0;
  /// Without VNNI: the source less its zero point, the sums, and the
  /// weights, in float32 and the graph's layouts.
  std::vector<float> wideSource, wideDestination, wideWeights;
  /// The weights `wideWeights` were made from.
  const void *widenedFrom = nullptr;

  bool readsPrepacked() const override { return weights.usesPrepacked; }
};

/// An integer convolution's buffers as the graph has them: bytes and int32,
/// or float32 (`bytes` false).
struct IntegerConvDescs {
  memory::desc source, weights, destination;
};

IntegerConvDescs integerConvDescs(const IntegerConv2dParams &p, bool bytes) {
  auto type = [&](memory::data_type wanted) {
    return bytes ? wanted : memory::data_type::f32;
  };
  Dims source = {p.batch, p.inChannels, p.inHeight, p.inWidth};
  Dims destination = {p.batch, p.outChannels, p.outHeight, p.outWidth};
  return {denseDesc(source, activationStrides(source, p.sourceLayout),
                    type(memory::data_type::s8)),
          convWeightsDesc(p, type(memory::data_type::s8)),
          denseDesc(destination, activationStrides(destination, p.destinationLayout),
                    type(memory::data_type::s32))};
}

/// The integer convolution's primitive: in the graph's layouts where the
/// library has a kernel for them that is not its reference code, else in
/// the layouts it picks (reordered on each side); the weights always in
/// its own.
dnnl::convolution_forward::primitive_desc
integerConvPrimitive(const dnnl::engine &engine, const IntegerConv2dParams &p,
                     bool bytes) {
  IntegerConvDescs descs = integerConvDescs(p, bytes);
  dnnl::primitive_attr attr;
  if (bytes && p.zeroSource != 0)
    attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
  auto make = [&](const memory::desc &source, const memory::desc &destination) {
    dnnl::convolution_forward::desc desc(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, source,
        anyLayout(descs.weights, descs.weights.data_type()), destination,
        memory::dims{p.strideH, p.strideW},
        memory::dims{p.dilationH - 1, p.dilationW - 1}, memory::dims{p.padTop, p.padLeft},
        memory::dims{p.padBottom, p.padRight});
    return dnnl::convolution_forward::primitive_desc(desc, attr, engine);
  };
  try {
    auto plain = make(descs.source, descs.destination);
    if (!isReferenceImpl(plain.impl_info_str()))
      return plain;
  } catch (const dnnl::error &) {
  }
  return make(anyLayout(descs.source, descs.source.data_type()),
              anyLayout(descs.destination, descs.destination.data_type()));
}

/// Writes `count` int8 values as float32 into `out`.
void widenBytes(const void *bytes, size_t count, float *out) {
  for (size_t i = 0; i < count; ++i)
    out[i] = static_cast<float>(static_cast<const int8_t *>(bytes)[i]);
}

std::unique_ptr<IntegerConvSite> createIntegerConv(KernelContext &context, int64_t index,
                                                   const IntegerConv2dParams &p) {
  auto site = std::make_unique<IntegerConvSite>();
  site->bytes = hasExactInt8Products();
  IntegerConvDescs descs = integerConvDescs(p, site->bytes);
  auto pd = integerConvPrimitive(context.engine, p, site->bytes);
  site->primitive = dnnl::convolution_forward(pd);
  site->source.init(descs.source, pd.src_desc(), context.engine, false);
  site->destination.init(descs.destination, pd.dst_desc(), context.engine, true);
  site->weights.init(descs.weights, pd.weights_desc(), context.engine,
                     p.constantWeights ? context.prepacked(index, 1) : nullptr);
  site->zero = memory(memory::desc({1}, memory::data_type::s32, memory::format_tag::a),
                      context.engine, &site->zeroValue);
  if (!site->bytes) {
    site->wideSource.resize(descs.source.get_size() / sizeof(float));
    site->wideDestination.resize(descs.destination.get_size() / sizeof(float));
    if (!site->weights.usesPrepacked)
      site->wideWeights.resize(descs.weights.get_size() / sizeof(float));
    site->note = " (float32: no VNNI for exact int8 sums)";
  }
  return site;
}

void runIntegerConv(KernelContext &context, IntegerConvSite &site,
                    const IntegerConv2dParams &p, void **buffers) {
  const void *source = buffers[0], *weights = buffers[1];
  auto *out = static_cast<int32_t *>(buffers[2]);
  std::unordered_map<int, memory> args;
  memory packedWeights;
  if (site.bytes) {
    args[DNNL_ARG_SRC] =
        site.source.bind(const_cast<void *>(source), true, context.stream);
    args[DNNL_ARG_DST] = site.destination.bind(out, false, context.stream);
    packedWeights = site.weights.bind(const_cast<void *>(weights), p.constantWeights != 0,
                                      context.stream);
    if (p.zeroSource != 0) {
      site.zeroValue = static_cast<int32_t>(p.zeroSource);
      args[DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC] = site.zero;
    }
  } else {
    const auto *bytes = static_cast<const int8_t *>(source);
    for (size_t i = 0; i < site.wideSource.size(); ++i)
      site.wideSource[i] = static_cast<float>(bytes[i] - p.zeroSource);
    args[DNNL_ARG_SRC] = site.source.bind(site.wideSource.data(), true, context.stream);
    args[DNNL_ARG_DST] =
        site.destination.bind(site.wideDestination.data(), false, context.stream);
    // A constant is widened once, a run-time weight each call. Not
    // PackedWeights::bind: the widened weights always land in one buffer,
    // which that would take for the constant it already holds.
    bool widen = !p.constantWeights || weights != site.widenedFrom;
    if (site.weights.usesPrepacked) {
      packedWeights = site.weights.prepacked;
    } else {
      if (widen) {
        widenBytes(weights, site.wideWeights.size(), site.wideWeights.data());
        site.widenedFrom = weights;
      }
      packedWeights =
          site.weights.port.bind(site.wideWeights.data(), widen, context.stream);
    }
  }
  args[DNNL_ARG_WEIGHTS] = packedWeights;
  site.primitive.execute(context.stream, args);
  site.destination.store(context.stream);
  if (site.bytes)
    return;
  for (size_t i = 0; i < site.wideDestination.size(); ++i)
    out[i] = static_cast<int32_t>(std::nearbyint(site.wideDestination[i]));
}

/// Softmax reads and writes the graph's buffers in place: no reorders.
struct SourceToDestinationSite : Site {
  dnnl::primitive primitive;
  memory source, destination;
};

template <typename Params>
void runSourceToDestination(KernelContext &context, SourceToDestinationSite &site,
                            const Params &, void **buffers) {
  site.source.set_data_handle(buffers[0]);
  site.destination.set_data_handle(buffers[1]);
  site.primitive.execute(context.stream,
                         {{DNNL_ARG_SRC, site.source}, {DNNL_ARG_DST, site.destination}});
}

/// A pooling site. The library's fast kernels read and write one layout:
/// a pooling between two (an NHWC result that the graph wants in NCHW)
/// runs in its source's layout and reorders its result, not in the
/// reference kernel.
struct PoolSite : Site {
  dnnl::pooling_forward primitive;
  memory source;
  ActivationPort destination;
};

std::unique_ptr<PoolSite> createPool(KernelContext &context, int64_t,
                                     const Pool2dParams &p) {
  Dims sourceDims = {p.batch, p.channels, p.inHeight, p.inWidth};
  Dims destinationDims = {p.batch, p.channels, p.outHeight, p.outWidth};
  memory::desc sourceDesc =
      denseDesc(sourceDims, activationStrides(sourceDims, p.sourceLayout));
  memory::desc destinationDesc =
      denseDesc(destinationDims, activationStrides(destinationDims, p.destinationLayout));
  memory::desc wantedDesc =
      denseDesc(destinationDims, activationStrides(destinationDims, p.sourceLayout));
  auto algorithm = p.algorithm == PoolAlgorithm::Max
                       ? dnnl::algorithm::pooling_max
                       : dnnl::algorithm::pooling_avg_exclude_padding;
  dnnl::pooling_forward::desc desc(dnnl::prop_kind::forward_inference, algorithm,
                                   sourceDesc, wantedDesc, {p.strideH, p.strideW},
                                   {p.kernelHeight, p.kernelWidth}, {p.padTop, p.padLeft},
                                   {p.padBottom, p.padRight});
  auto site = std::make_unique<PoolSite>();
  site->primitive =
      dnnl::pooling_forward(dnnl::pooling_forward::primitive_desc(desc, context.engine));
  site->source = memory(sourceDesc, context.engine, DNNL_MEMORY_NONE);
  site->destination.init(destinationDesc, wantedDesc, context.engine, true);
  return site;
}

void runPool(KernelContext &context, PoolSite &site, const Pool2dParams &,
             void **buffers) {
  site.source.set_data_handle(buffers[0]);
  memory destination = site.destination.bind(buffers[1], false, context.stream);
  site.primitive.execute(context.stream,
                         {{DNNL_ARG_SRC, site.source}, {DNNL_ARG_DST, destination}});
  site.destination.store(context.stream);
}

std::unique_ptr<SourceToDestinationSite> createSoftmax(KernelContext &context, int64_t,
                                                       const SoftmaxParams &p) {
  Dims dims = {p.rows, p.channels};
  memory::desc desc = denseDesc(dims, stridesInOrder(dims, {0, 1}));
  auto site = std::make_unique<SourceToDestinationSite>();
  site->primitive = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(
      dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, desc, 1),
      context.engine));
  site->source = memory(desc, context.engine, DNNL_MEMORY_NONE);
  site->destination = memory(desc, context.engine, DNNL_MEMORY_NONE);
  return site;
}

struct LayerNormSite : Site {
  dnnl::layer_normalization_forward primitive;
  memory source, destination, scale, shift;
};

std::unique_ptr<LayerNormSite> createLayerNorm(KernelContext &context, int64_t,
                                               const LayerNormParams &p) {
  Dims dims = {p.rows, p.channels};
  memory::desc desc = denseDesc(dims, stridesInOrder(dims, {0, 1}));
  memory::desc channelDesc = denseDesc({p.channels}, {1});
  auto flags = dnnl::normalization_flags::none;
  if (p.hasScale)
    flags |= dnnl::normalization_flags::use_scale;
  if (p.hasShift)
    flags |= dnnl::normalization_flags::use_shift;
  auto site = std::make_unique<LayerNormSite>();
  site->primitive =
      dnnl::layer_normalization_forward(dnnl::layer_normalization_forward::primitive_desc(
          dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_inference,
                                                  desc, paramFloat(p.epsilon), flags),
          context.engine));
  site->source = memory(desc, context.engine, DNNL_MEMORY_NONE);
  site->destination = memory(desc, context.engine, DNNL_MEMORY_NONE);
  site->scale = memory(channelDesc, context.engine, DNNL_MEMORY_NONE);
  site->shift = memory(channelDesc, context.engine, DNNL_MEMORY_NONE);
  return site;
}

void runLayerNorm(KernelContext &context, LayerNormSite &site, const LayerNormParams &p,
                  void **buffers) {
  int next = 1;
  std::unordered_map<int, memory> args;
  if (p.hasScale) {
    site.scale.set_data_handle(buffers[next++]);
    args[DNNL_ARG_SCALE] = site.scale;
  }
  if (p.hasShift) {
    site.shift.set_data_handle(buffers[next++]);
    args[DNNL_ARG_SHIFT] = site.shift;
  }
  site.source.set_data_handle(buffers[0]);
  site.destination.set_data_handle(buffers[next]);
  args[DNNL_ARG_SRC] = site.source;
  args[DNNL_ARG_DST] = site.destination;
  site.primitive.execute(context.stream, args);
}

template <typename SiteType, typename Params, typename Create, typename Run>
void dispatch(void *opaque, int64_t index, const int64_t *words, void **buffers,
              const char *what, Create create, Run run) {
  auto &context = *static_cast<KernelContext *>(opaque);
  if (!context.failure.isOk())
    return;
  // The words are the kind's params struct (KernelAbi.h); a copy reads
  // them without aliasing the constant array as another type.
  Params params;
  std::memcpy(&params, words, sizeof(Params));
  try {
    std::unique_ptr<Site> &slot = context.sites.at(index);
    if (!slot) {
      auto made = create(context, index, params);
      made->implementation = implementationOf(made->primitive) + made->note;
      slot = std::move(made);
    }
    run(context, static_cast<SiteType &>(*slot), params, buffers);
  } catch (const std::exception &error) {
    context.failure = internalError(std::string(what) + " kernel at site " +
                                    std::to_string(index) + " failed: " + error.what());
  }
}

void convKernel(void *context, int64_t site, const int64_t *params, void **buffers) {
  dispatch<ConvSite, Conv2dParams>(context, site, params, buffers, "conv2d", createConv,
                                   runConv);
}

void matmulKernel(void *context, int64_t site, const int64_t *params, void **buffers) {
  dispatch<MatMulSite, MatMulParams>(context, site, params, buffers, "matmul",
                                     createMatMul, runMatMul);
}

void integerMatMulKernel(void *context, int64_t site, const int64_t *params,
                         void **buffers) {
  dispatch<IntegerMatMulSite, IntegerMatMulParams>(context, site, params, buffers,
                                                   "integer_matmul", createIntegerMatMul,
                                                   runIntegerMatMul);
}

void integerConvKernel(void *context, int64_t site, const int64_t *params,
                       void **buffers) {
  dispatch<IntegerConvSite, IntegerConv2dParams>(context, site, params, buffers,
                                                 "integer_conv2d", createIntegerConv,
                                                 runIntegerConv);
}

void poolKernel(void *context, int64_t site, const int64_t *params, void **buffers) {
  dispatch<PoolSite, Pool2dParams>(context, site, params, buffers, "pool2d", createPool,
                                   runPool);
}

void softmaxKernel(void *context, int64_t site, const int64_t *params, void **buffers) {
  dispatch<SourceToDestinationSite, SoftmaxParams>(context, site, params, buffers,
                                                   "softmax", createSoftmax,
                                                   runSourceToDestination<SoftmaxParams>);
}

void layerNormKernel(void *context, int64_t site, const int64_t *params, void **buffers) {
  dispatch<LayerNormSite, LayerNormParams>(context, site, params, buffers, "layernorm",
                                           createLayerNorm, runLayerNorm);
}

/// A kernel of flowc's own (Selection.h): no oneDNN primitive; the site
/// records `implementation` for --profile.
template <typename Params, typename Run>
void ownKernel(void *opaque, int64_t index, const int64_t *words, const char *what,
               const char *implementation, Run run) {
  auto &context = *static_cast<KernelContext *>(opaque);
  if (!context.failure.isOk())
    return;
  if (index < 0 || static_cast<size_t>(index) >= context.sites.size()) {
    context.failure = internalError(std::string(what) + " kernel at site " +
                                    std::to_string(index) + ": the code has " +
                                    std::to_string(context.sites.size()) + " sites");
    return;
  }
  Params params;
  std::memcpy(&params, words, sizeof(Params));
  std::unique_ptr<Site> &slot = context.sites[static_cast<size_t>(index)];
  if (!slot) {
    slot = std::make_unique<Site>();
    slot->implementation = implementation;
  }
  run(params);
}

void topKKernel(void *context, int64_t site, const int64_t *words, void **buffers) {
  ownKernel<TopKParams>(context, site, words, "topk", "flowc:select",
                        [&](const TopKParams &p) {
                          topKRows(p, buffers[0], static_cast<int32_t *>(buffers[1]));
                        });
}

void scatterKernel(void *context, int64_t site, const int64_t *words, void **buffers) {
  ownKernel<ScatterRowsParams>(
      context, site, words, "scatter", "flowc:scatter", [&](const ScatterRowsParams &p) {
        scatterRows(p, buffers[0], buffers[1], static_cast<const int32_t *>(buffers[2]),
                    buffers[3]);
      });
}

KernelFunction kernelFor(KernelKind kind) {
  switch (kind) {
  case KernelKind::Conv2d:
    return convKernel;
  case KernelKind::MatMul:
    return matmulKernel;
  case KernelKind::Pool2d:
    return poolKernel;
  case KernelKind::Softmax:
    return softmaxKernel;
  case KernelKind::LayerNorm:
    return layerNormKernel;
  case KernelKind::TopK:
    return topKKernel;
  case KernelKind::ScatterRows:
    return scatterKernel;
  case KernelKind::IntegerMatMul:
    return integerMatMulKernel;
  case KernelKind::IntegerConv2d:
    return integerConvKernel;
  }
  return nullptr;
}

} // namespace

namespace {

/// At most this many layout and implementation candidates per kernel, and
/// thread variants of the default on top.
constexpr size_t kMaxImplCandidates = 6;
/// Multiply-adds below which fewer threads may win: the fork and join of
/// every core costs more than a small kernel's work.
constexpr int64_t kOneThreadMacs = int64_t{1} << 22;
constexpr int64_t kHalfThreadsMacs = int64_t{1} << 26;

/// One implementation found while listing candidates, with the layouts it
/// reads and writes (two with the same name and layouts are one).
struct Found {
  Candidate candidate;
  memory::desc source, weights, destination;
};

/// Whether `name` ("jit:sse41") is a kernel already found for `kind`'s
/// layout and algorithm on another instruction set ("jit:avx2"): the
/// library lists the best one first, and the older one only adds a
/// candidate that cannot win.
bool isOlderIsaOf(const std::vector<Found> &found, const Candidate &kind,
                  std::string_view name) {
  auto family = [](std::string_view impl) { return impl.substr(0, impl.rfind(':')); };
  return std::any_of(found.begin(), found.end(), [&](const Found &other) {
    return isSameKind(other.candidate, kind) && other.candidate.impl != name &&
           family(other.candidate.impl) == family(name);
  });
}

/// Adds `pd`'s implementations, in the library's order, as candidates of
/// `kind`'s layout and algorithm: the first of each name (what selectImpl
/// builds), reference implementations and older instruction sets of one
/// found left out but for the default (always first, whatever the library
/// picks), and none that repeats an earlier one.
template <typename Desc, typename PrimitiveDesc>
void addImplementations(std::vector<Found> &found, Iterable<Desc, PrimitiveDesc> &&made,
                        const Candidate &kind) {
  PrimitiveDesc &pd = made.pd;
  std::set<std::string> names;
  do {
    std::string name = pd.impl_info_str();
    bool isDefault = found.empty();
    if (!names.insert(name).second)
      continue;
    if (!isDefault && (isReferenceImpl(name) || !isCandidateWord(name) ||
                       isOlderIsaOf(found, kind, name)))
      continue;
    Found next{{kind.layout, isCandidateWord(name) ? name : "", 0, kind.winograd},
               pd.src_desc(),
               pd.weights_desc(),
               pd.dst_desc()};
    bool repeats = std::any_of(found.begin(), found.end(), [&](const Found &other) {
      return other.candidate.impl == next.candidate.impl && other.source == next.source &&
             other.weights == next.weights && other.destination == next.destination;
    });
    if (!repeats)
      found.push_back(std::move(next));
  } while (found.size() < kMaxImplCandidates && pd.next_impl());
}

/// The candidates `found` lists, then the default on fewer threads when
/// the kernel is small enough for that to win.
std::vector<std::string> candidateTexts(const std::vector<Found> &found, int64_t macs) {
  std::vector<std::string> texts;
  for (const Found &entry : found)
    texts.push_back(candidateText(entry.candidate));
  int cores = omp_get_max_threads();
  auto withThreads = [&](int threads) {
    Candidate candidate = found.front().candidate;
    candidate.threads = threads;
    texts.push_back(candidateText(candidate));
  };
  if (cores >= 4 && macs < kHalfThreadsMacs)
    withThreads(cores / 2);
  if (cores > 1 && macs < kOneThreadMacs)
    withThreads(1);
  return texts;
}

std::vector<std::string> convCandidates(const dnnl::engine &engine,
                                        const Conv2dParams &p) {
  ConvBuffers buffers = convBuffers(p);
  std::vector<Found> found;
  auto [first, made] = defaultConv(engine, p, buffers);
  addImplementations(found, std::move(made), first);
  // The library's layouts, the graph's own plain ones (no activation
  // reorders) and Winograd: each that is not the default's.
  std::vector<Candidate> others = {Candidate{}};
  for (auto [layout, name] : {std::pair{ActivationLayout::Nhwc, "nhwc"},
                              std::pair{ActivationLayout::Nchw, "nchw"}})
    if (p.sourceLayout == layout || p.destinationLayout == layout)
      others.push_back(Candidate{name, "", 0});
  if (isWinogradShape(p))
    others.push_back(Candidate{"any", "", 0, true});
  for (const Candidate &other : others) {
    if (isSameKind(other, first))
      continue;
    if (auto pd = convCandidatePrimitive(engine, p, buffers, other))
      addImplementations(found, std::move(*pd), other);
  }
  int64_t macs = p.batch * p.outChannels * p.outHeight * p.outWidth *
                 (p.inChannels / std::max<int64_t>(p.groups, 1)) * p.kernelHeight *
                 p.kernelWidth;
  return candidateTexts(found, macs);
}

std::vector<std::string> matmulCandidates(const dnnl::engine &engine,
                                          const MatMulParams &p) {
  MatMulBuffers buffers = matmulBuffers(p);
  std::vector<Found> found;
  addImplementations(found, *matmulCandidatePrimitive(engine, p, buffers, Candidate{}),
                     Candidate{});
  // A constant B may also be read as it is, unpacked.
  if (p.constantB)
    if (Candidate plain{"plain", "", 0};
        auto pd = matmulCandidatePrimitive(engine, p, buffers, plain))
      addImplementations(found, std::move(*pd), plain);
  return candidateTexts(found, p.batch * p.m * p.n * p.k);
}

/// `words` as a `Params`; InvalidArgument naming the kind when they are not.
template <typename Params>
Expected<Params> kernelParams(KernelKind kind, const std::vector<int64_t> &words) {
  std::optional<Params> params = paramsFromWords<Params>(words);
  if (!params)
    return invalidArgument(std::string("a ") + kernelKindName(kind) + " kernel has " +
                           std::to_string(sizeof(Params) / sizeof(int64_t)) +
                           " params, not " + std::to_string(words.size()));
  return *params;
}

} // namespace

bool isTunable(KernelKind kind) {
  return kind == KernelKind::Conv2d || kind == KernelKind::MatMul;
}

Expected<std::vector<std::string>> libraryCandidates(KernelKind kind,
                                                     const std::vector<int64_t> &params) {
  if (!isTunable(kind))
    return std::vector<std::string>();
  try {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    if (kind == KernelKind::Conv2d) {
      FLOWC_ASSIGN_OR_RETURN(auto conv, kernelParams<Conv2dParams>(kind, params));
      return convCandidates(engine, conv);
    }
    FLOWC_ASSIGN_OR_RETURN(auto matmul, kernelParams<MatMulParams>(kind, params));
    return matmulCandidates(engine, matmul);
  } catch (const dnnl::error &error) {
    return invalidArgument(std::string("the library refuses this ") +
                           kernelKindName(kind) + " kernel: " + error.what());
  }
}

namespace {

/// `source` (in `user`'s layout) reordered into `wanted`.
PackedWeight reorderedWeight(const dnnl::engine &engine, const memory::desc &user,
                             const memory::desc &wanted, const void *source) {
  PackedWeight packed{layoutOf(wanted), std::string(wanted.get_size(), '\0')};
  // A reorder only reads its source.
  memory from(user, engine, const_cast<void *>(source));
  memory to(wanted, engine, packed.bytes.data());
  dnnl::stream stream(engine);
  dnnl::reorder(from, to).execute(stream, from, to);
  stream.wait();
  return packed;
}

/// An integer product's constant B as its site reads it on this CPU: Bs
/// (int8, or float32 without VNNI) in the library's layout.
Expected<std::optional<PackedWeight>> packIntegerB(const IntegerMatMulParams &p,
                                                   std::string_view source) {
  if (source.size() != static_cast<size_t>(p.k * p.n))
    return invalidArgument("an integer_matmul kernel's B has " +
                           std::to_string(p.k * p.n) + " bytes, not " +
                           std::to_string(source.size()));
  bool bytes = hasExactInt8Products();
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  memory::desc user = integerMatMulDescs(p, bytes).b;
  memory::desc wanted = integerMatMulPrimitive(engine, p, bytes).weights_desc();
  bool converted = !bytes || p.unsignedB;
  if (user == wanted && !converted)
    return std::optional<PackedWeight>();
  std::string bs(source);
  if (converted) {
    bs.resize(user.get_size());
    convertIntegerB(p, bytes, source.data(), bs.data());
  }
  return std::optional<PackedWeight>(reorderedWeight(engine, user, wanted, bs.data()));
}

/// An integer convolution's constant weights as its site reads them on
/// this CPU: int8 (with the library's compensation sums), or float32 without
/// VNNI, in the library's layout.
Expected<std::optional<PackedWeight>> packIntegerConvWeights(const IntegerConv2dParams &p,
                                                             std::string_view source) {
  bool bytes = hasExactInt8Products();
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  memory::desc user = integerConvDescs(p, bytes).weights;
  size_t count = user.get_size() / (bytes ? 1 : sizeof(float));
  if (source.size() != count)
    return invalidArgument("an integer_conv2d kernel's weights have " +
                           std::to_string(count) + " bytes, not " +
                           std::to_string(source.size()));
  memory::desc wanted = integerConvPrimitive(engine, p, bytes).weights_desc();
  if (bytes && user == wanted)
    return std::optional<PackedWeight>();
  std::string widened;
  const void *data = source.data();
  if (!bytes) {
    widened.resize(user.get_size());
    widenBytes(source.data(), count, reinterpret_cast<float *>(widened.data()));
    data = widened.data();
  }
  return std::optional<PackedWeight>(reorderedWeight(engine, user, wanted, data));
}

} // namespace

Expected<std::optional<PackedWeight>>
packKernelWeight(KernelKind kind, const std::vector<int64_t> &params, int64_t buffer,
                 std::string_view source, std::string_view candidate) {
  std::optional<Conv2dParams> conv;
  std::optional<MatMulParams> matmul;
  if (kind == KernelKind::Conv2d)
    conv = paramsFromWords<Conv2dParams>(params);
  if (kind == KernelKind::MatMul)
    matmul = paramsFromWords<MatMulParams>(params);
  // The library's exceptions as an error naming what was being packed.
  auto packing = [](const char *what,
                    auto pack) -> Expected<std::optional<PackedWeight>> {
    try {
      return pack();
    } catch (const dnnl::error &error) {
      return internalError(std::string("packing ") + what + " failed: " + error.what());
    }
  };
  if (auto integer = kind == KernelKind::IntegerMatMul
                         ? paramsFromWords<IntegerMatMulParams>(params)
                         : std::nullopt;
      integer && buffer == 1 && integer->constantB)
    return packing("an integer_matmul kernel's B",
                   [&] { return packIntegerB(*integer, source); });
  if (auto integerConv = kind == KernelKind::IntegerConv2d
                             ? paramsFromWords<IntegerConv2dParams>(params)
                             : std::nullopt;
      integerConv && buffer == 1 && integerConv->constantWeights)
    return packing("an integer_conv2d kernel's weights",
                   [&] { return packIntegerConvWeights(*integerConv, source); });
  std::string what =
      std::string("packing a ") + kernelKindName(kind) + " kernel's weights";
  try {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    memory::desc user, wanted;
    if (conv && buffer == 1 && conv->constantWeights) {
      ConvBuffers buffers = convBuffers(*conv);
      user = buffers.weightsDesc;
      wanted = chooseConv(engine, *conv, buffers, what, std::string(candidate))
                   .pd.weights_desc();
    } else if (matmul && buffer == 1 && matmul->constantB) {
      MatMulBuffers buffers = matmulBuffers(*matmul);
      user = buffers.bDesc;
      wanted = chooseMatMul(engine, *matmul, buffers, what, std::string(candidate))
                   .pd.weights_desc();
    } else {
      return std::optional<PackedWeight>();
    }
    if (source.size() != user.get_size())
      return invalidArgument("a " + std::string(kernelKindName(kind)) +
                             " kernel's buffer " + std::to_string(buffer) + " has " +
                             std::to_string(user.get_size()) + " bytes, not " +
                             std::to_string(source.size()));
    // Read as it is: nothing to pack.
    if (user == wanted)
      return std::optional<PackedWeight>();
    return std::optional<PackedWeight>(
        reorderedWeight(engine, user, wanted, source.data()));
  } catch (const dnnl::error &error) {
    return internalError(what + " failed: " + error.what());
  }
}

int64_t prepackedWeightsInUse(const KernelContext &context) {
  int64_t count = 0;
  for (const std::unique_ptr<Site> &site : context.sites)
    count += site && site->readsPrepacked();
  return count;
}

Expected<KernelContextPtr> bindKernels(void *library, const Artifact &artifact) {
  const std::string &artifactPath = artifact.path();
  auto *table = static_cast<KernelFunction *>(dlsym(library, kKernelTableSymbol));
  if (!table)
    return KernelContextPtr();
  auto *context = static_cast<void **>(dlsym(library, kKernelContextSymbol));
  auto *kinds = static_cast<const int64_t *>(dlsym(library, kKernelKindsSymbol));
  auto *sites = static_cast<const int64_t *>(dlsym(library, kKernelSitesSymbol));
  if (!context || !kinds || !sites)
    return dataLoss("'" + artifactPath + "': code has a kernel table but not " +
                    kKernelContextSymbol + ", " + kKernelKindsSymbol + " and " +
                    kKernelSitesSymbol);
  // Code from before the version symbol existed is version 1.
  auto *abi = static_cast<const int64_t *>(dlsym(library, kKernelAbiSymbol));
  int64_t version = abi ? *abi : 1;
  if (version != kKernelAbiVersion)
    return unavailable("'" + artifactPath + "' was compiled for library kernel ABI " +
                       std::to_string(version) + ", this runtime has " +
                       std::to_string(kKernelAbiVersion) +
                       ": compile the model again with this flowc");
  for (int64_t kind = 0; kind < 63; ++kind) {
    if (!(*kinds & (int64_t{1} << kind)))
      continue;
    if (kind >= kKernelKindCount)
      return unavailable("'" + artifactPath + "' needs library kernel kind " +
                         std::to_string(kind) + ", which this runtime lacks");
    table[kind] = kernelFor(static_cast<KernelKind>(kind));
  }
  KernelContextPtr state(new KernelContext(*sites));
  const std::vector<PackedWeightSpec> &packed = artifact.plan().packed;
  for (size_t i = 0; i < packed.size(); ++i)
    state->prepackedWeights[{packed[i].site, packed[i].buffer}] =
        PrepackedWeight{artifact.packedBytes(i).data(), packed[i].size, packed[i].layout};
  FLOWC_ASSIGN_OR_RETURN(state->candidates, tunedCandidates(artifact, *sites));
  *context = state.get();
  return state;
}

Expected<std::vector<std::string>> tunedCandidates(const Artifact &artifact,
                                                   int64_t sites) {
  std::vector<std::string> candidates(static_cast<size_t>(std::max<int64_t>(sites, 0)));
  for (const TunedKernelSpec &tuned : artifact.plan().tuned) {
    // Loop kernels' entries (site -1) were applied when the code was made.
    if (tuned.site < 0)
      continue;
    if (tuned.site >= sites)
      return dataLoss("'" + artifact.path() + "': the plan tunes library kernel site " +
                      std::to_string(tuned.site) + ", but the code has " +
                      std::to_string(sites) + " sites");
    candidates[tuned.site] = tuned.candidate;
  }
  return candidates;
}

std::string siteImplementation(const KernelContext &context, int64_t site) {
  if (site < 0 || static_cast<size_t>(site) >= context.sites.size() ||
      !context.sites[site])
    return "";
  return context.sites[site]->implementation;
}

KernelContextPtr makeKernelContext(std::vector<std::string> candidates) {
  KernelContextPtr context(new KernelContext(static_cast<int64_t>(candidates.size())));
  context->candidates = std::move(candidates);
  return context;
}

KernelFunction kernelFunction(KernelKind kind) { return kernelFor(kind); }

Status takeKernelFailure(KernelContext &context) {
  Status failure = std::move(context.failure);
  context.failure = Status::ok();
  return failure;
}

} // namespace flowc::runtime
