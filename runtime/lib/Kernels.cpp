#include "Kernels.h"

#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/KernelAbi.h"
#include "flowc/runtime/PackedWeights.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <chrono>
#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <limits>
#include <map>
#include <numeric>
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
};

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
      : engine(dnnl::engine::kind::cpu, 0), stream(engine), sites(siteCount) {}

  /// The packed weight of buffer `buffer` of `site`, if the artifact has one.
  const PrepackedWeight *prepacked(int64_t site, int64_t buffer) const {
    auto found = prepackedWeights.find({site, buffer});
    return found == prepackedWeights.end() ? nullptr : &found->second;
  }

  dnnl::engine engine;
  dnnl::stream stream;
  std::vector<std::unique_ptr<Site>> sites;
  std::map<std::pair<int64_t, int64_t>, PrepackedWeight> prepackedWeights;
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
    if (alpha == 0.0f && std::isinf(beta) && beta > 0)
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

/// One way to run a convolution: a primitive and the layouts it wants.
struct ConvVariant {
  dnnl::convolution_forward primitive;
  ActivationPort source, destination;
  PackedWeights weights;
  memory::desc chosenSource, chosenDestination;
};

/// A convolution site tunes itself: on its first call each candidate
/// layout runs and is timed, and the fastest stays alone (the others'
/// packed weights are freed).
struct ConvSite : Site {
  std::vector<ConvVariant> candidates;
  memory bias;
  size_t destinationBytes = 0;

  /// Once tuned one candidate is left; before, any may.
  bool readsPrepacked() const override {
    for (const ConvVariant &variant : candidates)
      if (variant.weights.usesPrepacked)
        return true;
    return false;
  }
};

memory::desc anyLayout(const memory::desc &desc,
                       memory::data_type type = memory::data_type::f32) {
  return memory::desc(desc.dims(), type, memory::format_tag::any);
}

memory::desc convWeightsDesc(const Conv2dParams &p) {
  int64_t groups = p.groups, kh = p.kernelHeight, kw = p.kernelWidth;
  ConvWeightLayout layout = p.weightLayout;
  if (groups == 1) {
    Dims dims = {p.outChannels, p.inChannels, kh, kw};
    return denseDesc(dims, layout == ConvWeightLayout::Ohwi
                               ? stridesInOrder(dims, {0, 2, 3, 1})
                               : stridesInOrder(dims, {0, 1, 2, 3}));
  }
  Dims dims = {groups, p.outChannels / groups, p.inChannels / groups, kh, kw};
  // Depthwise [kh, kw, channels, multiplier]: group-major channels.
  return denseDesc(dims, layout == ConvWeightLayout::Hwcm
                             ? stridesInOrder(dims, {3, 4, 0, 1, 2})
                             : stridesInOrder(dims, {0, 1, 2, 3, 4}));
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

dnnl::convolution_forward::primitive_desc
convPrimitive(const dnnl::engine &engine, const Conv2dParams &p,
              const ConvBuffers &buffers, const memory::desc &wantedSource,
              const memory::desc &wantedDestination) {
  dnnl::primitive_attr attr;
  attr.set_post_ops(postOps(p.hasResidual != 0, p.activation, p.alpha, p.beta));
  dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
      wantedSource, anyLayout(buffers.weightsDesc, buffers.type), buffers.biasDesc,
      wantedDestination, {p.strideH, p.strideW}, {p.dilationH - 1, p.dilationW - 1},
      {p.padTop, p.padLeft}, {p.padBottom, p.padRight});
  return dnnl::convolution_forward::primitive_desc(desc, attr, engine);
}

/// The first candidate: the library's preferred (blocked) layouts, with
/// activation reorders. Its weight layout is the one packed at link time.
dnnl::convolution_forward::primitive_desc
preferredConvPrimitive(const dnnl::engine &engine, const Conv2dParams &p,
                       const ConvBuffers &buffers) {
  return convPrimitive(engine, p, buffers, anyLayout(buffers.sourceDesc, buffers.type),
                       anyLayout(buffers.destinationDesc));
}

std::unique_ptr<ConvSite> createConv(KernelContext &context, int64_t index,
                                     const Conv2dParams &p) {
  ConvBuffers buffers = convBuffers(p);
  auto site = std::make_unique<ConvSite>();
  auto addCandidate = [&](const dnnl::convolution_forward::primitive_desc &pd) {
    for (const ConvVariant &existing : site->candidates)
      if (existing.chosenSource == pd.src_desc() &&
          existing.chosenDestination == pd.dst_desc())
        return;
    ConvVariant &variant = site->candidates.emplace_back();
    variant.primitive = dnnl::convolution_forward(pd);
    variant.source.init(buffers.sourceDesc, pd.src_desc(), context.engine, false);
    variant.destination.init(buffers.destinationDesc, pd.dst_desc(), context.engine,
                             true);
    variant.weights.init(buffers.weightsDesc, pd.weights_desc(), context.engine,
                         p.constantWeights ? context.prepacked(index, 1) : nullptr);
    variant.chosenSource = pd.src_desc();
    variant.chosenDestination = pd.dst_desc();
  };
  addCandidate(preferredConvPrimitive(context.engine, p, buffers));
  // And NHWC as the graph has it, with no reorders (but the bf16 rounding).
  bool nhwc = p.sourceLayout == ActivationLayout::Nhwc &&
              p.destinationLayout == ActivationLayout::Nhwc;
  if (nhwc)
    addCandidate(convPrimitive(
        context.engine, p, buffers,
        denseDesc(buffers.source, activationStrides(buffers.source, p.sourceLayout),
                  buffers.type),
        buffers.destinationDesc));
  site->bias = memory(buffers.biasDesc, context.engine, DNNL_MEMORY_NONE);
  site->destinationBytes = buffers.destinationDesc.get_size();
  return site;
}

void runConvVariant(KernelContext &context, ConvSite &site, ConvVariant &variant,
                    const Conv2dParams &p, void **buffers) {
  bool residual = p.hasResidual != 0;
  void *out = buffers[residual ? 4 : 3];
  if (residual)
    seedResidual(buffers[3], out, site.destinationBytes);
  site.bias.set_data_handle(buffers[2]);
  memory source = variant.source.bind(buffers[0], true, context.stream);
  memory destination = variant.destination.bind(out, residual, context.stream);
  memory weights =
      variant.weights.bind(buffers[1], p.constantWeights != 0, context.stream);
  variant.primitive.execute(context.stream, {{DNNL_ARG_SRC, source},
                                             {DNNL_ARG_WEIGHTS, weights},
                                             {DNNL_ARG_BIAS, site.bias},
                                             {DNNL_ARG_DST, destination}});
  variant.destination.store(context.stream);
}

/// Runs every candidate and keeps the fastest. Each run computes the whole
/// output from the inputs (the residual is seeded again), so whichever ran
/// last leaves a correct result.
void tuneConv(KernelContext &context, ConvSite &site, const Conv2dParams &p,
              void **buffers) {
  // Add-to-output: the residual is the destination, which every run
  // overwrites; each run starts from a saved copy.
  std::string residual;
  if (p.hasResidual != 0 && buffers[3] == buffers[4])
    residual.assign(static_cast<const char *>(buffers[3]), site.destinationBytes);
  auto run = [&](ConvVariant &variant) {
    if (!residual.empty())
      std::memcpy(buffers[4], residual.data(), residual.size());
    runConvVariant(context, site, variant, p, buffers);
  };
  size_t best = 0;
  double bestSeconds = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < site.candidates.size(); ++i) {
    // The first run packs weights; the second is the one timed.
    run(site.candidates[i]);
    auto start = std::chrono::steady_clock::now();
    run(site.candidates[i]);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (seconds < bestSeconds) {
      bestSeconds = seconds;
      best = i;
    }
  }
  ConvVariant chosen = std::move(site.candidates[best]);
  site.candidates.clear();
  site.candidates.push_back(std::move(chosen));
}

void runConv(KernelContext &context, ConvSite &site, const Conv2dParams &p,
             void **buffers) {
  if (site.candidates.size() > 1) {
    tuneConv(context, site, p, buffers);
    return;
  }
  runConvVariant(context, site, site.candidates.front(), p, buffers);
}

struct MatMulSite : Site {
  dnnl::matmul primitive;
  memory bias, mask, destination;
  /// The mask's post-op argument (its index in the post-op list).
  int maskArgument = 0;
  ActivationPort a;
  PackedWeights b;
  size_t destinationBytes = 0;

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

dnnl::matmul::primitive_desc matmulPrimitive(const dnnl::engine &engine,
                                             const MatMulParams &p,
                                             const MatMulBuffers &buffers) {
  memory::data_type type = computeType(p.precision);
  // Constant B may be repacked once into whatever the library prefers.
  memory::desc wantedB = p.constantB
                             ? memory::desc(buffers.bDims, type, memory::format_tag::any)
                             : denseDesc(buffers.bDims, buffers.bStrides, type);
  memory::desc wantedA = denseDesc(buffers.aDims, buffers.aStrides, type);
  dnnl::matmul::desc desc(wantedA, wantedB, buffers.biasDesc, buffers.cDesc);
  dnnl::primitive_attr attr;
  attr.set_post_ops(matmulPostOps(p, buffers));
  return dnnl::matmul::primitive_desc(desc, attr, engine);
}

std::unique_ptr<MatMulSite> createMatMul(KernelContext &context, int64_t index,
                                         const MatMulParams &p) {
  MatMulBuffers buffers = matmulBuffers(p);
  dnnl::matmul::primitive_desc pd = matmulPrimitive(context.engine, p, buffers);
  auto site = std::make_unique<MatMulSite>();
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

/// Pooling and softmax read and write the graph's buffers in place,
/// whichever plain layout they have: no reorders.
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

std::unique_ptr<SourceToDestinationSite> createPool(KernelContext &context, int64_t,
                                                    const Pool2dParams &p) {
  Dims sourceDims = {p.batch, p.channels, p.inHeight, p.inWidth};
  Dims destinationDims = {p.batch, p.channels, p.outHeight, p.outWidth};
  memory::desc sourceDesc =
      denseDesc(sourceDims, activationStrides(sourceDims, p.sourceLayout));
  memory::desc destinationDesc =
      denseDesc(destinationDims, activationStrides(destinationDims, p.destinationLayout));
  auto algorithm = p.algorithm == PoolAlgorithm::Max
                       ? dnnl::algorithm::pooling_max
                       : dnnl::algorithm::pooling_avg_exclude_padding;
  dnnl::pooling_forward::desc desc(dnnl::prop_kind::forward_inference, algorithm,
                                   sourceDesc, destinationDesc, {p.strideH, p.strideW},
                                   {p.kernelHeight, p.kernelWidth}, {p.padTop, p.padLeft},
                                   {p.padBottom, p.padRight});
  auto site = std::make_unique<SourceToDestinationSite>();
  site->primitive =
      dnnl::pooling_forward(dnnl::pooling_forward::primitive_desc(desc, context.engine));
  site->source = memory(sourceDesc, context.engine, DNNL_MEMORY_NONE);
  site->destination = memory(destinationDesc, context.engine, DNNL_MEMORY_NONE);
  return site;
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
    if (!slot)
      slot = create(context, index, params);
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

void poolKernel(void *context, int64_t site, const int64_t *params, void **buffers) {
  dispatch<SourceToDestinationSite, Pool2dParams>(context, site, params, buffers,
                                                  "pool2d", createPool,
                                                  runSourceToDestination<Pool2dParams>);
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
  }
  return nullptr;
}

} // namespace

Expected<std::optional<PackedWeight>> packKernelWeight(KernelKind kind,
                                                       const std::vector<int64_t> &params,
                                                       int64_t buffer,
                                                       std::string_view source) {
  std::optional<Conv2dParams> conv;
  std::optional<MatMulParams> matmul;
  if (kind == KernelKind::Conv2d)
    conv = paramsFromWords<Conv2dParams>(params);
  if (kind == KernelKind::MatMul)
    matmul = paramsFromWords<MatMulParams>(params);
  try {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    memory::desc user, wanted;
    if (conv && buffer == 1 && conv->constantWeights) {
      ConvBuffers buffers = convBuffers(*conv);
      user = buffers.weightsDesc;
      wanted = preferredConvPrimitive(engine, *conv, buffers).weights_desc();
    } else if (matmul && buffer == 1 && matmul->constantB) {
      MatMulBuffers buffers = matmulBuffers(*matmul);
      user = buffers.bDesc;
      wanted = matmulPrimitive(engine, *matmul, buffers).weights_desc();
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
    PackedWeight packed{layoutOf(wanted), std::string(wanted.get_size(), '\0')};
    // A reorder only reads its source.
    memory from(user, engine, const_cast<char *>(source.data()));
    memory to(wanted, engine, packed.bytes.data());
    dnnl::stream stream(engine);
    dnnl::reorder(from, to).execute(stream, from, to);
    stream.wait();
    return std::optional<PackedWeight>(std::move(packed));
  } catch (const dnnl::error &error) {
    return internalError("packing a " + std::string(kernelKindName(kind)) +
                         " kernel's weights failed: " + error.what());
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
  *context = state.get();
  return state;
}

Status takeKernelFailure(KernelContext &context) {
  Status failure = std::move(context.failure);
  context.failure = Status::ok();
  return failure;
}

} // namespace flowc::runtime
