// A compile's structured progress (phases, passes, each kernel with its
// index and the time left, lookups and bytes hashed so far), the plan
// task's pass frames from a `flowc-worker serve` process, and the error
// fields parsed from the messages real bad input provokes.
#include "flowc/support/ErrorFields.h"
#include "flowc/worker/CompileExecutor.h"
#include "flowc/worker/Tasks.h"
#include "flowc/worker/WorkerProtocol.h"

#include "../common/OnnxTestBuilder.h"
#include "../common/TestUtil.h"

#include <algorithm>
#include <csignal>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <mutex>
#include <sys/wait.h>
#include <unistd.h>

namespace flowc::worker {
namespace {

using namespace flowc::testing;
using ::testing::Contains;
using ::testing::HasSubstr;

constexpr const char *kBuild = "flowc-test-build";

struct Recorded {
  Expected<CompileResult> result;
  std::vector<ProgressEvent> events;

  std::vector<ProgressEvent> of(const std::string &stage) const {
    std::vector<ProgressEvent> found;
    for (const ProgressEvent &event : events)
      if (event.stage == stage)
        found.push_back(event);
    return found;
  }
};

Recorded compileRecording(const std::string &cacheDir, const std::string &model,
                          unsigned threads) {
  auto cache = cache::Cache::open(cacheDir, {});
  if (!cache)
    return {cache.status(), {}};
  InProcessTaskRunner runner(**cache, kBuild, threads);
  CompileExecutor executor(**cache, kBuild, CompileExecutor::Eviction::Never, &runner);
  CompileRequest request;
  request.modelPath = model;
  Recorded recorded{CompileResult{}, {}};
  recorded.result = executor.compile(
      request, [&](const ProgressEvent &event) { recorded.events.push_back(event); });
  return recorded;
}

TEST(ProgressTest, EachCompiledKernelIsAnEventWithItsIndexAndTheTimeLeft) {
  TempDir dir;
  writeFile(dir.file("m.onnx"), centeringModel("Sigmoid", 256));
  // Two threads: kernel events come from both, one at a time.
  Recorded cold = compileRecording(dir.file("cache"), dir.file("m.onnx"), 2);
  ASSERT_TRUE(cold.result) << cold.result.status().toString();
  unsigned compiled = cold.result->kernelsCompiled;
  ASSERT_GE(compiled, 2u);

  std::vector<ProgressEvent> kernels = cold.of("kernel");
  ASSERT_EQ(kernels.size(), compiled);
  for (unsigned i = 0; i < compiled; ++i) {
    EXPECT_EQ(kernels[i].kernelIndex, i + 1);
    EXPECT_EQ(kernels[i].kernelCount, compiled);
    EXPECT_THAT(kernels[i].kernel, HasSubstr("flowc_loops"));
    EXPECT_EQ(kernels[i].executor, "in-process");
    EXPECT_FALSE(kernels[i].kernelCached);
    EXPECT_GE(kernels[i].seconds, 0.0);
    // Known from the first kernel on; nothing left after the last.
    EXPECT_GE(kernels[i].etaSeconds, 0.0);
  }
  EXPECT_EQ(kernels.back().etaSeconds, 0.0);
  // The count comes before the first kernel; no estimate before it.
  std::vector<ProgressEvent> codegen = cold.of("codegen");
  ASSERT_EQ(codegen.size(), 1u);
  EXPECT_EQ(codegen[0].kernelCount, compiled);
  EXPECT_EQ(codegen[0].etaSeconds, -1.0);
  EXPECT_EQ(codegen[0].cache.at("kernel").misses, compiled);
  EXPECT_EQ(codegen[0].cache.at("kernel").hits, 0u);
  EXPECT_EQ(codegen[0].cache.at("artifact").misses, 1u);
  EXPECT_EQ(codegen[0].cache.at("code").misses, 1u);

  // The bytes hashed are known after ingest, and only grow.
  std::vector<ProgressEvent> store = cold.of("store");
  ASSERT_EQ(store.size(), 1u);
  EXPECT_GT(store[0].bytesHashed, 0u);
  EXPECT_EQ(cold.of("ingest").at(0).bytesHashed, 0u);
  uint64_t last = 0;
  for (const ProgressEvent &event : cold.events) {
    EXPECT_GE(event.bytesHashed, last) << event.stage;
    last = event.bytesHashed;
  }

  // The plan ran in this process: its passes are events, before codegen.
  std::vector<ProgressEvent> passes = cold.of("pass");
  ASSERT_FALSE(passes.empty());
  std::vector<std::string> names;
  for (const ProgressEvent &pass : passes) {
    names.push_back(pass.pass);
    EXPECT_GE(pass.seconds, 0.0);
    EXPECT_THAT(pass.detail, HasSubstr(pass.pass));
  }
  EXPECT_THAT(names, Contains("canonicalize"));
  EXPECT_THAT(names, Contains("one-shot-bufferize"));
  EXPECT_THAT(names, Contains("llvm-codegen"));
  auto firstKernel =
      std::find_if(cold.events.begin(), cold.events.end(),
                   [](const ProgressEvent &e) { return e.stage == "kernel"; });
  auto lastPass = std::find_if(cold.events.rbegin(), cold.events.rend(),
                               [](const ProgressEvent &e) { return e.stage == "pass"; });
  EXPECT_LT(lastPass.base() - cold.events.begin(), firstKernel - cold.events.begin());
}

TEST(ProgressTest, KernelsTheCacheAnswersAreCountedNotListed) {
  TempDir dir;
  writeFile(dir.file("sigmoid.onnx"), centeringModel("Sigmoid", 256));
  writeFile(dir.file("tanh.onnx"), centeringModel("Tanh", 256));
  ASSERT_TRUE(compileRecording(dir.file("cache"), dir.file("sigmoid.onnx"), 1).result);
  // Only the last op differs: one kernel event, the others one count.
  Recorded warm = compileRecording(dir.file("cache"), dir.file("tanh.onnx"), 1);
  ASSERT_TRUE(warm.result) << warm.result.status().toString();
  ASSERT_EQ(warm.result->kernelsCompiled, 1u);
  std::vector<ProgressEvent> kernels = warm.of("kernel");
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0].kernelIndex, 1u);
  EXPECT_EQ(kernels[0].kernelCount, 1u);
  std::vector<ProgressEvent> codegen = warm.of("codegen");
  ASSERT_EQ(codegen.size(), 1u);
  EXPECT_EQ(codegen[0].cache.at("kernel").hits, warm.result->kernelsReused);
  EXPECT_EQ(codegen[0].cache.at("kernel").misses, 1u);
  EXPECT_THAT(codegen[0].detail, HasSubstr("1 kernels to compile"));

  // The same model again: one artifact hit, and no kernel at all.
  Recorded hit = compileRecording(dir.file("cache"), dir.file("tanh.onnx"), 1);
  ASSERT_TRUE(hit.result);
  EXPECT_TRUE(hit.result->cacheHit);
  EXPECT_TRUE(hit.of("kernel").empty());
  ASSERT_EQ(hit.of("cache").size(), 1u);
  EXPECT_EQ(hit.of("cache")[0].cache.at("artifact").hits, 1u);
}

TEST(ProgressTest, ARunnerTellsItsListenerAsEachTaskEnds) {
  TempDir dir;
  auto cache = cache::Cache::open(dir.file("cache"), {});
  ASSERT_TRUE(cache);
  std::vector<Task> tasks;
  for (int i = 0; i < 5; ++i) {
    auto task = makeNoopTask(**cache, "noop" + std::to_string(i), kBuild);
    ASSERT_TRUE(task);
    tasks.push_back(*task);
  }
  InProcessTaskRunner runner(**cache, kBuild, 3);
  std::mutex mutex;
  std::vector<size_t> done;
  TaskListener listener;
  listener.done = [&](size_t index, const Expected<TaskOutcome> &outcome,
                      double seconds) {
    std::lock_guard lock(mutex);
    EXPECT_TRUE(outcome) << outcome.status().toString();
    EXPECT_GE(seconds, 0.0);
    done.push_back(index);
  };
  auto results = runner.run(tasks, listener);
  ASSERT_EQ(results.size(), 5u);
  std::sort(done.begin(), done.end());
  EXPECT_EQ(done, (std::vector<size_t>{0, 1, 2, 3, 4}));
}

/// A `flowc-worker serve` process with its stdin and fd 3 on pipes.
class ServeProcess {
public:
  ServeProcess() {
    int in[2], reply[2];
    EXPECT_EQ(::pipe2(in, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(reply, O_CLOEXEC), 0);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], STDIN_FILENO);
      ::dup2(reply[1], kWorkerReplyFd);
      std::string worker = std::string(FLOWC_BIN_DIR) + "/flowc-worker";
      ::execl(worker.c_str(), worker.c_str(), "serve", static_cast<char *>(nullptr));
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(reply[1]);
    stdin_ = in[1];
    replies_ = reply[0];
  }
  ~ServeProcess() {
    if (stdin_ >= 0)
      ::close(stdin_);
    ::close(replies_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  int stdinFd() const { return stdin_; }
  int replies() const { return replies_; }

private:
  pid_t pid_ = -1;
  int stdin_ = -1, replies_ = -1;
};

TEST(ProgressTest, AServeProcessWritesThePlanTasksPassesBeforeItsTaskDone) {
  TempDir dir;
  writeFile(dir.file("m.onnx"), centeringModel("Sigmoid", 256));
  auto cache = cache::Cache::open(dir.file("cache"), {});
  ASSERT_TRUE(cache);
  auto ingested = ingestModel(dir.file("m.onnx"));
  ASSERT_TRUE(ingested) << ingested.status().toString();
  auto ir = (*cache)->put(ingested->graph.irBytecode);
  ASSERT_TRUE(ir);
  // The task is for the binary's own build: it refuses any other.
  auto version = std::string(FLOWC_BUILD_ID);
  auto plan = makePlanTask(**cache, *ir, {}, compiler::CodeTarget::host(), version);
  ASSERT_TRUE(plan);
  auto taskDir = prepareTask(**cache, *plan);
  ASSERT_TRUE(taskDir);

  ServeProcess serve;
  flowc::v1::WorkerTask task;
  task.mutable_task_directory()->set_input(taskDir->in);
  task.mutable_task_directory()->set_output(taskDir->out);
  ASSERT_TRUE(writeFrame(serve.stdinFd(), task).isOk());

  // Frames until the task's end: passes first, then task_done.
  std::vector<flowc::v1::Progress> passes;
  bool finished = false;
  while (!finished) {
    flowc::v1::WorkerReply reply;
    auto read = readFrame(serve.replies(), reply);
    ASSERT_TRUE(read) << read.status().toString();
    ASSERT_TRUE(*read) << "the serve process ended before its task_done";
    ASSERT_FALSE(reply.has_error()) << reply.error().message();
    if (reply.has_task_done()) {
      finished = true;
      continue;
    }
    ASSERT_TRUE(reply.has_progress());
    passes.push_back(reply.progress());
  }
  ASSERT_FALSE(passes.empty());
  std::vector<std::string> names;
  for (const flowc::v1::Progress &pass : passes) {
    EXPECT_EQ(pass.stage(), "pass");
    EXPECT_FALSE(pass.pass().empty());
    EXPECT_GE(pass.seconds(), 0.0);
    names.push_back(pass.pass());
  }
  EXPECT_THAT(names, Contains("canonicalize"));
  EXPECT_THAT(names, Contains("flowc-partition-kernels"));
  // And the task did its work: the plan is there.
  EXPECT_TRUE(std::filesystem::exists(taskDir->out + "/plan.json"));
}

// Error fields -------------------------------------------------------------

/// The error that ingesting `bytes` as DIR/NAME provokes.
Status ingestError(const TempDir &dir, const std::string &name,
                   const std::string &bytes) {
  writeFile(dir.file(name), bytes);
  auto ingested = ingestModel(dir.file(name));
  return ingested ? internalError("ingest succeeded") : ingested.status();
}

TEST(ErrorFieldsTest, AnImportErrorNamesTheFileTheNodeAndTheOp) {
  TempDir dir;
  GraphSpec spec;
  spec.initializers = {floatTensor("w", {4, 3, 3, 3}, std::vector<float>(108, 1.0f))};
  spec.nodes = {
      node("Conv", {"x", "w"}, {"y"}, "conv0", {intsAttribute("strides", {0, 0})})};
  spec.inputs = {valueInfo("x", {1, 3, 8, 8})};
  spec.outputs = {valueInfo("y", {})};
  Status status = ingestError(dir, "zero_strides.onnx", model(spec));
  ASSERT_THAT(status, StatusIs(StatusCode::InvalidArgument, "strides[0] = 0"));
  ErrorFields fields = parseErrorFields(status.message());
  EXPECT_EQ(fields.file, dir.file("zero_strides.onnx"));
  EXPECT_EQ(fields.node, "conv0");
  EXPECT_EQ(fields.op, "Conv");
  EXPECT_EQ(fields.digest, "");
}

TEST(ErrorFieldsTest, AnOpOfAnotherDomainKeepsItsDomain) {
  TempDir dir;
  GraphSpec spec;
  std::string gelu = node("Gelu", {"x"}, {"y"}, "act");
  // NodeProto.domain is field 7.
  gelu += std::string("\x3a\x0d", 2) + "com.microsoft";
  spec.nodes = {gelu};
  spec.inputs = {valueInfo("x", {2, 3})};
  spec.outputs = {valueInfo("y", {2, 3})};
  Status status = ingestError(dir, "gelu.onnx", model(spec));
  ASSERT_THAT(status, StatusIs(StatusCode::Unimplemented, "domain"));
  ErrorFields fields = parseErrorFields(status.message());
  EXPECT_EQ(fields.node, "act");
  EXPECT_EQ(fields.op, "com.microsoft.Gelu");
}

TEST(ErrorFieldsTest, ANodeNameWithQuotesAndParenthesesIsKeptWhole) {
  TempDir dir;
  GraphSpec spec;
  std::string name = "it's (a) 'node' (";
  spec.nodes = {node("LpNormalization", {"x"}, {"y"}, name)};
  spec.inputs = {valueInfo("x", {2, 3})};
  spec.outputs = {valueInfo("y", {2, 3})};
  Status status = ingestError(dir, "odd name.onnx", model(spec));
  ASSERT_THAT(status, StatusIs(StatusCode::Unimplemented, "LpNormalization"));
  ErrorFields fields = parseErrorFields(status.message());
  EXPECT_EQ(fields.node, name);
  EXPECT_EQ(fields.op, "LpNormalization");
  // An absolute path may hold spaces.
  EXPECT_EQ(fields.file, dir.file("odd name.onnx"));
}

TEST(ErrorFieldsTest, AFileThatIsNotAModelNamesOnlyTheFile) {
  TempDir dir;
  Status status = ingestError(dir, "garbage.onnx", "\xff\xff\xff\xff not protobuf");
  ASSERT_FALSE(status.isOk());
  ErrorFields fields = parseErrorFields(status.message());
  EXPECT_EQ(fields.file, dir.file("garbage.onnx")) << status.message();
  EXPECT_EQ(fields.node, "");
  EXPECT_EQ(fields.op, "");
}

TEST(ErrorFieldsTest, AMissingBlobNamesItsDigest) {
  TempDir dir;
  auto cache = cache::Cache::open(dir.file("cache"), {});
  ASSERT_TRUE(cache);
  cache::Digest absent = cache::digestOf("never stored");
  auto blob = (*cache)->get(absent);
  ASSERT_THAT(blob, StatusIs(StatusCode::NotFound, "not in the cache"));
  ErrorFields fields = parseErrorFields(blob.status().message());
  EXPECT_EQ(fields.digest, absent.toString());
  EXPECT_EQ(fields.file, "");
}

TEST(ErrorFieldsTest, HostileTextGivesNoFieldsItDoesNotHold) {
  // Truncated forms, a digest one hex digit short, control characters in
  // a would-be path, an unterminated node: none is a field.
  EXPECT_EQ(parseErrorFields("node 'x' (").node, "");
  EXPECT_EQ(parseErrorFields("node 'x").node, "");
  EXPECT_EQ(parseErrorFields("node 'x' (Conv").op, "");
  EXPECT_EQ(parseErrorFields("sha256:" + std::string(63, 'a')).digest, "");
  EXPECT_EQ(parseErrorFields("sha256:" + std::string(65, 'a')).digest, "");
  EXPECT_EQ(parseErrorFields(std::string("/tmp/a\x01.onnx: bad")).file, "");
  EXPECT_EQ(parseErrorFields("submit /tmp/m.onnx: daemon unavailable").file, "");
  EXPECT_EQ(parseErrorFields("").file, "");
  std::string huge = "node '" + std::string(1 << 20, 'n') + "' (Relu): bad";
  EXPECT_EQ(parseErrorFields(huge).node, "");
  // NUL and bytes that are not UTF-8 do not stop the parse.
  ErrorFields fields =
      parseErrorFields(std::string("m.onnx: node '\xff\x00z' (Relu): x", 28));
  EXPECT_EQ(fields.file, "m.onnx");
  EXPECT_EQ(fields.node, std::string("\xff\x00z", 3));
  EXPECT_EQ(fields.op, "Relu");
}

TEST(ErrorFieldsTest, TextThatIsNotUtf8IsMadeValid) {
  EXPECT_EQ(validUtf8("plain"), "plain");
  EXPECT_EQ(validUtf8("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(validUtf8("a\xff"
                      "b"),
            "a\xef\xbf\xbd"
            "b");
  // Overlong '/', a surrogate, a truncated sequence.
  EXPECT_EQ(validUtf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(validUtf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_EQ(validUtf8("\xe2\x82"), "\xef\xbf\xbd\xef\xbf\xbd");
  EXPECT_STREQ(statusKindName(StatusCode::InvalidArgument), "invalid_argument");
  EXPECT_STREQ(statusKindName(StatusCode::ResourceExhausted), "resource_exhausted");
}

} // namespace
} // namespace flowc::worker
