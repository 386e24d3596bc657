#include "Jobs.h"

#include "flowc/worker/WorkerProtocol.h"

#include <algorithm>
#include <atomic>
#include <spdlog/spdlog.h>
#include <utility>

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

/// The request less what only concerns one client.
std::string sharedRequest(const flowc::v1::SubmitRequest &request) {
  flowc::v1::SubmitRequest shared = request;
  shared.clear_priority();
  shared.clear_want_local_path();
  shared.clear_client();
  shared.clear_detach();
  shared.clear_timeout_seconds();
  std::string key;
  // Deterministic: the same request makes the same bytes in one process.
  shared.SerializeToString(&key);
  return key;
}

} // namespace

std::string flightKey(const flowc::v1::SubmitRequest &request,
                      const cache::FileIdentity &file) {
  return sharedRequest(request) + "\n" + std::to_string(file.device) + ":" +
         std::to_string(file.inode) + ":" + std::to_string(file.size) + ":" +
         std::to_string(file.mtimeNs) + ":" + std::to_string(file.ctimeNs);
}

std::string supersedeKey(const flowc::v1::SubmitRequest &request) {
  if (request.client().empty() || request.model_path().empty())
    return "";
  return request.client() + "\n" + sharedRequest(request);
}

void JobRegistry::start(const std::string &id, const std::string &model,
                        flowc::v1::Priority priority, const std::string &client,
                        std::chrono::steady_clock::time_point since) {
  std::lock_guard lock(mutex_);
  Job &job = jobs_.emplace_back();
  job.started = since;
  job.info.set_id(id);
  job.info.set_model(model);
  job.info.set_state("running");
  job.info.set_priority(priority);
  job.info.set_client(client);
  touch(job);
}

void JobRegistry::touch(Job &job) {
  job.changed = ++changeCount_;
  changes_.notify_all();
}

JobSummary JobRegistry::summaryOf(const Job &job) {
  JobSummary summary;
  summary.id = job.info.id();
  summary.model = job.info.model();
  summary.state = job.info.state();
  summary.priority =
      job.info.priority() == flowc::v1::PRIORITY_BATCH ? "batch" : "interactive";
  summary.client = job.info.client();
  summary.error = job.info.error();
  summary.phase = job.phase;
  summary.seconds =
      job.info.state() == "running" ? secondsSince(job.started) : job.info.seconds();
  summary.kernelsDone = job.kernelsDone;
  summary.kernelsTotal = job.kernelsTotal;
  summary.kernelsCached = job.kernelsCached;
  summary.tasks = job.droppedTasks.value_or(static_cast<uint32_t>(job.info.tasks_size()));
  summary.modelDigest = job.modelDigest;
  summary.detailed = !job.droppedTasks;
  return summary;
}

const JobRegistry::Job *JobRegistry::find(const std::string &id) const {
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it)
    if (it->info.id() == id)
      return &*it;
  return nullptr;
}

JobRegistry::Job *JobRegistry::find(const std::string &id) {
  return const_cast<Job *>(std::as_const(*this).find(id));
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
  job->taskStarts.push_back(-1);
  touch(*job);
  return static_cast<size_t>(job->info.tasks_size() - 1);
}

void JobRegistry::taskStarted(const std::string &id, size_t task) {
  std::lock_guard lock(mutex_);
  Job *job = find(id);
  if (job && task < job->taskStarts.size())
    job->taskStarts[task] = secondsSince(job->started);
}

void JobRegistry::addProgress(const std::string &id, const flowc::v1::Progress &event) {
  // IR text is for the client that asked; a trace has no use for it.
  if (event.stage() == "ir")
    return;
  std::lock_guard lock(mutex_);
  Job *job = find(id);
  if (!job)
    return;
  job->progress.push_back(event);
  if (event.stage() == "kernel") {
    job->kernelsDone = std::max(job->kernelsDone, event.kernel_index());
    job->kernelsTotal = std::max(job->kernelsTotal, event.kernel_count());
    job->kernelsCached += event.kernel_cached();
  } else if (event.stage() != "pass") {
    job->phase = event.stage();
  }
  touch(*job);
}

void JobRegistry::setSupersededBy(const std::string &id, const std::string &newer) {
  std::lock_guard lock(mutex_);
  if (Job *job = find(id))
    job->info.set_superseded_by(newer);
}

std::optional<flowc::v1::JobInfo> JobRegistry::job(const std::string &id) const {
  std::lock_guard lock(mutex_);
  const Job *job = find(id);
  if (!job)
    return std::nullopt;
  return job->info;
}

std::optional<std::string> JobRegistry::trace(const std::string &id) const {
  TraceInput input;
  {
    std::lock_guard lock(mutex_);
    const Job *job = find(id);
    if (!job)
      return std::nullopt;
    input.jobId = id;
    input.model = job->info.model();
    input.events = job->progress;
    input.tasks.assign(job->info.tasks().begin(), job->info.tasks().end());
    input.taskStarts = job->taskStarts;
    input.seconds =
        job->info.state() == "running" ? secondsSince(job->started) : job->info.seconds();
  }
  return chromeTrace(input);
}

void JobRegistry::update(const std::string &id, size_t task,
                         const std::function<void(flowc::v1::TaskInfo &)> &change) {
  std::lock_guard lock(mutex_);
  Job *job = find(id);
  if (!job || task >= static_cast<size_t>(job->info.tasks_size()))
    return;
  change(*job->info.mutable_tasks(static_cast<int>(task)));
  touch(*job);
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
  touch(*job);
  metrics_.jobSeconds[state].observe(job->info.seconds());
  for (const flowc::v1::TaskInfo &task : job->info.tasks())
    if (task.state() == "done" || task.state() == "failed")
      metrics_.taskSeconds[task.kind()].observe(task.seconds());
  size_t finished = 0;
  for (const Job &each : jobs_)
    finished += each.info.state() != "running";
  // Newest first: the first kKeptDetailed finished keep everything, the
  // rest up to kKeptFinished their summary, older ones go.
  size_t seen = 0;
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it) {
    if (it->info.state() == "running" || ++seen <= kKeptDetailed || it->droppedTasks)
      continue;
    it->droppedTasks = static_cast<uint32_t>(it->info.tasks_size());
    it->info.clear_tasks();
    it->progress.clear();
    it->progress.shrink_to_fit();
    it->taskStarts.clear();
    it->taskStarts.shrink_to_fit();
  }
  for (auto it = jobs_.begin(); finished > kKeptFinished && it != jobs_.end();) {
    if (it->info.state() == "running") {
      ++it;
      continue;
    }
    it = jobs_.erase(it);
    --finished;
  }
}

void JobRegistry::setModelDigest(const std::string &id, const std::string &digest) {
  std::lock_guard lock(mutex_);
  if (Job *job = find(id)) {
    job->modelDigest = digest;
    touch(*job);
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

std::optional<JobSummary> JobRegistry::summary(const std::string &id) const {
  std::lock_guard lock(mutex_);
  const Job *job = find(id);
  if (!job)
    return std::nullopt;
  return summaryOf(*job);
}

std::vector<JobSummary> JobRegistry::changedSince(uint64_t seen, uint64_t &latest) const {
  std::lock_guard lock(mutex_);
  latest = changeCount_;
  std::vector<JobSummary> out;
  for (const Job &job : jobs_)
    if (job.changed > seen)
      out.push_back(summaryOf(job));
  return out;
}

bool JobRegistry::waitForChange(uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock lock(mutex_);
  return changes_.wait_for(lock, timeout, [&] { return changeCount_ > seen; });
}

JobMetrics JobRegistry::metrics() const {
  std::lock_guard lock(mutex_);
  return metrics_;
}

void JobControls::add(const std::string &id, StopFn stop) {
  std::lock_guard lock(mutex_);
  stops_[id] = std::move(stop);
}

void JobControls::remove(const std::string &id) {
  std::lock_guard lock(mutex_);
  stops_.erase(id);
}

bool JobControls::stop(const std::string &id, const Status &why) {
  StopFn stop;
  {
    std::lock_guard lock(mutex_);
    auto it = stops_.find(id);
    if (it == stops_.end())
      return false;
    stop = it->second;
  }
  return stop(why);
}

namespace {

/// The answer to a task its job no longer wants.
flowc::v1::TaskResult cancelledResult(const flowc::v1::TaskRequest &request,
                                      const std::string &jobId) {
  flowc::v1::TaskResult result;
  result.set_id(request.id());
  *result.mutable_error() =
      worker::errorReply(Status(StatusCode::Cancelled, request.kind() + " " +
                                                           request.name() + ": job " +
                                                           jobId + " is stopping"))
          .error();
  return result;
}

} // namespace

TaskDispatch::TaskDispatch(TaskExecutor &executor, JobRegistry &registry,
                           cache::Cache *kernels, std::string jobId,
                           scheduler::Priority priority, std::function<JobStop()> stop,
                           std::function<void(flowc::v1::Progress &&)> onProgress)
    : executor_(executor), registry_(registry), kernels_(kernels),
      jobId_(std::move(jobId)), priority_(priority), stop_(std::move(stop)),
      onProgress_(std::move(onProgress)) {}

TaskDispatch::~TaskDispatch() { finish(); }

void TaskDispatch::add(flowc::v1::TaskRequest &&request, TaskAnswer answer) {
  // A stopping job starts nothing new.
  if (stop_() != JobStop::None) {
    answer(cancelledResult(request, jobId_));
    return;
  }
  std::lock_guard lock(mutex_);
  if (ended_)
    return;
  queue_.push_back(
      {std::move(request), std::move(answer), std::chrono::steady_clock::now()});
  // A thread per task in flight, up to the executor's concurrency.
  if (queue_.size() > idle_ && threads_.size() < std::max(1u, executor_.concurrency()))
    threads_.emplace_back([this] { loop(); });
  queued_.notify_one();
}

void TaskDispatch::finish() {
  std::deque<Queued> dropped;
  {
    std::lock_guard lock(mutex_);
    ended_ = true;
    dropped.swap(queue_);
    queued_.notify_all();
  }
  for (Queued &queued : dropped)
    queued.answer(cancelledResult(queued.request, jobId_));
  for (std::thread &thread : threads_)
    if (thread.joinable())
      thread.join();
}

void TaskDispatch::loop() {
  while (true) {
    Queued next;
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
    if (stop_() != JobStop::None) {
      next.answer(cancelledResult(next.request, jobId_));
      continue;
    }
    runOne(next);
  }
}

void TaskDispatch::runOne(Queued &queued) {
  flowc::v1::TaskRequest &request = queued.request;
  const TaskAnswer &answer = queued.answer;
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
  // A task that has begun runs to its end when the job drains (its output
  // goes to the kernel cache); one still waiting for a slot does not.
  std::atomic<bool> begun{false};
  auto stopped = [this, &begun] {
    JobStop stop = stop_();
    if (stop == JobStop::Kill || (stop == JobStop::Drain && !begun))
      return true;
    if (stop == JobStop::Drain)
      return false;
    std::lock_guard lock(mutex_);
    return ended_;
  };
  std::string where;
  TaskRun run{*task,
              priority_,
              stopped,
              [&](const std::string &executor) {
                started = std::chrono::steady_clock::now();
                begun = true;
                {
                  std::lock_guard lock(mutex_);
                  where = executor;
                }
                registry_.taskStarted(jobId_, index);
                registry_.update(jobId_, index, [&](flowc::v1::TaskInfo &info) {
                  info.set_state("running");
                  info.set_executor(executor);
                  info.set_attempts(info.attempts() + 1);
                });
              },
              [&](flowc::v1::Progress &&event) {
                if (!onProgress_)
                  return;
                {
                  std::lock_guard lock(mutex_);
                  event.set_executor(where);
                }
                onProgress_(std::move(event));
              },
              queued.received};
  auto outcome = executor_.run(run);
  if (outcome)
    recordKernel(request, *outcome);
  double seconds = secondsSince(started);
  registry_.update(jobId_, index, [&](flowc::v1::TaskInfo &info) {
    info.set_seconds(seconds);
    if (!outcome) {
      info.set_state(outcome.status().code() == StatusCode::Cancelled ? "cancelled"
                                                                      : "failed");
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

void TaskDispatch::recordKernel(const flowc::v1::TaskRequest &request,
                                const worker::TaskOutcome &outcome) {
  if (!kernels_ || request.cache_key().empty() || outcome.outputs.empty())
    return;
  auto key = cache::Digest::parse(request.cache_key());
  if (!key) {
    spdlog::warn("job={} task={} {}: its cache key is not a digest: {}", jobId_,
                 request.kind(), request.name(), key.status().toString());
    return;
  }
  if (Status recorded =
          kernels_->recordAction(cache::ActionKind::Kernel, *key, outcome.outputs[0]);
      !recorded)
    spdlog::warn("job={} task={} {}: kernel cache store failed: {}", jobId_,
                 request.kind(), request.name(), recorded.toString());
}

} // namespace flowc::daemon
