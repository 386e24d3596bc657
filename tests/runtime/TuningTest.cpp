#include "flowc/runtime/Tuning.h"

#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/KernelAbi.h"
#include "flowc/runtime/PackedWeights.h"
#include "flowc/runtime/Session.h"

#include "flowc/support/MappedFile.h"
#include "flowc/support/Subprocess.h"

#include "../common/TestUtil.h"
#include "SmallArtifact.h"

#include <oneapi/dnnl/dnnl.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <omp.h>
#include <random>
#include <sched.h>
#include <set>

namespace flowc::runtime {
namespace {

using flowc::testing::StatusIs;
using flowc::testing::TempDir;
using ::testing::HasSubstr;

std::vector<float> randomFloats(size_t count, uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float &value : values)
    value = uniform(random);
  return values;
}

float relu(float x) { return std::max(x, 0.0f); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

float activate(Activation activation, float x) {
  if (activation == Activation::Clip)
    return relu(x);
  if (activation == Activation::Sigmoid)
    return sigmoid(x);
  return x;
}

/// The largest difference relative to the largest magnitude of `reference`.
double relativeError(const std::vector<float> &output,
                     const std::vector<float> &reference) {
  double scale = 1e-30, error = 0;
  for (size_t i = 0; i < output.size(); ++i) {
    double delta = std::abs(static_cast<double>(output[i]) - reference[i]);
    error = std::isnan(delta) ? INFINITY : std::max(error, delta);
    scale = std::max(scale, std::abs(static_cast<double>(reference[i])));
  }
  return error / scale;
}

/// A convolution's params: `size` x `size` input, 3x3 or 1x1 kernel.
Conv2dParams conv(int64_t batch, int64_t in, int64_t out, int64_t size, int64_t kernel,
                  int64_t stride, int64_t pad, ActivationLayout layout) {
  Conv2dParams p{};
  p.batch = batch;
  p.inChannels = in;
  p.inHeight = p.inWidth = size;
  p.outChannels = out;
  p.kernelHeight = p.kernelWidth = kernel;
  p.outHeight = p.outWidth = (size + 2 * pad - kernel) / stride + 1;
  p.strideH = p.strideW = stride;
  p.dilationH = p.dilationW = 1;
  p.padTop = p.padLeft = p.padBottom = p.padRight = pad;
  p.groups = 1;
  p.sourceLayout = p.destinationLayout = layout;
  p.weightLayout = ConvWeightLayout::Oihw;
  p.constantWeights = 1;
  p.activation = Activation::None;
  p.precision = Precision::Fp32;
  return p;
}

/// Index of element (n, c, h, w) of a [n, c, h, w] tensor stored in `layout`.
size_t activationIndex(ActivationLayout layout, int64_t channels, int64_t height,
                       int64_t width, int64_t n, int64_t c, int64_t h, int64_t w) {
  if (layout == ActivationLayout::Nhwc)
    return static_cast<size_t>(((n * height + h) * width + w) * channels + c);
  return static_cast<size_t>(((n * channels + c) * height + h) * width + w);
}

size_t weightIndex(const Conv2dParams &p, int64_t oc, int64_t icInGroup, int64_t kh,
                   int64_t kw) {
  int64_t perGroup = p.inChannels / p.groups, kH = p.kernelHeight, kW = p.kernelWidth;
  switch (p.weightLayout) {
  case ConvWeightLayout::Oihw:
    return static_cast<size_t>(((oc * perGroup + icInGroup) * kH + kh) * kW + kw);
  case ConvWeightLayout::Ohwi:
    return static_cast<size_t>(((oc * kH + kh) * kW + kw) * p.inChannels + icInGroup);
  case ConvWeightLayout::Hwcm: {
    // [kh, kw, channels, multiplier], output channel = channel * multiplier + m.
    int64_t multiplier = p.outChannels / p.groups;
    int64_t channel = oc / multiplier, m = oc % multiplier;
    return static_cast<size_t>(((kh * kW + kw) * p.groups + channel) * multiplier + m);
  }
  }
  return 0;
}

/// The convolution computed directly from its definition.
std::vector<float> referenceConv(const Conv2dParams &p, const std::vector<float> &source,
                                 const std::vector<float> &weights,
                                 const std::vector<float> &bias,
                                 const std::vector<float> &residual) {
  std::vector<float> out(
      static_cast<size_t>(p.batch * p.outChannels * p.outHeight * p.outWidth));
  int64_t perGroupIn = p.inChannels / p.groups, perGroupOut = p.outChannels / p.groups;
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t oc = 0; oc < p.outChannels; ++oc)
      for (int64_t oh = 0; oh < p.outHeight; ++oh)
        for (int64_t ow = 0; ow < p.outWidth; ++ow) {
          int64_t group = oc / perGroupOut;
          double sum = bias[static_cast<size_t>(oc)];
          for (int64_t icg = 0; icg < perGroupIn; ++icg)
            for (int64_t kh = 0; kh < p.kernelHeight; ++kh)
              for (int64_t kw = 0; kw < p.kernelWidth; ++kw) {
                int64_t ih = oh * p.strideH - p.padTop + kh * p.dilationH;
                int64_t iw = ow * p.strideW - p.padLeft + kw * p.dilationW;
                if (ih < 0 || iw < 0 || ih >= p.inHeight || iw >= p.inWidth)
                  continue;
                sum += static_cast<double>(source[activationIndex(
                           p.sourceLayout, p.inChannels, p.inHeight, p.inWidth, n,
                           group * perGroupIn + icg, ih, iw)]) *
                       weights[weightIndex(p, oc, icg, kh, kw)];
              }
          size_t at = activationIndex(p.destinationLayout, p.outChannels, p.outHeight,
                                      p.outWidth, n, oc, oh, ow);
          if (p.hasResidual)
            sum += residual[at];
          out[at] = activate(p.activation, static_cast<float>(sum));
        }
  return out;
}

/// A named kernel case: its params and random buffers (output last).
struct KernelCase {
  std::string name;
  KernelKind kind;
  std::vector<int64_t> params;
  std::vector<std::vector<float>> inputs;
  std::vector<float> reference;
  double tolerance;
};

KernelCase convCase(const std::string &name, const Conv2dParams &p) {
  KernelCase c{name, KernelKind::Conv2d, paramWords(p), {}, {}, 0};
  size_t destination =
      static_cast<size_t>(p.batch * p.outChannels * p.outHeight * p.outWidth);
  c.inputs.push_back(randomFloats(
      static_cast<size_t>(p.batch * p.inChannels * p.inHeight * p.inWidth), 1));
  c.inputs.push_back(
      randomFloats(static_cast<size_t>(p.outChannels * (p.inChannels / p.groups) *
                                       p.kernelHeight * p.kernelWidth),
                   2));
  c.inputs.push_back(randomFloats(static_cast<size_t>(p.outChannels), 3));
  std::vector<float> residual;
  if (p.hasResidual)
    c.inputs.push_back(residual = randomFloats(destination, 4));
  c.reference = referenceConv(p, c.inputs[0], c.inputs[1], c.inputs[2], residual);
  // bf16 rounds the source and weights (8 bits of mantissa) before fp32
  // accumulation.
  c.tolerance = p.precision == Precision::Bf16 ? 3e-2 : 1e-4;
  return c;
}

/// `p` adding a residual and then ReLU (a clip to [0, inf)).
Conv2dParams withResidualRelu(Conv2dParams p) {
  p.hasResidual = 1;
  p.activation = Activation::Clip;
  p.alpha = floatParam(0.0f);
  p.beta = floatParam(INFINITY);
  return p;
}

std::vector<KernelCase> convCases() {
  std::vector<KernelCase> cases;
  cases.push_back(convCase("3x3 stride 1 pad 1 nchw",
                           conv(1, 16, 32, 14, 3, 1, 1, ActivationLayout::Nchw)));
  cases.push_back(convCase("3x3 stride 1 pad 1 nhwc",
                           conv(1, 16, 32, 14, 3, 1, 1, ActivationLayout::Nhwc)));
  cases.push_back(
      convCase("1x1 nhwc batch 2", conv(2, 32, 64, 7, 1, 1, 0, ActivationLayout::Nhwc)));
  Conv2dParams strided = conv(1, 8, 16, 15, 3, 2, 1, ActivationLayout::Nchw);
  strided.weightLayout = ConvWeightLayout::Ohwi;
  cases.push_back(convCase("strided 3x3 ohwi weights", strided));
  Conv2dParams depthwise = conv(1, 32, 32, 12, 3, 1, 1, ActivationLayout::Nhwc);
  depthwise.groups = 32;
  depthwise.weightLayout = ConvWeightLayout::Hwcm;
  cases.push_back(convCase("depthwise 3x3 nhwc", depthwise));
  cases.push_back(
      convCase("residual + relu nhwc",
               withResidualRelu(conv(1, 16, 16, 10, 3, 1, 1, ActivationLayout::Nhwc))));
  // Where the library's Winograd kernels pay (F(2x2,3x3) at batch 1,
  // F(4x4,3x3) above, on AVX-512): the default there.
  cases.push_back(convCase("3x3 64 channels nhwc",
                           conv(1, 64, 64, 14, 3, 1, 1, ActivationLayout::Nhwc)));
  cases.push_back(
      convCase("3x3 64 channels batch 4 residual + relu",
               withResidualRelu(conv(4, 64, 64, 14, 3, 1, 1, ActivationLayout::Nhwc))));
  // OHWI weights (TOSA's order): the library cannot pack them for Winograd.
  Conv2dParams ohwi = conv(1, 64, 64, 14, 3, 1, 1, ActivationLayout::Nhwc);
  ohwi.weightLayout = ConvWeightLayout::Ohwi;
  cases.push_back(convCase("3x3 64 channels ohwi weights", ohwi));
  Conv2dParams bf16 = conv(1, 16, 16, 8, 3, 1, 1, ActivationLayout::Nchw);
  bf16.precision = Precision::Bf16;
  cases.push_back(convCase("bf16 3x3 nchw", bf16));
  return cases;
}

KernelCase matmulCase(const std::string &name, const MatMulParams &p) {
  KernelCase c{name, KernelKind::MatMul, paramWords(p), {}, {}, 0};
  size_t b = static_cast<size_t>(p.batch), m = static_cast<size_t>(p.m),
         n = static_cast<size_t>(p.n), k = static_cast<size_t>(p.k);
  std::vector<float> a = randomFloats(b * m * k, 11), w = randomFloats(b * k * n, 12);
  std::vector<float> bias, residual, mask;
  c.inputs = {a, w};
  if (p.hasBias)
    c.inputs.push_back(bias = randomFloats(n, 13));
  if (p.hasResidual)
    c.inputs.push_back(residual = randomFloats(b * m * n, 14));
  size_t maskRows = p.maskRows ? m : 1, maskColumns = p.maskColumns ? n : 1;
  if (p.hasMask)
    c.inputs.push_back(mask = randomFloats(maskRows * maskColumns, 15));
  c.reference.resize(b * m * n);
  for (size_t batch = 0; batch < b; ++batch)
    for (size_t i = 0; i < m; ++i)
      for (size_t j = 0; j < n; ++j) {
        double sum = 0;
        for (size_t x = 0; x < k; ++x)
          sum +=
              static_cast<double>(a[(batch * m + i) * k + x]) *
              (p.transposedB ? w[(batch * n + j) * k + x] : w[(batch * k + x) * n + j]);
        size_t at = (batch * m + i) * n + j;
        if (p.hasBias)
          sum += bias[j];
        if (p.hasResidual)
          sum += residual[at];
        if (p.scale)
          sum *= paramFloat(p.scale);
        if (p.hasMask)
          sum += mask[(p.maskRows ? i : 0) * maskColumns + (p.maskColumns ? j : 0)];
        c.reference[at] = activate(p.activation, static_cast<float>(sum));
      }
  c.tolerance = p.precision == Precision::Bf16 ? 3e-2 : 1e-4;
  return c;
}

MatMulParams matmul(int64_t batch, int64_t m, int64_t n, int64_t k) {
  MatMulParams p{};
  p.batch = batch;
  p.m = m;
  p.n = n;
  p.k = k;
  p.constantB = 1;
  p.activation = Activation::None;
  p.precision = Precision::Fp32;
  return p;
}

std::vector<KernelCase> matmulCases() {
  std::vector<KernelCase> cases;
  MatMulParams bias = matmul(1, 24, 48, 64);
  bias.hasBias = 1;
  bias.activation = Activation::Sigmoid;
  cases.push_back(matmulCase("bias + sigmoid", bias));
  MatMulParams transposed = matmul(1, 16, 40, 72);
  transposed.transposedB = 1;
  transposed.hasResidual = 1;
  cases.push_back(matmulCase("transposed B + residual", transposed));
  MatMulParams batched = matmul(3, 12, 20, 28);
  batched.constantB = 0;
  cases.push_back(matmulCase("batch 3, B an activation", batched));
  MatMulParams attention = matmul(2, 16, 16, 32);
  attention.constantB = 0;
  attention.scale = floatParam(0.125f);
  attention.hasMask = 1;
  attention.maskRows = 0;
  attention.maskColumns = 1;
  cases.push_back(matmulCase("attention scale + column mask", attention));
  MatMulParams bf16 = matmul(1, 8, 32, 48);
  bf16.precision = Precision::Bf16;
  cases.push_back(matmulCase("bf16", bf16));
  return cases;
}

/// Whether the library has bf16 kernels here: oneDNN 2.6 has none below
/// AVX-512 (it refuses bf16 convolutions and products on AVX2).
bool libraryHasBf16() {
  auto isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
  return (isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core;
}

/// The cases whose kernels this library can build here.
std::vector<KernelCase> supported(std::vector<KernelCase> cases) {
  std::erase_if(cases, [](const KernelCase &c) {
    return c.name.starts_with("bf16") && !libraryHasBf16();
  });
  return cases;
}

/// Runs every candidate of `c` and compares it with the reference.
void expectEveryCandidateMatches(const KernelCase &c) {
  auto candidates = libraryCandidates(c.kind, c.params);
  ASSERT_TRUE(candidates) << c.name << ": " << candidates.status().toString();
  ASSERT_FALSE(candidates->empty()) << c.name;
  for (const std::string &candidate : *candidates) {
    std::vector<std::vector<float>> buffers = c.inputs;
    buffers.push_back(std::vector<float>(c.reference.size(), NAN));
    std::vector<void *> pointers;
    for (std::vector<float> &buffer : buffers)
      pointers.push_back(buffer.data());
    ASSERT_TRUE(runLibraryCandidate(c.kind, c.params, candidate, pointers))
        << c.name << ", " << candidate;
    EXPECT_LE(relativeError(buffers.back(), c.reference), c.tolerance)
        << c.name << ", candidate " << candidate;
  }
  // Link packs constant weights for each candidate, and for the default
  // (no record: the empty candidate).
  std::string_view weights(reinterpret_cast<const char *>(c.inputs[1].data()),
                           c.inputs[1].size() * sizeof(float));
  std::vector<std::string> packed = *candidates;
  packed.push_back("");
  for (const std::string &candidate : packed) {
    auto pack = packKernelWeight(c.kind, c.params, 1, weights, candidate);
    EXPECT_TRUE(pack) << c.name << ", candidate '" << candidate
                      << "': " << pack.status().toString();
  }
}

// Every candidate of every convolution computes the convolution: 3x3, 1x1,
// strided, depthwise, with residual and activation, NHWC and NCHW graphs,
// fp32 and bf16.
TEST(LibraryCandidatesTest, EveryConvCandidateMatchesTheReference) {
  for (const KernelCase &c : supported(convCases()))
    expectEveryCandidateMatches(c);
}

// Every candidate of every matrix product computes it: bias and
// activation, transposed B with residual, batches, attention's scale and
// mask, bf16.
TEST(LibraryCandidatesTest, EveryMatMulCandidateMatchesTheReference) {
  for (const KernelCase &c : supported(matmulCases()))
    expectEveryCandidateMatches(c);
}

// Listing is deterministic, the default (the library's first
// implementation in its preferred layouts) comes first, and no candidate
// repeats; kinds search does not tune have none.
TEST(LibraryCandidatesTest, CandidatesAreDeterministicWithTheDefaultFirst) {
  std::vector<KernelCase> cases = supported(convCases());
  for (KernelCase &c : supported(matmulCases()))
    cases.push_back(std::move(c));
  for (const KernelCase &c : cases) {
    auto first = libraryCandidates(c.kind, c.params);
    auto second = libraryCandidates(c.kind, c.params);
    ASSERT_TRUE(first && second) << c.name;
    EXPECT_EQ(*first, *second) << c.name;
    ASSERT_FALSE(first->empty());
    EXPECT_LE(first->size(), 8u) << c.name;
    // The default: a convolution between NHWC buffers runs the library's
    // NHWC kernel where it has one of its own, anything else the library's
    // choice of layout.
    bool nhwc = first->front().rfind("layout=nhwc;impl=", 0) == 0;
    bool any = first->front().rfind("layout=any;impl=", 0) == 0;
    bool winograd = first->front().rfind("layout=any;algo=winograd;impl=", 0) == 0;
    EXPECT_TRUE(any || ((nhwc || winograd) && c.kind == KernelKind::Conv2d))
        << first->front();
    EXPECT_EQ(first->front().find("threads="), std::string::npos) << first->front();
    EXPECT_EQ(std::set<std::string>(first->begin(), first->end()).size(), first->size())
        << c.name;
  }
  // A small kernel may win on one thread: with more than one core, its
  // default on one thread is a candidate too.
  if (omp_get_max_threads() > 1) {
    KernelCase small = matmulCases().front();
    auto candidates = libraryCandidates(small.kind, small.params);
    ASSERT_TRUE(candidates);
    EXPECT_EQ(candidates->back(), candidates->front() + ";threads=1");
  }
  EXPECT_TRUE(isTunable(KernelKind::Conv2d) && isTunable(KernelKind::MatMul));
  EXPECT_FALSE(isTunable(KernelKind::Pool2d));
  auto pool = libraryCandidates(KernelKind::Pool2d, paramWords(Pool2dParams{}));
  ASSERT_TRUE(pool);
  EXPECT_TRUE(pool->empty());
}

// A 3x3 convolution with unit strides runs the library's Winograd kernel by
// default where the library has one (AVX-512; none on AVX2) and the shape
// is one where it pays: 64 channels or more in and out, 14x14 pixels or
// more. Small channel counts and bf16 keep the direct kernels, and search
// still lists Winograd for them; OHWI weights, which the library cannot
// pack for it, never list it.
TEST(LibraryCandidatesTest, WinogradIsTheDefaultWhereItPays) {
  auto isWinograd = [](const std::string &candidate) {
    return candidate.find(";algo=winograd;") != std::string::npos;
  };
  for (const KernelCase &c : supported(convCases())) {
    auto candidates = libraryCandidates(c.kind, c.params);
    ASSERT_TRUE(candidates) << c.name;
    bool offered = std::any_of(candidates->begin(), candidates->end(), isWinograd);
    bool pays = c.name.starts_with("3x3 64 channels");
    EXPECT_EQ(isWinograd(candidates->front()), offered && pays)
        << c.name << ": " << candidates->front();
    if (c.name.ends_with("ohwi weights")) {
      EXPECT_FALSE(offered) << c.name;
    }
    bool shape = c.name.starts_with("3x3 ") || c.name.starts_with("residual") ||
                 c.name.starts_with("bf16");
    if (!shape) {
      EXPECT_FALSE(offered) << c.name;
    }
  }
}

// A candidate the listing does not have, or params of another kind, are
// refused with what is wrong.
TEST(LibraryCandidatesTest, UnknownCandidatesAndBadParamsAreInvalidArgument) {
  KernelCase c = convCases().front();
  std::vector<std::vector<float>> buffers = c.inputs;
  buffers.push_back(std::vector<float>(c.reference.size()));
  std::vector<void *> pointers;
  for (std::vector<float> &buffer : buffers)
    pointers.push_back(buffer.data());
  for (const std::string candidate : {"layout=any;impl=no_such:impl", "layout=sideways",
                                      "layout=any;algo=sideways", "threads=0", ""})
    EXPECT_THAT(runLibraryCandidate(c.kind, c.params, candidate, pointers),
                StatusIs(StatusCode::InvalidArgument,
                         "'" + candidate + "' is not a candidate of this conv2d kernel"));
  EXPECT_THAT(
      measureLibraryKernel(c.kind, c.params, {"layout=any;impl=no_such:impl"}, {}),
      StatusIs(StatusCode::InvalidArgument, "is not a candidate"));
  EXPECT_THAT(measureLibraryKernel(c.kind, c.params, {}, {}),
              StatusIs(StatusCode::InvalidArgument, "no candidates"));
  EXPECT_THAT(
      libraryCandidates(KernelKind::Conv2d, paramWords(matmul(1, 2, 3, 4))),
      StatusIs(StatusCode::InvalidArgument, "a conv2d kernel has 30 params, not 16"));
  Conv2dParams negative = conv(1, 16, 32, 14, 3, 1, 1, ActivationLayout::Nchw);
  negative.inChannels = -4;
  EXPECT_THAT(
      libraryCandidates(KernelKind::Conv2d, paramWords(negative)),
      StatusIs(StatusCode::InvalidArgument, "the library refuses this conv2d kernel"));
  auto candidates = libraryCandidates(c.kind, c.params);
  ASSERT_TRUE(candidates);
  pointers.pop_back();
  EXPECT_THAT(runLibraryCandidate(c.kind, c.params, candidates->front(), pointers),
              StatusIs(StatusCode::InvalidArgument, "has 4 buffers, not 3"));
}

// A measurement times every candidate, in the order given, and its best
// is the fastest median.
TEST(MeasureLibraryKernelTest, TimesEveryCandidate) {
  ASSERT_TRUE(pinMeasurementThreads());
  for (const KernelCase &c : {convCases()[1], matmulCases()[0]}) {
    auto candidates = libraryCandidates(c.kind, c.params);
    ASSERT_TRUE(candidates);
    MeasureOptions options;
    options.budgetSeconds = 2;
    auto measurement = measureLibraryKernel(c.kind, c.params, *candidates, options);
    ASSERT_TRUE(measurement) << measurement.status().toString();
    ASSERT_EQ(measurement->timings.size(), candidates->size());
    for (size_t i = 0; i < candidates->size(); ++i) {
      const CandidateTiming &timing = measurement->timings[i];
      EXPECT_EQ(timing.candidate, (*candidates)[i]);
      EXPECT_GT(timing.samples, 0) << timing.candidate;
      EXPECT_GT(timing.medianNs, 0) << timing.candidate;
      EXPECT_LE(timing.lowNs, timing.medianNs);
      EXPECT_GE(timing.highNs, timing.medianNs);
      EXPECT_LE(measurement->timings[measurement->best].medianNs, timing.medianNs);
    }
  }
}

// A small budget ends the measurement of a slow kernel soon after it runs
// out.
TEST(MeasureLibraryKernelTest, SmallBudgetEndsTheMeasurement) {
  // Tens of milliseconds a run: seven rounds of its candidates take longer
  // than the budget.
  Conv2dParams big = conv(1, 128, 128, 56, 3, 1, 1, ActivationLayout::Nhwc);
  auto candidates = libraryCandidates(KernelKind::Conv2d, paramWords(big));
  ASSERT_TRUE(candidates);
  MeasureOptions options;
  options.budgetSeconds = 0.2;
  // Separation may not end it first: on a quiet, fast machine seven
  // rounds of clearly separated candidates fit in the budget.
  options.minRounds = 50;
  auto measurement =
      measureLibraryKernel(KernelKind::Conv2d, paramWords(big), *candidates, options);
  ASSERT_TRUE(measurement) << measurement.status().toString();
  EXPECT_TRUE(measurement->budgetEnded);
  EXPECT_FALSE(measurement->separated);
  // Ended by the budget, not by its rounds: no wall-clock bound, which a
  // busy machine could break.
  EXPECT_GE(measurement->rounds, 1);
  EXPECT_LT(measurement->rounds, options.minRounds);
  for (const CandidateTiming &timing : measurement->timings)
    EXPECT_GT(timing.samples, 0) << timing.candidate;
}

// Pinning leaves this thread on one core, and pinning again succeeds.
TEST(PinMeasurementThreadsTest, PinsThisThreadToOneCore) {
  ASSERT_TRUE(pinMeasurementThreads());
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  EXPECT_EQ(CPU_COUNT(&set), 1);
  EXPECT_TRUE(pinMeasurementThreads());
}

TEST(LibraryVersionsTest, NamesOneDnnAndItsRuntime) {
  std::string versions = libraryVersions();
  EXPECT_EQ(versions.rfind("onednn ", 0), 0u) << versions;
  EXPECT_NE(versions.find(" cpu_runtime omp"), std::string::npos) << versions;
}

// --- The session runs the plan's candidate --------------------------------

/// Code calling one conv2d kernel site with `p`: y = conv(x, w) + b.
std::string convCode(const Conv2dParams &p) {
  std::string words;
  for (int64_t word : paramWords(p))
    words += std::to_string(word) + "LL, ";
  return "#include <stdint.h>\n"
         "typedef void (*Kernel)(void *, int64_t, const int64_t *, void **);\n"
         "Kernel flowc_kernel_table[8]; void *flowc_kernel_context;\n"
         "const int64_t flowc_kernel_kinds = 1, flowc_kernel_sites = 1;\n"
         "const int64_t flowc_kernel_abi = " +
         std::to_string(kKernelAbiVersion) +
         ";\n"
         "static const int64_t params[" +
         std::to_string(sizeof(Conv2dParams) / 8) + "] = {" + words +
         "};\n"
         "void flowc_entry(void **args) {\n"
         "  void *buffers[4] = {args[0], args[1], args[2], args[3]};\n"
         "  flowc_kernel_table[0](flowc_kernel_context, 0, params, buffers);\n"
         "}\n";
}

std::string bytesOf(const std::vector<float> &values) {
  return std::string(reinterpret_cast<const char *>(values.data()),
                     values.size() * sizeof(float));
}

/// An artifact written by writeConvArtifact.
struct ConvArtifact {
  std::string path;
  /// Whether it has the weight packed (the candidate's weights layout is
  /// not the graph's).
  bool packed = false;
};

/// An artifact of convCode(p) with the case's weights, `tuned` in its plan
/// and the weight packed for `candidate` as link does.
Expected<ConvArtifact> writeConvArtifact(const TempDir &dir, const KernelCase &c,
                                         const Conv2dParams &p,
                                         const std::vector<TunedKernelSpec> &tuned,
                                         const std::string &candidate) {
  FLOWC_ASSIGN_OR_RETURN(std::string code, testing::compileCode(dir.path(), convCode(p)));
  std::string w = bytesOf(c.inputs[1]), b = bytesOf(c.inputs[2]);
  FLOWC_ASSIGN_OR_RETURN(auto packed,
                         packKernelWeight(KernelKind::Conv2d, c.params, 1, w, candidate));
  std::string path = dir.file("conv.fca");
  FLOWC_ASSIGN_OR_RETURN(auto writer, ArtifactWriter::create(path));
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::Metadata, "{}"));
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::Code, code));
  std::vector<std::string_view> pieces = {w, b};
  if (packed)
    pieces.push_back(packed->bytes);
  FLOWC_ASSIGN_OR_RETURN(auto offsets, writer->addWeights(pieces));
  Plan plan;
  plan.entry = "flowc_entry";
  plan.inputs = {{"x", "float32", {p.batch, p.inChannels, p.inHeight, p.inWidth}}};
  plan.outputs = {{"y", "float32", {p.batch, p.outChannels, p.outHeight, p.outWidth}}};
  plan.weights = {{{"w", "float32", {static_cast<int64_t>(c.inputs[1].size())}},
                   testing::weightDigest(w),
                   offsets[0],
                   w.size()},
                  {{"b", "float32", {p.outChannels}},
                   testing::weightDigest(b),
                   offsets[1],
                   b.size()}};
  if (packed)
    plan.packed = {{0, 1, packed->layout, testing::weightDigest(packed->bytes),
                    offsets[2], packed->bytes.size()}};
  plan.tuned = tuned;
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::Plan, plan.toJson().dump()));
  FLOWC_RETURN_IF_ERROR(writer->finish());
  return ConvArtifact{path, packed.has_value()};
}

/// Runs the artifact at `path` on the case's input; its output and how
/// many sites read packed weights in place.
Expected<std::pair<std::vector<float>, int64_t>> runConvArtifact(const std::string &path,
                                                                 const KernelCase &c) {
  FLOWC_ASSIGN_OR_RETURN(auto artifact, Artifact::open(path));
  FLOWC_ASSIGN_OR_RETURN(auto session, Session::create(std::move(artifact)));
  std::vector<float> out(c.reference.size(), NAN);
  FLOWC_RETURN_IF_ERROR(session->runInPlace({c.inputs[0].data()}, {out.data()}));
  return std::pair{out, session->prepackedWeightsInUse()};
}

/// Collects what is logged in its scope.
class LogCapture {
public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64)) {
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto &sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::find(sinks.begin(), sinks.end(), sink_));
  }
  std::vector<std::string> lines() const { return sink_->last_formatted(); }

private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
};

// A session runs each candidate the plan names for its site, reading the
// weight packed for that candidate in place, and computes the convolution.
TEST(TunedSessionTest, RunsThePlansCandidateWithItsPackedWeight) {
  Conv2dParams p = conv(1, 16, 32, 14, 3, 1, 1, ActivationLayout::Nhwc);
  KernelCase c = convCase("session", p);
  auto candidates = libraryCandidates(KernelKind::Conv2d, c.params);
  ASSERT_TRUE(candidates);
  for (const std::string &candidate : *candidates) {
    TempDir dir;
    TunedKernelSpec tuned{0, "", "conv-signature", candidate, 1000, 10, "here", 1};
    auto written = writeConvArtifact(dir, c, p, {tuned}, candidate);
    ASSERT_TRUE(written) << written.status().toString();
    LogCapture log;
    auto result = runConvArtifact(written->path, c);
    ASSERT_TRUE(result) << result.status().toString();
    EXPECT_LE(relativeError(result->first, c.reference), c.tolerance) << candidate;
    EXPECT_EQ(result->second, written->packed ? 1 : 0)
        << candidate << ": the packed weight is not read in place";
    EXPECT_TRUE(log.lines().empty()) << candidate << ": " << log.lines().front();
  }
}

// A candidate this machine's library cannot build (an artifact from
// another CPU) runs the default after one warning naming the site and the
// candidate: the session does not fail.
TEST(TunedSessionTest, AnUnknownCandidateRunsTheDefaultWithAWarning) {
  Conv2dParams p = conv(1, 16, 32, 14, 3, 1, 1, ActivationLayout::Nchw);
  KernelCase c = convCase("session", p);
  for (const std::string candidate :
       {"layout=any;impl=brg:avx1024_future", "layout=nhwc;impl=jit:sideways;threads=3",
        "layout=diagonal"}) {
    TempDir dir;
    TunedKernelSpec tuned{0, "", "conv-signature", candidate, 1000, 10, "elsewhere", 1};
    // Linked elsewhere: the weight is packed for the default.
    auto written = writeConvArtifact(dir, c, p, {tuned}, "");
    ASSERT_TRUE(written) << written.status().toString();
    LogCapture log;
    auto result = runConvArtifact(written->path, c);
    ASSERT_TRUE(result) << result.status().toString();
    EXPECT_LE(relativeError(result->first, c.reference), c.tolerance) << candidate;
    EXPECT_EQ(result->second, written->packed ? 1 : 0);
    std::vector<std::string> lines = log.lines();
    ASSERT_EQ(lines.size(), 1u) << candidate;
    EXPECT_NE(lines[0].find("conv2d kernel site 0: search's candidate '" + candidate +
                            "' cannot run here"),
              std::string::npos)
        << lines[0];
    EXPECT_NE(lines[0].find("running the default"), std::string::npos) << lines[0];
  }
}

// A plan tuning a site the code does not have is a damaged artifact.
TEST(TunedSessionTest, ATunedSiteBeyondTheCodesIsDataLoss) {
  Conv2dParams p = conv(1, 8, 8, 6, 3, 1, 1, ActivationLayout::Nchw);
  KernelCase c = convCase("session", p);
  TempDir dir;
  TunedKernelSpec tuned{3, "", "sig", "layout=any", 1, 1, "here", 1};
  auto written = writeConvArtifact(dir, c, p, {tuned}, "");
  ASSERT_TRUE(written);
  auto artifact = Artifact::open(written->path);
  ASSERT_TRUE(artifact);
  EXPECT_THAT(Session::create(std::move(*artifact)),
              StatusIs(StatusCode::DataLoss,
                       "the plan tunes library kernel site 3, but the code has 1 sites"));
}

// Only cuda code keeps a convolution's buffers in 16 bits. Code for the
// CPU asking for them (an edited artifact run unverified) fails its run,
// naming the site, instead of reading fp32 bytes as halves.
TEST(TunedSessionTest, SixteenBitBuffersFailTheRunOnTheCpu) {
  Conv2dParams p = conv(1, 8, 8, 6, 3, 1, 1, ActivationLayout::Nhwc);
  KernelCase c = convCase("session", p);
  for (int64_t Conv2dParams::*flag :
       {&Conv2dParams::sixteenBitSource, &Conv2dParams::sixteenBitResidual,
        &Conv2dParams::sixteenBitDestination}) {
    Conv2dParams sixteenBit = p;
    sixteenBit.precision = Precision::Fp16;
    sixteenBit.*flag = 1;
    TempDir dir;
    auto written = writeConvArtifact(dir, c, sixteenBit, {}, "");
    ASSERT_TRUE(written) << written.status().toString();
    auto result = runConvArtifact(written->path, c);
    EXPECT_THAT(result,
                StatusIs(StatusCode::Internal,
                         "conv2d kernel at site 0 failed: 16-bit source, residual "
                         "or destination buffers are for cuda code, not the CPU's"));
  }
}

// --- Plan::tuned as JSON --------------------------------------------------

TEST(TunedPlanTest, RoundTripsAndIsOptional) {
  Plan plan;
  plan.entry = "flowc_entry";
  plan.tuned = {{2, "", "sig-a", "layout=nhwc;impl=jit:avx2", 12345, 67, "host-a", 1700},
                {-1, "flowc_loop_3", "sig-b", "tile=8x32", 999, 5, "host-b", 1800}};
  auto read = Plan::fromJson(plan.toJson());
  ASSERT_TRUE(read) << read.status().toString();
  ASSERT_EQ(read->tuned.size(), 2u);
  const TunedKernelSpec &a = read->tuned[0], &b = read->tuned[1];
  EXPECT_EQ(a.site, 2);
  EXPECT_EQ(a.signature, "sig-a");
  EXPECT_EQ(a.candidate, "layout=nhwc;impl=jit:avx2");
  EXPECT_EQ(a.timeNs, 12345);
  EXPECT_EQ(a.spreadNs, 67);
  EXPECT_EQ(a.host, "host-a");
  EXPECT_EQ(a.measuredMs, 1700);
  EXPECT_EQ(b.site, -1);
  EXPECT_EQ(b.kernel, "flowc_loop_3");
  // A plan from before search has no "tuned" at all, and reads.
  Plan old;
  old.entry = "flowc_entry";
  nlohmann::json json = old.toJson();
  EXPECT_FALSE(json.contains("tuned"));
  auto oldRead = Plan::fromJson(json);
  ASSERT_TRUE(oldRead);
  EXPECT_TRUE(oldRead->tuned.empty());
}

// Every field of a tuned entry must have its type: a damaged plan is
// DataLoss naming the entry and field, not a silently converted value.
TEST(TunedPlanTest, MistypedFieldsAreDataLoss) {
  Plan plan;
  plan.entry = "flowc_entry";
  plan.tuned = {{0, "", "sig", "layout=any", 1, 1, "h", 1}};
  nlohmann::json good = plan.toJson();
  struct Damage {
    std::string field;
    nlohmann::json value;
    std::string message;
  };
  for (const Damage &damage : std::vector<Damage>{
           {"site", "0", "tuned kernel 0: \"site\" is not an integer"},
           {"time_ns", 1.5, "tuned kernel 0: \"time_ns\" is not an integer"},
           {"spread_ns", true, "tuned kernel 0: \"spread_ns\" is not an integer"},
           {"candidate", 7, "tuned kernel 0: \"candidate\" is not a string"},
           {"site", -2, "tuned kernel 0 has site -2"}}) {
    nlohmann::json json = good;
    json["tuned"][0][damage.field] = damage.value;
    EXPECT_THAT(Plan::fromJson(json), StatusIs(StatusCode::DataLoss, damage.message))
        << damage.field;
  }
  nlohmann::json missing = good;
  missing["tuned"][0].erase("host");
  EXPECT_THAT(Plan::fromJson(missing),
              StatusIs(StatusCode::DataLoss, "tuned kernel 0 has no \"host\""));
  nlohmann::json notArray = good;
  notArray["tuned"] = {{"site", 0}};
  EXPECT_THAT(Plan::fromJson(notArray),
              StatusIs(StatusCode::DataLoss, "\"tuned\" is not an array"));
  nlohmann::json notObject = good;
  notObject["tuned"] = nlohmann::json::array({3});
  EXPECT_THAT(Plan::fromJson(notObject),
              StatusIs(StatusCode::DataLoss, "tuned kernel 0 is not an object"));
}

// GPU candidates ------------------------------------------------------------

// What sessions record reads back as itself: the text is the key.
TEST(GpuCandidateTest, FormattedCandidatesParseBack) {
  GpuCandidate conv;
  conv.library = GpuCandidate::Library::Cudnn;
  conv.id = 42;
  conv.knobs = {{1, 3}, {7, -1}, {12, 128}};
  GpuCandidate bare = conv;
  bare.knobs.clear();
  GpuCandidate fused = conv;
  fused.fusedEpilogue = true;
  GpuCandidate matmul;
  matmul.library = GpuCandidate::Library::CublasLt;
  matmul.id = 21;
  matmul.config = {15, 22, 1, 0, 1, 0, 0, 0};
  EXPECT_EQ(formatGpuCandidate(conv), "cudnn:engine=42;knobs=1:3,7:-1,12:128");
  EXPECT_EQ(formatGpuCandidate(bare), "cudnn:engine=42;knobs=");
  EXPECT_EQ(formatGpuCandidate(fused),
            "cudnn:engine=42;knobs=1:3,7:-1,12:128;epilogue=fused");
  EXPECT_EQ(formatGpuCandidate(matmul),
            "cublaslt:algo=21;tile=15;stages=22;splitk=1;"
            "reduction=0;swizzle=1;custom=0;inner=0;cluster=0");
  for (const GpuCandidate &candidate : {conv, bare, fused, matmul}) {
    std::string text = formatGpuCandidate(candidate);
    Expected<GpuCandidate> parsed = parseGpuCandidate(text);
    ASSERT_TRUE(parsed) << parsed.status().toString();
    EXPECT_EQ(formatGpuCandidate(*parsed), text);
    EXPECT_EQ(parsed->id, candidate.id);
    EXPECT_EQ(parsed->knobs, candidate.knobs);
    EXPECT_EQ(parsed->fusedEpilogue, candidate.fusedEpilogue);
  }
  EXPECT_TRUE(isGpuCandidateOf(KernelKind::Conv2d, formatGpuCandidate(fused)));
  EXPECT_TRUE(isGpuCandidateOf(KernelKind::Conv2d, formatGpuCandidate(conv)));
  EXPECT_FALSE(isGpuCandidateOf(KernelKind::MatMul, formatGpuCandidate(conv)));
  EXPECT_TRUE(isGpuCandidateOf(KernelKind::MatMul, formatGpuCandidate(matmul)));
  EXPECT_FALSE(isGpuCandidateOf(KernelKind::Conv2d, formatGpuCandidate(matmul)));
  EXPECT_FALSE(isGpuCandidateOf(KernelKind::Softmax, formatGpuCandidate(conv)));
}

// A candidate comes from an artifact or a tuning import: anything but what
// formatGpuCandidate writes is refused, naming the candidate.
TEST(GpuCandidateTest, MalformedCandidatesAreRefused) {
  const std::string cublas = ";tile=1;stages=2;splitk=1;reduction=0;swizzle=0;custom=0;"
                             "inner=0;cluster=0";
  std::string manyKnobs = "cudnn:engine=1;knobs=";
  for (int i = 0; i < 65; ++i)
    manyKnobs += (i ? "," : "") + std::to_string(i) + ":0";
  for (const std::string &text : std::vector<std::string>{
           "",
           "cudnn:",
           "cudnn:engine=1",
           "cudnn:engine=;knobs=",
           "cudnn:engine=-1;knobs=",
           "cudnn:engine=01;knobs=",
           "cudnn:engine=1 ;knobs=",
           "cudnn:engine=1;knobs=1",
           "cudnn:engine=1;knobs=2:1,1:0",
           "cudnn:engine=1;knobs=1:0,1:1",
           "cudnn:engine=1;knobs=1:0,",
           "cudnn:engine=1;knobs=,1:0",
           "cudnn:engine=1;knobs=1:x",
           "cudnn:engine=1;knobs=-1:0",
           "cudnn:engine=1;knobs=1:-0",
           "cudnn:engine=1;knobs=1:--1",
           "cudnn:engine=1;knobs=1:-",
           "cudnn:engine=2147483648;knobs=",
           "cudnn:engine=99999999999999999999;knobs=",
           "cudnn:engine=1;knobs=;extra=1",
           "cudnn:engine=1;knobs=;epilogue=",
           "cudnn:engine=1;knobs=;epilogue=helper",
           "cudnn:engine=1;knobs=;epilogue=fused;",
           "cudnn:engine=1;knobs=;epilogue=fused;epilogue=fused",
           "cudnn:engine=1;epilogue=fused;knobs=",
           "CUDNN:engine=1;knobs=",
           "cublaslt:algo=1",
           "cublaslt:algo=1" + cublas + ";x=1",
           "cublaslt:algo=1;stages=2;tile=1;splitk=1;reduction=0;swizzle=0;custom=0;"
           "inner=0;cluster=0",
           "cublaslt:algo=1;tile=1;stages=2;splitk=1;reduction=0;swizzle=0;custom=0;"
           "inner=0;cluster=",
           "layout=any;impl=jit:avx2",
           std::string("cudnn:engine=1\0;knobs=", 22),
           manyKnobs,
           "cudnn:engine=1;knobs=" + std::string(2000, '1'),
           "cudnn:engine=1;knobs=;split=",
           "cudnn:engine=1;knobs=;split=columns",
           "cudnn:engine=1;knobs=;split=columns/",
           "cudnn:engine=1;knobs=;split=columns/1",
           "cudnn:engine=1;knobs=;split=columns/0",
           "cudnn:engine=1;knobs=;split=columns/65",
           "cudnn:engine=1;knobs=;split=columns/02",
           "cudnn:engine=1;knobs=;split=columns/-2",
           "cudnn:engine=1;knobs=;split=diagonal/2",
           "cudnn:engine=1;knobs=;split=columns/2;",
           "cudnn:engine=1;knobs=;split=columns/2;epilogue=fused",
           "cudnn:engine=1;knobs=;split=rows/2;split=rows/2",
           "cudnn:engine=1;split=rows/2;knobs=",
           "cudnn:engine=1;knobs=;epilogue=fused;split=Rows/2",
           "cublaslt:algo=1" + cublas + ";split=rows/4x",
           "cublaslt:algo=1;split=rows/4" + cublas}) {
    Expected<GpuCandidate> parsed = parseGpuCandidate(text);
    EXPECT_THAT(parsed, StatusIs(StatusCode::InvalidArgument, "GPU candidate '"))
        << "'" << text << "' parsed";
  }
  EXPECT_TRUE(parseGpuCandidate("cublaslt:algo=1" + cublas));
}

// A tensor-parallel split ends either library's candidate and parses back;
// a plan on one GPU takes no split candidate, a group's only its own width.
TEST(GpuCandidateTest, TensorSplitsParseBackAndNameTheirGroup) {
  GpuCandidate conv;
  conv.id = 7;
  conv.knobs = {{1, 3}};
  conv.fusedEpilogue = true;
  conv.split = TensorSplit{TensorSplit::Axis::Columns, 4};
  GpuCandidate matmul;
  matmul.library = GpuCandidate::Library::CublasLt;
  matmul.id = 21;
  matmul.config = {15, 22, 1, 0, 1, 0, 0, 0};
  matmul.split = TensorSplit{TensorSplit::Axis::Rows, 2};
  EXPECT_EQ(formatGpuCandidate(conv),
            "cudnn:engine=7;knobs=1:3;epilogue=fused;split=columns/4");
  EXPECT_EQ(formatGpuCandidate(matmul),
            "cublaslt:algo=21;tile=15;stages=22;splitk=1;reduction=0;swizzle=1;custom=0;"
            "inner=0;cluster=0;split=rows/2");
  for (const GpuCandidate &candidate : {conv, matmul}) {
    std::string text = formatGpuCandidate(candidate);
    Expected<GpuCandidate> parsed = parseGpuCandidate(text);
    ASSERT_TRUE(parsed) << parsed.status().toString();
    EXPECT_EQ(formatGpuCandidate(*parsed), text);
    ASSERT_TRUE(parsed->split);
    EXPECT_EQ(parsed->split->axis, candidate.split->axis);
    EXPECT_EQ(parsed->split->ways, candidate.split->ways);
  }
  EXPECT_TRUE(parseGpuCandidate("cudnn:engine=1;knobs=;split=rows/64"));
  std::string conv4 = formatGpuCandidate(conv);
  EXPECT_FALSE(isGpuCandidateOf(KernelKind::Conv2d, conv4));
  EXPECT_FALSE(isGpuCandidateOf(KernelKind::Conv2d, conv4, 2));
  EXPECT_TRUE(isGpuCandidateOf(KernelKind::Conv2d, conv4, 4));
  EXPECT_FALSE(isGpuCandidateOf(KernelKind::MatMul, conv4, 4));
  EXPECT_TRUE(isGpuCandidateOf(KernelKind::MatMul, formatGpuCandidate(matmul), 2));
  // A candidate without a split fits any group: the site runs on each.
  conv.split.reset();
  EXPECT_TRUE(isGpuCandidateOf(KernelKind::Conv2d, formatGpuCandidate(conv), 4));
  // A group's records are never one GPU's.
  std::string group = gpuGroupTuningDevice("NVIDIA H200", 90, 4);
  EXPECT_EQ(group, "gpu NVIDIA H200 sm_90 x4");
  EXPECT_FALSE(isGpuTuningDeviceOf(group, 90));
  EXPECT_NE(group, gpuTuningDevice("NVIDIA H200", 90));
}

// A split must divide the axis it splits: a product's n or k, a
// convolution's output or input channels (a grouped one by columns only,
// its groups divisible too).
TEST(GpuCandidateTest, TensorSplitsFitTheirSite) {
  auto words = [](const auto &params) {
    std::vector<int64_t> all(sizeof params / 8);
    std::memcpy(all.data(), &params, sizeof params);
    return all;
  };
  MatMulParams product{};
  product.batch = 1;
  product.m = 8;
  product.n = 3072;
  product.k = 768;
  using Axis = TensorSplit::Axis;
  EXPECT_TRUE(checkTensorSplit(KernelKind::MatMul, words(product), {Axis::Columns, 4}));
  EXPECT_TRUE(checkTensorSplit(KernelKind::MatMul, words(product), {Axis::Rows, 3}));
  EXPECT_THAT(checkTensorSplit(KernelKind::MatMul, words(product), {Axis::Rows, 5}),
              StatusIs(StatusCode::InvalidArgument,
                       "a split 5 ways does not divide the product's reduction (768)"));
  Conv2dParams conv{};
  conv.inChannels = 64;
  conv.outChannels = 96;
  conv.groups = 1;
  EXPECT_TRUE(checkTensorSplit(KernelKind::Conv2d, words(conv), {Axis::Columns, 32}));
  EXPECT_TRUE(checkTensorSplit(KernelKind::Conv2d, words(conv), {Axis::Rows, 64}));
  EXPECT_THAT(checkTensorSplit(KernelKind::Conv2d, words(conv), {Axis::Columns, 64}),
              StatusIs(StatusCode::InvalidArgument, "output channels (96)"));
  Conv2dParams depthwise = conv;
  depthwise.inChannels = depthwise.outChannels = depthwise.groups = 96;
  EXPECT_TRUE(checkTensorSplit(KernelKind::Conv2d, words(depthwise), {Axis::Columns, 8}));
  EXPECT_THAT(checkTensorSplit(KernelKind::Conv2d, words(depthwise), {Axis::Rows, 2}),
              StatusIs(StatusCode::InvalidArgument, "splits by columns only"));
  depthwise.groups = 3;
  EXPECT_THAT(checkTensorSplit(KernelKind::Conv2d, words(depthwise), {Axis::Columns, 2}),
              StatusIs(StatusCode::InvalidArgument, "convolution's groups (3)"));
  EXPECT_THAT(checkTensorSplit(KernelKind::Softmax, {1, 2}, {Axis::Columns, 2}),
              StatusIs(StatusCode::InvalidArgument, "has no tensor-parallel split"));
  EXPECT_THAT(checkTensorSplit(KernelKind::MatMul, {1, 2}, {Axis::Columns, 2}),
              StatusIs(StatusCode::InvalidArgument, "has no tensor-parallel split"));
}

// GPU records are keyed by the GPU's name and compute capability, never
// confused with a CPU's device or another capability's.
TEST(GpuCandidateTest, TuningDevicesNameTheGpuAndItsCapability) {
  std::string device = gpuTuningDevice("NVIDIA H200", 90);
  EXPECT_EQ(device, "gpu NVIDIA H200 sm_90");
  EXPECT_TRUE(isGpuTuningDeviceOf(device, 90));
  EXPECT_FALSE(isGpuTuningDeviceOf(device, 9));
  EXPECT_FALSE(isGpuTuningDeviceOf(device, 80));
  EXPECT_FALSE(isGpuTuningDeviceOf(gpuTuningDevice("", 90), 90));
  EXPECT_FALSE(isGpuTuningDeviceOf("x86-64 znver3 sm_90", 90));
  EXPECT_EQ(librarySignature(KernelKind::MatMul, {1, 2, 3}), "library.matmul:1,2,3");
}

// An operator names a remote engine's GPU as its workers' `gpu` platform
// property does; anything else is refused, quoting the text.
TEST(GpuCandidateTest, GpuNamesBecomeTuningDevicesAndBack) {
  auto device = parseGpuName("NVIDIA H200 sm_90");
  ASSERT_TRUE(device) << device.status().toString();
  EXPECT_EQ(*device, gpuTuningDevice("NVIDIA H200", 90));
  EXPECT_EQ(gpuNameOf(*device), "NVIDIA H200 sm_90");
  device = parseGpuName("NVIDIA B200 sm_100");
  ASSERT_TRUE(device) << device.status().toString();
  EXPECT_TRUE(isGpuTuningDeviceOf(*device, 100));
  for (const char *bad :
       {"", "NVIDIA H200", "sm_90", " sm_90", " NVIDIA H200 sm_90", "NVIDIA H200 sm_",
        "NVIDIA H200 sm_9", "NVIDIA H200 sm_090", "NVIDIA H200 sm_90a",
        "NVIDIA H200 sm_1000", "A,B sm_90", "NVIDIA\tH200 sm_90", "NVIDIA H200 sm_-90"})
    EXPECT_THAT(parseGpuName(bad),
                StatusIs(StatusCode::InvalidArgument, "GPU '" + std::string(bad) + "'"))
        << bad;
  EXPECT_THAT(parseGpuName(std::string(200, 'x') + " sm_90"),
              StatusIs(StatusCode::InvalidArgument, "longer than 128 bytes"));
}

// The versions part needs the libraries, not a GPU.
TEST(GpuCandidateTest, TuningVersionsNameTheLibrariesAndTheKernelAbi) {
  Expected<std::string> versions = gpuTuningVersions();
  if (!versions)
    GTEST_SKIP() << "no cuDNN/cuBLASLt here: " << versions.status().message();
  EXPECT_THAT(*versions, HasSubstr("cuDNN 9."));
  // Records whose times cover another span (before fused epilogues, cuDNN's
  // call alone) are not compared with these.
  EXPECT_THAT(*versions, HasSubstr("; kernel abi " + std::to_string(kKernelAbiVersion) +
                                   "; trials " + std::to_string(kGpuTrialsVersion)));
}

// A GPU measure task's work: only convolutions and products have GPU
// candidates, params are checked before any device is asked for, and
// without a GPU the answer is Unavailable with the reason.
TEST(GpuMeasureTest, MeasuringNeedsAGpuAndAKernelWithGpuCandidates) {
  EXPECT_THAT(measureGpuLibraryKernel(KernelKind::Softmax, {1, 8}, 8),
              StatusIs(StatusCode::InvalidArgument,
                       "only convolutions and matrix products have GPU candidates"));
  EXPECT_THAT(measureGpuLibraryKernel(KernelKind::Conv2d, {1, 2, 3}, 8),
              StatusIs(StatusCode::InvalidArgument, "not 30 words"));
  // A measure task's params come from elsewhere: what would divide by zero,
  // overflow or disagree with itself never reaches the libraries.
  Conv2dParams good = conv(1, 8, 16, 15, 3, 1, 1, ActivationLayout::Nchw);
  std::vector<std::pair<std::string, Conv2dParams>> hostile;
  auto with = [&](const std::string &why, auto change) {
    Conv2dParams p = good;
    change(p);
    hostile.emplace_back(why, p);
  };
  with("size, stride", [](Conv2dParams &p) { p.groups = 0; });
  with("groups do not divide", [](Conv2dParams &p) { p.groups = 3; });
  with("output size", [](Conv2dParams &p) { p.outHeight += 1; });
  with("size, stride", [](Conv2dParams &p) { p.strideW = 0; });
  with("size, stride", [](Conv2dParams &p) { p.batch = INT64_MAX; });
  with("padding", [](Conv2dParams &p) { p.padTop = -1; });
  with("layout, flag", [](Conv2dParams &p) { p.precision = static_cast<Precision>(9); });
  with("layout, flag", [](Conv2dParams &p) { p.hasResidual = 2; });
  with("layout, flag", [](Conv2dParams &p) { p.sixteenBitSource = 2; });
  with("16-bit buffers in an fp32 convolution",
       [](Conv2dParams &p) { p.sixteenBitDestination = 1; });
  with("a 16-bit residual without a residual", [](Conv2dParams &p) {
    p.precision = Precision::Fp16;
    p.sixteenBitResidual = 1;
  });
  with("more than 2^40", [](Conv2dParams &p) { p.batch = p.inChannels = 1 << 20; });
  for (const auto &[why, p] : hostile)
    EXPECT_THAT(measureGpuLibraryKernel(KernelKind::Conv2d, paramWords(p), 8),
                StatusIs(StatusCode::InvalidArgument, why))
        << why;
  MatMulParams product{};
  product.batch = product.m = product.n = product.k = 8;
  product.hasMask = 3;
  EXPECT_THAT(measureGpuLibraryKernel(KernelKind::MatMul, paramWords(product), 8),
              StatusIs(StatusCode::InvalidArgument, "a flag that is not 0 or 1"));
  Expected<std::string> device = localGpuTuningDevice();
  if (device)
    GTEST_SKIP() << "a GPU is here (" << *device << "): gpu-check.sh measures on it";
  Conv2dParams p = conv(1, 8, 16, 15, 3, 1, 1, ActivationLayout::Nchw);
  EXPECT_THAT(measureGpuLibraryKernel(KernelKind::Conv2d, paramWords(p), 8),
              StatusIs(StatusCode::Unavailable,
                       "a measurement of a conv2d kernel needs an NVIDIA GPU"));
}

} // namespace
} // namespace flowc::runtime
