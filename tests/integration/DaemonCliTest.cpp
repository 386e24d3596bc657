// Integration: a real flowcd on a temp socket and cache dir, driven by the
// real flowc binary, as a user would.
#include "../common/OnnxTestBuilder.h"
#include "../common/TestUtil.h"

#include "flowc/runtime/Tensor.h"
#include "flowc/support/MappedFile.h"

#include <nlohmann/json.hpp>
#include <csignal>
#include <set>
#include <sys/wait.h>
#include <thread>

namespace flowc {
namespace {

using namespace flowc::testing;
namespace fs = std::filesystem;

struct CommandResult {
  int exitCode = -1;
  std::string out;
  std::string err;
};

class DaemonCliTest : public ::testing::Test {
protected:
  void SetUp() override {
    cacheDir_ = dir_.file("cache");
    socket_ = dir_.file("flowcd.sock");
    // Start the daemon explicitly in the foreground-capable binary.
    daemon_ = run("daemon start");
    ASSERT_EQ(daemon_.exitCode, 0) << daemon_.err;
  }
  void TearDown() override { run("daemon stop"); }

  CommandResult run(const std::string &args) {
    std::string out = dir_.file("stdout"), err = dir_.file("stderr");
    std::string command = std::string(FLOWC_BIN_DIR) + "/flowc --cache-dir '" +
                          cacheDir_ + "' --socket '" + socket_ + "' " + args + " >'" +
                          out + "' 2>'" + err + "'";
    int status = std::system(command.c_str());
    CommandResult result;
    result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    result.out = readFileToString(out).hasValue() ? *readFileToString(out) : "";
    result.err = readFileToString(err).hasValue() ? *readFileToString(err) : "";
    return result;
  }

  nlohmann::json submitJson(const std::string &model, const std::string &artifact) {
    CommandResult result = run("submit '" + model + "' -o '" + artifact + "' --json");
    EXPECT_EQ(result.exitCode, 0) << result.err;
    return nlohmann::json::parse(result.out, nullptr, false);
  }

  /// Every file of the cache with its size, and the index's row counts.
  std::set<std::string> cacheSnapshot() {
    std::set<std::string> files;
    for (const auto &entry : fs::recursive_directory_iterator(cacheDir_ + "/cas"))
      if (entry.is_regular_file())
        files.insert(entry.path().string() + ":" + std::to_string(entry.file_size()));
    auto status = nlohmann::json::parse(run("status --json").out, nullptr, false);
    files.insert("blobs=" + status["blobs"].dump() +
                 " actions=" + status["actions"].dump());
    return files;
  }

  TempDir dir_;
  std::string cacheDir_, socket_;
  CommandResult daemon_;
};

TEST_F(DaemonCliTest, SecondSubmitOfAnUnchangedModelHits) {
  std::string model = dir_.file("dense.onnx");
  writeFile(model, denseReluModel());
  nlohmann::json first = submitJson(model, dir_.file("a.fca"));
  EXPECT_EQ(first["cache"], "miss");
  for (const char *key : {"artifact", "artifact_digest", "model_digest", "seconds"})
    EXPECT_TRUE(first.contains(key)) << key;
  nlohmann::json second = submitJson(model, dir_.file("b.fca"));
  EXPECT_EQ(second["cache"], "hit");
  EXPECT_EQ(second["artifact_digest"], first["artifact_digest"]);
  EXPECT_EQ(*readFileToString(dir_.file("a.fca")), *readFileToString(dir_.file("b.fca")));
}

TEST_F(DaemonCliTest, RunWritesOutputsMatchingTheReference) {
  std::string model = dir_.file("dense.onnx");
  writeFile(model, denseReluModel());
  submitJson(model, dir_.file("dense.fca"));
  runtime::Tensor x =
      runtime::Tensor::fromFloats({2, 4}, {0.5f, -1, 2, 3, 1, 1, -2, 0.25f});
  ASSERT_TRUE(runtime::writeNpy(dir_.file("x.npy"), x));
  CommandResult result =
      run("run '" + dir_.file("dense.fca") + "' --input x=" + dir_.file("x.npy") +
          " --output-dir " + dir_.file("out"));
  ASSERT_EQ(result.exitCode, 0) << result.err;
  EXPECT_THAT(result.out, ::testing::HasSubstr("y [2,3]"));
  auto y = runtime::readNpy(dir_.file("out/y.npy"));
  ASSERT_TRUE(y);
  std::vector<float> expected = denseReluReference(x.floats());
  std::vector<float> ys = y->floats();
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(ys[i], expected[i], 1e-5);
}

TEST_F(DaemonCliTest, NewWeightsReuseTheCompiledCode) {
  writeFile(dir_.file("v1.onnx"), denseReluModel(1.0f));
  writeFile(dir_.file("v2.onnx"), denseReluModel(3.0f));
  nlohmann::json v1 = submitJson(dir_.file("v1.onnx"), dir_.file("v1.fca"));
  nlohmann::json v2 = submitJson(dir_.file("v2.onnx"), dir_.file("v2.fca"));
  EXPECT_EQ(v2["cache"], "miss");
  EXPECT_EQ(v2["code_cache"], "hit");
  EXPECT_NE(v2["artifact_digest"], v1["artifact_digest"]);
}

TEST_F(DaemonCliTest, BadModelsFailCleanlyAndLeaveTheCacheUntouched) {
  std::string good = denseReluModel();
  GraphSpec unsupported;
  unsupported.nodes = {node("Det", {"x"}, {"y"}, "det")};
  unsupported.inputs = {valueInfo("x", {2, 4})};
  unsupported.outputs = {valueInfo("y", {2, 4})};
  writeFile(dir_.file("truncated.onnx"), good.substr(0, good.size() / 2));
  writeFile(dir_.file("garbage.onnx"), "\xff\xff\xff\xff garbage");
  writeFile(dir_.file("det.onnx"), model(unsupported));
  // Something valid first, so that the cache is not trivially empty.
  writeFile(dir_.file("good.onnx"), good);
  submitJson(dir_.file("good.onnx"), dir_.file("good.fca"));
  std::set<std::string> before = cacheSnapshot();

  struct Case {
    std::string file, expected;
  };
  for (const Case &c :
       std::vector<Case>{{"truncated.onnx", "truncated"},
                         {"garbage.onnx", "garbage.onnx"},
                         {"missing.onnx", "missing.onnx"},
                         {"det.onnx", "node 'det' (Det): unsupported op 'Det'"}}) {
    CommandResult result =
        run("submit '" + dir_.file(c.file) + "' -o " + dir_.file("x.fca"));
    EXPECT_NE(result.exitCode, 0) << c.file;
    EXPECT_THAT(result.err, ::testing::StartsWith("flowc: error: ")) << c.file;
    EXPECT_THAT(result.err, ::testing::HasSubstr(c.expected)) << c.file;
    EXPECT_EQ(std::count(result.err.begin(), result.err.end(), '\n'), 1) << result.err;
    EXPECT_FALSE(fs::exists(dir_.file("x.fca"))) << c.file;
  }
  EXPECT_EQ(cacheSnapshot(), before);
}

TEST_F(DaemonCliTest, RunRejectsAnInputOfTheWrongShape) {
  writeFile(dir_.file("dense.onnx"), denseReluModel());
  submitJson(dir_.file("dense.onnx"), dir_.file("dense.fca"));
  ASSERT_TRUE(
      runtime::writeNpy(dir_.file("x.npy"), runtime::Tensor::zeros("float32", {3, 4})));
  CommandResult result =
      run("run " + dir_.file("dense.fca") + " --input x=" + dir_.file("x.npy"));
  EXPECT_NE(result.exitCode, 0);
  EXPECT_THAT(result.err,
              ::testing::HasSubstr("input 'x' has shape [3,4], the model expects [2,4]"));
}

TEST_F(DaemonCliTest, StatusReportsTheRunningDaemonAndStopEndsIt) {
  auto status = nlohmann::json::parse(run("status --json").out, nullptr, false);
  EXPECT_EQ(status["running"], true);
  EXPECT_EQ(status["cache_dir"], cacheDir_);
  CommandResult stop = run("daemon stop");
  EXPECT_EQ(stop.exitCode, 0) << stop.err;
  EXPECT_FALSE(fs::exists(socket_));
  status = nlohmann::json::parse(run("status --json").out, nullptr, false);
  EXPECT_EQ(status["running"], false);
}

TEST_F(DaemonCliTest, InspectDescribesModelAndArtifact) {
  writeFile(dir_.file("dense.onnx"), denseReluModel());
  nlohmann::json submitted = submitJson(dir_.file("dense.onnx"), dir_.file("dense.fca"));
  auto model =
      nlohmann::json::parse(run("inspect --json " + dir_.file("dense.onnx")).out);
  EXPECT_EQ(model["parameters"], 15);
  EXPECT_EQ(model["op_counts"]["MatMul"], 1);
  EXPECT_EQ(model["model_digest"], submitted["model_digest"]);
  auto artifact =
      nlohmann::json::parse(run("inspect --json " + dir_.file("dense.fca")).out);
  EXPECT_EQ(artifact["kind"], "artifact");
  EXPECT_EQ(artifact["model_digest"], submitted["model_digest"]);
  EXPECT_EQ(artifact["inputs"][0]["shape"], nlohmann::json({2, 4}));
}

/// Starts flowcd in the foreground as a child; returns its pid.
pid_t startForegroundDaemon(const std::string &cacheDir, const std::string &socket,
                            const std::string &log) {
  pid_t pid = fork();
  if (pid == 0) {
    freopen(log.c_str(), "w", stderr);
    std::string binary = std::string(FLOWC_BIN_DIR) + "/flowcd";
    execl(binary.c_str(), binary.c_str(), "--cache-dir", cacheDir.c_str(), "--socket",
          socket.c_str(), static_cast<char *>(nullptr));
    _exit(127);
  }
  return pid;
}

bool waitForFile(const std::string &path) {
  for (int i = 0; i < 600 && !fs::exists(path); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return fs::exists(path);
}

TEST(DaemonProcessTest, SigtermStopsTheDaemonCleanly) {
  TempDir dir;
  for (int signal : {SIGTERM, SIGINT}) {
    pid_t pid =
        startForegroundDaemon(dir.file("cache"), dir.file("d.sock"), dir.file("log"));
    ASSERT_TRUE(waitForFile(dir.file("d.sock")));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    kill(pid, signal);
    int status = 0;
    waitpid(pid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "signal " << signal;
    EXPECT_FALSE(fs::exists(dir.file("d.sock")));
    EXPECT_THAT(*readFileToString(dir.file("log")),
                ::testing::HasSubstr("flowcd stopped"));
  }
}

TEST(DaemonProcessTest, SecondDaemonOnTheSameSocketRefusesToStart) {
  TempDir dir;
  pid_t first =
      startForegroundDaemon(dir.file("cache"), dir.file("d.sock"), dir.file("log1"));
  ASSERT_TRUE(waitForFile(dir.file("d.sock")));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  pid_t second =
      startForegroundDaemon(dir.file("cache"), dir.file("d.sock"), dir.file("log2"));
  int status = 0;
  waitpid(second, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) != 0);
  EXPECT_THAT(*readFileToString(dir.file("log2")),
              ::testing::HasSubstr("another flowcd is already listening"));
  // The first one still serves.
  EXPECT_TRUE(fs::exists(dir.file("d.sock")));
  kill(first, SIGTERM);
  waitpid(first, &status, 0);
}

TEST(DaemonProcessTest, StaleSocketFileIsReplaced) {
  TempDir dir;
  fs::create_directories(dir.file("cache"));
  // A regular file where the socket should be, as a crashed daemon leaves.
  writeFile(dir.file("d.sock"), "");
  pid_t pid =
      startForegroundDaemon(dir.file("cache"), dir.file("d.sock"), dir.file("log"));
  for (int i = 0; i < 600 && !fs::is_socket(dir.file("d.sock")); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(fs::is_socket(dir.file("d.sock")));
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

} // namespace
} // namespace flowc
