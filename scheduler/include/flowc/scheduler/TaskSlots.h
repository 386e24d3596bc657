// The thread budget of the local executor: a task process runs one thread,
// and at most `slots` of them run at once (one per core by default), so
// tasks x threads <= cores however many jobs run. Interactive tasks take a
// free slot before waiting batch ones.
#pragma once

#include "flowc/scheduler/JobQueue.h"

#include <condition_variable>
#include <functional>
#include <mutex>

namespace flowc::scheduler {

class TaskSlots {
public:
  explicit TaskSlots(unsigned slots);

  /// A held slot; released on destruction.
  class Slot {
  public:
    Slot() = default;
    Slot(Slot &&other) noexcept : pool_(other.pool_) { other.pool_ = nullptr; }
    Slot &operator=(Slot &&) = delete;
    ~Slot();
    explicit operator bool() const { return pool_ != nullptr; }

  private:
    friend class TaskSlots;
    explicit Slot(TaskSlots *pool) : pool_(pool) {}
    TaskSlots *pool_ = nullptr;
  };

  /// Waits for a slot; an empty Slot once `cancelled` says so (polled a few
  /// times a second).
  Slot acquire(Priority priority, const std::function<bool()> &cancelled);

  unsigned size() const { return slots_; }
  unsigned busy() const;

private:
  void release();

  const unsigned slots_;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  unsigned busy_ = 0;
  unsigned interactiveWaiting_ = 0;
};

} // namespace flowc::scheduler
