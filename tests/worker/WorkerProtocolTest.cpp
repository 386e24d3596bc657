// The daemon <-> worker pipe and the request checks both ends run.
#include "flowc/worker/RequestValidation.h"
#include "flowc/worker/WorkerProtocol.h"

#include "../common/TestUtil.h"

#include <cmath>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

namespace flowc::worker {
namespace {

using flowc::testing::StatusIs;
using ::testing::HasSubstr;

flowc::v1::SubmitRequest goodSubmit() {
  flowc::v1::SubmitRequest request;
  request.set_model_path("/models/m.onnx");
  request.mutable_options()->set_opt_level(2);
  return request;
}

TEST(RequestValidationTest, AcceptsAPlainSubmit) {
  auto compile = validateSubmitRequest(goodSubmit());
  ASSERT_TRUE(compile) << compile.status().toString();
  EXPECT_EQ(compile->modelPath, "/models/m.onnx");
  EXPECT_EQ(compile->options.target, Target::Cpu);
  EXPECT_EQ(compile->options.precision, Precision::Fp32);
  EXPECT_EQ(compile->kind, ArtifactKind::Packed);
}

// The wire's enums reach the compiler's options as the same values.
TEST(RequestValidationTest, CarriesTheWireEnums) {
  flowc::v1::SubmitRequest request = goodSubmit();
  request.mutable_options()->set_target(flowc::v1::TARGET_CPU);
  request.mutable_options()->set_precision(flowc::v1::PRECISION_BF16);
  request.mutable_options()->add_disabled_passes("flowc-derive-weights");
  request.mutable_options()->set_print_ir_after("all");
  auto compile = validateSubmitRequest(request);
  ASSERT_TRUE(compile) << compile.status().toString();
  EXPECT_EQ(compile->options.target, Target::Cpu);
  EXPECT_EQ(compile->options.precision, Precision::Bf16);
  EXPECT_EQ(compile->options.disabledPasses,
            std::vector<std::string>{"flowc-derive-weights"});
  EXPECT_EQ(compile->options.printIrAfter, "all");
}

TEST(RequestValidationTest, NamesTheBadField) {
  struct Case {
    std::function<void(flowc::v1::SubmitRequest &)> spoil;
    std::string message;
  };
  std::vector<Case> cases = {
      {[](auto &r) { r.set_model_path("relative.onnx"); }, "absolute path"},
      {[](auto &r) { r.set_model_path(""); }, "absolute path"},
      {[](auto &r) { r.set_model_path("/" + std::string(5000, 'a')); }, "5001 bytes"},
      {[](auto &r) { r.set_model_path(std::string("/a\0b", 4)); }, "NUL"},
      {[](auto &r) { r.mutable_options()->set_opt_level(9); }, "out of range 0..3"},
      {[](auto &r) {
         r.mutable_options()->set_target(static_cast<flowc::v1::Target>(7));
       },
       "options.target is 7, not a value this daemon knows (supported: cpu, cuda:sm_75"},
      {[](auto &r) {
         r.mutable_options()->set_precision(static_cast<flowc::v1::Precision>(9));
       },
       "options.precision is 9, not a value this daemon knows (supported: fp32, bf16, "
       "fp16)"},
      {[](auto &r) { r.mutable_options()->add_disabled_passes("no-such-pass"); },
       "cannot disable pass 'no-such-pass' (optional passes: flowc-derive-weights"},
      {[](auto &r) {
         auto *shape = r.add_input_shapes();
         shape->set_name("x");
         shape->add_dims(-3);
       },
       "dimension -3"},
      {[](auto &r) { r.add_input_shapes()->add_dims(1); }, "without an input name"},
      {[](auto &r) {
         for (int i = 0; i < 2; ++i) {
           auto *shape = r.add_input_shapes();
           shape->set_name("x");
           shape->add_dims(1);
         }
       },
       "given two shapes"},
      {[](auto &r) {
         auto *shape = r.add_input_shapes();
         shape->set_name("x");
         for (int i = 0; i < 100; ++i)
           shape->add_dims(1);
       },
       "100 dimensions"},
  };
  for (const Case &c : cases) {
    flowc::v1::SubmitRequest request = goodSubmit();
    c.spoil(request);
    auto compile = validateSubmitRequest(request);
    ASSERT_FALSE(compile) << c.message;
    EXPECT_EQ(compile.status().code(), StatusCode::InvalidArgument) << c.message;
    EXPECT_THAT(compile.status().message(), HasSubstr(c.message));
  }
}

TEST(RequestValidationTest, InspectAndReproNeedAnAbsolutePath) {
  flowc::v1::InspectRequest inspect;
  inspect.set_model_path("m.onnx");
  EXPECT_EQ(validateInspectRequest(inspect).status().code(), StatusCode::InvalidArgument);
  flowc::v1::ReproRequest repro;
  repro.set_model_path("/m.onnx");
  repro.mutable_options()->set_opt_level(7);
  EXPECT_THAT(validateReproRequest(repro).status().message(), HasSubstr("0..3"));
}

// A reproducer records target, level and precision only: Repro refuses the
// debugging options rather than drop them.
TEST(RequestValidationTest, ReproRefusesTheDebuggingOptions) {
  flowc::v1::ReproRequest repro;
  repro.set_model_path("/m.onnx");
  repro.mutable_options()->set_opt_level(2);
  ASSERT_TRUE(validateReproRequest(repro));
  repro.mutable_options()->set_print_ir_after("all");
  auto refused = validateReproRequest(repro);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), StatusCode::InvalidArgument);
  EXPECT_THAT(refused.status().message(),
              HasSubstr("options.disabled_passes and options.print_ir_after apply to "
                        "Submit only"));
}

class PipeTest : public ::testing::Test {
protected:
  void SetUp() override { ASSERT_EQ(::pipe(fds_), 0); }
  void TearDown() override {
    for (int fd : fds_)
      if (fd >= 0)
        ::close(fd);
  }
  void closeWriter() {
    ::close(fds_[1]);
    fds_[1] = -1;
  }
  int fds_[2] = {-1, -1};
};

TEST_F(PipeTest, FramesRoundTrip) {
  flowc::v1::WorkerReply progress;
  progress.mutable_progress()->set_stage("codegen");
  ASSERT_TRUE(writeFrame(fds_[1], progress).isOk());
  ASSERT_TRUE(writeFrame(fds_[1], errorReply(dataLoss("/m.data shrank"))).isOk());
  closeWriter();
  flowc::v1::WorkerReply first, second, none;
  ASSERT_TRUE(*readFrame(fds_[0], first));
  EXPECT_EQ(first.progress().stage(), "codegen");
  ASSERT_TRUE(*readFrame(fds_[0], second));
  Status carried = statusOf(second.error());
  EXPECT_EQ(carried.code(), StatusCode::DataLoss);
  EXPECT_EQ(carried.message(), "/m.data shrank");
  EXPECT_FALSE(*readFrame(fds_[0], none));
}

TEST_F(PipeTest, TruncatedAndOversizedFramesAreDataLoss) {
  const char truncated[] = {10, 0, 0, 0, 1, 2};
  ASSERT_EQ(::write(fds_[1], truncated, sizeof truncated), 6);
  closeWriter();
  flowc::v1::WorkerReply reply;
  auto read = readFrame(fds_[0], reply);
  ASSERT_FALSE(read);
  EXPECT_EQ(read.status().code(), StatusCode::DataLoss);

  std::string oversized("\xff\xff\xff\x7f", 4);
  EXPECT_THAT(takeFrames(oversized).status().message(), HasSubstr("over the limit"));
}

TEST(TakeFramesTest, KeepsAPartialFrameForLater) {
  flowc::v1::WorkerReply reply;
  reply.mutable_progress()->set_detail("x");
  std::string bytes;
  reply.SerializeToString(&bytes);
  std::string stream =
      std::string(1, static_cast<char>(bytes.size())) + std::string(3, '\0') + bytes;
  std::string buffer = stream + stream.substr(0, 3);
  auto frames = takeFrames(buffer);
  ASSERT_TRUE(frames);
  EXPECT_EQ(frames->size(), 1u);
  EXPECT_EQ(buffer.size(), 3u);
  buffer += stream.substr(3);
  EXPECT_EQ(takeFrames(buffer)->size(), 1u);
  EXPECT_TRUE(buffer.empty());

  std::string garbage = std::string("\x02\0\0\0", 4) + "\xff\xff";
  EXPECT_EQ(takeFrames(garbage).status().code(), StatusCode::DataLoss);
}

TEST(StatusOfTest, AnUnknownCodeIsInternal) {
  flowc::v1::WorkerError error;
  error.set_code(999);
  error.set_message("?");
  EXPECT_EQ(statusOf(error).code(), StatusCode::Internal);
}

TEST(WorkerProtocolTest, ATaskRequestWithABadDigestIsRefused) {
  Task task{"codegen", "k", {{"task.json", cache::digestOf("{}")}}, {"kernel.o"}};
  flowc::v1::TaskRequest request = toProto(task, 7);
  auto back = taskFromProto(request);
  ASSERT_TRUE(back) << back.status().toString();
  EXPECT_EQ(back->inputs[0].digest, task.inputs[0].digest);
  EXPECT_EQ(back->outputs, task.outputs);
  request.mutable_inputs(0)->set_digest("sha256:nothex/3");
  EXPECT_EQ(taskFromProto(request).status().code(), StatusCode::InvalidArgument);
}

// A GPU measure task keeps what it needs of a worker and how long it may
// wait for one on its way to the daemon; nonsense in either is refused.
TEST(WorkerProtocolTest, ATasksPlatformAndDeadlineCrossThePipe) {
  Task task{"measure",
            "library.conv2d:1",
            {{"task.json", cache::digestOf("{}")}},
            {"measure.json"}};
  task.platform = {{kGpuPlatformProperty, "NVIDIA H200 sm_90"}};
  task.deadlineSeconds = 2.5;
  flowc::v1::TaskRequest request = toProto(task, 8);
  auto back = taskFromProto(request);
  ASSERT_TRUE(back) << back.status().toString();
  EXPECT_EQ(back->platform, task.platform);
  EXPECT_EQ(back->deadlineSeconds, 2.5);
  for (double bad : {-1.0, std::nan(""), kMaxTaskDeadlineSeconds * 2}) {
    flowc::v1::TaskRequest late = request;
    late.set_deadline_seconds(bad);
    EXPECT_THAT(taskFromProto(late), StatusIs(StatusCode::InvalidArgument,
                                              "task 'library.conv2d:1': deadline"))
        << bad;
  }
  request.mutable_platform(0)->set_value("");
  EXPECT_THAT(taskFromProto(request),
              StatusIs(StatusCode::InvalidArgument, "an empty name or value"));
}

} // namespace
} // namespace flowc::worker
