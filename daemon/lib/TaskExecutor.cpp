#include "TaskExecutor.h"

#include "WorkerProcess.h"

#include "flowc/runtime/BuildInfo.h"
#include "flowc/support/Target.h"

#include <spdlog/spdlog.h>

namespace flowc::daemon {

LocalExecutor::LocalExecutor(cache::Cache &cache, Options options)
    : cache_(cache), options_(std::move(options)), slots_(options_.slots) {}

namespace {

/// Tasks a pooled process runs before a fresh one takes its place: what a
/// task leaves behind (heap fragments, caches) never adds up.
constexpr unsigned kTasksPerProcess = 256;

} // namespace

Expected<std::unique_ptr<ServeProcess>> LocalExecutor::takeProcess() {
  {
    std::lock_guard lock(mutex_);
    if (!idle_.empty()) {
      std::unique_ptr<ServeProcess> process = std::move(idle_.back());
      idle_.pop_back();
      return process;
    }
  }
  std::vector<std::string> args;
  if (options_.memoryLimit > 0)
    args = {"--memory-limit", std::to_string(options_.memoryLimit)};
  return ServeProcess::start(options_.workerPath, args);
}

void LocalExecutor::giveBack(std::unique_ptr<ServeProcess> process) {
  if (!process->alive() || process->tasksRun() >= kTasksPerProcess)
    return;
  std::lock_guard lock(mutex_);
  idle_.push_back(std::move(process));
}

LocalExecutor::Attempt LocalExecutor::attempt(const TaskRun &run) {
  const worker::Task &task = run.task;
  std::string what = task.kind + " " + task.name;
  auto dir = worker::prepareTask(cache_, task);
  if (!dir)
    return {dir.status().withContext(what)};
  auto process = takeProcess();
  if (!process)
    return {process.status()};
  pid_t pid = (*process)->pid();
  {
    std::lock_guard lock(mutex_);
    running_[pid] = {what, std::chrono::steady_clock::now()};
  }
  if (run.onStart)
    run.onStart("local pid " + std::to_string(pid));
  ServeProcess::Outcome outcome =
      (*process)->run(dir->in, dir->out, run.cancelled, run.onProgress);
  {
    std::lock_guard lock(mutex_);
    running_.erase(pid);
  }
  giveBack(std::move(*process));
  if (outcome.retired)
    spdlog::warn("local pid {} ended after {}: {}; a fresh process takes the next task",
                 pid, what,
                 outcome.status.isOk() ? "its GPU faulted" : outcome.status.message());
  if (outcome.cancelled)
    return {Status(StatusCode::Cancelled, what + ": cancelled")};
  if (outcome.died)
    return {deathStatus(what, pid, outcome.waitStatus, outcome.lastLine), true};
  if (!outcome.status.isOk())
    return {Status(outcome.status.code(), what + ": " + outcome.status.message())};
  auto outputs = worker::collectOutputs(cache_, task, dir->out);
  if (!outputs)
    return {outputs.status().withContext(what)};
  return {worker::TaskOutcome{std::move(*outputs), "local pid " + std::to_string(pid)}};
}

Expected<worker::TaskOutcome> LocalExecutor::run(const TaskRun &run) {
  scheduler::TaskSlots::Slot slot = slots_.acquire(run.priority, run.cancelled);
  if (!slot)
    return Status(StatusCode::Cancelled,
                  run.task.kind + " " + run.task.name + ": cancelled");
  ++tasksRun_;
  Attempt first = attempt(run);
  if (!first.died)
    return std::move(first.outcome);
  // A crash may be the machine's (an OOM kill of a big neighbour) rather
  // than the task's: once more, on a fresh process.
  spdlog::warn("{}; running it again on a fresh process",
               first.outcome.status().message());
  ++tasksRetried_;
  Attempt second = attempt(run);
  if (!second.died)
    return std::move(second.outcome);
  ++tasksFailed_;
  const Status &error = second.outcome.status();
  return Status(error.code(),
                error.message() +
                    ", twice (the first time: " + first.outcome.status().message() +
                    "); this job fails, the daemon and other jobs carry on");
}

void LocalExecutor::describe(flowc::v1::WorkersResponse &out) const {
  out.set_local_device(hostCpuDescription());
  // The driver is asked once per process; later calls repeat its answer.
  if (Expected<std::vector<std::string>> gpus = runtime::gpuDescriptions())
    for (const std::string &gpu : *gpus)
      out.add_local_gpus(gpu);
  else
    out.set_local_gpus_absent(gpus.status().message());
  out.set_slots(slots_.size());
  out.set_busy(slots_.busy());
  out.set_tasks_run(tasksRun_);
  out.set_tasks_retried(tasksRetried_);
  out.set_tasks_failed(tasksFailed_);
  auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mutex_);
  for (const auto &[pid, running] : running_) {
    flowc::v1::LocalWorker *worker = out.add_local();
    worker->set_pid(pid);
    worker->set_task(running.task);
    worker->set_seconds(std::chrono::duration<double>(now - running.since).count());
  }
}

} // namespace flowc::daemon
