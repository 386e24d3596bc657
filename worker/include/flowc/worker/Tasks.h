// A compile is a DAG of hermetic tasks: `plan` (graph passes and the
// partition: graph IR in, @main's object and the kernels' IR out), then one
// `codegen` per kernel the kernel cache misses (kernel IR in, its object
// out); ingest and link stay with the weights, in the job's own process.
//
// A task is a directory: `task.json` (what to do, the compile options, the
// target CPU, the build that must run it) and its input files. `flowc-worker
// task --input DIR --output DIR` runs one, as a REAPI Action executes it;
// the local pool's `flowc-worker serve` processes run one after another.
// No task reads a weight, so a remote compile of any model ships kilobytes.
#pragma once

#include "flowc/cache/Cache.h"
#include "flowc/compiler/Compiler.h"
#include "flowc/runtime/Artifact.h"
#include "flowc/worker/Progress.h"

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace flowc::worker {

inline constexpr const char *kTaskFile = "task.json";

/// One input file of a task, a blob in the cache.
struct TaskInput {
  std::string path; ///< Relative to the task's input directory.
  cache::Digest digest;
};

/// A task as its runner sees it: files in, files out.
struct Task {
  std::string kind; ///< "plan", "codegen", "measure", or "noop" (benchmarks).
  std::string name; ///< What it works on (a kernel's symbol), for errors and listings.
  std::vector<TaskInput> inputs;
  std::vector<std::string> outputs; ///< Relative to the output directory.
  /// The kernel-cache key (a digest) that outputs[0] answers, if any: the
  /// daemon records it as soon as the task succeeds.
  std::string cacheKey = {};
  /// What the machine that runs it must have besides flowc-worker's OS and
  /// ISA, as REAPI platform properties: a GPU measure task's
  /// {"gpu", "NVIDIA H200 sm_90"}. Remote actions ask for them.
  std::vector<std::pair<std::string, std::string>> platform = {};
  /// The most seconds a remote engine may take over it, queueing included
  /// (0: no limit): a GPU measure task waits no longer than its search
  /// budget for a worker that offers the GPU. Past it the runner abandons
  /// it with ResourceExhausted.
  double deadlineSeconds = 0;
};

/// The most a deadline may be (Task::deadlineSeconds): a day.
inline constexpr double kMaxTaskDeadlineSeconds = 86400;

/// The platform property naming the GPU a task needs (Task::platform).
inline constexpr const char *kGpuPlatformProperty = "gpu";

/// What a finished task left in the cache, in Task::outputs order.
struct TaskOutcome {
  std::vector<cache::Digest> outputs;
  /// Where it ran ("local pid 123", "remote bot-1", "remote action cache").
  std::string executor;
};

/// What a runner says while a batch of tasks runs; either callback may be
/// empty.
struct TaskListener {
  /// A task ended: its index in the batch, its result, its wall time (from
  /// its start in this process, or from its dispatch when another process
  /// runs it, waiting for a free worker included). Once per task, before
  /// run() returns, from whichever thread saw it end.
  std::function<void(size_t index, const Expected<TaskOutcome> &result, double seconds)>
      done;
  /// An event a task reported while it ran (a plan task's passes), where
  /// the runner sees them: in this process. From the task's thread.
  std::function<void(size_t index, const ProgressEvent &event)> progress;
};

/// Runs tasks for a compile: in this process, in the daemon's worker pool,
/// or on a remote engine.
class TaskRunner {
public:
  virtual ~TaskRunner() = default;
  /// Runs `tasks` (at once where the runner can); one result per task, in
  /// order. Inputs must be in the cache; outputs are there after. Tells
  /// `listener` as each task ends.
  virtual std::vector<Expected<TaskOutcome>> run(const std::vector<Task> &tasks,
                                                 const TaskListener &listener) = 0;
  std::vector<Expected<TaskOutcome>> run(const std::vector<Task> &tasks) {
    return run(tasks, TaskListener());
  }
};

/// A scratch directory under the cache's tmp/, removed on scope exit.
class ScratchDir {
public:
  static Expected<ScratchDir> create(const cache::Cache &cache, const std::string &what);
  ScratchDir(ScratchDir &&other) noexcept;
  ScratchDir &operator=(ScratchDir &&) = delete;
  ~ScratchDir();
  const std::string &path() const { return path_; }

private:
  explicit ScratchDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

/// The plan task of graph IR (the blob `ir`) for `target`.
Expected<Task> makePlanTask(cache::Cache &cache, const cache::Digest &ir,
                            const compiler::CompileOptions &options,
                            const compiler::CodeTarget &target,
                            const std::string &buildId);

/// The codegen task of one planned kernel.
Expected<Task> makeCodegenTask(cache::Cache &cache, const compiler::PlannedKernel &kernel,
                               const compiler::CompileOptions &options,
                               const compiler::CodeTarget &target,
                               const std::string &buildId);

/// The measure task of one tunable kernel (Search.h): `measure` says what
/// to time; a loop kernel's IR goes with it as an input file.
Expected<Task> makeMeasureTask(cache::Cache &cache, nlohmann::json measure,
                               const std::optional<compiler::PlannedKernel> &kernel,
                               const compiler::CompileOptions &options,
                               const std::string &buildId);

/// A task that does nothing: its cost is the dispatch's (bench/).
Expected<Task> makeNoopTask(cache::Cache &cache, const std::string &name,
                            const std::string &buildId);

/// The plan a plan task wrote (its two outputs' bytes).
Expected<compiler::CompilePlan> parsePlanOutput(std::string_view planJson,
                                                std::string graphObject);

/// Runs the task in `inputDir` and writes its outputs into `outputDir`.
/// FailedPrecondition when the task names another build than `buildId`
/// (a worker of another build never answers); InvalidArgument for a task
/// directory that is not one. A plan task tells `progress` (when set) of
/// each compiler pass as it ends (stage "pass", with `pass` and `seconds`).
Status runTaskDirectory(const std::string &inputDir, const std::string &outputDir,
                        const std::string &buildId, const ProgressFn &progress = {});

/// The error a failed `flowc-worker task` wrote last ("flowc-worker: error:
/// CODE: message" on stderr), with its code; Internal when there is none.
Status taskErrorFrom(std::string_view output);

/// A task's scratch directory in the cache's tmp/: its inputs written
/// from the cache under `in`, its outputs to come under `out`.
struct TaskDirectory {
  ScratchDir scratch;
  std::string in, out;
};
Expected<TaskDirectory> prepareTask(cache::Cache &cache, const Task &task);

/// Stores the outputs a task wrote in `dir` in the cache.
Expected<std::vector<cache::Digest>> collectOutputs(cache::Cache &cache, const Task &task,
                                                    const std::string &dir);

/// Runs tasks in this process, on up to `threads` threads, each in a
/// scratch directory of the cache: `flowc compile`, and compiles made
/// without a daemon.
class InProcessTaskRunner final : public TaskRunner {
public:
  InProcessTaskRunner(cache::Cache &cache, std::string buildId, unsigned threads);
  using TaskRunner::run;
  std::vector<Expected<TaskOutcome>> run(const std::vector<Task> &tasks,
                                         const TaskListener &listener) override;

private:
  Expected<TaskOutcome> runOne(const Task &task, const ProgressFn &progress);

  cache::Cache &cache_;
  std::string buildId_;
  unsigned threads_;
};

/// The weight list of compiled code, with the kernels search chose
/// candidates for, as JSON text, and back (nullopt when unreadable: the
/// code is then compiled again).
std::string codeWeightsText(const compiler::CodeWeights &weights,
                            const std::vector<runtime::TunedKernelSpec> &tuned = {});
std::optional<compiler::CodeWeights>
parseCodeWeights(std::string_view bytes,
                 std::vector<runtime::TunedKernelSpec> *tuned = nullptr);

} // namespace flowc::worker
