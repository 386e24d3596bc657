#include "flowc/scheduler/JobQueue.h"

namespace flowc::scheduler {

JobQueue::JobQueue(unsigned workers, uint64_t firstId)
    : nextId_(std::max<uint64_t>(1, firstId)) {
  for (unsigned i = 0; i < std::max(1u, workers); ++i)
    threads_.emplace_back([this] { workerLoop(); });
}

JobQueue::~JobQueue() {
  shutdown();
  for (std::thread &thread : threads_)
    thread.join();
}

void JobQueue::FairQueue::push(const std::string &client, std::function<void()> job) {
  auto &jobs = byClient[client];
  if (jobs.empty())
    turns.push_back(client);
  jobs.push_back(std::move(job));
  ++size;
}

std::function<void()> JobQueue::FairQueue::pop() {
  std::string client = std::move(turns.front());
  turns.pop_front();
  auto it = byClient.find(client);
  std::function<void()> job = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty())
    byClient.erase(it);
  else
    turns.push_back(std::move(client));
  --size;
  return job;
}

void JobQueue::FairQueue::clear() {
  byClient.clear();
  turns.clear();
  size = 0;
}

std::string JobQueue::submit(Priority priority, std::function<void()> job,
                             const std::string &client) {
  std::lock_guard lock(mutex_);
  if (stopping_)
    return "";
  (priority == Priority::Interactive ? interactive_ : batch_)
      .push(client, std::move(job));
  ready_.notify_one();
  return "job-" + std::to_string(nextId_++);
}

std::string JobQueue::newId() {
  std::lock_guard lock(mutex_);
  return "job-" + std::to_string(nextId_++);
}

void JobQueue::shutdown() {
  std::lock_guard lock(mutex_);
  stopping_ = true;
  interactive_.clear();
  batch_.clear();
  ready_.notify_all();
}

JobCounts JobQueue::counts() const {
  std::lock_guard lock(mutex_);
  return JobCounts{interactive_.size + batch_.size, running_, completed_};
}

void JobQueue::workerLoop() {
  while (true) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock, [&] { return stopping_ || interactive_.size + batch_.size > 0; });
      if (stopping_)
        return;
      job = (interactive_.size > 0 ? interactive_ : batch_).pop();
      ++running_;
    }
    job();
    std::lock_guard lock(mutex_);
    --running_;
    ++completed_;
  }
}

} // namespace flowc::scheduler
