// Where the daemon runs the plan and codegen tasks of its jobs: a pool of
// local flowc-worker processes (the embedded default), or a REAPI engine
// (--remote-executor), which falls back to the local pool when asked to.
#pragma once

#include "flowc/cache/Cache.h"
#include "flowc/scheduler/TaskSlots.h"
#include "flowc/v1/flowc.pb.h"
#include "flowc/worker/Tasks.h"

#include "WorkerProcess.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace flowc::daemon {

/// One task to run, and what its job wants to know while it runs.
struct TaskRun {
  const worker::Task &task;
  scheduler::Priority priority;
  std::function<bool()> cancelled;
  /// Called with where the task runs now ("local pid 123"), each attempt.
  std::function<void(const std::string &)> onStart;
  /// Called with each progress event the task process sends (a compiler
  /// pass that ended), on the thread that called run().
  std::function<void(flowc::v1::Progress &&)> onProgress = nullptr;
  /// When the daemon received the task: its deadline
  /// (worker::Task::deadlineSeconds) counts from then, the wait for a
  /// dispatch thread included.
  std::chrono::steady_clock::time_point received = std::chrono::steady_clock::now();
};

class TaskExecutor {
public:
  virtual ~TaskExecutor() = default;
  /// Runs the task; its outputs are in the cache on success. Blocking.
  virtual Expected<worker::TaskOutcome> run(const TaskRun &run) = 0;
  /// How many of one job's tasks are worth having in flight at once.
  virtual unsigned concurrency() const = 0;
  /// Fills in `flowc workers`.
  virtual void describe(flowc::v1::WorkersResponse &out) const = 0;
};

/// A pool of `flowc-worker serve` processes, one task at a time each, at
/// most one busy per slot (a task runs one thread); idle ones wait for the
/// next task, so a task costs no process start. A task whose process dies
/// (a crash, an abort, an OOM kill) runs once more on a fresh process; a
/// second death fails it, with an error naming the task and the signal.
class LocalExecutor final : public TaskExecutor {
public:
  struct Options {
    std::string workerPath;
    unsigned slots = 1;
    /// RLIMIT_DATA of each task process; 0: the worker's default (3/4 RAM).
    uint64_t memoryLimit = 0;
  };
  LocalExecutor(cache::Cache &cache, Options options);

  Expected<worker::TaskOutcome> run(const TaskRun &run) override;
  unsigned concurrency() const override { return slots_.size(); }
  void describe(flowc::v1::WorkersResponse &out) const override;

private:
  struct Attempt {
    Expected<worker::TaskOutcome> outcome;
    bool died = false; ///< Killed by a signal: worth another process.
  };
  Attempt attempt(const TaskRun &run);
  /// An idle process of the pool, or a new one.
  Expected<std::unique_ptr<ServeProcess>> takeProcess();
  /// Back to the pool, unless it died or has served long enough.
  void giveBack(std::unique_ptr<ServeProcess> process);

  cache::Cache &cache_;
  Options options_;
  scheduler::TaskSlots slots_;
  mutable std::mutex mutex_;
  struct Running {
    std::string task;
    std::chrono::steady_clock::time_point since;
  };
  std::map<pid_t, Running> running_;
  std::vector<std::unique_ptr<ServeProcess>> idle_;
  std::atomic<uint64_t> tasksRun_{0}, tasksRetried_{0}, tasksFailed_{0};
};

} // namespace flowc::daemon
