#include "Jobs.h"

#include "flowc/worker/WorkerProtocol.h"

#include <spdlog/spdlog.h>

namespace flowc::daemon {

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

uint64_t inputBytes(const worker::Task &task) {
  uint64_t bytes = 0;
  for (const worker::TaskInput &input : task.inputs)
    bytes += input.digest.size;
  return bytes;
}

} // namespace

void JobRegistry::start(const std::string &id, const std::string &model,
                        flowc::v1::Priority priority, const std::string &client) {
  std::lock_guard lock(mutex_);
  Job &job = jobs_.emplace_back();
  job.started = std::chrono::steady_clock::now();
  job.info.set_id(id);
  job.info.set_model(model);
  job.info.set_state("running");
  job.info.set_priority(priority);
  job.info.set_client(client);
}

JobRegistry::Job *JobRegistry::find(const std::string &id) {
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it)
    if (it->info.id() == id)
      return &*it;
  return nullptr;
}

size_t JobRegistry::addTask(const std::string &id, const worker::Task &task) {
  std::lock_guard lock(mutex_);
  Job *job = find(id);
  if (!job)
    return 0;
  flowc::v1::TaskInfo *info = job->info.add_tasks();
  info->set_kind(task.kind);
  info->set_name(task.name);
  info->set_state("queued");
  info->set_input_bytes(inputBytes(task));
  info->set_queued_at_seconds(secondsSince(job->started));
  return static_cast<size_t>(job->info.tasks_size() - 1);
}

void JobRegistry::update(const std::string &id, size_t task,
                         const std::function<void(flowc::v1::TaskInfo &)> &change) {
  std::lock_guard lock(mutex_);
  Job *job = find(id);
  if (job && task < static_cast<size_t>(job->info.tasks_size()))
    change(*job->info.mutable_tasks(static_cast<int>(task)));
}

void JobRegistry::setExplain(const std::string &id, const std::string &explain) {
  std::lock_guard lock(mutex_);
  if (Job *job = find(id))
    job->info.set_explain(explain);
}

void JobRegistry::finish(const std::string &id, const std::string &state,
                         const std::string &error) {
  std::lock_guard lock(mutex_);
  Job *job = find(id);
  if (!job)
    return;
  job->info.set_state(state);
  job->info.set_error(error);
  job->info.set_seconds(secondsSince(job->started));
  size_t finished = 0;
  for (const Job &each : jobs_)
    finished += each.info.state() != "running";
  for (auto it = jobs_.begin(); finished > kKeptFinished && it != jobs_.end();) {
    if (it->info.state() == "running") {
      ++it;
      continue;
    }
    it = jobs_.erase(it);
    --finished;
  }
}

flowc::v1::JobsResponse JobRegistry::list() const {
  std::lock_guard lock(mutex_);
  flowc::v1::JobsResponse response;
  for (const Job &job : jobs_) {
    flowc::v1::JobInfo *info = response.add_jobs();
    *info = job.info;
    if (job.info.state() == "running")
      info->set_seconds(secondsSince(job.started));
  }
  return response;
}

TaskDispatch::TaskDispatch(TaskExecutor &executor, JobRegistry &registry,
                           std::string jobId, scheduler::Priority priority,
                           std::function<bool()> cancelled)
    : executor_(executor), registry_(registry), jobId_(std::move(jobId)),
      priority_(priority), cancelled_(std::move(cancelled)) {}

TaskDispatch::~TaskDispatch() { finish(); }

void TaskDispatch::add(flowc::v1::TaskRequest &&request, TaskAnswer answer) {
  std::lock_guard lock(mutex_);
  if (ended_)
    return;
  queue_.emplace_back(std::move(request), std::move(answer));
  // A thread per task in flight, up to the executor's concurrency.
  if (queue_.size() > idle_ && threads_.size() < std::max(1u, executor_.concurrency()))
    threads_.emplace_back([this] { loop(); });
  queued_.notify_one();
}

void TaskDispatch::finish() {
  {
    std::lock_guard lock(mutex_);
    ended_ = true;
    queue_.clear();
    queued_.notify_all();
  }
  for (std::thread &thread : threads_)
    if (thread.joinable())
      thread.join();
}

void TaskDispatch::loop() {
  while (true) {
    std::pair<flowc::v1::TaskRequest, TaskAnswer> next;
    {
      std::unique_lock lock(mutex_);
      ++idle_;
      queued_.wait(lock, [&] { return ended_ || !queue_.empty(); });
      --idle_;
      if (ended_)
        return;
      next = std::move(queue_.front());
      queue_.pop_front();
    }
    runOne(next.first, next.second);
  }
}

void TaskDispatch::runOne(flowc::v1::TaskRequest &request, const TaskAnswer &answer) {
  flowc::v1::TaskResult result;
  result.set_id(request.id());
  auto task = worker::taskFromProto(request);
  if (!task) {
    *result.mutable_error() = worker::errorReply(task.status()).error();
    answer(result);
    return;
  }
  size_t index = registry_.addTask(jobId_, *task);
  // From the start of its (last) attempt: the time waiting for a slot is not
  // the task's.
  auto started = std::chrono::steady_clock::now();
  auto stopped = [this] {
    {
      std::lock_guard lock(mutex_);
      if (ended_)
        return true;
    }
    return cancelled_();
  };
  TaskRun run{*task, priority_, stopped, [&](const std::string &where) {
                started = std::chrono::steady_clock::now();
                registry_.update(jobId_, index, [&](flowc::v1::TaskInfo &info) {
                  info.set_state("running");
                  info.set_executor(where);
                  info.set_attempts(info.attempts() + 1);
                });
              }};
  auto outcome = executor_.run(run);
  double seconds = secondsSince(started);
  registry_.update(jobId_, index, [&](flowc::v1::TaskInfo &info) {
    info.set_seconds(seconds);
    if (!outcome) {
      info.set_state("failed");
      info.set_error(outcome.status().message());
      return;
    }
    info.set_state("done");
    info.set_executor(outcome->executor);
    uint64_t bytes = 0;
    for (const cache::Digest &digest : outcome->outputs)
      bytes += digest.size;
    info.set_output_bytes(bytes);
  });
  if (!outcome) {
    *result.mutable_error() = worker::errorReply(outcome.status()).error();
  } else {
    result.set_executor(outcome->executor);
    for (const cache::Digest &digest : outcome->outputs)
      result.add_outputs(digest.toString());
  }
  answer(result);
}

} // namespace flowc::daemon
