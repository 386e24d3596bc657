// A compile as a DAG of tasks: plan, one codegen per kernel the kernel
// cache misses, link; the task directory format and its refusals.
#include "flowc/worker/CompileExecutor.h"
#include "flowc/worker/Tasks.h"

#include "../common/OnnxTestBuilder.h"
#include "../common/TestUtil.h"

#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mutex>

namespace flowc::worker {
namespace {

using namespace flowc::testing;
using ::testing::HasSubstr;

constexpr const char *kBuild = "flowc-test-build";

/// Runs tasks in process and records them.
class RecordingRunner final : public TaskRunner {
public:
  RecordingRunner(cache::Cache &cache, unsigned threads)
      : inner_(cache, kBuild, threads) {}
  using TaskRunner::run;
  std::vector<Expected<TaskOutcome>> run(const std::vector<Task> &tasks,
                                         const TaskListener &listener) override {
    {
      std::lock_guard lock(mutex_);
      for (const Task &task : tasks)
        kinds.push_back(task.kind);
    }
    if (failCodegen && !tasks.empty() && tasks[0].kind == "codegen")
      return std::vector<Expected<TaskOutcome>>(
          tasks.size(), internalError("codegen " + tasks[0].name + ": refused"));
    return inner_.run(tasks, listener);
  }
  size_t count(const std::string &kind) const {
    return static_cast<size_t>(std::count(kinds.begin(), kinds.end(), kind));
  }
  std::vector<std::string> kinds;
  bool failCodegen = false;

private:
  InProcessTaskRunner inner_;
  std::mutex mutex_;
};

struct Compiled {
  Expected<CompileResult> result;
  std::vector<std::string> kinds;
};

Compiled compileIn(const std::string &cacheDir, const std::string &modelPath,
                   unsigned threads, bool failCodegen = false) {
  auto cache = cache::Cache::open(cacheDir, {});
  if (!cache)
    return {cache.status(), {}};
  RecordingRunner runner(**cache, threads);
  runner.failCodegen = failCodegen;
  CompileExecutor executor(**cache, kBuild, CompileExecutor::Eviction::Never, &runner);
  CompileRequest request;
  request.modelPath = modelPath;
  auto result = executor.compile(request, [](const ProgressEvent &) {});
  return {std::move(result), runner.kinds};
}

TEST(TasksTest, AJobIsAPlanThenACodegenPerKernelTheKernelCacheMisses) {
  TempDir dir;
  writeFile(dir.file("sigmoid.onnx"), centeringModel("Sigmoid", 256));
  writeFile(dir.file("tanh.onnx"), centeringModel("Tanh", 256));
  Compiled first = compileIn(dir.file("cache"), dir.file("sigmoid.onnx"), 2);
  ASSERT_TRUE(first.result) << first.result.status().toString();
  ASSERT_EQ(first.kinds.front(), "plan");
  size_t codegens = std::count(first.kinds.begin(), first.kinds.end(), "codegen");
  EXPECT_EQ(first.kinds.size(), 1 + codegens);
  EXPECT_EQ(first.result->kernelsCompiled, codegens);
  EXPECT_GE(codegens, 2u);
  EXPECT_EQ(first.result->kernelsReused, 0u);

  // Only the last op differs: its kernel is the one new task.
  Compiled second = compileIn(dir.file("cache"), dir.file("tanh.onnx"), 2);
  ASSERT_TRUE(second.result) << second.result.status().toString();
  EXPECT_EQ(std::count(second.kinds.begin(), second.kinds.end(), "codegen"), 1);
  EXPECT_EQ(second.result->kernelsCompiled, 1u);
  EXPECT_GE(second.result->kernelsReused, 1u);
}

TEST(TasksTest, TheArtifactDoesNotDependOnHowManyTasksRunAtOnce) {
  TempDir dir;
  writeFile(dir.file("m.onnx"), centeringModel("Sigmoid", 256));
  Compiled serial = compileIn(dir.file("one"), dir.file("m.onnx"), 1);
  Compiled parallel = compileIn(dir.file("four"), dir.file("m.onnx"), 4);
  ASSERT_TRUE(serial.result) << serial.result.status().toString();
  ASSERT_TRUE(parallel.result) << parallel.result.status().toString();
  EXPECT_EQ(serial.result->artifactDigest, parallel.result->artifactDigest);
}

TEST(TasksTest, AFailedTaskFailsTheCompileWithItsError) {
  TempDir dir;
  writeFile(dir.file("m.onnx"), centeringModel("Sigmoid", 256));
  Compiled failed = compileIn(dir.file("cache"), dir.file("m.onnx"), 1, true);
  EXPECT_THAT(failed.result, StatusIs(StatusCode::Internal, ": refused"));
  // Nothing is answered from the cache afterwards: the next compile works.
  Compiled again = compileIn(dir.file("cache"), dir.file("m.onnx"), 1);
  ASSERT_TRUE(again.result) << again.result.status().toString();
  EXPECT_FALSE(again.result->cacheHit);
}

TEST(TasksTest, ATaskDirectoryNamesWhatIsWrong) {
  TempDir dir;
  std::string in = dir.file("in"), out = dir.file("out");
  std::filesystem::create_directory(in);
  EXPECT_THAT(runTaskDirectory(in, out, kBuild),
              StatusIs(StatusCode::NotFound, "task.json"));
  writeFile(in + "/task.json", "not json");
  EXPECT_THAT(runTaskDirectory(in, out, kBuild),
              StatusIs(StatusCode::InvalidArgument, "not a flowc task"));
  writeFile(in + "/task.json", R"({"format": "flowc.task.v1", "build": "flowc-0.1"})");
  EXPECT_THAT(
      runTaskDirectory(in, out, kBuild),
      StatusIs(StatusCode::FailedPrecondition,
               "for the build 'flowc-0.1', and this worker is 'flowc-test-build'"));
  writeFile(
      in + "/task.json",
      R"({"format": "flowc.task.v1", "build": "flowc-test-build", "kind": "plan"})");
  EXPECT_THAT(runTaskDirectory(in, out, kBuild),
              StatusIs(StatusCode::InvalidArgument, "options"));
}

TEST(TasksTest, ACodegenTaskRefusesKernelIrThatDoesNotParse) {
  TempDir dir;
  auto cache = cache::Cache::open(dir.file("cache"), {});
  ASSERT_TRUE(cache);
  compiler::PlannedKernel kernel{"flowc_loops_bad", "key", "this is not MLIR", 1};
  auto task = makeCodegenTask(**cache, kernel, {}, compiler::CodeTarget::host(), kBuild);
  ASSERT_TRUE(task);
  InProcessTaskRunner runner(**cache, kBuild, 1);
  auto outcome = std::move(runner.run({*task}).front());
  EXPECT_THAT(outcome, StatusIs(StatusCode::InvalidArgument,
                                "kernel flowc_loops_bad: its IR does not parse"));
}

TEST(TasksTest, APlanOutputThatIsNoneIsDataLoss) {
  EXPECT_THAT(parsePlanOutput("[]", ""),
              StatusIs(StatusCode::DataLoss, "not a plan (flowc.plan.v1)"));
  EXPECT_THAT(parsePlanOutput(R"({"format": "flowc.plan.v1"})", ""),
              StatusIs(StatusCode::DataLoss, "no readable weight list"));
  std::string weights = codeWeightsText({});
  EXPECT_THAT(parsePlanOutput(R"({"format": "flowc.plan.v1", "weights": )" + weights +
                                  R"(, "kernels": [{"symbol": 3}]})",
                              ""),
              StatusIs(StatusCode::DataLoss, "a plan task's output is damaged"));
}

TEST(TasksTest, ATaskErrorKeepsTheCodeTheWorkerWrote) {
  EXPECT_THAT(taskErrorFrom("log line\nflowc-worker: error: InvalidArgument: kernel k: "
                            "bad IR\n"),
              StatusIs(StatusCode::InvalidArgument, "kernel k: bad IR"));
  EXPECT_THAT(taskErrorFrom("flowc-worker: error: no code here"),
              StatusIs(StatusCode::Internal, "no code here"));
  EXPECT_THAT(taskErrorFrom(""), StatusIs(StatusCode::Internal, "it wrote no error"));
}

} // namespace
} // namespace flowc::worker
