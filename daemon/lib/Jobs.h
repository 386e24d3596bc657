// The daemon's record of its jobs and their tasks (`flowc jobs`), and the
// dispatcher that runs one job's tasks on an executor as its worker asks.
#pragma once

#include "Metrics.h"
#include "TaskExecutor.h"
#include "Trace.h"
#include "WorkerProcess.h"

#include "flowc/v1/flowc.pb.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace flowc::daemon {

/// What the jobs page shows of a job, and what its live stream sends.
struct JobSummary {
  std::string id, model, state, priority, client, error;
  /// The last phase it reported ("parse", "codegen", ...).
  std::string phase;
  double seconds = 0;
  uint32_t kernelsDone = 0, kernelsTotal = 0, kernelsCached = 0;
  uint32_t tasks = 0;
  /// The compiled model's digest (its model page), once the job has one.
  std::string modelDigest;
  /// Its tasks and progress are still kept (JobRegistry::kKeptDetailed).
  bool detailed = true;
};

/// Finished jobs and tasks as Prometheus histograms (flowc_job_seconds,
/// flowc_task_seconds), and finished jobs by state.
struct JobMetrics {
  std::map<std::string, Histogram> jobSeconds;  ///< By final state.
  std::map<std::string, Histogram> taskSeconds; ///< By task kind.
};

/// Running jobs and the most recent finished ones.
class JobRegistry {
public:
  /// Finished jobs kept for `flowc jobs` and the jobs page, and of those
  /// the most recent that keep their tasks and progress (the others keep
  /// their summary: a long history costs little memory).
  static constexpr size_t kKeptFinished = 1000;
  static constexpr size_t kKeptDetailed = 64;

  /// Job `id` starts; its times count from `since` (when it was accepted).
  void start(const std::string &id, const std::string &model,
             flowc::v1::Priority priority, const std::string &client,
             std::chrono::steady_clock::time_point since);
  /// Adds a queued task to job `id`; its index for update().
  size_t addTask(const std::string &id, const worker::Task &task);
  void update(const std::string &id, size_t task,
              const std::function<void(flowc::v1::TaskInfo &)> &change);
  /// Task `task` of job `id` starts an attempt now (for its trace).
  void taskStarted(const std::string &id, size_t task);
  /// A progress event of job `id`, kept for its trace ("ir" text is not).
  void addProgress(const std::string &id, const flowc::v1::Progress &event);
  /// `state`: "done", "failed", "cancelled" or "superseded".
  void finish(const std::string &id, const std::string &state, const std::string &error);
  /// What the job's compile said about its cache lookup (flowc explain).
  void setExplain(const std::string &id, const std::string &explain);
  /// The newer job that superseded job `id`.
  void setSupersededBy(const std::string &id, const std::string &newer);
  /// The digest of the model job `id` compiled.
  void setModelDigest(const std::string &id, const std::string &digest);

  flowc::v1::JobsResponse list() const;
  /// Job `id`'s summary, if running or kept.
  std::optional<JobSummary> summary(const std::string &id) const;
  /// The jobs that changed after change `seen` (all kept jobs for 0),
  /// oldest first, and in `latest` the newest change (pass it back as
  /// `seen`).
  std::vector<JobSummary> changedSince(uint64_t seen, uint64_t &latest) const;
  /// Waits until a change after `seen` or `timeout`; false on timeout.
  bool waitForChange(uint64_t seen, std::chrono::milliseconds timeout) const;
  JobMetrics metrics() const;
  /// Job `id`, if running or kept.
  std::optional<flowc::v1::JobInfo> job(const std::string &id) const;
  /// Job `id`'s trace (Trace.h) as it stands, if running or kept.
  std::optional<std::string> trace(const std::string &id) const;

private:
  struct Job {
    flowc::v1::JobInfo info;
    std::chrono::steady_clock::time_point started;
    std::vector<flowc::v1::Progress> progress;
    /// Per task: when its last attempt started, -1 before any.
    std::vector<double> taskStarts;
    std::string phase;
    uint32_t kernelsDone = 0, kernelsTotal = 0, kernelsCached = 0;
    std::string modelDigest;
    /// Set once its tasks and progress were dropped (kKeptDetailed): how
    /// many tasks it had.
    std::optional<uint32_t> droppedTasks;
    /// The registry's change count at this job's last change.
    uint64_t changed = 0;
  };
  const Job *find(const std::string &id) const;
  Job *find(const std::string &id);
  /// Marks `job` changed and wakes the live streams; under the lock.
  void touch(Job &job);
  static JobSummary summaryOf(const Job &job);

  mutable std::mutex mutex_;
  mutable std::condition_variable changes_;
  uint64_t changeCount_ = 0;
  std::list<Job> jobs_; ///< Oldest first.
  JobMetrics metrics_;
};

/// What identical submits share (one flight, Compiler.Submit): the request
/// less what only concerns one client (priority, local path, client,
/// detach, timeout), and the model file's identity (a changed file is
/// another flight).
std::string flightKey(const flowc::v1::SubmitRequest &request,
                      const cache::FileIdentity &file);

/// What a newer submit must share with an older one to supersede it: the
/// same client, model path and compile options (the flight key less the
/// file identity). Empty, superseding nothing, for a submit without a
/// client or without a model path (an upload).
std::string supersedeKey(const flowc::v1::SubmitRequest &request);

/// How a job stops before its end: not at all, by dropping what has not
/// started while what runs finishes (superseded), or by killing it all
/// (cancelled, timed out, its clients gone).
enum class JobStop { None, Drain, Kill };

/// The queued and running jobs that Admin.Cancel can stop, by id.
/// Thread-safe.
class JobControls {
public:
  /// Stops the job for the reason given (a Cancelled status naming the job
  /// and who cancelled it); false when it had ended already.
  using StopFn = std::function<bool(const Status &why)>;
  void add(const std::string &id, StopFn stop);
  void remove(const std::string &id);
  /// Calls job `id`'s StopFn (outside the lock); false for no such job.
  bool stop(const std::string &id, const Status &why);

private:
  std::mutex mutex_;
  std::map<std::string, StopFn> stops_;
};

/// Runs the tasks one job's worker asks for on `executor`, up to its
/// concurrency at once, and answers each. Once `stop` says Drain, tasks not
/// yet started are answered Cancelled at once and started ones finish; once
/// it says Kill, they are cancelled too. A task with a `cache_key` that
/// succeeds is recorded in `kernels` (the kernel cache) at once, whatever
/// becomes of its job; null for a read-only cache. Progress frames of the
/// task processes go to `onProgress` with `executor` set.
class TaskDispatch {
public:
  TaskDispatch(TaskExecutor &executor, JobRegistry &registry, cache::Cache *kernels,
               std::string jobId, scheduler::Priority priority,
               std::function<JobStop()> stop,
               std::function<void(flowc::v1::Progress &&)> onProgress);
  ~TaskDispatch();

  /// Queues a request (does not block).
  void add(flowc::v1::TaskRequest &&request, TaskAnswer answer);
  /// Ends the dispatch: answers what is queued Cancelled, then waits for
  /// the running tasks, which are cancelled unless the job drains.
  void finish();

private:
  /// A request waiting for a thread, and when it came: a task's deadline
  /// counts from then (TaskRun::received).
  struct Queued {
    flowc::v1::TaskRequest request;
    TaskAnswer answer;
    std::chrono::steady_clock::time_point received;
  };

  void loop();
  void runOne(Queued &queued);
  /// Records a kernel task's object under its kernel-cache key.
  void recordKernel(const flowc::v1::TaskRequest &request,
                    const worker::TaskOutcome &outcome);

  TaskExecutor &executor_;
  JobRegistry &registry_;
  cache::Cache *kernels_;
  std::string jobId_;
  scheduler::Priority priority_;
  std::function<JobStop()> stop_;
  std::function<void(flowc::v1::Progress &&)> onProgress_;
  std::mutex mutex_;
  std::condition_variable queued_;
  std::deque<Queued> queue_;
  std::vector<std::thread> threads_;
  unsigned idle_ = 0;
  bool ended_ = false;
};

} // namespace flowc::daemon
