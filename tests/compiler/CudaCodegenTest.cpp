// The cuda targets without a GPU: a compile produces host code that embeds
// one cubin per loop kernel, assembled by the toolkit's ptxas for the
// target's chip (so the PTX LLVM wrote is checked by NVIDIA's assembler),
// and loading that code runs nothing until a session sets up a GPU. From
// -O1 the heavy ops are library kernels (cuDNN, cuBLASLt, the runtime's),
// called through the kernel table a session fills.
#include "flowc/compiler/Compiler.h"

#include "../common/OnnxTestBuilder.h"
#include "../common/TestUtil.h"
#include "ImportBytes.h"

#include "flowc/runtime/GpuAbi.h"
#include "flowc/runtime/KernelAbi.h"

#include <cstring>
#include <dlfcn.h>
#include <elf.h>
#include <fstream>
#include <memory>
#include <optional>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace flowc::compiler {
namespace {

using namespace flowc::testing;

/// EM_CUDA: the machine of cubins (not in every elf.h).
constexpr uint16_t kCudaMachine = 190;

/// The chips (compute capabilities) of the CUDA ELF images inside `code`.
std::vector<int> embeddedCubinChips(const std::string &code) {
  std::vector<int> chips;
  for (size_t at = code.find(ELFMAG); at != std::string::npos;
       at = code.find(ELFMAG, at + 1)) {
    if (at + sizeof(Elf64_Ehdr) > code.size())
      break;
    Elf64_Ehdr header;
    std::memcpy(&header, code.data() + at, sizeof header);
    if (header.e_machine != kCudaMachine)
      continue;
    // CUDA's ELF ABI version 8 keeps the SM in bits 8..15 of e_flags.
    chips.push_back(static_cast<int>((header.e_flags >> 8) & 0xff));
  }
  return chips;
}

/// Conv (stride 2, padded) -> MaxPool -> Flatten -> Softmax: a convolution,
/// a window reduction, a row reduction and elementwise nests.
std::string convPoolSoftmaxModel() {
  GraphSpec spec;
  spec.initializers = {floatTensor("k", {4, 2, 3, 3}, std::vector<float>(72, 0.5f))};
  spec.nodes = {
      node("Conv", {"x", "k"}, {"c"}, "conv",
           {intsAttribute("strides", {2, 2}), intsAttribute("pads", {1, 1, 1, 1})}),
      node("MaxPool", {"c"}, {"p"}, "pool", {intsAttribute("kernel_shape", {2, 2})}),
      node("Flatten", {"p"}, {"f"}, "flat"), node("Softmax", {"f"}, {"y"}, "softmax")};
  spec.inputs = {valueInfo("x", {1, 2, 9, 9})};
  spec.outputs = {valueInfo("y", {1, 64})};
  return model(spec);
}

/// convPoolSoftmaxModel() compiled with `options` in `dir`: the code
/// object, and `report` filled.
Expected<std::string> compileConvPoolSoftmax(const CompileOptions &options,
                                             const TempDir &dir, CompileReport &report) {
  FLOWC_ASSIGN_OR_RETURN(ImportedGraph graph,
                         importBytes(convPoolSoftmaxModel(), "conv.onnx"));
  return compileToSharedObject(graph.irBytecode, options, dir.path(), &report);
}

/// The parameters the kernel `name` of `cubin` takes, by ordinal: the byte
/// size of each, from its EIATTR_KPARAM_INFO entry in section
/// .nv.info.<name> (each entry a format byte, an attribute byte and either
/// two bytes of value or, for format 4, a two-byte size and that many
/// bytes; a parameter's entry holds its index, its ordinal and offset as
/// two 16-bit values, then its size in bits 18-31 of a 32-bit word).
/// nullopt without the section.
std::optional<std::vector<uint16_t>> cubinKernelParams(const std::string &cubin,
                                                       const std::string &name) {
  constexpr uint8_t kSizedFormat = 4, kParamInfo = 0x17;
  Elf64_Ehdr header;
  if (cubin.size() < sizeof header)
    return std::nullopt;
  std::memcpy(&header, cubin.data(), sizeof header);
  auto section = [&](size_t index) {
    Elf64_Shdr shdr{};
    size_t at = header.e_shoff + index * header.e_shentsize;
    if (at + sizeof shdr <= cubin.size())
      std::memcpy(&shdr, cubin.data() + at, sizeof shdr);
    return shdr;
  };
  Elf64_Shdr names = section(header.e_shstrndx);
  for (size_t i = 0; i < header.e_shnum; ++i) {
    Elf64_Shdr shdr = section(i);
    if (names.sh_offset + shdr.sh_name >= cubin.size() ||
        std::string(cubin.c_str() + names.sh_offset + shdr.sh_name) != ".nv.info." + name)
      continue;
    std::vector<uint16_t> params;
    for (size_t at = shdr.sh_offset; at + 4 <= shdr.sh_offset + shdr.sh_size;) {
      uint8_t format = static_cast<uint8_t>(cubin[at]);
      uint8_t attribute = static_cast<uint8_t>(cubin[at + 1]);
      uint16_t size = 0;
      std::memcpy(&size, cubin.data() + at + 2, sizeof size);
      if (format == kSizedFormat && attribute == kParamInfo && size >= 12 &&
          at + 4 + size <= cubin.size()) {
        uint16_t ordinal = 0;
        uint32_t word = 0;
        std::memcpy(&ordinal, cubin.data() + at + 8, sizeof ordinal);
        std::memcpy(&word, cubin.data() + at + 12, sizeof word);
        if (ordinal >= params.size())
          params.resize(ordinal + 1);
        params[ordinal] = static_cast<uint16_t>(word >> 18);
      }
      at += 4 + (format == kSizedFormat ? size : 0);
    }
    return params;
  }
  return std::nullopt;
}

/// A GPU table that records what CUDA code asks of it, for a machine
/// without a GPU: modules are the cubins' bytes, functions the parameter
/// sizes of their kernels, device memory made-up addresses never read.
namespace recorder {
std::vector<std::unique_ptr<std::string>> modules;
std::vector<std::unique_ptr<std::optional<std::vector<uint16_t>>>> functions;
/// (parameters the kernel takes, parameters the launch passes).
std::vector<std::pair<int, uint64_t>> launches;
/// Parameters that are addresses in a loaded object (the code's constants,
/// say): host memory, which a kernel cannot read.
std::vector<std::string> hostAddresses;
uintptr_t nextAddress = 0x10000000;

void *load(void *data, uint64_t bytes) {
  return modules
      .emplace_back(std::make_unique<std::string>(static_cast<char *>(data), bytes))
      .get();
}
void unload(void *) {}
void *function(void *module, const char *name) {
  return functions
      .emplace_back(std::make_unique<std::optional<std::vector<uint16_t>>>(
          cubinKernelParams(*static_cast<std::string *>(module), name)))
      .get();
}
void launch(void *function, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int32_t,
            void *, void **params, void **, uint64_t paramCount) {
  const auto &sizes = *static_cast<std::optional<std::vector<uint16_t>> *>(function);
  launches.emplace_back(sizes ? static_cast<int>(sizes->size()) : -1, paramCount);
  for (uint64_t i = 0; i < paramCount; ++i) {
    // Only a pointer-sized parameter can be an address; reading 8 bytes of
    // a 4-byte one (a fill's float) would take in whatever follows it.
    if (!sizes || i >= sizes->size() || (*sizes)[i] != sizeof(void *))
      continue;
    void *value = nullptr;
    std::memcpy(&value, params[i], sizeof value);
    Dl_info info;
    if (value && dladdr(value, &info))
      hostAddresses.push_back(
          std::string(info.dli_sname ? info.dli_sname : info.dli_fname) + " (launch " +
          std::to_string(launches.size()) + ", parameter " + std::to_string(i) + ")");
  }
}
void *stream() { return &nextAddress; }
void streamNothing(void *) {}
void *alloc(uint64_t bytes) {
  void *address = reinterpret_cast<void *>(nextAddress);
  nextAddress += (bytes + 255) / 256 * 256 + 256;
  return address;
}
/// Allocations the code made while it ran (each one keeps a run out of
/// CUDA graphs).
int codeAllocations = 0;
void *codeAlloc(uint64_t bytes) {
  ++codeAllocations;
  return alloc(bytes);
}
void *alignedAlloc(uint64_t, uint64_t bytes) { return codeAlloc(bytes); }
void release(void *) {}

/// Buffers handed to library kernels that are host addresses.
std::vector<std::string> libraryHostAddresses;
int libraryCalls = 0;

void checkBuffers(const char *kind, void **buffers, int count) {
  ++libraryCalls;
  for (int i = 0; i < count; ++i) {
    Dl_info info;
    if (buffers[i] && dladdr(buffers[i], &info))
      libraryHostAddresses.push_back(std::string(kind) + " buffer " + std::to_string(i));
  }
}
void conv2d(void *, int64_t, const int64_t *params, void **buffers) {
  const auto *p = reinterpret_cast<const runtime::Conv2dParams *>(params);
  checkBuffers("conv2d", buffers, 4 + static_cast<int>(p->hasResidual));
}
void sourceAndDestination(void *, int64_t, const int64_t *, void **buffers) {
  checkBuffers("pool2d or softmax", buffers, 2);
}

void fillKernels(void **table) {
  using runtime::KernelKind;
  table[static_cast<int64_t>(KernelKind::Conv2d)] = reinterpret_cast<void *>(&conv2d);
  table[static_cast<int64_t>(KernelKind::Pool2d)] =
      reinterpret_cast<void *>(&sourceAndDestination);
  table[static_cast<int64_t>(KernelKind::Softmax)] =
      reinterpret_cast<void *>(&sourceAndDestination);
}

void fill(void **table) {
  using runtime::GpuFunction;
  auto set = [&](GpuFunction slot, auto function) {
    table[static_cast<int64_t>(slot)] = reinterpret_cast<void *>(function);
  };
  set(GpuFunction::ModuleLoad, &load);
  set(GpuFunction::ModuleUnload, &unload);
  set(GpuFunction::ModuleGetFunction, &function);
  set(GpuFunction::LaunchKernel, &launch);
  set(GpuFunction::StreamCreate, &stream);
  set(GpuFunction::StreamDestroy, &streamNothing);
  set(GpuFunction::StreamSynchronize, &streamNothing);
  set(GpuFunction::MemAlloc, &codeAlloc);
  set(GpuFunction::AlignedMemAlloc, &alignedAlloc);
  set(GpuFunction::MemFree, &release);
}

void reset() {
  modules.clear();
  functions.clear();
  launches.clear();
  hostAddresses.clear();
  libraryHostAddresses.clear();
  libraryCalls = 0;
  codeAllocations = 0;
}

/// Runs the CUDA code `library` once with the recording GPU table (and
/// kernel table, for code with library kernels) on made-up device buffers:
/// what it asks for is left in the recorder.
void run(void *library) {
  reset();
  fill(static_cast<void **>(dlsym(library, runtime::kGpuTableSymbol)));
  if (auto *kernels = static_cast<void **>(dlsym(library, runtime::kKernelTableSymbol)))
    fillKernels(kernels);
  auto load = reinterpret_cast<void (*)()>(dlsym(library, runtime::kGpuLoadSymbol));
  auto unload = reinterpret_cast<void (*)()>(dlsym(library, runtime::kGpuUnloadSymbol));
  auto entry = reinterpret_cast<void (*)(void **)>(dlsym(library, kEntrySymbol));
  ASSERT_TRUE(load && unload && entry);
  load();
  std::vector<void *> args(16);
  for (void *&arg : args)
    arg = alloc(1 << 20);
  entry(args.data());
  unload();
}
} // namespace recorder

class CudaCodegenTest : public ::testing::TestWithParam<Target> {};

TEST_P(CudaCodegenTest, EachKernelIsACubinForTheChipAndLoadingRunsNothing) {
  Target target = GetParam();
  CompileOptions options;
  options.target = target;
  // Every op in generated kernels: -O0 outlines no library kernel.
  options.optLevel = 0;
  if (Status toolkit = options.validate(); !toolkit.isOk())
    GTEST_SKIP() << "no CUDA toolkit in this build: " << toolkit.toString();
  TempDir dir;
  CompileReport report;
  auto code = compileConvPoolSoftmax(options, dir, report);
  ASSERT_TRUE(code) << code.status().toString();

  EXPECT_GE(report.loopKernels, 4);
  std::vector<int> chips = embeddedCubinChips(*code);
  EXPECT_EQ(chips.size(), static_cast<size_t>(report.loopKernels));
  for (int chip : chips)
    EXPECT_EQ(chip, cudaComputeCapability(target));

  // A machine without a GPU can load the code: the cubins are loaded by
  // flowc_gpu_load, which only a session calls.
  std::string path = dir.path() + "/cuda.so";
  std::ofstream(path, std::ios::binary) << *code;
  void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
  auto *capability =
      static_cast<const int64_t *>(dlsym(library, runtime::kGpuCapabilitySymbol));
  ASSERT_NE(capability, nullptr);
  EXPECT_EQ(*capability, cudaComputeCapability(target));
  auto *abi = static_cast<const int64_t *>(dlsym(library, runtime::kGpuAbiSymbol));
  ASSERT_NE(abi, nullptr);
  EXPECT_EQ(*abi, runtime::kGpuAbiVersion);
  auto *table = static_cast<void **>(dlsym(library, runtime::kGpuTableSymbol));
  ASSERT_NE(table, nullptr);
  for (int64_t slot = 0; slot < runtime::kGpuFunctionCount; ++slot)
    EXPECT_EQ(table[slot], nullptr) << runtime::kGpuFunctionNames[slot];
  EXPECT_NE(dlsym(library, runtime::kGpuLoadSymbol), nullptr);
  EXPECT_NE(dlsym(library, runtime::kGpuUnloadSymbol), nullptr);
  EXPECT_NE(dlsym(library, kEntrySymbol), nullptr);

  // Each launch passes its kernel as many parameters as the cubin's kernel
  // takes (a kernel reading more reads past them: cuLaunchKernel refuses).
  // The host code only forwards device addresses, so a run here with a
  // recording table launches every kernel without a GPU.
  recorder::run(library);
  EXPECT_EQ(recorder::modules.size(), static_cast<size_t>(report.loopKernels));
  EXPECT_EQ(recorder::launches.size(), static_cast<size_t>(report.loopKernels));
  for (const auto &[takes, passed] : recorder::launches) {
    EXPECT_GT(takes, 0);
    EXPECT_EQ(static_cast<uint64_t>(takes), passed);
  }
  EXPECT_THAT(recorder::hostAddresses, ::testing::IsEmpty());
  recorder::reset();
  dlclose(library);
}

INSTANTIATE_TEST_SUITE_P(Chips, CudaCodegenTest,
                         ::testing::Values(Target::CudaSm80, Target::CudaSm90,
                                           Target::CudaSm100),
                         [](const ::testing::TestParamInfo<Target> &info) {
                           return cudaChip(info.param);
                         });

// From -O1 the convolution, the pooling and the softmax are library
// kernels: the code calls them through its kernel table (null until a
// session fills it) and declares their kinds; what is left is loop kernels,
// each a cubin for the chip.
TEST(CudaCodegenLibraryTest, HeavyOpsAreLibraryKernels) {
  CompileOptions options;
  options.target = Target::CudaSm90;
  if (Status toolkit = options.validate(); !toolkit.isOk())
    GTEST_SKIP() << "no CUDA toolkit in this build: " << toolkit.toString();
  TempDir dir;
  CompileReport report;
  auto code = compileConvPoolSoftmax(options, dir, report);
  ASSERT_TRUE(code) << code.status().toString();
  EXPECT_EQ(embeddedCubinChips(*code).size(), static_cast<size_t>(report.loopKernels));
  // Weights packed at link time are oneDNN's, for the CPU only.
  EXPECT_TRUE(report.weights.kernelWeights.empty());
  ASSERT_EQ(report.weights.librarySites.size(), 3u);
  std::vector<runtime::KernelKind> kinds;
  for (const LibrarySite &site : report.weights.librarySites)
    kinds.push_back(static_cast<runtime::KernelKind>(site.kind));
  EXPECT_THAT(kinds, ::testing::ElementsAre(runtime::KernelKind::Conv2d,
                                            runtime::KernelKind::Pool2d,
                                            runtime::KernelKind::Softmax));

  std::string path = dir.path() + "/cuda.so";
  std::ofstream(path, std::ios::binary) << *code;
  void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(library, nullptr) << dlerror();
  auto symbol = [&](const char *name) {
    return static_cast<const int64_t *>(dlsym(library, name));
  };
  ASSERT_NE(symbol(runtime::kKernelKindsSymbol), nullptr);
  EXPECT_EQ(*symbol(runtime::kKernelKindsSymbol),
            (1 << static_cast<int>(runtime::KernelKind::Conv2d)) |
                (1 << static_cast<int>(runtime::KernelKind::Pool2d)) |
                (1 << static_cast<int>(runtime::KernelKind::Softmax)));
  ASSERT_NE(symbol(runtime::kKernelSitesSymbol), nullptr);
  EXPECT_EQ(*symbol(runtime::kKernelSitesSymbol), 3);
  ASSERT_NE(symbol(runtime::kKernelAbiSymbol), nullptr);
  EXPECT_EQ(*symbol(runtime::kKernelAbiSymbol), runtime::kKernelAbiVersion);
  auto *table = static_cast<void **>(dlsym(library, runtime::kKernelTableSymbol));
  ASSERT_NE(table, nullptr);
  for (int64_t kind = 0; kind < runtime::kKernelKindCount; ++kind)
    EXPECT_EQ(table[kind], nullptr) << kind;
  EXPECT_NE(dlsym(library, runtime::kGpuTableSymbol), nullptr);

  // Run with recording tables: every buffer a library kernel gets is
  // device memory, the convolution's zero bias (the model has none) too,
  // and so is every kernel parameter.
  recorder::run(library);
  EXPECT_EQ(recorder::libraryCalls, 3);
  EXPECT_THAT(recorder::libraryHostAddresses, ::testing::IsEmpty());
  // The bias's device copy is in the arena: the code allocates nothing
  // while it runs, so its runs can be captured in a CUDA graph.
  EXPECT_EQ(recorder::codeAllocations, 0);
  EXPECT_THAT(recorder::hostAddresses, ::testing::IsEmpty());
  recorder::reset();
  dlclose(library);
}

TEST(CudaTargetTest, NamesParseAndPrintBothWays) {
  EXPECT_EQ(*parseTarget("cuda"), Target::CudaSm90);
  for (Target target :
       {Target::CudaSm75, Target::CudaSm80, Target::CudaSm86, Target::CudaSm89,
        Target::CudaSm90, Target::CudaSm100, Target::CudaSm120}) {
    EXPECT_TRUE(isCudaTarget(target));
    EXPECT_EQ(*parseTarget(targetName(target)), target);
    EXPECT_EQ(std::string(targetName(target)), "cuda:" + cudaChip(target));
  }
  EXPECT_FALSE(isCudaTarget(Target::Cpu));
  EXPECT_EQ(cudaComputeCapability(Target::CudaSm86), 86);
  EXPECT_THAT(parseTarget("cuda:sm_61"),
              StatusIs(StatusCode::InvalidArgument, "cuda:sm_80"));
}

// AMP's precisions: fp16 on any cuda target, bf16 from sm_80 (Ampere's
// tensor cores), neither at -O0 (no library kernels), fp16 never on the CPU.
TEST(CudaTargetTest, AmpPrecisionsWhereTheHardwareHasThem) {
  CompileOptions options;
  options.target = Target::CudaSm90;
  if (options.validate().code() == StatusCode::Unimplemented)
    GTEST_SKIP() << "no CUDA toolkit in this build: " << options.validate().toString();
  for (Precision precision : {Precision::Fp16, Precision::Bf16}) {
    options.precision = precision;
    EXPECT_TRUE(options.validate().isOk()) << options.validate().toString();
  }
  options.target = Target::CudaSm75;
  options.precision = Precision::Fp16;
  EXPECT_TRUE(options.validate().isOk()) << options.validate().toString();
  options.precision = Precision::Bf16;
  EXPECT_THAT(options.validate(),
              StatusIs(StatusCode::InvalidArgument,
                       "precision bf16 needs sm_80 or newer; cuda:sm_75 has no bfloat16 "
                       "tensor cores: use fp16"));
  options.target = Target::CudaSm90;
  options.optLevel = 0;
  EXPECT_THAT(options.validate(),
              StatusIs(StatusCode::InvalidArgument,
                       "precision bf16 needs library kernels, which -O0 does not use"));
  options.target = Target::Cpu;
  options.optLevel = 2;
  options.precision = Precision::Fp16;
  EXPECT_THAT(options.validate(),
              StatusIs(StatusCode::InvalidArgument,
                       "precision fp16 is for the cuda targets' tensor cores"));
}

// Under AMP the convolution and the product carry the precision to the
// runtime (which rounds their operands to 16 bits); pooling and softmax,
// which AMP keeps in fp32, have no precision to carry.
TEST(CudaCodegenLibraryTest, AmpReachesTheConvolutionsAndProducts) {
  CompileOptions options;
  options.target = Target::CudaSm90;
  options.precision = Precision::Fp16;
  if (Status toolkit = options.validate(); !toolkit.isOk())
    GTEST_SKIP() << "no CUDA toolkit in this build: " << toolkit.toString();
  TempDir dir;
  CompileReport report;
  auto code = compileConvPoolSoftmax(options, dir, report);
  ASSERT_TRUE(code) << code.status().toString();
  ASSERT_FALSE(report.weights.librarySites.empty());
  const LibrarySite &conv = report.weights.librarySites[0];
  ASSERT_EQ(static_cast<runtime::KernelKind>(conv.kind), runtime::KernelKind::Conv2d);
  auto params = runtime::paramsFromWords<runtime::Conv2dParams>(conv.params);
  ASSERT_TRUE(params);
  EXPECT_EQ(params->precision, Precision::Fp16);
}

} // namespace
} // namespace flowc::compiler
