// Convolution layouts: each ResNet-50 and DenseNet-121 convolution shape
// between NHWC buffers, timed through the runtime's own site code
// (measureLibraryKernel, interleaved rounds) as the library's preferred
// layouts with their reorders ("layout=any") against its NHWC kernel read
// and written in place ("layout=nhwc"), which is what a site runs without a
// tuning record where the library has such a kernel. Prints per shape the
// implementation and GFLOP/s of each, and the sums; asserts nothing.
//
//   conv_layout_bench [THREADS]
//
// The ISA is oneDNN's on this CPU; DNNL_MAX_CPU_ISA=AVX2 gives an AVX2
// machine's library kernels on an AVX-512 one.
#include "flowc/runtime/BuildInfo.h"
#include "flowc/runtime/KernelAbi.h"
#include "flowc/runtime/Tuning.h"

#include <cstdio>
#include <cstdlib>
#include <omp.h>
#include <string>
#include <vector>

namespace {

using namespace flowc::runtime;

struct Shape {
  const char *name;
  int64_t in, out, size, kernel, stride;
};

// ResNet-50's distinct convolutions after the stem, and DenseNet-121's
// 1x1 bottlenecks and 3x3 growth convolutions.
constexpr Shape kShapes[] = {
    {"resnet 3x3 64", 64, 64, 56, 3, 1},
    {"resnet 1x1 256->64", 256, 64, 56, 1, 1},
    {"resnet 1x1 64->256", 64, 256, 56, 1, 1},
    {"resnet 3x3 128", 128, 128, 28, 3, 1},
    {"resnet 1x1 512->128", 512, 128, 28, 1, 1},
    {"resnet 3x3 256", 256, 256, 14, 3, 1},
    {"resnet 1x1 1024->256", 1024, 256, 14, 1, 1},
    {"resnet 3x3 512", 512, 512, 7, 3, 1},
    {"resnet 1x1 2048->512", 2048, 512, 7, 1, 1},
    {"densenet 1x1 256->128", 256, 128, 56, 1, 1},
    {"densenet 3x3 128->32 56", 128, 32, 56, 3, 1},
    {"densenet 1x1 512->128", 512, 128, 28, 1, 1},
    {"densenet 1x1 1024->128", 1024, 128, 14, 1, 1},
    {"densenet 3x3 128->32 14", 128, 32, 14, 3, 1},
};

Conv2dParams paramsOf(const Shape &shape) {
  Conv2dParams p{};
  p.batch = 1;
  p.inChannels = shape.in;
  p.outChannels = shape.out;
  p.inHeight = p.inWidth = shape.size;
  p.kernelHeight = p.kernelWidth = shape.kernel;
  int64_t pad = shape.kernel / 2;
  p.outHeight = p.outWidth = (shape.size + 2 * pad - shape.kernel) / shape.stride + 1;
  p.strideH = p.strideW = shape.stride;
  p.dilationH = p.dilationW = 1;
  p.padTop = p.padLeft = p.padBottom = p.padRight = pad;
  p.groups = 1;
  p.sourceLayout = p.destinationLayout = ActivationLayout::Nhwc;
  p.weightLayout = ConvWeightLayout::Oihw;
  p.constantWeights = 1;
  p.activation = Activation::None;
  p.precision = flowc::Precision::Fp32;
  return p;
}

/// The first of `candidates` in `layout`, with no thread count of its own.
std::string firstIn(const std::vector<std::string> &candidates,
                    const std::string &layout) {
  for (const std::string &candidate : candidates)
    if (candidate.rfind("layout=" + layout + ";", 0) == 0 &&
        candidate.find("threads=") == std::string::npos)
      return candidate;
  return "";
}

double gflops(const Conv2dParams &p, int64_t ns) {
  double flops = 2.0 * p.batch * p.outChannels * p.outHeight * p.outWidth * p.inChannels *
                 p.kernelHeight * p.kernelWidth;
  return ns > 0 ? flops / static_cast<double>(ns) : 0;
}

} // namespace

int main(int argc, char **argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : omp_get_max_threads();
  omp_set_num_threads(threads);
  const char *capped = std::getenv("DNNL_MAX_CPU_ISA");
  std::printf("conv layouts through the runtime's sites: oneDNN ISA %s%s%s, %d threads\n",
              cpuIsaName().c_str(), capped ? ", DNNL_MAX_CPU_ISA=" : "",
              capped ? capped : "", threads);
  std::printf("%-26s %-40s %9s %-40s %9s %7s\n", "shape", "any (library's layouts)",
              "GFLOP/s", "nhwc (in place)", "GFLOP/s", "nhwc/any");
  double anyMs = 0, nhwcMs = 0;
  for (const Shape &shape : kShapes) {
    Conv2dParams p = paramsOf(shape);
    std::vector<int64_t> words = paramWords(p);
    auto candidates = libraryCandidates(KernelKind::Conv2d, words);
    if (!candidates) {
      std::fprintf(stderr, "%s: %s\n", shape.name,
                   candidates.status().toString().c_str());
      return 1;
    }
    std::string any = firstIn(*candidates, "any"), nhwc = firstIn(*candidates, "nhwc");
    if (any.empty() || nhwc.empty()) {
      std::printf("%-26s no %s candidate on this CPU\n", shape.name,
                  any.empty() ? "blocked" : "NHWC");
      continue;
    }
    flowc::MeasureOptions options;
    options.minRounds = 15;
    options.maxRounds = 31;
    auto measured = measureLibraryKernel(KernelKind::Conv2d, words, {any, nhwc}, options);
    if (!measured) {
      std::fprintf(stderr, "%s: %s\n", shape.name, measured.status().toString().c_str());
      return 1;
    }
    int64_t anyNs = measured->timings[0].medianNs, nhwcNs = measured->timings[1].medianNs;
    anyMs += anyNs / 1e6;
    nhwcMs += nhwcNs / 1e6;
    std::printf("%-26s %-40s %9.1f %-40s %9.1f %6.2fx\n", shape.name, any.c_str(),
                gflops(p, anyNs), nhwc.c_str(), gflops(p, nhwcNs),
                nhwcNs > 0 ? static_cast<double>(anyNs) / nhwcNs : 0.0);
  }
  std::printf("sum of medians: any %.3f ms, nhwc %.3f ms (%.2fx)\n", anyMs, nhwcMs,
              nhwcMs > 0 ? anyMs / nhwcMs : 0.0);
  return 0;
}
