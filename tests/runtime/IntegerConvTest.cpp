// The integer convolution (KernelKind::IntegerConv2d) against sums of
// products in int64: dense and depthwise, every layout of the source, the
// weights and the destination, strides, dilations and uneven padding (which
// counts as the zero point: 0 once shifted), zero points across the int8
// range, weights constant or not. ctest runs these tests twice: as the CPU
// is, and with DNNL_MAX_CPU_ISA=AVX2 (no VNNI), where the convolution runs
// in float32.
#include "Kernels.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace flowc::runtime {
namespace {

struct Operands {
  IntegerConv2dParams params;
  std::vector<int8_t> source, weights;
};

/// Offset of NCHW coordinates in `layout`.
int64_t activationOffset(const std::array<int64_t, 4> &dims, ActivationLayout layout,
                         int64_t n, int64_t c, int64_t h, int64_t w) {
  auto [batch, channels, height, width] = dims;
  (void)batch;
  if (layout == ActivationLayout::Nhwc)
    return ((n * height + h) * width + w) * channels + c;
  return ((n * channels + c) * height + h) * width + w;
}

/// Offset of weight (output channel o, input channel i of its group, kh,
/// kw) in the params' weight layout.
int64_t weightOffset(const IntegerConv2dParams &p, int64_t o, int64_t i, int64_t y,
                     int64_t x) {
  int64_t in = p.inChannels / p.groups, kh = p.kernelHeight, kw = p.kernelWidth;
  switch (p.weightLayout) {
  case ConvWeightLayout::Ohwi:
    return ((o * kh + y) * kw + x) * in + i;
  case ConvWeightLayout::Hwcm: {
    int64_t multiplier = p.outChannels / p.groups;
    return ((y * kw + x) * p.groups + o / multiplier) * multiplier + o % multiplier;
  }
  case ConvWeightLayout::Oihw:
    break;
  }
  return ((o * in + i) * kh + y) * kw + x;
}

IntegerConv2dParams geometry(int64_t channels, int64_t outChannels, int64_t size,
                             int64_t kernel, int64_t stride, int64_t dilation,
                             std::array<int64_t, 4> pads, int64_t groups) {
  IntegerConv2dParams p{};
  p.batch = 2;
  p.inChannels = channels;
  p.inHeight = size;
  p.inWidth = size + 1;
  p.outChannels = outChannels;
  p.kernelHeight = kernel;
  p.kernelWidth = kernel;
  p.strideH = p.strideW = stride;
  p.dilationH = p.dilationW = dilation;
  p.padTop = pads[0];
  p.padLeft = pads[1];
  p.padBottom = pads[2];
  p.padRight = pads[3];
  p.groups = groups;
  int64_t span = dilation * (kernel - 1) + 1;
  p.outHeight = (p.inHeight + p.padTop + p.padBottom - span) / stride + 1;
  p.outWidth = (p.inWidth + p.padLeft + p.padRight - span) / stride + 1;
  p.constantWeights = 1;
  return p;
}

Operands randomOperands(std::mt19937 &random, const IntegerConv2dParams &p) {
  std::uniform_int_distribution<int> byte(-128, 127);
  auto bytes = [&](int64_t count) {
    std::vector<int8_t> out(static_cast<size_t>(count));
    for (int8_t &value : out)
      value = static_cast<int8_t>(byte(random));
    return out;
  };
  return Operands{
      p, bytes(p.batch * p.inChannels * p.inHeight * p.inWidth),
      bytes(p.outChannels * (p.inChannels / p.groups) * p.kernelHeight * p.kernelWidth)};
}

std::vector<int32_t> expectedConvolution(const Operands &o) {
  const IntegerConv2dParams &p = o.params;
  std::array<int64_t, 4> in = {p.batch, p.inChannels, p.inHeight, p.inWidth};
  std::array<int64_t, 4> out = {p.batch, p.outChannels, p.outHeight, p.outWidth};
  int64_t perGroup = p.inChannels / p.groups, outPerGroup = p.outChannels / p.groups;
  std::vector<int32_t> result(static_cast<size_t>(out[0] * out[1] * out[2] * out[3]));
  for (int64_t n = 0; n < p.batch; ++n)
    for (int64_t oc = 0; oc < p.outChannels; ++oc)
      for (int64_t oy = 0; oy < p.outHeight; ++oy)
        for (int64_t ox = 0; ox < p.outWidth; ++ox) {
          int64_t sum = 0;
          for (int64_t i = 0; i < perGroup; ++i)
            for (int64_t ky = 0; ky < p.kernelHeight; ++ky)
              for (int64_t kx = 0; kx < p.kernelWidth; ++kx) {
                int64_t y = oy * p.strideH - p.padTop + ky * p.dilationH;
                int64_t x = ox * p.strideW - p.padLeft + kx * p.dilationW;
                // Padding holds the zero point: 0 once shifted.
                if (y < 0 || y >= p.inHeight || x < 0 || x >= p.inWidth)
                  continue;
                int64_t c = oc / outPerGroup * perGroup + i;
                int64_t value =
                    o.source[activationOffset(in, p.sourceLayout, n, c, y, x)];
                sum += (value - p.zeroSource) * o.weights[weightOffset(p, oc, i, ky, kx)];
              }
          result[activationOffset(out, p.destinationLayout, n, oc, oy, ox)] =
              static_cast<int32_t>(sum);
        }
  return result;
}

/// One site's kernel, called as generated code calls it.
class Convolution {
public:
  Convolution() : context_(makeKernelContext({""})) {}

  std::vector<int32_t> run(Operands &o) {
    const IntegerConv2dParams &p = o.params;
    std::vector<int32_t> out(
        static_cast<size_t>(p.batch * p.outChannels * p.outHeight * p.outWidth), -7);
    std::vector<void *> buffers = {o.source.data(), o.weights.data(), out.data()};
    std::vector<int64_t> words = paramWords(o.params);
    kernelFunction(KernelKind::IntegerConv2d)(context_.get(), 0, words.data(),
                                              buffers.data());
    Status failure = takeKernelFailure(*context_);
    EXPECT_TRUE(failure.isOk()) << failure.message();
    return out;
  }

  std::string implementation() const { return siteImplementation(*context_, 0); }

private:
  KernelContextPtr context_;
};

TEST(IntegerConvTest, DenseConvolutionsInEveryLayoutAreExact) {
  std::mt19937 random(3);
  for (auto source : {ActivationLayout::Nchw, ActivationLayout::Nhwc})
    for (auto destination : {ActivationLayout::Nchw, ActivationLayout::Nhwc})
      for (auto weights : {ConvWeightLayout::Oihw, ConvWeightLayout::Ohwi})
        for (int64_t zero : {0, -128, 5, 127}) {
          IntegerConv2dParams p = geometry(16, 24, 9, 3, 1, 1, {1, 1, 1, 1}, 1);
          p.sourceLayout = source;
          p.destinationLayout = destination;
          p.weightLayout = weights;
          p.zeroSource = zero;
          Operands o = randomOperands(random, p);
          Convolution convolution;
          EXPECT_EQ(convolution.run(o), expectedConvolution(o))
              << "source " << static_cast<int>(source) << ", destination "
              << static_cast<int>(destination) << ", weights "
              << static_cast<int>(weights) << ", zero point " << zero << " ("
              << convolution.implementation() << ")";
        }
}

TEST(IntegerConvTest, StridesDilationsAndUnevenPaddingAreExact) {
  std::mt19937 random(7);
  struct Shape {
    int64_t channels, outChannels, size, kernel, stride, dilation;
    std::array<int64_t, 4> pads;
  };
  for (const Shape &s :
       {Shape{3, 8, 12, 7, 2, 1, {3, 3, 3, 3}}, Shape{8, 16, 10, 3, 2, 1, {0, 0, 1, 1}},
        Shape{5, 4, 11, 3, 1, 2, {2, 0, 1, 2}}, Shape{32, 16, 6, 1, 1, 1, {0, 0, 0, 0}},
        Shape{4, 4, 5, 5, 3, 1, {2, 2, 2, 2}}}) {
    IntegerConv2dParams p = geometry(s.channels, s.outChannels, s.size, s.kernel,
                                     s.stride, s.dilation, s.pads, 1);
    p.sourceLayout = ActivationLayout::Nhwc;
    p.destinationLayout = ActivationLayout::Nhwc;
    p.weightLayout = ConvWeightLayout::Oihw;
    p.zeroSource = -3;
    Operands o = randomOperands(random, p);
    Convolution convolution;
    EXPECT_EQ(convolution.run(o), expectedConvolution(o))
        << s.channels << " -> " << s.outChannels << ", kernel " << s.kernel << ", stride "
        << s.stride << ", dilation " << s.dilation << " (" << convolution.implementation()
        << ")";
  }
}

TEST(IntegerConvTest, DepthwiseConvolutionsAreExact) {
  std::mt19937 random(11);
  for (auto weights : {ConvWeightLayout::Oihw, ConvWeightLayout::Hwcm})
    for (int64_t multiplier : {1, 2})
      for (int64_t stride : {1, 2}) {
        IntegerConv2dParams p =
            geometry(16, 16 * multiplier, 9, 3, stride, 1, {1, 1, 1, 1}, 16);
        p.sourceLayout = ActivationLayout::Nhwc;
        p.destinationLayout = ActivationLayout::Nchw;
        p.weightLayout = weights;
        p.zeroSource = 100;
        Operands o = randomOperands(random, p);
        Convolution convolution;
        EXPECT_EQ(convolution.run(o), expectedConvolution(o))
            << "weights " << static_cast<int>(weights) << ", multiplier " << multiplier
            << ", stride " << stride << " (" << convolution.implementation() << ")";
      }
}

TEST(IntegerConvTest, RunTimeWeightsAreReadEachCallAndConstantsFromAnotherBuffer) {
  std::mt19937 random(13);
  IntegerConv2dParams p = geometry(8, 8, 6, 3, 1, 1, {1, 1, 1, 1}, 1);
  p.sourceLayout = p.destinationLayout = ActivationLayout::Nhwc;
  p.weightLayout = ConvWeightLayout::Oihw;
  p.zeroSource = 7;
  for (bool constant : {false, true}) {
    p.constantWeights = constant;
    Operands first = randomOperands(random, p), second = randomOperands(random, p);
    Convolution convolution;
    EXPECT_EQ(convolution.run(first), expectedConvolution(first));
    // Another buffer: read anew whether constant or not.
    EXPECT_EQ(convolution.run(second), expectedConvolution(second));
    if (constant)
      continue;
    // New contents at the same address: a run-time weight is read again.
    for (int8_t &value : second.weights)
      value = static_cast<int8_t>(value * 3 + 1);
    EXPECT_EQ(convolution.run(second), expectedConvolution(second));
  }
}

TEST(IntegerConvTest, LongSumsAreExactInInt8) {
  // 512 input channels of 3x3: sums of 4608 products of up to 255 * 128,
  // past 2^24, where float32 would round.
  IntegerConv2dParams p = geometry(512, 8, 3, 3, 1, 1, {0, 0, 0, 0}, 1);
  p.sourceLayout = p.destinationLayout = ActivationLayout::Nhwc;
  p.weightLayout = ConvWeightLayout::Oihw;
  p.zeroSource = -128;
  std::mt19937 random(17);
  Operands o = randomOperands(random, p);
  o.source.assign(o.source.size(), 127);
  for (size_t i = 0; i < o.weights.size(); ++i)
    o.weights[i] = static_cast<int8_t>(i % 3 ? -128 : 127);
  Convolution convolution;
  std::vector<int32_t> got = convolution.run(o);
  if (convolution.implementation().find("float32") != std::string::npos)
    GTEST_SKIP() << "this CPU (or DNNL_MAX_CPU_ISA) has no VNNI: the convolution runs "
                    "in float32, exact below 2^24";
  EXPECT_EQ(got, expectedConvolution(o));
}

TEST(IntegerConvTest, RunsInFloat32WithoutVnni) {
  const char *isa = std::getenv("DNNL_MAX_CPU_ISA");
  if (!isa || std::string(isa) != "AVX2")
    GTEST_SKIP() << "runs where ctest sets DNNL_MAX_CPU_ISA=AVX2";
  std::mt19937 random(19);
  IntegerConv2dParams p = geometry(4, 4, 5, 3, 1, 1, {1, 1, 1, 1}, 1);
  p.zeroSource = 9;
  Operands o = randomOperands(random, p);
  Convolution convolution;
  EXPECT_EQ(convolution.run(o), expectedConvolution(o));
  EXPECT_NE(convolution.implementation().find("float32"), std::string::npos)
      << convolution.implementation();
}

} // namespace
} // namespace flowc::runtime
