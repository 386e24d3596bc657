// Runs jobs on a fixed set of threads: interactive jobs before batch ones,
// and within a priority, clients in turn (one client's hundred CI submits
// do not starve another's one). The tasks of running jobs take the slots
// of a TaskSlots pool (TaskSlots.h).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace flowc::scheduler {

enum class Priority { Interactive, Batch };

struct JobCounts {
  uint64_t queued = 0;
  uint64_t running = 0;
  uint64_t completed = 0;
};

class JobQueue {
public:
  /// Starts `workers` threads (at least one); ids count from `firstId`.
  explicit JobQueue(unsigned workers, uint64_t firstId = 1);
  /// Finishes running jobs, drops queued ones, joins the threads.
  ~JobQueue();
  JobQueue(const JobQueue &) = delete;
  JobQueue &operator=(const JobQueue &) = delete;

  /// Queues `job` of `client`; returns its id ("job-17"). Thread-safe.
  /// After shutdown() the job is dropped and the id is empty.
  std::string submit(Priority priority, std::function<void()> job,
                     const std::string &client = "");

  /// A fresh id for work answered without a queued job (a cache hit).
  std::string newId();

  /// Stops taking jobs; queued jobs are dropped. Thread-safe, idempotent.
  void shutdown();

  JobCounts counts() const;
  unsigned workerCount() const { return static_cast<unsigned>(threads_.size()); }

private:
  void workerLoop();

  /// The queued jobs of one priority: per client, and the clients in the
  /// order they take turns.
  struct FairQueue {
    std::map<std::string, std::deque<std::function<void()>>> byClient;
    std::deque<std::string> turns;
    size_t size = 0;

    void push(const std::string &client, std::function<void()> job);
    /// The next client's oldest job; that client goes to the back.
    std::function<void()> pop();
    void clear();
  };

  mutable std::mutex mutex_;
  std::condition_variable ready_;
  FairQueue interactive_, batch_;
  std::vector<std::thread> threads_;
  bool stopping_ = false;
  uint64_t nextId_ = 1;
  uint64_t running_ = 0;
  uint64_t completed_ = 0;
};

} // namespace flowc::scheduler
