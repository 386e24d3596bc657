// Convolution layouts and algorithms: each ResNet-50 and DenseNet-121
// convolution shape between NHWC buffers, timed through the runtime's own
// site code (measureLibraryKernel, interleaved rounds) as the library's
// preferred layouts with their reorders ("layout=any"), its NHWC kernel
// read and written in place ("layout=nhwc"), and, for 3x3 ones where the
// library has it, its Winograd kernel with reorders
// ("layout=any;algo=winograd"). Marks the candidate a site runs without a
// tuning record (the first listed, "*"). Prints per shape the
// implementation and GFLOP/s (direct-convolution flops) of each, and the
// sums with the default's; asserts nothing.
//
//   conv_layout_bench [THREADS] [BATCH]
//
// The ISA is oneDNN's on this CPU; DNNL_MAX_CPU_ISA=AVX2 gives an AVX2
// machine's library kernels on an AVX-512 one.
#include "flowc/runtime/BuildInfo.h"
#include "flowc/runtime/KernelAbi.h"
#include "flowc/runtime/Tuning.h"

#include <algorithm>
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
    {"densenet 3x3 128->32 7", 128, 32, 7, 3, 1},
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

/// The first of `candidates` that starts with `prefix`, with no thread
/// count of its own.
std::string firstWith(const std::vector<std::string> &candidates,
                      const std::string &prefix) {
  for (const std::string &candidate : candidates)
    if (candidate.rfind(prefix, 0) == 0 &&
        candidate.find("threads=") == std::string::npos)
      return candidate;
  return "";
}

double gflops(const Conv2dParams &p, int64_t ns) {
  double flops = 2.0 * p.batch * p.outChannels * p.outHeight * p.outWidth * p.inChannels *
                 p.kernelHeight * p.kernelWidth;
  return ns > 0 ? flops / static_cast<double>(ns) : 0;
}

struct Column {
  const char *title, *prefix;
  double sumMs = 0;
  int shapes = 0;
};

} // namespace

int main(int argc, char **argv) {
  int threads = argc > 1 ? std::atoi(argv[1]) : omp_get_max_threads();
  int64_t batch = argc > 2 ? std::max(1, std::atoi(argv[2])) : 1;
  omp_set_num_threads(threads);
  const char *capped = std::getenv("DNNL_MAX_CPU_ISA");
  std::printf("conv layouts through the runtime's sites: oneDNN ISA %s%s%s, %d threads, "
              "batch %lld; * = the default\n",
              cpuIsaName().c_str(), capped ? ", DNNL_MAX_CPU_ISA=" : "",
              capped ? capped : "", threads, static_cast<long long>(batch));
  Column columns[] = {{"any (library's layouts)", "layout=any;impl="},
                      {"nhwc (in place)", "layout=nhwc;impl="},
                      {"winograd (library's layouts)", "layout=any;algo=winograd;impl="}};
  std::printf("%-26s", "shape");
  for (const Column &column : columns)
    std::printf(" %-40s %8s", column.title, "GFLOP/s");
  std::printf("\n");
  double defaultMs = 0;
  for (const Shape &shape : kShapes) {
    Conv2dParams p = paramsOf(shape);
    p.batch = batch;
    std::vector<int64_t> words = paramWords(p);
    auto candidates = libraryCandidates(KernelKind::Conv2d, words);
    if (!candidates) {
      std::fprintf(stderr, "%s: %s\n", shape.name,
                   candidates.status().toString().c_str());
      return 1;
    }
    std::vector<std::string> timed;
    for (const Column &column : columns)
      timed.push_back(firstWith(*candidates, column.prefix));
    std::vector<std::string> present;
    for (const std::string &candidate : timed)
      if (!candidate.empty())
        present.push_back(candidate);
    // The default first: measureLibraryKernel checks the others against it.
    std::stable_partition(present.begin(), present.end(),
                          [&](const std::string &c) { return c == candidates->front(); });
    flowc::MeasureOptions options;
    options.minRounds = 15;
    options.maxRounds = 31;
    auto measured = measureLibraryKernel(KernelKind::Conv2d, words, present, options);
    if (!measured) {
      std::fprintf(stderr, "%s: %s\n", shape.name, measured.status().toString().c_str());
      return 1;
    }
    std::printf("%-26s", shape.name);
    for (size_t c = 0; c < timed.size(); ++c) {
      if (timed[c].empty()) {
        std::printf(" %-40s %8s", "(none on this CPU)", "-");
        continue;
      }
      auto at = std::find(present.begin(), present.end(), timed[c]);
      int64_t ns = measured->timings[at - present.begin()].medianNs;
      bool isDefault = timed[c] == candidates->front();
      columns[c].sumMs += ns / 1e6;
      ++columns[c].shapes;
      if (isDefault)
        defaultMs += ns / 1e6;
      std::printf(" %-40s %8.1f", (timed[c] + (isDefault ? " *" : "")).c_str(),
                  gflops(p, ns));
    }
    std::printf("\n");
  }
  std::printf("sum of medians:");
  for (const Column &column : columns)
    std::printf(" %s %.3f ms (%d shapes);", column.title, column.sumMs, column.shapes);
  std::printf(" the defaults %.3f ms\n", defaultMs);
  return 0;
}
