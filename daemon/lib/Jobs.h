// The daemon's record of its jobs and their tasks (`flowc jobs`), and the
// dispatcher that runs one job's tasks on an executor as its worker asks.
#pragma once

#include "TaskExecutor.h"
#include "WorkerProcess.h"

#include "flowc/v1/flowc.pb.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace flowc::daemon {

/// Running jobs and the most recent finished ones.
class JobRegistry {
public:
  /// Finished jobs kept for `flowc jobs`.
  static constexpr size_t kKeptFinished = 64;

  void start(const std::string &id, const std::string &model,
             flowc::v1::Priority priority, const std::string &client);
  /// Adds a queued task to job `id`; its index for update().
  size_t addTask(const std::string &id, const worker::Task &task);
  void update(const std::string &id, size_t task,
              const std::function<void(flowc::v1::TaskInfo &)> &change);
  /// `state`: "done", "failed" or "cancelled".
  void finish(const std::string &id, const std::string &state, const std::string &error);
  /// What the job's compile said about its cache lookup (flowc explain).
  void setExplain(const std::string &id, const std::string &explain);

  flowc::v1::JobsResponse list() const;

private:
  struct Job {
    flowc::v1::JobInfo info;
    std::chrono::steady_clock::time_point started;
  };
  Job *find(const std::string &id);

  mutable std::mutex mutex_;
  std::list<Job> jobs_; ///< Oldest first.
};

/// Runs the tasks one job's worker asks for on `executor`, up to its
/// concurrency at once, and answers each. Tasks still running when the job
/// ends are cancelled (finish()).
class TaskDispatch {
public:
  TaskDispatch(TaskExecutor &executor, JobRegistry &registry, std::string jobId,
               scheduler::Priority priority, std::function<bool()> cancelled);
  ~TaskDispatch();

  /// Queues a request (does not block).
  void add(flowc::v1::TaskRequest &&request, TaskAnswer answer);
  /// Cancels what is left and waits for the running tasks.
  void finish();

private:
  void loop();
  void runOne(flowc::v1::TaskRequest &request, const TaskAnswer &answer);

  TaskExecutor &executor_;
  JobRegistry &registry_;
  std::string jobId_;
  scheduler::Priority priority_;
  std::function<bool()> cancelled_;
  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<std::pair<flowc::v1::TaskRequest, TaskAnswer>> queue_;
  std::vector<std::thread> threads_;
  unsigned idle_ = 0;
  bool ended_ = false;
};

} // namespace flowc::daemon
