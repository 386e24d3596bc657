// Search for CUDA targets: the GPU's tuning records (from sessions' trial
// runs, or imported) decide a compile's convolutions and products, never
// another GPU's or a record naming another library's candidate; with no
// record the plan leaves them to trial runs.
#include "flowc/runtime/Tuning.h"
#include "flowc/worker/Search.h"
#include "flowc/worker/Tasks.h"

#include "../common/TestUtil.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace flowc::worker {
namespace {

using namespace flowc::testing;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr const char *kBuild = "flowc-test-build";
constexpr const char *kConvCandidate = "cudnn:engine=12;knobs=1:3,4:0";
constexpr const char *kMatMulCandidate =
    "cublaslt:algo=21;tile=15;stages=22;splitk=1;reduction=0;swizzle=0;custom=0;"
    "inner=0;cluster=0";

class GpuSearchTest : public ::testing::Test {
protected:
  void SetUp() override {
    Expected<std::string> versions = runtime::gpuTuningVersions();
    if (!versions)
      GTEST_SKIP() << "no cuDNN/cuBLASLt here: " << versions.status().message();
    if (Expected<std::string> local = runtime::localGpuTuningDevice())
      GTEST_SKIP() << "this machine's own GPU would be chosen: " << *local;
    versions_ = *versions;
    auto cache = cache::Cache::open(dir_.file("cache"), {});
    ASSERT_TRUE(cache) << cache.status().toString();
    cache_ = std::move(*cache);
    // Two convolutions of one signature, a product, and a softmax (the
    // runtime's own kernel on the GPU: nothing to choose).
    plan_.weights.librarySites = {
        {0, 0, {1, 2, 3}}, {1, 1, {4, 5, 6}}, {2, 0, {1, 2, 3}}, {3, 3, {7}}};
    options_.target = Target::CudaSm90;
    options_.optLevel = 2;
  }

  void record(const std::string &signature, const std::string &device,
              const std::string &candidate, int64_t timeNs, int64_t measuredMs) {
    cache::TuningRecord record;
    record.signature = signature;
    record.device = device;
    record.versions = versions_;
    record.candidate = candidate;
    record.timeNs = timeNs;
    record.samples = 3;
    record.measuredMs = measuredMs;
    record.host = "gpu-host";
    ASSERT_TRUE(cache_->recordTuning(record));
  }

  Expected<SearchChoices> search() {
    InProcessTaskRunner runner(*cache_, kBuild, 1);
    SearchBudget budget;
    budget.mode = SearchBudget::Mode::Exhaustive;
    return searchKernels(*cache_, nullptr, runner, plan_, options_, budget, {}, kBuild,
                         [](const std::string &) {});
  }

  TempDir dir_;
  std::string versions_;
  std::unique_ptr<cache::Cache> cache_;
  compiler::CompilePlan plan_;
  compiler::CompileOptions options_;
};

const char *kConvSignature = "library.conv2d:1,2,3";
const char *kMatMulSignature = "library.matmul:4,5,6";

// Without any GPU record there is no GPU to key by: nothing is tunable at
// compile time, and nothing is measured (no compile times a GPU).
TEST_F(GpuSearchTest, WithoutRecordsEverySiteIsLeftToTrialRuns) {
  auto choices = search();
  ASSERT_TRUE(choices) << choices.status().toString();
  EXPECT_THAT(choices->tuned, IsEmpty());
  EXPECT_EQ(choices->summary.tunableKernels, 0u);
  EXPECT_EQ(choices->summary.measuredKernels, 0u);
  auto device = gpuTuningDeviceFor(*cache_, Target::CudaSm90);
  ASSERT_TRUE(device) << device.status().toString();
  EXPECT_FALSE(*device);
}

// The fastest record of each signature decides every site of it; the plan
// carries the candidate and where it was measured.
TEST_F(GpuSearchTest, TheGpusFastestRecordsDecideTheSites) {
  std::string h200 = runtime::gpuTuningDevice("NVIDIA H200", 90);
  record(kConvSignature, h200, kConvCandidate, 5000, 1000);
  record(kConvSignature, h200, "cudnn:engine=3;knobs=", 9000, 1000);
  record(kMatMulSignature, h200, kMatMulCandidate, 7000, 1000);
  auto choices = search();
  ASSERT_TRUE(choices) << choices.status().toString();
  EXPECT_EQ(choices->summary.gpuDevice, h200);
  EXPECT_EQ(choices->summary.tunableKernels, 2u);
  EXPECT_EQ(choices->summary.tunedKernels, 2u);
  EXPECT_EQ(choices->summary.measuredKernels, 0u);
  ASSERT_EQ(choices->tuned.size(), 3u);
  EXPECT_EQ(choices->tuned[0].site, 0);
  EXPECT_EQ(choices->tuned[0].candidate, kConvCandidate);
  EXPECT_EQ(choices->tuned[0].timeNs, 5000);
  EXPECT_EQ(choices->tuned[0].host, "gpu-host");
  EXPECT_EQ(choices->tuned[1].site, 1);
  EXPECT_EQ(choices->tuned[1].candidate, kMatMulCandidate);
  EXPECT_EQ(choices->tuned[2].site, 2);
  EXPECT_EQ(choices->tuned[2].candidate, kConvCandidate);
}

// Records of another compute capability never decide: an sm_80 GPU's
// engines are not an sm_90 one's. Of two GPUs of the target's capability,
// the one measured last is the one a compile keys by.
TEST_F(GpuSearchTest, OnlyTheTargetsCapabilityAndTheLatestGpuCount) {
  std::string a100 = runtime::gpuTuningDevice("NVIDIA A100", 80);
  std::string h100 = runtime::gpuTuningDevice("NVIDIA H100", 90);
  std::string h200 = runtime::gpuTuningDevice("NVIDIA H200", 90);
  record(kConvSignature, a100, "cudnn:engine=1;knobs=", 100, 3000);
  record(kConvSignature, h100, "cudnn:engine=2;knobs=", 200, 1000);
  record(kConvSignature, h200, "cudnn:engine=4;knobs=", 900, 2000);
  auto device = gpuTuningDeviceFor(*cache_, Target::CudaSm90);
  ASSERT_TRUE(device) << device.status().toString();
  EXPECT_EQ(*device, h200);
  auto choices = search();
  ASSERT_TRUE(choices) << choices.status().toString();
  ASSERT_EQ(choices->tuned.size(), 2u);
  EXPECT_EQ(choices->tuned[0].candidate, "cudnn:engine=4;knobs=");
  options_.target = Target::CudaSm80;
  choices = search();
  ASSERT_TRUE(choices) << choices.status().toString();
  ASSERT_EQ(choices->tuned.size(), 2u);
  EXPECT_EQ(choices->tuned[0].candidate, "cudnn:engine=1;knobs=");
  device = gpuTuningDeviceFor(*cache_, Target::CudaSm100);
  ASSERT_TRUE(device) << device.status().toString();
  EXPECT_FALSE(*device);
}

// A record whose candidate is not its kernel's library's (a product's
// algorithm under a convolution, a CPU candidate, garbage from an import)
// is set aside with a warning: the site is left to trial runs.
TEST_F(GpuSearchTest, ARecordOfAnotherLibrarysCandidateIsSetAside) {
  std::string h200 = runtime::gpuTuningDevice("NVIDIA H200", 90);
  record(kConvSignature, h200, kMatMulCandidate, 100, 1000);
  record(kMatMulSignature, h200, "layout=any;impl=jit:avx2", 100, 1000);
  auto choices = search();
  ASSERT_TRUE(choices) << choices.status().toString();
  EXPECT_THAT(choices->tuned, IsEmpty());
  EXPECT_EQ(choices->summary.tunableKernels, 2u);
  EXPECT_EQ(choices->summary.tunedKernels, 0u);
}

// A GPU measure task asks for its GPU (the remote action's platform
// property) and runs nowhere else: on a machine without that GPU, or with
// other library versions than the records', it fails saying which it
// needed, and a malformed one is refused.
TEST_F(GpuSearchTest, AGpuMeasureTaskNeedsItsGpu) {
  Expected<std::string> versions = runtime::gpuTuningVersions();
  std::string h200 = runtime::gpuTuningDevice("NVIDIA H200", 90);
  nlohmann::json measure = {{"device", h200},
                            {"gpu", true},
                            {"signature", kConvSignature},
                            {"trials", 16},
                            {"versions", "cuDNN 8.0.0, cuBLASLt 11.0.0; kernel abi 1"},
                            {"library", {{"kind", 0}, {"params", {1, 2, 3}}}}};
  auto task = makeMeasureTask(*cache_, measure, std::nullopt, options_, kBuild);
  ASSERT_TRUE(task) << task.status().toString();
  EXPECT_EQ(task->platform, (std::vector<std::pair<std::string, std::string>>{
                                {kGpuPlatformProperty, "NVIDIA H200 sm_90"}}));
  TempDir out;
  EXPECT_THAT(runMeasureTask(measure, options_, out.path(), out.path(), "", "m.json"),
              StatusIs(StatusCode::FailedPrecondition,
                       "a measure task for the libraries 'cuDNN 8.0.0, cuBLASLt 11.0.0; "
                       "kernel abi 1' reached a machine with " +
                           (versions ? "'" + *versions + "'" : std::string("none"))));
  if (!versions)
    return; // Without cuDNN and cuBLASLt the libraries are what it lacks.
  measure["versions"] = *versions;
  EXPECT_THAT(runMeasureTask(measure, options_, out.path(), out.path(), "", "m.json"),
              StatusIs(StatusCode::FailedPrecondition,
                       "a measure task for the GPU 'gpu NVIDIA H200 sm_90' reached a "
                       "machine with no GPU"));
  measure.erase("versions");
  EXPECT_THAT(runMeasureTask(measure, options_, out.path(), out.path(), "", "m.json"),
              StatusIs(StatusCode::InvalidArgument, "a GPU measure task"));
  measure["versions"] = *versions;
  measure["trials"] = 1;
  EXPECT_THAT(runMeasureTask(measure, options_, out.path(), out.path(), "", "m.json"),
              StatusIs(StatusCode::InvalidArgument, "times 2 to 64 candidates"));
  measure.erase("library");
  EXPECT_THAT(runMeasureTask(measure, options_, out.path(), out.path(), "", "m.json"),
              StatusIs(StatusCode::InvalidArgument, "a GPU measure task"));
  // A CPU measure task asks for nothing more than the CPU's platform.
  auto cpu = makeMeasureTask(*cache_, {{"device", deviceDescriptor()}}, std::nullopt,
                             options_, kBuild);
  ASSERT_TRUE(cpu) << cpu.status().toString();
  EXPECT_THAT(cpu->platform, IsEmpty());
}

/// Runs nothing: keeps the tasks it is given and fails each as an engine
/// with no worker offering their GPU would.
class NoGpuWorkerRunner final : public TaskRunner {
public:
  using TaskRunner::run;
  std::vector<Expected<TaskOutcome>> run(const std::vector<Task> &tasks,
                                         const TaskListener &) override {
    seen.insert(seen.end(), tasks.begin(), tasks.end());
    return std::vector<Expected<TaskOutcome>>(
        tasks.size(), Status(StatusCode::ResourceExhausted, "no worker offers it"));
  }
  std::vector<Task> seen;
};

// A GPU the remote engine offers (flowcd --remote-gpu) is the one a compile
// for its capability keys by, before any other GPU's records; one of
// another capability changes nothing.
TEST_F(GpuSearchTest, ARemoteGpuOfTheTargetsCapabilityDecides) {
  std::string h200 = runtime::gpuTuningDevice("NVIDIA H200", 90);
  std::string h100 = runtime::gpuTuningDevice("NVIDIA H100", 90);
  std::string a100 = runtime::gpuTuningDevice("NVIDIA A100", 80);
  record(kConvSignature, h200, kConvCandidate, 5000, 1000);
  auto device = gpuTuningDeviceFor(*cache_, Target::CudaSm90, {a100, h100});
  ASSERT_TRUE(device) << device.status().toString();
  EXPECT_EQ(*device, h100);
  device = gpuTuningDeviceFor(*cache_, Target::CudaSm90, {a100});
  ASSERT_TRUE(device) << device.status().toString();
  EXPECT_EQ(*device, h200);
  device = gpuTuningDeviceFor(*cache_, Target::CudaSm80, {h100});
  ASSERT_TRUE(device) << device.status().toString();
  EXPECT_FALSE(*device);
}

// With a remote GPU and a budget, each kernel without a record becomes a
// measure task asking for that GPU, which waits no longer than the budget.
// A task that fails leaves its sites to trial runs, with a warning.
TEST_F(GpuSearchTest, KernelsWithoutRecordsAreMeasuredOnTheRemoteGpu) {
  std::string h200 = runtime::gpuTuningDevice("NVIDIA H200", 90);
  NoGpuWorkerRunner runner;
  std::vector<std::string> warnings;
  SearchBudget budget{SearchBudget::Mode::Seconds, 7.5};
  auto choices = searchKernels(
      *cache_, nullptr, runner, plan_, options_, budget, {{h200}, true}, kBuild,
      [&](const std::string &warning) { warnings.push_back(warning); });
  ASSERT_TRUE(choices) << choices.status().toString();
  EXPECT_EQ(choices->summary.gpuDevice, h200);
  EXPECT_EQ(choices->summary.tunableKernels, 2u);
  EXPECT_EQ(choices->summary.measuredKernels, 0u);
  EXPECT_THAT(choices->tuned, IsEmpty());
  ASSERT_EQ(runner.seen.size(), 2u);
  for (const Task &task : runner.seen) {
    EXPECT_EQ(task.kind, "measure");
    EXPECT_EQ(task.platform, (std::vector<std::pair<std::string, std::string>>{
                                 {kGpuPlatformProperty, "NVIDIA H200 sm_90"}}));
    EXPECT_EQ(task.deadlineSeconds, 7.5);
  }
  ASSERT_EQ(warnings.size(), 2u);
  EXPECT_THAT(warnings[0], HasSubstr("measuring library.conv2d:1,2,3 failed, so it runs "
                                     "its default: no worker offers it"));

  // `exhaustive` waits ten minutes at most; without an engine offering the
  // GPU, or without a budget, nothing is measured.
  runner.seen.clear();
  budget = {SearchBudget::Mode::Exhaustive, 0};
  ASSERT_TRUE(searchKernels(*cache_, nullptr, runner, plan_, options_, budget,
                            {{h200}, true}, kBuild, [](const std::string &) {}));
  ASSERT_EQ(runner.seen.size(), 2u);
  EXPECT_EQ(runner.seen[0].deadlineSeconds, 600);
  // A farm GPU with no engine to measure on (a remote cache alone) keys
  // the compile but gets no task.
  runner.seen.clear();
  auto keyed = searchKernels(*cache_, nullptr, runner, plan_, options_, budget,
                             {{h200}, false}, kBuild, [](const std::string &) {});
  ASSERT_TRUE(keyed) << keyed.status().toString();
  EXPECT_EQ(keyed->summary.gpuDevice, h200);
  EXPECT_THAT(runner.seen, IsEmpty());
  record(kConvSignature, h200, kConvCandidate, 5000, 1000);
  ASSERT_TRUE(searchKernels(*cache_, nullptr, runner, plan_, options_, budget, {}, kBuild,
                            [](const std::string &) {}));
  EXPECT_THAT(runner.seen, IsEmpty());
  budget = {};
  ASSERT_TRUE(searchKernels(*cache_, nullptr, runner, plan_, options_, budget,
                            {{h200}, true}, kBuild, [](const std::string &) {}));
  EXPECT_THAT(runner.seen, IsEmpty());
}

} // namespace
} // namespace flowc::worker
