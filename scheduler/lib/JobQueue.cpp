#include "flowc/scheduler/JobQueue.h"

namespace flowc::scheduler {

JobQueue::JobQueue(unsigned workers) {
  for (unsigned i = 0; i < std::max(1u, workers); ++i)
    threads_.emplace_back([this] { workerLoop(); });
}

JobQueue::~JobQueue() {
  shutdown();
  for (std::thread &thread : threads_)
    thread.join();
}

std::string JobQueue::submit(Priority priority, std::function<void()> job) {
  std::lock_guard lock(mutex_);
  if (stopping_)
    return "";
  (priority == Priority::Interactive ? interactive_ : batch_).push_back(std::move(job));
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
  return JobCounts{interactive_.size() + batch_.size(), running_, completed_};
}

void JobQueue::workerLoop() {
  while (true) {
    std::function<void()> job;
    {
      std::unique_lock lock(mutex_);
      ready_.wait(lock,
                  [&] { return stopping_ || !interactive_.empty() || !batch_.empty(); });
      if (stopping_)
        return;
      auto &queue = interactive_.empty() ? batch_ : interactive_;
      job = std::move(queue.front());
      queue.pop_front();
      ++running_;
    }
    job();
    std::lock_guard lock(mutex_);
    --running_;
    ++completed_;
  }
}

} // namespace flowc::scheduler
