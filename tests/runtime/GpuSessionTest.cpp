// The runtime's GPU side. Without a GPU (the build machines): opening the
// device is Unavailable with the reason, and a CUDA artifact opens but its
// session fails in one line that says what it needs. With a GPU: the device
// is described, and CUDA code (C host code launching a PTX kernel, y = x + w
// over n floats) runs through the session. Tests that need a GPU skip,
// saying why, on a machine without one.
#include "Gpu.h"
#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/BuildInfo.h"
#include "flowc/runtime/KernelAbi.h"
#include "gpu/Coalesce.h"
#include "gpu/LibraryKernels.h"
#include "gpu/Nccl.h"
#include "flowc/runtime/GpuAbi.h"
#include "flowc/runtime/Session.h"
#include "flowc/runtime/Tensor.h"
#include "flowc/runtime/Tuning.h"

#include "../common/TestUtil.h"
#include "SmallArtifact.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <limits>
#include <sstream>

namespace flowc::runtime {
namespace {

using flowc::testing::StatusIs;
using flowc::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::StartsWith;

/// Whether this host has the driver library, whatever it then says.
bool hasDriverLibrary() {
  void *library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library)
    return false;
  dlclose(library);
  return true;
}

/// y[i] = x[i] + w[i] for i < n, one thread per element. Loaded by the
/// driver's JIT, so the test needs no toolkit.
constexpr const char *kAddPtx[] = {
    ".version 6.0",
    ".target sm_50",
    ".address_size 64",
    ".visible .entry add(.param .u64 x, .param .u64 w, .param .u64 y, .param .u64 n)",
    "{",
    "  .reg .pred %p<2>;",
    "  .reg .b32 %r<4>;",
    "  .reg .b64 %rd<10>;",
    "  .reg .f32 %f<4>;",
    "  ld.param.u64 %rd1, [x];",
    "  ld.param.u64 %rd2, [w];",
    "  ld.param.u64 %rd3, [y];",
    "  ld.param.u64 %rd4, [n];",
    "  mov.u32 %r1, %ctaid.x;",
    "  mov.u32 %r2, %ntid.x;",
    "  mov.u32 %r3, %tid.x;",
    "  mul.wide.u32 %rd5, %r1, %r2;",
    "  cvt.u64.u32 %rd9, %r3;",
    "  add.s64 %rd5, %rd5, %rd9;",
    "  setp.ge.u64 %p1, %rd5, %rd4;",
    "  @%p1 bra DONE;",
    "  cvta.to.global.u64 %rd1, %rd1;",
    "  cvta.to.global.u64 %rd2, %rd2;",
    "  cvta.to.global.u64 %rd3, %rd3;",
    "  shl.b64 %rd6, %rd5, 2;",
    "  add.s64 %rd7, %rd1, %rd6;",
    "  ld.global.f32 %f1, [%rd7];",
    "  add.s64 %rd7, %rd2, %rd6;",
    "  ld.global.f32 %f2, [%rd7];",
    "  add.f32 %f3, %f1, %f2;",
    "  add.s64 %rd8, %rd3, %rd6;",
    "  st.global.f32 [%rd8], %f3;",
    "DONE:",
    "  ret;",
    "}",
};

/// What the test's CUDA code object (C host code, a PTX kernel) says of
/// itself and does.
struct CudaCode {
  int64_t capability = 90;
  int64_t abi = kGpuAbiVersion;
  /// Also defines flowc_kernel_table, and none of the other library-kernel
  /// symbols.
  bool libraryKernels = false;
  /// Nonzero: defines every library-kernel symbol (KernelAbi.h), with this
  /// kernel ABI version, for one softmax site.
  int64_t kernelAbi = 0;
  /// Leaves out flowc_gpu_load.
  bool withoutLoad = false;
  /// Launches a grid of 0 blocks, which CUDA cannot.
  bool badLaunch = false;
  /// Hands the kernel address 16 for x: its reads fault on the device.
  bool faultingRead = false;
  /// Allocates (and frees) a temporary around the launch, as -O0 code does.
  bool scratch = true;
  /// Elements of x, w and y.
  int64_t elements = 4;
  /// >= 0: the plan names a tuned candidate for this library-kernel site.
  int64_t tunedSite = -1;
};

constexpr int64_t kBlockThreads = 256;

/// C source of a CUDA code object as GpuAbi.h describes it: the add kernel
/// launched through the session's table, with a temporary allocated and
/// freed around it and a profile mark on each side.
std::string cudaSource(const CudaCode &code) {
  std::ostringstream ptx;
  for (const char *line : kAddPtx)
    ptx << "\"" << line << "\\n\"\n";
  std::ostringstream source;
  source << "#include <stdint.h>\n"
            "typedef void (*Slot)(void);\n"
            "typedef void *(*ModuleLoad)(void *, uint64_t);\n"
            "typedef void (*ModuleUnload)(void *);\n"
            "typedef void *(*ModuleGetFunction)(void *, const char *);\n"
            "typedef void (*LaunchKernel)(void *, int64_t, int64_t, int64_t, int64_t,\n"
            "  int64_t, int64_t, int32_t, void *, void **, void **, uint64_t);\n"
            "typedef void *(*StreamCreate)(void);\n"
            "typedef void (*StreamFunction)(void *);\n"
            "typedef void *(*MemAlloc)(uint64_t);\n"
            "typedef void (*MemFree)(void *);\n"
            "Slot flowc_gpu_table[10];\n"
         << "const int64_t flowc_gpu_capability = " << code.capability << ";\n"
         << "const int64_t flowc_gpu_abi = " << code.abi << ";\n"
         << (code.libraryKernels || code.kernelAbi ? "void *flowc_kernel_table[8];\n"
                                                   : "")
         << (code.kernelAbi ? "void *flowc_kernel_context;\n"
                              "const int64_t flowc_kernel_kinds = 8;\n"
                              "const int64_t flowc_kernel_sites = 1;\n"
                              "const int64_t flowc_kernel_abi = " +
                                  std::to_string(code.kernelAbi) + ";\n"
                            : "")
         << "void (*flowc_profile_hook)(int64_t);\n"
            "const char flowc_profile_calls[] = "
            "\"[{\\\"kernel\\\":\\\"add\\\",\\\"nodes\\\":[0]}]\";\n"
            "static const char ptx[] =\n"
         << ptx.str() << ";\n"
         << "static void *module, *function;\n";
  if (!code.withoutLoad)
    source << "void flowc_gpu_load(void) {\n"
              "  module = ((ModuleLoad)flowc_gpu_table[0])((void *)ptx, sizeof ptx);\n"
              "  function = ((ModuleGetFunction)flowc_gpu_table[2])(module, \"add\");\n"
              "}\n";
  int64_t grid = code.badLaunch ? 0 : (code.elements + kBlockThreads - 1) / kBlockThreads;
  source << "void flowc_gpu_unload(void) {\n"
            "  ((ModuleUnload)flowc_gpu_table[1])(module);\n"
            "}\n"
            "void flowc_entry(void **args) {\n"
            "  void *x = args[0], *w = args[1], *y = args[2];\n"
         << (code.faultingRead ? "  x = (void *)16;\n" : "")
         << "  uint64_t n = " << code.elements << ";\n"
         << "  void *params[] = {&x, &w, &y, &n};\n"
            "  void *stream = ((StreamCreate)flowc_gpu_table[4])();\n"
         << (code.scratch ? "  void *scratch = ((MemAlloc)flowc_gpu_table[7])(64);\n"
                          : "")
         << "  if (flowc_profile_hook) flowc_profile_hook(0);\n"
         << "  ((LaunchKernel)flowc_gpu_table[3])(function, " << grid << ", 1, 1, "
         << kBlockThreads << ", 1, 1, 0, stream, params, 0, 4);\n"
         << "  if (flowc_profile_hook) flowc_profile_hook(1);\n"
            "  ((StreamFunction)flowc_gpu_table[6])(stream);\n"
         << (code.scratch ? "  ((MemFree)flowc_gpu_table[9])(scratch);\n" : "")
         << "  ((StreamFunction)flowc_gpu_table[5])(stream);\n"
            "}\n";
  return source.str();
}

/// The weight w of `elements` floats: 10, 20, ..., 70, 10, ...
std::vector<float> addWeights(int64_t elements) {
  std::vector<float> w(elements);
  for (int64_t i = 0; i < elements; ++i)
    w[i] = static_cast<float>(10 * (i % 7 + 1));
  return w;
}

/// The add model over `code.elements` floats with `code` as its CUDA code,
/// written to `dir`/add.fca and opened.
Expected<std::shared_ptr<Artifact>> cudaArtifact(const TempDir &dir,
                                                 const CudaCode &code) {
  FLOWC_ASSIGN_OR_RETURN(std::string object,
                         testing::compileCode(dir.path(), cudaSource(code)));
  std::string path = dir.file("add.fca");
  std::vector<float> w = addWeights(code.elements);
  std::string_view bytes(reinterpret_cast<const char *>(w.data()),
                         w.size() * sizeof(float));
  FLOWC_ASSIGN_OR_RETURN(auto writer, ArtifactWriter::create(path));
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::Metadata, R"({"model":"add"})"));
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::Code, object));
  FLOWC_ASSIGN_OR_RETURN(std::vector<uint64_t> offsets, writer->addWeights({bytes}));
  Plan plan;
  plan.entry = "flowc_entry";
  plan.inputs = {{"x", "float32", {code.elements}}};
  plan.outputs = {{"y", "float32", {code.elements}}};
  plan.weights = {{{"w", "float32", {code.elements}},
                   testing::weightDigest(bytes),
                   offsets[0],
                   bytes.size()}};
  if (code.tunedSite >= 0) {
    TunedKernelSpec tuned;
    tuned.site = code.tunedSite;
    tuned.signature = "library.softmax:1";
    tuned.candidate = "cudnn:engine=1;knobs=";
    tuned.timeNs = 1000;
    plan.tuned = {tuned};
  }
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::Plan, plan.toJson().dump()));
  FLOWC_RETURN_IF_ERROR(writer->finish());
  return Artifact::open(path);
}

/// Runs `session` on x[i] = base + i % 1000 and checks y = x + w.
void expectAdds(Session &session, int64_t elements, float base) {
  std::vector<float> x(elements), expected(elements);
  std::vector<float> w = addWeights(elements);
  for (int64_t i = 0; i < elements; ++i) {
    x[i] = base + static_cast<float>(i % 1000);
    expected[i] = x[i] + w[i];
  }
  auto outputs = session.run({{"x", Tensor::fromFloats({elements}, x)}});
  ASSERT_TRUE(outputs) << outputs.status().toString();
  // One message for the first difference, not one per element.
  std::vector<float> y = outputs->at(0).floats();
  ASSERT_EQ(y.size(), expected.size());
  auto [got, want] = std::mismatch(y.begin(), y.end(), expected.begin());
  EXPECT_TRUE(got == y.end()) << "y[" << (got - y.begin()) << "] is " << *got << ", not "
                              << *want;
}

// Without the driver library, opening the GPU says so, naming the library.
TEST(GpuTest, WithoutTheDriverLibraryOpenGpuIsUnavailable) {
  Expected<GpuDevice> device = openGpu();
  if (device)
    GTEST_SKIP() << "a GPU is present: " << device->description();
  if (hasDriverLibrary())
    GTEST_SKIP() << "libcuda.so.1 is installed, but: " << device.status().message();
  EXPECT_THAT(device, StatusIs(StatusCode::Unavailable,
                               "the NVIDIA driver (libcuda.so.1) is not installed: "));
}

// Opening is done once per process: a second call answers the same.
TEST(GpuTest, OpenGpuAnswersTheSameEachTime) {
  Expected<GpuDevice> first = openGpu();
  Expected<GpuDevice> second = openGpu();
  ASSERT_EQ(first.hasValue(), second.hasValue());
  if (first)
    EXPECT_EQ(first->description(), second->description());
  else
    EXPECT_EQ(first.status().toString(), second.status().toString());
}

// Devices are chosen by the driver's ordinal: one the driver does not see
// is NotFound, naming those it does; without a GPU, every ordinal is the
// same Unavailable.
TEST(GpuTest, ADeviceTheDriverDoesNotSeeIsNotFound) {
  Expected<std::vector<GpuDevice>> devices = listGpus();
  if (!devices) {
    for (int ordinal : {0, 1, 7})
      EXPECT_THAT(openGpu(ordinal),
                  StatusIs(StatusCode::Unavailable, devices.status().message()));
    EXPECT_FALSE(localGpuOrdinal("gpu NVIDIA H200 sm_90").has_value());
    return;
  }
  auto count = static_cast<int>(devices->size());
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    Expected<GpuDevice> device = openGpu(ordinal);
    ASSERT_TRUE(device) << device.status().toString();
    EXPECT_EQ(device->ordinal, ordinal);
    Expected<std::string> tuning = localGpuTuningDevice(ordinal);
    ASSERT_TRUE(tuning) << tuning.status().toString();
    // The first device of that name and capability.
    std::optional<int> first = localGpuOrdinal(*tuning);
    ASSERT_TRUE(first.has_value());
    EXPECT_LE(*first, ordinal);
  }
  for (int ordinal : {count, -1})
    EXPECT_THAT(openGpu(ordinal),
                StatusIs(StatusCode::NotFound,
                         "there is no GPU device " + std::to_string(ordinal) +
                             ": the driver sees " + std::to_string(count) +
                             " (device 0 ("));
  EXPECT_FALSE(localGpuOrdinal("gpu No Such GPU sm_90").has_value());
}

// With a GPU, the device is described as messages and keys will name it.
TEST(GpuTest, DescribesDeviceZero) {
  Expected<GpuDevice> device = openGpu();
  if (!device)
    GTEST_SKIP() << "no GPU here: " << device.status().message();
  std::cout << "GPU: " << device->description() << "\n";
  EXPECT_EQ(device->ordinal, 0);
  EXPECT_FALSE(device->name.empty());
  EXPECT_GE(device->capability, 30);
  EXPECT_GT(device->totalMemoryBytes, 0u);
  EXPECT_GT(device->driverVersion, 0);
  EXPECT_THAT(device->description(),
              StartsWith("device 0 (" + device->name + ", sm_" +
                         std::to_string(device->capability) + ", "));
}

// A machine without a GPU opens a CUDA artifact (to inspect it), and a
// session of it fails in one line: the artifact, its target and the reason.
TEST(GpuSessionTest, CudaCodeWithoutAGpuIsUnavailableInOneLine) {
  Expected<GpuDevice> device = openGpu();
  if (device)
    GTEST_SKIP() << "a GPU is present: " << device->description();
  TempDir dir;
  // The artifact opens: loading its code runs none of the GPU contract.
  auto artifact = cudaArtifact(dir, {});
  ASSERT_TRUE(artifact) << artifact.status().toString();
  auto session = Session::create(*artifact);
  ASSERT_THAT(session, StatusIs(StatusCode::Unavailable, ""));
  const std::string &message = session.status().message();
  EXPECT_THAT(message, StartsWith("'" + dir.file("add.fca") +
                                  "' is CUDA code for sm_90 and needs an NVIDIA GPU: " +
                                  device.status().message()));
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

// Code compiled against another GPU ABI is refused with what to do, on any
// machine: it needs no device to tell.
TEST(GpuSessionTest, CudaCodeOfAnotherGpuAbiIsRefused) {
  TempDir dir;
  auto artifact = cudaArtifact(dir, {.abi = kGpuAbiVersion + 1});
  ASSERT_TRUE(artifact) << artifact.status().toString();
  EXPECT_THAT(Session::create(*artifact),
              StatusIs(StatusCode::FailedPrecondition,
                       "was compiled for GPU ABI 2, this runtime has 1: compile the "
                       "model again"));
}

// CUDA code with part of the library-kernel contract is damaged: refused
// before any device is touched.
TEST(GpuSessionTest, CudaCodeWithPartOfTheKernelContractIsDataLoss) {
  TempDir dir;
  auto artifact = cudaArtifact(dir, {.libraryKernels = true});
  ASSERT_TRUE(artifact) << artifact.status().toString();
  EXPECT_THAT(Session::create(*artifact),
              StatusIs(StatusCode::DataLoss, "library kernels lacks one of "
                                             "flowc_kernel_context"));
}

// Library-kernel parameters of another ABI would be read wrongly: refused,
// on any machine, with what to do.
TEST(GpuSessionTest, CudaCodeOfAnotherKernelAbiIsRefused) {
  TempDir dir;
  auto artifact = cudaArtifact(dir, {.kernelAbi = kKernelAbiVersion + 1});
  ASSERT_TRUE(artifact) << artifact.status().toString();
  EXPECT_THAT(Session::create(*artifact),
              StatusIs(StatusCode::FailedPrecondition,
                       "was compiled for kernel ABI " +
                           std::to_string(kKernelAbiVersion + 1) + ", this runtime has " +
                           std::to_string(kKernelAbiVersion)));
}

// Code with the whole contract gets as far as the device: without one it
// fails like any CUDA code, in one line.
TEST(GpuSessionTest, CudaCodeWithLibraryKernelsNeedsAGpu) {
  if (Expected<GpuDevice> device = openGpu())
    GTEST_SKIP() << "a GPU is present: " << device->description();
  TempDir dir;
  auto artifact = cudaArtifact(dir, {.kernelAbi = kKernelAbiVersion});
  ASSERT_TRUE(artifact) << artifact.status().toString();
  EXPECT_THAT(Session::create(*artifact),
              StatusIs(StatusCode::Unavailable, "is CUDA code for sm_90 and needs an "
                                                "NVIDIA GPU"));
}

// A plan whose tuned candidates name a library-kernel site the code does
// not have is damaged: refused before any device is touched.
TEST(GpuSessionTest, CudaCodeWhosePlanTunesASiteItLacksIsDataLoss) {
  TempDir dir;
  auto artifact = cudaArtifact(dir, {.kernelAbi = kKernelAbiVersion, .tunedSite = 1});
  ASSERT_TRUE(artifact) << artifact.status().toString();
  EXPECT_THAT(Session::create(*artifact),
              StatusIs(StatusCode::DataLoss,
                       "the plan tunes library kernel site 1, but the code has 1 sites"));
}

// cuDNN and cuBLASLt open and name their versions without a GPU: the
// dlopen binding of every function the library kernels call is checked
// here, where the kernels themselves cannot run.
TEST(GpuLibraryTest, CudnnAndCublasLtOpenWithoutAGpu) {
  Expected<std::string> versions = gpu::libraryVersions();
  if (!versions && versions.status().code() != StatusCode::Unavailable)
    GTEST_SKIP() << versions.status().message();
  ASSERT_TRUE(versions) << versions.status().toString();
  EXPECT_THAT(*versions, ::testing::MatchesRegex("cuDNN 9\\.[0-9]+\\.[0-9]+, cuBLASLt "
                                                 "1[0-9]\\.[0-9]+\\.[0-9]+"));
}

/// What a helper kernel's threads do, in thread order, as Helpers.cu's
/// forEachElement walks `shape`: each element's output offset, and the
/// offsets of `strides`' buffers and its coordinate along `axis` with it.
std::vector<std::array<int64_t, 4>> walk(const gpu::Index4 &shape,
                                         const gpu::Index4 &outStrides,
                                         const gpu::Index4 &inStrides,
                                         const gpu::Index4 &maskStrides, int64_t axis) {
  std::vector<std::array<int64_t, 4>> steps;
  const auto &d = shape.dims;
  for (int64_t linear = 0; linear < d[0] * d[1] * d[2] * d[3]; ++linear) {
    int64_t at[4], rest = linear;
    for (int k = 3; k >= 0; --k) {
      at[k] = rest % d[k];
      rest /= d[k];
    }
    auto offset = [&](const gpu::Index4 &strides) {
      return at[0] * strides.dims[0] + at[1] * strides.dims[1] + at[2] * strides.dims[2] +
             at[3] * strides.dims[3];
    };
    steps.push_back(
        {offset(outStrides), offset(inStrides), offset(maskStrides), at[axis]});
  }
  return steps;
}

// The helper kernels walk the written buffer in memory order, so a warp's
// stores are contiguous: an NHWC result of an [N, C, H, W] shape, walked
// as the shape, would store a row of channels apart from thread to thread.
// The host's reordering keeps every element's pairing (input, bias
// channel, mask) and makes consecutive threads store consecutive elements.
TEST(GpuHelperTest, HelpersWalkTheWrittenBufferInMemoryOrder) {
  gpu::Index4 shape = {{2, 5, 3, 4}};
  auto [n, c, h, w] = shape.dims;
  gpu::Index4 nchw = {{c * h * w, h * w, w, 1}}, nhwc = {{h * w * c, 1, w * c, c}};
  gpu::Index4 channelMask = {{0, 1, 0, 0}};
  for (const auto &[out, in] : {std::pair{nhwc, nhwc}, std::pair{nhwc, nchw},
                                std::pair{nchw, nhwc}, std::pair{nchw, nchw}}) {
    gpu::EpilogueArgs args{};
    args.shape = shape;
    args.outStrides = out;
    args.inStrides = in;
    args.maskStrides = channelMask;
    args.channelAxis = 1;
    gpu::EpilogueArgs ordered = gpu::inOutputOrder(args);
    auto before = walk(args.shape, args.outStrides, args.inStrides, args.maskStrides,
                       args.channelAxis);
    auto after = walk(ordered.shape, ordered.outStrides, ordered.inStrides,
                      ordered.maskStrides, ordered.channelAxis);
    for (size_t i = 0; i < after.size(); ++i)
      ASSERT_EQ(after[i][0], static_cast<int64_t>(i))
          << "thread " << i << " stores apart";
    std::sort(before.begin(), before.end());
    std::sort(after.begin(), after.end());
    EXPECT_EQ(before, after);

    gpu::GatherArgs gather{nullptr, nullptr, shape, out, in, gpu::kF16, gpu::kF32};
    gpu::GatherArgs orderedGather = gpu::inOutputOrder(gather);
    auto gathered = walk(orderedGather.shape, orderedGather.outStrides,
                         orderedGather.inStrides, {}, 0);
    for (size_t i = 0; i < gathered.size(); ++i)
      ASSERT_EQ(gathered[i][0], static_cast<int64_t>(i));
  }
  // Pooling walks its destination the same way: step d of a thread is
  // coordinate order[d] (Helpers.cu's flowc_pool2d).
  std::array<int, 4> order = gpu::memoryOrder(shape, nhwc);
  gpu::Index4 walked = gpu::permuted(shape, order);
  auto steps = walk(walked, {}, {}, {}, 0);
  for (int64_t linear = 0; linear < static_cast<int64_t>(steps.size()); ++linear) {
    int64_t step[4], at[4], rest = linear;
    for (int k = 3; k >= 0; --k) {
      step[k] = rest % walked.dims[k];
      rest /= walked.dims[k];
    }
    for (int k = 0; k < 4; ++k)
      at[order[k]] = step[k];
    ASSERT_EQ(at[0] * nhwc.dims[0] + at[1] * nhwc.dims[1] + at[2] * nhwc.dims[2] +
                  at[3] * nhwc.dims[3],
              linear);
  }
  // NHWC results go channel-fastest; NCHW ones stay as they are.
  EXPECT_EQ(gpu::memoryOrder(shape, nhwc), (std::array<int, 4>{0, 2, 3, 1}));
  EXPECT_EQ(gpu::memoryOrder(shape, nchw), (std::array<int, 4>{0, 1, 2, 3}));
  // Dimensions of extent 1 never move (any stride), and a flat row stays
  // flat: the 16-bit copies of products' operands.
  EXPECT_EQ(gpu::memoryOrder({{1, 1, 1, 6}}, {{0, 0, 0, 1}}),
            (std::array<int, 4>{0, 1, 2, 3}));
  EXPECT_EQ(gpu::memoryOrder({{1, 8, 1, 4}}, {{32, 1, 32, 8}}),
            (std::array<int, 4>{0, 2, 3, 1}));
}

/// A 3x3 convolution of a batch of 8 [64, 56, 56] activations, as
/// ResNet's: bias and ReLU.
Conv2dParams resnetConv(ActivationLayout layout, Precision precision) {
  Conv2dParams p{};
  p.batch = 8;
  p.inChannels = p.outChannels = 64;
  p.inHeight = p.inWidth = p.outHeight = p.outWidth = 56;
  p.kernelHeight = p.kernelWidth = 3;
  p.strideH = p.strideW = p.dilationH = p.dilationW = 1;
  p.padTop = p.padLeft = p.padBottom = p.padRight = 1;
  p.groups = 1;
  p.sourceLayout = p.destinationLayout = layout;
  p.weightLayout =
      layout == ActivationLayout::Nhwc ? ConvWeightLayout::Ohwi : ConvWeightLayout::Oihw;
  p.constantWeights = 1;
  p.activation = Activation::Clip;
  p.alpha = floatParam(0.0f);
  p.beta = floatParam(std::numeric_limits<float>::infinity());
  p.precision = precision;
  return p;
}

// The convolution's cuDNN graphs, alone and with the epilogue fused, are
// built as a session builds them; cuDNN checks every descriptor and the
// graph without a GPU (only engines need one), so a wrong attribute, type
// or tensor here fails on the build machines. The fused graph is made
// only for the epilogues the runtime fuses.
TEST(GpuLibraryTest, ConvolutionGraphsBuildWithoutAGpu) {
  auto check = [](const Conv2dParams &p) {
    Expected<gpu::ConvGraphCheck> graphs = gpu::checkConvGraphs(p);
    EXPECT_TRUE(graphs) << graphs.status().toString();
    return graphs ? *graphs : gpu::ConvGraphCheck{};
  };
  // Both graphs finalize: the convolution alone and with its epilogue.
  auto checkBoth = [&](const Conv2dParams &p) {
    gpu::ConvGraphCheck graphs = check(p);
    EXPECT_TRUE(graphs.alone.isOk()) << graphs.alone.toString();
    ASSERT_TRUE(graphs.fused.has_value());
    EXPECT_TRUE(graphs.fused->isOk()) << graphs.fused->toString();
  };
  if (Expected<std::string> versions = gpu::libraryVersions();
      !versions && versions.status().code() != StatusCode::Unavailable)
    GTEST_SKIP() << versions.status().message();
  for (ActivationLayout layout : {ActivationLayout::Nhwc, ActivationLayout::Nchw})
    for (Precision precision : {Precision::Fp32, Precision::Fp16, Precision::Bf16}) {
      SCOPED_TRACE("layout " + std::to_string(static_cast<int>(layout)) + ", precision " +
                   std::to_string(static_cast<int>(precision)));
      Conv2dParams p = resnetConv(layout, precision);
      for (int64_t residual : {0, 1})
        for (Activation activation : {Activation::Clip, Activation::None}) {
          p.hasResidual = residual;
          p.activation = activation;
          checkBoth(p);
        }
    }

  // AMP's 16-bit buffers (flowc-mark-16-bit-buffers): the residual and the
  // result in the precision's type, the pointwise steps still in fp32.
  for (Precision precision : {Precision::Fp16, Precision::Bf16})
    for (int64_t sixteenBitResidual : {0, 1})
      for (int64_t sixteenBitDestination : {0, 1})
        for (Activation activation : {Activation::Clip, Activation::None}) {
          SCOPED_TRACE("16-bit residual " + std::to_string(sixteenBitResidual) +
                       ", destination " + std::to_string(sixteenBitDestination) +
                       ", precision " + std::to_string(static_cast<int>(precision)));
          Conv2dParams p = resnetConv(ActivationLayout::Nhwc, precision);
          p.hasResidual = 1;
          p.activation = activation;
          p.sixteenBitSource = 1;
          p.sixteenBitResidual = sixteenBitResidual;
          p.sixteenBitDestination = sixteenBitDestination;
          checkBoth(p);
        }

  // Uneven padding: the padded copy is the source, cuDNN pads nothing.
  Conv2dParams padded = resnetConv(ActivationLayout::Nhwc, Precision::Fp16);
  padded.padTop = padded.padLeft = 0;
  padded.padBottom = padded.padRight = 2;
  checkBoth(padded);

  // Epilogues that stay the runtime's kernel: another activation, ReLU6,
  // a result in another layout (a depthwise convolution computes in NCHW).
  Conv2dParams sigmoid = resnetConv(ActivationLayout::Nhwc, Precision::Fp16);
  sigmoid.activation = Activation::Sigmoid;
  Conv2dParams relu6 = sigmoid;
  relu6.activation = Activation::Clip;
  relu6.beta = floatParam(6.0f);
  Conv2dParams depthwise = resnetConv(ActivationLayout::Nhwc, Precision::Fp16);
  depthwise.groups = 64;
  depthwise.weightLayout = ConvWeightLayout::Hwcm;
  for (const Conv2dParams &p : {sigmoid, relu6, depthwise}) {
    gpu::ConvGraphCheck graphs = check(p);
    EXPECT_TRUE(graphs.alone.isOk()) << graphs.alone.toString();
    EXPECT_FALSE(graphs.fused.has_value());
  }

  // cuDNN refuses what is not a convolution: a result of another size than
  // the geometry gives.
  Conv2dParams wrong = resnetConv(ActivationLayout::Nhwc, Precision::Fp16);
  wrong.outHeight = 55;
  gpu::ConvGraphCheck graphs = check(wrong);
  EXPECT_THAT(graphs.alone, StatusIs(StatusCode::Internal, "cudnnBackendFinalize"));
  ASSERT_TRUE(graphs.fused.has_value());
  EXPECT_THAT(*graphs.fused, StatusIs(StatusCode::Internal, "cudnnBackendFinalize"));
}

// CUDA code lacking part of the contract is damaged, not run half-bound.
TEST(GpuSessionTest, CudaCodeWithoutItsLoadFunctionIsDataLoss) {
  TempDir dir;
  auto artifact = cudaArtifact(dir, {.withoutLoad = true});
  ASSERT_TRUE(artifact) << artifact.status().toString();
  EXPECT_THAT(Session::create(*artifact),
              StatusIs(StatusCode::DataLoss, "CUDA code lacks one of flowc_gpu_table"));
}

// NCCL opens and names its version without a GPU: the dlopen binding of
// every function the replicas' weight broadcast calls is checked here,
// where no broadcast can run.
TEST(GpuNcclTest, NcclOpensWithoutAGpu) {
  Expected<std::string> version = gpu::ncclVersion();
  if (!version && version.status().code() == StatusCode::Unimplemented)
    GTEST_SKIP() << version.status().message();
  ASSERT_TRUE(version) << version.status().toString();
  EXPECT_THAT(*version, ::testing::MatchesRegex("NCCL 2\\.[0-9]+\\.[0-9]+"));
  // A broadcast needs somewhere to go: refused before any communicator.
  EXPECT_THAT(
      gpu::ncclBroadcast({{0, 0, nullptr}}, 16, [](size_t) { return Status::ok(); }),
      StatusIs(StatusCode::InvalidArgument, "two devices or more"));
}

// Replicas need devices, each once: refused before any device is touched.
TEST(GpuReplicaTest, NoDevicesOrARepeatedOneAreRefused) {
  TempDir dir;
  auto artifact = cudaArtifact(dir, {});
  ASSERT_TRUE(artifact) << artifact.status().toString();
  EXPECT_THAT(Session::createReplicas(*artifact, {}, {}),
              StatusIs(StatusCode::InvalidArgument, "at least one GPU device"));
  EXPECT_THAT(Session::createReplicas(*artifact, {}, {1, 0, 1}),
              StatusIs(StatusCode::InvalidArgument, "GPU device 1 is named twice"));
}

// Without a GPU, replicas fail as a session does: in one line.
TEST(GpuReplicaTest, WithoutAGpuReplicasAreUnavailable) {
  if (Expected<GpuDevice> device = openGpu())
    GTEST_SKIP() << "a GPU is present: " << device->description();
  TempDir dir;
  auto artifact = cudaArtifact(dir, {});
  ASSERT_TRUE(artifact) << artifact.status().toString();
  auto replicas = Session::createReplicas(*artifact, {}, {0, 1});
  ASSERT_THAT(replicas, StatusIs(StatusCode::Unavailable, "needs an NVIDIA GPU"));
  EXPECT_EQ(replicas.status().message().find('\n'), std::string::npos);
}

/// Tests that need a GPU; skipped, saying why, without one.
class GpuSessionOnDeviceTest : public ::testing::Test {
protected:
  void SetUp() override {
    Expected<GpuDevice> opened = openGpu();
    if (!opened)
      GTEST_SKIP() << "no GPU here: " << opened.status().message();
    device = *opened;
  }

  /// A session of the add model with `code`, compiled for this device.
  Expected<std::unique_ptr<Session>> createSession(CudaCode code,
                                                   SessionOptions options = {}) {
    code.capability = device.capability;
    FLOWC_ASSIGN_OR_RETURN(std::shared_ptr<Artifact> artifact, cudaArtifact(dir, code));
    return Session::create(std::move(artifact), options);
  }

  GpuDevice device;
  TempDir dir;
};

// Cubins run on one capability: code for another is refused, naming both
// and the target to compile for.
TEST_F(GpuSessionOnDeviceTest, CudaCodeForAnotherCapabilityIsRefused) {
  auto artifact = cudaArtifact(dir, {.capability = device.capability + 1});
  ASSERT_TRUE(artifact) << artifact.status().toString();
  EXPECT_THAT(Session::create(*artifact),
              StatusIs(StatusCode::FailedPrecondition,
                       "compiled for sm_" + std::to_string(device.capability + 1) + ", " +
                           device.label() + " is sm_" +
                           std::to_string(device.capability) +
                           ": compile with --target cuda:sm_" +
                           std::to_string(device.capability)));
}

// A session runs on the device it is given; one the driver does not see is
// refused before anything is uploaded.
TEST_F(GpuSessionOnDeviceTest, RunsOnTheDeviceItIsGiven) {
  Expected<std::vector<GpuDevice>> devices = listGpus();
  ASSERT_TRUE(devices) << devices.status().toString();
  auto last = static_cast<int>(devices->size()) - 1;
  if ((*devices)[static_cast<size_t>(last)].capability == device.capability) {
    auto session = createSession({}, {.gpuDevice = last});
    ASSERT_TRUE(session) << session.status().toString();
    expectAdds(**session, 4, 1);
  }
  EXPECT_THAT(createSession({}, {.gpuDevice = last + 1}),
              StatusIs(StatusCode::NotFound,
                       "there is no GPU device " + std::to_string(last + 1)));
}

// Replicas on every device of this GPU's capability each run the graph on
// the weights they were given: uploaded to the first, broadcast from there
// through NCCL to the others (with one device, nothing to copy).
TEST_F(GpuSessionOnDeviceTest, ReplicasOnEachDeviceRunTheGraph) {
  Expected<std::vector<GpuDevice>> devices = listGpus();
  ASSERT_TRUE(devices) << devices.status().toString();
  std::vector<int> ordinals;
  for (const GpuDevice &other : *devices)
    if (other.capability == device.capability)
      ordinals.push_back(other.ordinal);
  if (ordinals.size() < 2)
    std::cout << "one device of sm_" << device.capability
              << ": replicas without a broadcast (the broadcast needs two)\n";
  // Large enough for several staging chunks on the first device.
  CudaCode code{.capability = device.capability, .elements = int64_t{6} << 20};
  auto artifact = cudaArtifact(dir, code);
  ASSERT_TRUE(artifact) << artifact.status().toString();
  auto replicas = Session::createReplicas(*artifact, {}, ordinals);
  ASSERT_TRUE(replicas) << replicas.status().toString();
  ASSERT_EQ(replicas->sessions.size(), ordinals.size());
  for (const std::unique_ptr<Session> &session : replicas->sessions)
    expectAdds(*session, code.elements, 3);
  EXPECT_GE(replicas->weights.bytes, static_cast<uint64_t>(code.elements) * 4);
  if (ordinals.size() == 1) {
    EXPECT_EQ(replicas->weights.method, "");
    return;
  }
  Expected<std::string> nccl = gpu::ncclVersion();
  EXPECT_EQ(replicas->weights.method, nccl ? *nccl : "upload");
}

// The add model runs on the device: weights uploaded at creation, inputs
// and outputs copied each run, and a profile of its one kernel call.
TEST_F(GpuSessionOnDeviceTest, RunsTheGraph) {
  auto session = createSession({}, {.profile = true});
  ASSERT_TRUE(session) << session.status().toString();
  // Two runs: the second reuses the session's device buffers.
  expectAdds(**session, 4, 1);
  expectAdds(**session, 4, 5);
  RunProfile profile = (*session)->profile();
  EXPECT_EQ(profile.runs, 2u);
  ASSERT_EQ(profile.calls.size(), 1u);
  EXPECT_EQ(profile.calls[0].kernel, "add");
  EXPECT_EQ(profile.calls[0].calls, 2u);
}

// From the second run the launches are captured into a CUDA graph and
// replayed: each later run still reads its own inputs. Code that allocates
// a temporary while it runs is never captured (the address would be baked
// into the graph), and profiling drops the graph.
TEST_F(GpuSessionOnDeviceTest, LaterRunsReplayACudaGraph) {
  auto session = createSession({.scratch = false});
  ASSERT_TRUE(session) << session.status().toString();
  for (int run = 0; run < 4; ++run) {
    expectAdds(**session, 4, static_cast<float>(10 * run));
    EXPECT_EQ((*session)->replaysGpuGraph(), run >= 1) << "after run " << run;
  }
  auto withTemporaries = createSession({});
  ASSERT_TRUE(withTemporaries) << withTemporaries.status().toString();
  for (int run = 0; run < 3; ++run)
    expectAdds(**withTemporaries, 4, static_cast<float>(run));
  EXPECT_FALSE((*withTemporaries)->replaysGpuGraph());
  auto profiled = createSession({.scratch = false}, {.profile = true});
  ASSERT_TRUE(profiled) << profiled.status().toString();
  for (int run = 0; run < 3; ++run)
    expectAdds(**profiled, 4, static_cast<float>(run));
  EXPECT_FALSE((*profiled)->replaysGpuGraph());
}

// A launch CUDA refuses fails the run with the reason, and the session
// stays usable for the next one.
TEST_F(GpuSessionOnDeviceTest, AFailedLaunchIsTheRunsError) {
  auto session = createSession({.badLaunch = true});
  ASSERT_TRUE(session) << session.status().toString();
  for (int run = 0; run < 2; ++run)
    EXPECT_THAT((*session)->run({{"x", Tensor::fromFloats({4}, {1, 2, 3, 4})}}),
                StatusIs(StatusCode::Internal, "which CUDA cannot launch"));
}

// A fault on the device (the kernel reads address 16) fails the run with
// Unavailable, and from then on the process's GPU is unusable:
// gpuProcessFault says so, and a pooled worker retires on it. In a child
// process of its own (the fault is sticky), started afresh rather than
// forked (CUDA is not fork-safe).
TEST_F(GpuSessionOnDeviceTest, AFaultOnTheDeviceMarksTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto session = createSession({.faultingRead = true});
        if (!session)
          _exit(2);
        auto outputs = (*session)->run({{"x", Tensor::fromFloats({4}, {1, 2, 3, 4})}});
        std::optional<Status> fault = gpuProcessFault();
        if (outputs || outputs.status().code() != StatusCode::Unavailable || !fault ||
            fault->message().find("CUDA needs the process restarted") ==
                std::string::npos) {
          std::fprintf(stderr, "run: %s; fault: %s\n",
                       outputs ? "ok" : outputs.status().toString().c_str(),
                       fault ? fault->toString().c_str() : "none");
          _exit(1);
        }
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  // The fault was the child's: this process's GPU is still usable.
  EXPECT_FALSE(gpuProcessFault().has_value());
}

// Tensors larger than a staging buffer (16 MiB) cross it in chunks, the
// weights at creation and the inputs and outputs each run.
TEST_F(GpuSessionOnDeviceTest, LargeTensorsCrossTheStagingBuffersInChunks) {
  // 40 MB: two full chunks and a part of one.
  constexpr int64_t kElements = 10'000'003;
  auto session = createSession({.elements = kElements});
  ASSERT_TRUE(session) << session.status().toString();
  expectAdds(**session, kElements, 3);
}

} // namespace
} // namespace flowc::runtime
