// The runtime's C API (flowc/runtime/c_api.h), linked as the shared library
// other languages load, on the add artifact of SmallArtifact.h (real code
// compiled by the system compiler: y = x + w over four floats).
#include "flowc/runtime/c_api.h"

#include "flowc/cache/Digest.h"
#include "flowc/support/MappedFile.h"

#include "../common/TestUtil.h"
#include "SmallArtifact.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sstream>
#include <string>
#include <vector>

namespace flowc::runtime {
namespace {

using flowc::testing::TempDir;
using ::testing::HasSubstr;

/// The add artifact written in `dir`: its path.
std::string writeAdd(const TempDir &dir, const Plan &plan = testing::addPlan()) {
  auto code = testing::compileCode(dir.path(), testing::kAddSource);
  EXPECT_TRUE(code) << code.status().toString();
  std::string path = dir.file("add.fca");
  Status written = testing::writeArtifact(path, code ? *code : "", plan);
  EXPECT_TRUE(written) << written.toString();
  return path;
}

/// Owns an artifact handle and a session over it.
struct Opened {
  flowc_artifact *artifact = nullptr;
  flowc_session *session = nullptr;
  ~Opened() {
    flowc_session_close(session);
    flowc_artifact_close(artifact);
  }
};

const int64_t kShape[] = {4};

flowc_tensor floatTensor(const char *name, float *data, size_t count = 4,
                         const int64_t *shape = kShape, size_t rank = 1) {
  return {name, "float32", rank, shape, data, count * sizeof(float)};
}

// Open lists the plan's inputs and outputs with their byte sizes, and the
// metadata as JSON.
TEST(CApiTest, OpenListsInputsOutputsAndMetadata) {
  TempDir dir;
  Opened opened;
  ASSERT_EQ(flowc_artifact_open(writeAdd(dir).c_str(), nullptr, FLOWC_VERIFY_DIGESTS,
                                &opened.artifact),
            FLOWC_OK)
      << flowc_last_error();
  size_t inputs = 0, outputs = 0;
  ASSERT_EQ(flowc_artifact_input_count(opened.artifact, &inputs), FLOWC_OK);
  ASSERT_EQ(flowc_artifact_output_count(opened.artifact, &outputs), FLOWC_OK);
  EXPECT_EQ(inputs, 1u);
  EXPECT_EQ(outputs, 1u);
  flowc_tensor_info info{};
  ASSERT_EQ(flowc_artifact_input(opened.artifact, 0, &info), FLOWC_OK);
  EXPECT_STREQ(info.name, "x");
  EXPECT_STREQ(info.dtype, "float32");
  ASSERT_EQ(info.rank, 1u);
  EXPECT_EQ(info.shape[0], 4);
  EXPECT_EQ(info.byte_size, 16u);
  ASSERT_EQ(flowc_artifact_output(opened.artifact, 0, &info), FLOWC_OK);
  EXPECT_STREQ(info.name, "y");
  const char *metadata = nullptr;
  ASSERT_EQ(flowc_artifact_metadata(opened.artifact, &metadata), FLOWC_OK);
  EXPECT_STREQ(metadata, R"({"model":"add"})");
  // An index past the end names the range.
  EXPECT_EQ(flowc_artifact_output(opened.artifact, 1, &info), FLOWC_INVALID_ARGUMENT);
  EXPECT_THAT(flowc_last_error(), HasSubstr("index 1 is out of range (1 outputs)"));
}

// A run reads the caller's input and writes the result into the caller's
// output buffer; the session keeps the artifact mapped after its handle is
// closed.
TEST(CApiTest, RunWritesOutputsIntoCallerBuffers) {
  TempDir dir;
  Opened opened;
  ASSERT_EQ(flowc_artifact_open(writeAdd(dir).c_str(), nullptr, FLOWC_VERIFY_DIGESTS,
                                &opened.artifact),
            FLOWC_OK);
  ASSERT_EQ(flowc_session_create(opened.artifact, 1, &opened.session), FLOWC_OK)
      << flowc_last_error();
  flowc_artifact_close(opened.artifact);
  opened.artifact = nullptr;
  float x[4] = {1, 2, 3, 4}, y[4] = {};
  flowc_tensor input = floatTensor("x", x), output = floatTensor(nullptr, y);
  ASSERT_EQ(flowc_session_run(opened.session, &input, 1, &output, 1), FLOWC_OK)
      << flowc_last_error();
  EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{11, 22, 33, 44}));
  // Again, with the output named: runs repeat on one session.
  output = floatTensor("y", y);
  x[0] = -10;
  ASSERT_EQ(flowc_session_run(opened.session, &input, 1, &output, 1), FLOWC_OK);
  EXPECT_EQ(y[0], 0);
}

// What is not an artifact, a truncated one and a missing file are refused
// with the file named.
TEST(CApiTest, OpenRefusesFilesThatAreNoArtifact) {
  TempDir dir;
  flowc_artifact *artifact = nullptr;
  // Garbage longer than a header.
  std::ofstream(dir.file("garbage.fca")) << std::string(4096, 'g');
  EXPECT_EQ(flowc_artifact_open(dir.file("garbage.fca").c_str(), nullptr,
                                FLOWC_VERIFY_DIGESTS, &artifact),
            FLOWC_INVALID_ARGUMENT);
  EXPECT_THAT(flowc_last_error(), HasSubstr("garbage.fca"));
  EXPECT_EQ(artifact, nullptr);
  // A real artifact cut short.
  std::string path = writeAdd(dir);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100);
  EXPECT_EQ(flowc_artifact_open(path.c_str(), nullptr, FLOWC_VERIFY_DIGESTS, &artifact),
            FLOWC_DATA_LOSS);
  EXPECT_THAT(flowc_last_error(), HasSubstr("add.fca"));
  // No file at all.
  EXPECT_EQ(flowc_artifact_open(dir.file("none.fca").c_str(), nullptr,
                                FLOWC_VERIFY_DIGESTS, &artifact),
            FLOWC_NOT_FOUND);
  EXPECT_THAT(flowc_last_error(), HasSubstr("none.fca"));
  // A verification mode that does not exist.
  EXPECT_EQ(flowc_artifact_open(path.c_str(), nullptr, static_cast<flowc_verification>(7),
                                &artifact),
            FLOWC_INVALID_ARGUMENT);
  EXPECT_THAT(flowc_last_error(), HasSubstr("verification 7"));
}

// Every way a run's tensors can disagree with the plan is refused before
// anything runs, naming the tensor and what is wrong; the output buffer is
// left untouched. That includes an output overlapping an input: the code
// writes results while it still reads inputs.
TEST(CApiTest, RunRefusesTensorsThatDoNotMatchThePlan) {
  TempDir dir;
  Opened opened;
  ASSERT_EQ(flowc_artifact_open(writeAdd(dir).c_str(), nullptr, FLOWC_VERIFY_DIGESTS,
                                &opened.artifact),
            FLOWC_OK);
  ASSERT_EQ(flowc_session_create(opened.artifact, 0, &opened.session), FLOWC_OK);
  alignas(16) float x[5] = {1, 2, 3, 4, 5};
  float y[4] = {-1, -1, -1, -1};
  const int64_t wrongShape[] = {2, 2};
  const flowc_tensor output = floatTensor(nullptr, y);
  struct Case {
    std::vector<flowc_tensor> inputs;
    flowc_tensor output;
    const char *message;
  };
  flowc_tensor good = floatTensor("x", x);
  flowc_tensor int64Input = good;
  int64Input.dtype = "int64";
  flowc_tensor shortBytes = good;
  shortBytes.byte_size = 12;
  flowc_tensor noData = good;
  noData.data = nullptr;
  flowc_tensor noShape = good;
  noShape.shape = nullptr;
  flowc_tensor noName = good;
  noName.name = nullptr;
  flowc_tensor misaligned = good;
  misaligned.data = reinterpret_cast<char *>(x) + 1;
  flowc_tensor wrongOutput = floatTensor("z", y);
  flowc_tensor int32Output = output;
  int32Output.dtype = "int32";
  std::vector<Case> cases = {
      {{}, output, "missing input 'x' of shape [4]"},
      {{good, good}, output, "input 'x' is given twice"},
      {{floatTensor("w", x)}, output, "the model has no input named 'w'"},
      {{int64Input}, output, "input 'x' is int64, the model expects float32"},
      {{floatTensor("x", x, 4, wrongShape, 2)},
       output,
       "input 'x' has shape [2,2], the model expects [4]"},
      {{shortBytes},
       output,
       "input 'x' has 12 bytes, a float32 tensor of shape [4] has 16"},
      {{noData}, output, "input 'x': data is NULL"},
      {{noShape}, output, "input 'x': shape is NULL for rank 1"},
      {{noName}, output, "input 0: name is NULL"},
      {{misaligned}, output, "input 'x': data is not aligned to its 4-byte elements"},
      {{good}, wrongOutput, "output 0 is 'y', not 'z'"},
      {{good}, int32Output, "output 'y' is int32, the model expects float32"},
      {{good}, floatTensor(nullptr, x), "output 'y' overlaps input 'x'"},
      {{good}, floatTensor(nullptr, x + 1), "output 'y' overlaps input 'x'"},
  };
  for (const Case &c : cases) {
    EXPECT_EQ(
        flowc_session_run(opened.session, c.inputs.data(), c.inputs.size(), &c.output, 1),
        FLOWC_INVALID_ARGUMENT)
        << c.message;
    EXPECT_THAT(flowc_last_error(), HasSubstr(c.message));
  }
  EXPECT_EQ(flowc_session_run(opened.session, &good, 1, &output, 0),
            FLOWC_INVALID_ARGUMENT);
  EXPECT_THAT(flowc_last_error(), HasSubstr("0 output buffers given, the model has 1"));
  EXPECT_EQ(y[0], -1) << "a refused run wrote its output";
}

// Two outputs sharing memory are refused as well: one kernel's result may be
// written straight into an output while another output is still read.
TEST(CApiTest, RunRefusesOutputsThatOverlapEachOther) {
  TempDir dir;
  Plan plan = testing::addPlan();
  plan.outputs.push_back({"z", "float32", {4}});
  auto code = testing::compileCode(
      dir.path(),
      "void flowc_entry(void **args) {\n"
      "  const float *x = args[0], *w = args[1];\n"
      "  float *y = args[2], *z = args[3];\n"
      "  for (int i = 0; i < 4; ++i) { y[i] = x[i] + w[i]; z[i] = x[i] - w[i]; }\n"
      "}\n");
  ASSERT_TRUE(code) << code.status().toString();
  std::string path = dir.file("two.fca");
  ASSERT_TRUE(testing::writeArtifact(path, *code, plan));
  Opened opened;
  ASSERT_EQ(
      flowc_artifact_open(path.c_str(), nullptr, FLOWC_VERIFY_DIGESTS, &opened.artifact),
      FLOWC_OK)
      << flowc_last_error();
  ASSERT_EQ(flowc_session_create(opened.artifact, 0, &opened.session), FLOWC_OK);
  float x[4] = {1, 2, 3, 4};
  float shared[6] = {-1, -1, -1, -1, -1, -1};
  flowc_tensor input = floatTensor("x", x);
  flowc_tensor overlapping[2] = {floatTensor(nullptr, shared),
                                 floatTensor(nullptr, shared + 2)};
  EXPECT_EQ(flowc_session_run(opened.session, &input, 1, overlapping, 2),
            FLOWC_INVALID_ARGUMENT);
  EXPECT_THAT(flowc_last_error(),
              HasSubstr("output 'z' overlaps output 'y': outputs need "
                        "memory of their own"));
  EXPECT_EQ(shared[0], -1) << "a refused run wrote its output";
  // Apart, both are written.
  float y[4], z[4];
  flowc_tensor apart[2] = {floatTensor(nullptr, y), floatTensor(nullptr, z)};
  ASSERT_EQ(flowc_session_run(opened.session, &input, 1, apart, 2), FLOWC_OK)
      << flowc_last_error();
  EXPECT_EQ(y[3], 44);
  EXPECT_EQ(z[3], -36);
}

// NULL handles and out-pointers are refused with the argument named; the
// closers take NULL.
TEST(CApiTest, NullPointersAreRefusedNotDereferenced) {
  TempDir dir;
  std::string path = writeAdd(dir);
  flowc_artifact *artifact = nullptr;
  flowc_session *session = nullptr;
  size_t count = 0;
  flowc_tensor_info info{};
  const char *text = nullptr;
  EXPECT_EQ(flowc_artifact_open(nullptr, nullptr, FLOWC_VERIFY_DIGESTS, &artifact),
            FLOWC_INVALID_ARGUMENT);
  EXPECT_THAT(flowc_last_error(), HasSubstr("flowc_artifact_open: 'path' is NULL"));
  EXPECT_EQ(flowc_artifact_open(path.c_str(), nullptr, FLOWC_VERIFY_DIGESTS, nullptr),
            FLOWC_INVALID_ARGUMENT);
  EXPECT_THAT(flowc_last_error(), HasSubstr("'out' is NULL"));
  EXPECT_EQ(flowc_artifact_input_count(nullptr, &count), FLOWC_INVALID_ARGUMENT);
  EXPECT_THAT(flowc_last_error(), HasSubstr("flowc_artifact_input_count: 'artifact'"));
  EXPECT_EQ(flowc_artifact_output_count(nullptr, &count), FLOWC_INVALID_ARGUMENT);
  EXPECT_EQ(flowc_artifact_input(nullptr, 0, &info), FLOWC_INVALID_ARGUMENT);
  EXPECT_EQ(flowc_artifact_metadata(nullptr, &text), FLOWC_INVALID_ARGUMENT);
  EXPECT_EQ(flowc_session_create(nullptr, 0, &session), FLOWC_INVALID_ARGUMENT);
  EXPECT_THAT(flowc_last_error(), HasSubstr("flowc_session_create: 'artifact' is NULL"));
  EXPECT_EQ(flowc_session_run(nullptr, nullptr, 0, nullptr, 0), FLOWC_INVALID_ARGUMENT);
  EXPECT_THAT(flowc_last_error(), HasSubstr("flowc_session_run: 'session' is NULL"));
  ASSERT_EQ(flowc_artifact_open(path.c_str(), nullptr, FLOWC_VERIFY_DIGESTS, &artifact),
            FLOWC_OK);
  EXPECT_EQ(flowc_artifact_input(artifact, 0, nullptr), FLOWC_INVALID_ARGUMENT);
  EXPECT_EQ(flowc_session_create(artifact, -2, &session), FLOWC_INVALID_ARGUMENT);
  EXPECT_THAT(flowc_last_error(), HasSubstr("thread count -2 is negative"));
  ASSERT_EQ(flowc_session_create(artifact, 0, &session), FLOWC_OK);
  EXPECT_EQ(flowc_session_run(session, nullptr, 1, nullptr, 1), FLOWC_INVALID_ARGUMENT);
  EXPECT_THAT(flowc_last_error(), HasSubstr("'inputs' is NULL"));
  flowc_session_close(session);
  flowc_artifact_close(artifact);
  flowc_session_close(nullptr);
  flowc_artifact_close(nullptr);
  EXPECT_STREQ(flowc_status_name(FLOWC_DATA_LOSS), "DataLoss");
  EXPECT_STREQ(flowc_status_name(99), "Unknown");
  EXPECT_EQ(flowc_c_api_version(), FLOWC_C_API_VERSION);
}

// A session on a chosen GPU: CPU code runs as it would anywhere (the device
// is CUDA code's), a negative device or a NULL is refused naming it.
TEST(CApiTest, ASessionOnAGpuDeviceIsCudaCodesChoice) {
  TempDir dir;
  std::string path = writeAdd(dir);
  Opened opened;
  ASSERT_EQ(
      flowc_artifact_open(path.c_str(), nullptr, FLOWC_VERIFY_DIGESTS, &opened.artifact),
      FLOWC_OK);
  flowc_session *refused = nullptr;
  EXPECT_EQ(flowc_session_create_on_gpu(opened.artifact, 0, -1, &refused),
            FLOWC_INVALID_ARGUMENT);
  EXPECT_THAT(flowc_last_error(), HasSubstr("GPU device -1 is negative"));
  EXPECT_EQ(refused, nullptr);
  EXPECT_EQ(flowc_session_create_on_gpu(nullptr, 0, 1, &refused), FLOWC_INVALID_ARGUMENT);
  EXPECT_THAT(flowc_last_error(),
              HasSubstr("flowc_session_create_on_gpu: 'artifact' is NULL"));
  EXPECT_EQ(flowc_session_create_on_gpu(opened.artifact, 0, 1, nullptr),
            FLOWC_INVALID_ARGUMENT);
  ASSERT_EQ(flowc_session_create_on_gpu(opened.artifact, 1, 3, &opened.session), FLOWC_OK)
      << flowc_last_error();
  float x[4] = {1, 2, 3, 4};
  float y[4] = {};
  flowc_tensor input = floatTensor("x", x);
  flowc_tensor output = floatTensor("y", y);
  ASSERT_EQ(flowc_session_run(opened.session, &input, 1, &output, 1), FLOWC_OK)
      << flowc_last_error();
  EXPECT_EQ(std::vector<float>(y, y + 4), (std::vector<float>{11, 22, 33, 44}));
}

// A thin artifact's weight is mapped from the cache directory given to
// open; a cache without it fails open naming the digest; without a cache
// the session says which weight is missing.
TEST(CApiTest, ThinArtifactWeightsComeFromTheCacheDir) {
  TempDir dir;
  Plan plan = testing::addPlan();
  plan.weights[0].external = true;
  std::string path = writeAdd(dir, plan);
  auto digest = cache::Digest::parse(plan.weights[0].digest);
  ASSERT_TRUE(digest);
  flowc_artifact *artifact = nullptr;
  EXPECT_EQ(flowc_artifact_open(path.c_str(), dir.file("cache").c_str(),
                                FLOWC_VERIFY_DIGESTS, &artifact),
            FLOWC_NOT_FOUND);
  EXPECT_THAT(flowc_last_error(),
              HasSubstr(plan.weights[0].digest + " is not in the cache"));
  std::string blob = cache::blobPathUnder(dir.file("cache"), *digest);
  std::filesystem::create_directories(std::filesystem::path(blob).parent_path());
  std::ofstream(blob, std::ios::binary) << testing::addWeightBytes();

  Opened without;
  ASSERT_EQ(
      flowc_artifact_open(path.c_str(), nullptr, FLOWC_VERIFY_DIGESTS, &without.artifact),
      FLOWC_OK);
  EXPECT_EQ(flowc_session_create(without.artifact, 0, &without.session),
            FLOWC_FAILED_PRECONDITION);
  EXPECT_THAT(flowc_last_error(), HasSubstr("w"));

  Opened with;
  ASSERT_EQ(flowc_artifact_open(path.c_str(), dir.file("cache").c_str(),
                                FLOWC_VERIFY_DIGESTS, &with.artifact),
            FLOWC_OK)
      << flowc_last_error();
  ASSERT_EQ(flowc_session_create(with.artifact, 0, &with.session), FLOWC_OK)
      << flowc_last_error();
  float x[4] = {1, 1, 1, 1}, y[4] = {};
  flowc_tensor input = floatTensor("x", x), output = floatTensor("y", y);
  ASSERT_EQ(flowc_session_run(with.session, &input, 1, &output, 1), FLOWC_OK);
  EXPECT_EQ(y[3], 41);
}

// The runtime's warnings reach the host's stderr as flowc's commands print
// them, never its stdout (a notebook's cell output, a program's answer);
// info lines (the cache's) are not printed.
TEST(CApiTest, WarningsGoToStderrNotTheHostsStdout) {
  // spdlog's stock default logger: unnamed, on stdout.
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "", std::make_shared<spdlog::sinks::stdout_sink_mt>()));
  TempDir dir;
  flowc_artifact *artifact = nullptr;
  EXPECT_EQ(flowc_artifact_open(dir.file("none.fca").c_str(), nullptr,
                                FLOWC_VERIFY_DIGESTS, &artifact),
            FLOWC_NOT_FOUND);
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  spdlog::warn("a candidate cannot run here");
  spdlog::info("cache restricted mode");
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
  EXPECT_EQ(err, "flowc: warning: a candidate cannot run here\n");
}

// A host that set a default logger of its own keeps it: the library does
// not take over its host's logging.
TEST(CApiTest, AHostsOwnLoggerIsKept) {
  std::ostringstream seen;
  auto host = std::make_shared<spdlog::logger>(
      "host", std::make_shared<spdlog::sinks::ostream_sink_mt>(seen));
  spdlog::set_default_logger(host);
  TempDir dir;
  flowc_artifact *artifact = nullptr;
  EXPECT_EQ(flowc_artifact_open(dir.file("none.fca").c_str(), nullptr,
                                FLOWC_VERIFY_DIGESTS, &artifact),
            FLOWC_NOT_FOUND);
  EXPECT_EQ(spdlog::default_logger(), host);
  spdlog::warn("to the host");
  EXPECT_THAT(seen.str(), HasSubstr("to the host"));
}

} // namespace
} // namespace flowc::runtime
