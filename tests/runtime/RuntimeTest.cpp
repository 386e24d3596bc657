#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/KernelAbi.h"
#include "flowc/runtime/Session.h"
#include "flowc/runtime/Tensor.h"

#include "flowc/support/MappedFile.h"
#include "flowc/support/Subprocess.h"

#include "../common/TestUtil.h"
#include "SmallArtifact.h"

#include <dlfcn.h>

#include <cstring>
#include <fstream>

namespace flowc::runtime {
namespace {

using flowc::testing::StatusIs;
using flowc::testing::TempDir;

/// The add model's code (testing::kAddSource), compiled in `path`'s directory.
Expected<std::string> addCode(const std::string &path) {
  return testing::compileCode(std::filesystem::path(path).parent_path(),
                              testing::kAddSource);
}

Status writeSmallArtifact(const std::string &path) {
  FLOWC_ASSIGN_OR_RETURN(std::string code, addCode(path));
  FLOWC_ASSIGN_OR_RETURN(auto writer, ArtifactWriter::create(path));
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::Metadata, R"({"model":"m"})"));
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::Code, code));
  std::string a(10, 'a'), b(5000, 'b');
  FLOWC_ASSIGN_OR_RETURN(auto offsets, writer->addWeights({a, b}));
  Plan plan;
  plan.entry = "flowc_entry";
  plan.inputs = {{"x", "float32", {2}}};
  plan.outputs = {{"y", "float32", {2}}};
  plan.weights = {{{"a", "uint8", {10}}, testing::weightDigest(a), offsets[0], 10},
                  {{"b", "uint8", {5000}}, testing::weightDigest(b), offsets[1], 5000}};
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::Plan, plan.toJson().dump()));
  return writer->finish();
}

TEST(ArtifactTest, RoundTripsSectionsAndPlan) {
  TempDir dir;
  std::string path = dir.file("a.fca");
  ASSERT_TRUE(writeSmallArtifact(path));
  auto artifact = Artifact::open(path);
  ASSERT_TRUE(artifact) << artifact.status().toString();
  EXPECT_EQ((*artifact)->section(SectionKind::Code), *addCode(path));
  EXPECT_EQ((*artifact)->metadata()["model"], "m");
  const Plan &plan = (*artifact)->plan();
  ASSERT_EQ(plan.weights.size(), 2u);
  EXPECT_EQ(plan.inputs[0].shape, (std::vector<int64_t>{2}));
  std::string_view weights = (*artifact)->section(SectionKind::Weights);
  EXPECT_EQ(weights.substr(plan.weights[1].offset, 3), "bbb");
}

TEST(ArtifactTest, WeightsArePageAlignedInTheFile) {
  TempDir dir;
  std::string path = dir.file("a.fca");
  ASSERT_TRUE(writeSmallArtifact(path));
  auto artifact = Artifact::open(path);
  ASSERT_TRUE(artifact);
  const char *base = (*artifact)->section(SectionKind::Metadata).data() - 64;
  const char *weights = (*artifact)->section(SectionKind::Weights).data();
  for (const WeightSpec &w : (*artifact)->plan().weights)
    EXPECT_EQ((weights + w.offset - base) % kPageSize, 0) << w.tensor.name;
}

TEST(ArtifactTest, RejectsBadMagic) {
  TempDir dir;
  std::ofstream(dir.file("x.fca")) << std::string(200, 'z');
  EXPECT_THAT(Artifact::open(dir.file("x.fca")),
              StatusIs(StatusCode::InvalidArgument, "bad magic"));
}

TEST(ArtifactTest, RejectsAPackedWeightOutsideTheWeightsSection) {
  TempDir dir;
  std::string path = dir.file("p.fca");
  auto code = addCode(path);
  ASSERT_TRUE(code);
  auto writer = ArtifactWriter::create(path);
  ASSERT_TRUE(writer);
  ASSERT_TRUE((*writer)->addSection(SectionKind::Metadata, "{}"));
  ASSERT_TRUE((*writer)->addSection(SectionKind::Code, *code));
  std::string packed(64, 'p');
  auto offsets = (*writer)->addWeights({packed});
  ASSERT_TRUE(offsets);
  Plan plan;
  plan.entry = "flowc_entry";
  // Site 3's packed filter claims more bytes than the section holds.
  plan.packed = {{3, 1, "layout", "sha256:" + std::string(64, '0') + "/1048576",
                  (*offsets)[0], 1 << 20}};
  ASSERT_TRUE((*writer)->addSection(SectionKind::Plan, plan.toJson().dump()));
  ASSERT_TRUE((*writer)->finish());
  EXPECT_THAT(
      Artifact::open(path),
      StatusIs(StatusCode::DataLoss,
               "packed weight of kernel site 3 lies outside the weights section"));
}

TEST(ArtifactTest, RejectsTruncatedFile) {
  TempDir dir;
  std::string path = dir.file("a.fca");
  ASSERT_TRUE(writeSmallArtifact(path));
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  EXPECT_THAT(Artifact::open(path), StatusIs(StatusCode::DataLoss, "truncated"));
}

TEST(ArtifactTest, RejectsTinyFile) {
  TempDir dir;
  std::ofstream(dir.file("t.fca")) << "FLOWC";
  EXPECT_THAT(Artifact::open(dir.file("t.fca")),
              StatusIs(StatusCode::InvalidArgument, "shorter than the header"));
}

TEST(ArtifactTest, MissingFileIsNotFound) {
  EXPECT_THAT(Artifact::open("/nonexistent/a.fca"),
              StatusIs(StatusCode::NotFound, "a.fca"));
}

TEST(ArtifactTest, UnfinishedWriterLeavesNoFile) {
  TempDir dir;
  {
    auto writer = ArtifactWriter::create(dir.file("a.fca"));
    ASSERT_TRUE(writer);
    ASSERT_TRUE((*writer)->addSection(SectionKind::Code, "unfinished"));
  }
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}

// oneDNN (built against GCC's libgomp) and generated parallel loops (LLVM's
// __kmpc_* ABI) must share one OpenMP runtime: two thread pools on the same
// cores spin against each other. Programs linking the runtime load libomp
// first, so oneDNN's GOMP_* calls bind to it. (Creating a session links
// the runtime's session code into this test, as into every such program.)
TEST(OpenMpTest, LibraryKernelsAndGeneratedLoopsShareOneRuntime) {
  TempDir dir;
  std::string path = dir.file("add.fca");
  ASSERT_TRUE(writeSmallArtifact(path));
  auto artifact = Artifact::open(path);
  ASSERT_TRUE(artifact);
  EXPECT_TRUE(Session::create(std::move(*artifact)));
  void *gomp = dlsym(RTLD_DEFAULT, "GOMP_parallel");
  void *kmpc = dlsym(RTLD_DEFAULT, "__kmpc_fork_call");
  ASSERT_NE(gomp, nullptr);
  ASSERT_NE(kmpc, nullptr) << "libomp is not loaded";
  Dl_info gompInfo{}, kmpcInfo{};
  ASSERT_NE(dladdr(gomp, &gompInfo), 0);
  ASSERT_NE(dladdr(kmpc, &kmpcInfo), 0);
  EXPECT_STREQ(gompInfo.dli_fname, kmpcInfo.dli_fname);
}

// Code with library kernels compiled against another kernel ABI (or before
// the ABI had a version) is refused with what to do, not run with its
// parameters misread.
TEST(KernelAbiTest, CodeForAnotherKernelAbiIsRefused) {
  TempDir dir;
  for (const std::string abi : {"", "const int64_t flowc_kernel_abi = 1;"}) {
    std::string source =
        "#include <stdint.h>\n"
        "void *flowc_kernel_table[8]; void *flowc_kernel_context;\n"
        "const int64_t flowc_kernel_kinds = 0, flowc_kernel_sites = 0;\n" +
        abi + "\nvoid flowc_entry(void **args) { (void)args; }\n";
    std::ofstream(dir.file("code.c")) << source;
    ASSERT_TRUE(runProgram(
        {"cc", "-shared", "-fPIC", "-o", dir.file("code.so"), dir.file("code.c")}));
    auto code = readFileToString(dir.file("code.so"));
    ASSERT_TRUE(code);
    std::string path = dir.file("old.fca");
    auto writer = ArtifactWriter::create(path);
    ASSERT_TRUE(writer);
    ASSERT_TRUE((*writer)->addSection(SectionKind::Metadata, "{}"));
    ASSERT_TRUE((*writer)->addSection(SectionKind::Code, *code));
    Plan plan;
    plan.entry = "flowc_entry";
    ASSERT_TRUE((*writer)->addSection(SectionKind::Plan, plan.toJson().dump()));
    ASSERT_TRUE((*writer)->finish());
    auto artifact = Artifact::open(path);
    ASSERT_TRUE(artifact);
    EXPECT_THAT(Session::create(*artifact),
                StatusIs(StatusCode::Unavailable,
                         "compiled for library kernel ABI 1, this runtime has " +
                             std::to_string(kKernelAbiVersion)));
  }
}

// The code's table of profiled calls (KernelAbi.h) is read when a session
// profiles; a malformed one is DataLoss naming the artifact and the entry,
// never a crash or a profile with made-up rows.
TEST(ProfileCallsTest, MalformedTablesAreRefusedNamingTheEntry) {
  TempDir dir;
  auto artifactWith = [&](const std::string &calls) -> std::shared_ptr<Artifact> {
    std::string source = "#include <stdint.h>\n"
                         "void (*flowc_profile_hook)(int64_t);\n"
                         "const char flowc_profile_calls[] = \"" +
                         calls + "\";\nvoid flowc_entry(void **args) { (void)args; }\n";
    auto code = testing::compileCode(dir.path(), source);
    EXPECT_TRUE(code) << code.status().toString();
    std::string path = dir.file("profiled.fca");
    Plan plan;
    plan.entry = "flowc_entry";
    auto writer = ArtifactWriter::create(path);
    EXPECT_TRUE(writer);
    EXPECT_TRUE((*writer)->addSection(SectionKind::Metadata, "{}"));
    EXPECT_TRUE((*writer)->addSection(SectionKind::Code, code ? *code : ""));
    EXPECT_TRUE((*writer)->addSection(SectionKind::Plan, plan.toJson().dump()));
    EXPECT_TRUE((*writer)->finish());
    auto artifact = Artifact::open(path);
    EXPECT_TRUE(artifact) << artifact.status().toString();
    return artifact ? *artifact : nullptr;
  };
  SessionOptions profiled;
  profiled.profile = true;
  const std::pair<const char *, const char *> cases[] = {
      {"{}", "not a JSON array"},
      {"[1]", "entry 0 lacks kernel or nodes"},
      {R"([{\"kernel\": \"k\"}])", "entry 0 lacks kernel or nodes"},
      {R"([{\"kernel\": \"k\", \"nodes\": [0]}, {\"kernel\": \"k\", \"nodes\": [-1]}])",
       "entry 1 has a bad node index"},
      {R"([{\"kernel\": \"k\", \"nodes\": [], \"bytes\": -8}])",
       "entry 0 has a bad byte count"},
      {R"([{\"kernel\": \"k\", \"nodes\": [], \"bytes\": \"8\"}])",
       "entry 0 has a bad byte count"},
      {R"([{\"kernel\": \"k\", \"nodes\": [], \"site\": 0}])",
       "entry 0 has a bad site or kind"},
  };
  for (const auto &[calls, message] : cases) {
    auto artifact = artifactWith(calls);
    ASSERT_TRUE(artifact);
    EXPECT_THAT(Session::create(artifact, profiled),
                StatusIs(StatusCode::DataLoss,
                         "'" + dir.file("profiled.fca") +
                             "': the code's profile calls are malformed: " + message))
        << calls;
  }
  // A well-formed table profiles: one row per call, its byte count kept.
  auto artifact = artifactWith(R"([{\"kernel\": \"k\", \"nodes\": [0], \"bytes\": 64}])");
  ASSERT_TRUE(artifact);
  auto session = Session::create(artifact, profiled);
  ASSERT_TRUE(session) << session.status().toString();
  ASSERT_EQ((*session)->profile().calls.size(), 1u);
  EXPECT_EQ((*session)->profile().calls[0].bytes, std::optional<uint64_t>(64));
}

// A kernel's params struct is the int64 words generated code passes: the
// words the compiler writes read back as the same struct, and words of
// another count are no struct of that kind.
TEST(KernelAbiTest, ParamsStructsAreTheirWords) {
  MatMulParams params{};
  params.batch = 2;
  params.n = 7;
  params.activation = Activation::GeluTanh;
  params.precision = Precision::Bf16;
  params.scale = floatParam(0.125f);
  std::vector<int64_t> words = paramWords(params);
  ASSERT_EQ(words.size(), 16u);
  // Fields sit where their word is.
  EXPECT_EQ(words[0], 2);
  EXPECT_EQ(words[2], 7);
  EXPECT_EQ(words[8], static_cast<int64_t>(Activation::GeluTanh));
  EXPECT_EQ(words[11], static_cast<int64_t>(Precision::Bf16));
  auto read = paramsFromWords<MatMulParams>(words);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->n, 7);
  EXPECT_EQ(paramFloat(read->scale), 0.125f);
  EXPECT_FALSE(paramsFromWords<Conv2dParams>(words));
  EXPECT_FALSE(paramsFromWords<MatMulParams>(std::span(words).first(15)));
}

TEST(NpyTest, RoundTrips) {
  TempDir dir;
  Tensor tensor = Tensor::fromFloats({2, 3}, {1, 2, 3, 4, 5, 6.5f});
  ASSERT_TRUE(writeNpy(dir.file("t.npy"), tensor));
  auto read = readNpy(dir.file("t.npy"));
  ASSERT_TRUE(read) << read.status().toString();
  EXPECT_EQ(read->shape, tensor.shape);
  EXPECT_EQ(read->bytes, tensor.bytes);
}

TEST(NpyTest, RoundTripsIntegerAndBoolTensors) {
  TempDir dir;
  for (const char *dtype : {"int64", "int32", "bool"}) {
    Tensor tensor = Tensor::zeros(dtype, {3});
    tensor.bytes[dtypeBytes(dtype)] = 1; // element 1
    ASSERT_TRUE(writeNpy(dir.file("t.npy"), tensor));
    auto read = readNpy(dir.file("t.npy"));
    ASSERT_TRUE(read) << read.status().toString();
    EXPECT_EQ(read->dtype, dtype);
    EXPECT_EQ(read->bytes, tensor.bytes);
    EXPECT_EQ(read->element(1), 1.0);
  }
}

TEST(NpyTest, RoundTripsFloat16AsNumpysHalf) {
  TempDir dir;
  Tensor tensor = Tensor::zeros("float16", {2});
  uint16_t bits[] = {0x3c00, 0xc500}; // 1.0, -5.0
  std::memcpy(tensor.bytes.data(), bits, sizeof bits);
  ASSERT_TRUE(writeNpy(dir.file("t.npy"), tensor));
  EXPECT_NE(readFileToString(dir.file("t.npy"))->find("'<f2'"), std::string::npos);
  auto read = readNpy(dir.file("t.npy"));
  ASSERT_TRUE(read) << read.status().toString();
  EXPECT_EQ(read->dtype, "float16");
  EXPECT_EQ(read->bytes, tensor.bytes);
  EXPECT_EQ(read->element(0), 1.0);
  EXPECT_EQ(read->element(1), -5.0);
}

TEST(NpyTest, RoundTripsInt8AndUint8) {
  TempDir dir;
  for (const char *dtype : {"int8", "uint8"}) {
    Tensor tensor = Tensor::zeros(dtype, {3});
    uint8_t bytes[] = {0x00, 0x7f, 0xff};
    std::memcpy(tensor.bytes.data(), bytes, sizeof bytes);
    ASSERT_TRUE(writeNpy(dir.file("t.npy"), tensor));
    bool isSigned = std::string(dtype) == "int8";
    EXPECT_NE(readFileToString(dir.file("t.npy"))->find(isSigned ? "'|i1'" : "'|u1'"),
              std::string::npos);
    auto read = readNpy(dir.file("t.npy"));
    ASSERT_TRUE(read) << read.status().toString();
    EXPECT_EQ(read->dtype, dtype);
    EXPECT_EQ(read->bytes, tensor.bytes);
    EXPECT_EQ(read->element(1), 127.0);
    EXPECT_EQ(read->element(2), isSigned ? -1.0 : 255.0);
  }
}

TEST(NpyTest, RoundTripsOneDimensionalAndScalarShapes) {
  TempDir dir;
  for (const std::vector<int64_t> &shape :
       {std::vector<int64_t>{4}, std::vector<int64_t>{}}) {
    Tensor tensor = Tensor::zeros("float32", shape);
    ASSERT_TRUE(writeNpy(dir.file("t.npy"), tensor));
    auto read = readNpy(dir.file("t.npy"));
    ASSERT_TRUE(read);
    EXPECT_EQ(read->shape, shape);
  }
}

TEST(NpyTest, RejectsOtherDtypes) {
  TempDir dir;
  Tensor tensor = Tensor::fromFloats({2}, {1, 2});
  ASSERT_TRUE(writeNpy(dir.file("t.npy"), tensor));
  std::string bytes = *readFileToString(dir.file("t.npy"));
  bytes.replace(bytes.find("<f4"), 3, "<f8");
  std::ofstream(dir.file("d.npy"), std::ios::binary) << bytes;
  EXPECT_THAT(readNpy(dir.file("d.npy")), StatusIs(StatusCode::InvalidArgument, "'<f8'"));
}

TEST(NpyTest, RejectsTruncatedPayloadAndGarbage) {
  TempDir dir;
  ASSERT_TRUE(writeNpy(dir.file("t.npy"), Tensor::fromFloats({4}, {1, 2, 3, 4})));
  std::filesystem::resize_file(dir.file("t.npy"),
                               std::filesystem::file_size(dir.file("t.npy")) - 4);
  EXPECT_THAT(readNpy(dir.file("t.npy")),
              StatusIs(StatusCode::InvalidArgument, "payload"));
  std::ofstream(dir.file("g.npy")) << "garbage!!!!!";
  EXPECT_THAT(readNpy(dir.file("g.npy")),
              StatusIs(StatusCode::InvalidArgument, "bad magic"));
}

// Found by fuzz_npy: the size was multiplied out in int64 (signed overflow,
// and a wrapped size could match a short payload) and a dimension past
// int64 threw from std::stoll.
TEST(NpyTest, RejectsShapesTooLargeToAddress) {
  TempDir dir;
  for (const std::string &shape : {std::string("(3000000000000000000, 40)"),
                                   std::string("(99999999999999999999999,)"),
                                   std::string("(4294967296, 4294967296, 0)")}) {
    std::string header =
        "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }\n";
    std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
    bytes.push_back(static_cast<char>(header.size() & 0xff));
    bytes.push_back(static_cast<char>(header.size() >> 8));
    std::ofstream(dir.file("big.npy"), std::ios::binary) << bytes << header;
    EXPECT_THAT(readNpy(dir.file("big.npy")),
                StatusIs(StatusCode::InvalidArgument, "shape " + shape + " is too large"))
        << shape;
  }
}

/// A session of C code `source` with one input `x` of `dtype` [4] and one
/// float32 output `y` [4] (no weights).
Expected<std::unique_ptr<Session>>
sessionOf(const TempDir &dir, const std::string &source, const std::string &dtype) {
  FLOWC_ASSIGN_OR_RETURN(std::string code, testing::compileCode(dir.path(), source));
  std::string path = dir.file("checks.fca");
  FLOWC_ASSIGN_OR_RETURN(auto writer, ArtifactWriter::create(path));
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::Metadata, "{}"));
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::Code, code));
  Plan plan;
  plan.entry = "flowc_entry";
  plan.inputs = {{"x", dtype, {4}}};
  plan.outputs = {{"y", "float32", {4}}};
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::Plan, plan.toJson().dump()));
  FLOWC_RETURN_IF_ERROR(writer->finish());
  FLOWC_ASSIGN_OR_RETURN(auto artifact, Artifact::open(path));
  return Session::create(artifact);
}

// Code with run-time checks takes a flag per check after its outputs; the
// session zeroes them before each run and fails the run with the first one
// set. Here check 1 fails when an input value is negative.
TEST(RunTimeCheckTest, ASetFlagFailsTheRunWithItsText) {
  TempDir dir;
  const char *source =
      "const char flowc_checks[] = \"[\\\"never\\\", \\\"x has a negative value\\\"]\";\n"
      "void flowc_entry(void **args) {\n"
      "  const float *x = args[0]; float *y = args[1];\n"
      "  unsigned char *never = args[2], *negative = args[3];\n"
      "  for (int i = 0; i < 4; ++i) { y[i] = x[i]; if (x[i] < 0) *negative = 1; }\n"
      "  (void)never;\n"
      "}\n";
  auto session = sessionOf(dir, source, "float32");
  ASSERT_TRUE(session) << session.status().toString();
  auto bad = (*session)->run({{"x", Tensor::fromFloats({4}, {1, -2, 3, 4})}});
  EXPECT_THAT(bad.status(),
              StatusIs(StatusCode::InvalidArgument, "x has a negative value"));
  // The flag of a failed run does not outlive it.
  auto good = (*session)->run({{"x", Tensor::fromFloats({4}, {1, 2, 3, 4})}});
  ASSERT_TRUE(good) << good.status().toString();
  EXPECT_EQ((*good)[0].floats(), (std::vector<float>{1, 2, 3, 4}));
}

TEST(RunTimeCheckTest, MalformedCheckTextsAreDataLoss) {
  for (const std::string texts : {"[1]", "{\\\"a\\\": 1}", "[\\\"a\\\""}) {
    TempDir dir;
    std::string source = "const char flowc_checks[] = \"" + texts +
                         "\";\nvoid flowc_entry(void **args) { (void)args; }\n";
    EXPECT_THAT(
        sessionOf(dir, source, "float32").status(),
        StatusIs(StatusCode::DataLoss, "flowc_checks is not a JSON array of strings"))
        << texts;
  }
}

// Generated code reads a bool's lowest bit and LLVM may assume 0 or 1: a
// byte of 2 is refused, naming the input and the element.
TEST(RunTimeCheckTest, ABoolInputByteOtherThanZeroOrOneIsRefused) {
  TempDir dir;
  const char *source = "void flowc_entry(void **args) {\n"
                       "  const unsigned char *x = args[0]; float *y = args[1];\n"
                       "  for (int i = 0; i < 4; ++i) y[i] = x[i];\n"
                       "}\n";
  auto session = sessionOf(dir, source, "bool");
  ASSERT_TRUE(session) << session.status().toString();
  Tensor mask{"bool", {4}, {1, 0, 2, 1}};
  EXPECT_THAT((*session)->run({{"x", mask}}).status(),
              StatusIs(StatusCode::InvalidArgument,
                       "input 'x' (bool) holds byte 2 at element 2; a bool is 0 or 1"));
  mask.bytes[2] = 1;
  auto ran = (*session)->run({{"x", mask}});
  ASSERT_TRUE(ran) << ran.status().toString();
  EXPECT_EQ((*ran)[0].floats(), (std::vector<float>{1, 0, 1, 1}));
}

} // namespace
} // namespace flowc::runtime
