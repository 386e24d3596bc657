#include "flowc/scheduler/TaskSlots.h"

#include <algorithm>
#include <chrono>

namespace flowc::scheduler {

TaskSlots::TaskSlots(unsigned slots) : slots_(std::max(1u, slots)) {}

TaskSlots::Slot::~Slot() {
  if (pool_)
    pool_->release();
}

TaskSlots::Slot TaskSlots::acquire(Priority priority,
                                   const std::function<bool()> &cancelled) {
  std::unique_lock lock(mutex_);
  bool interactive = priority == Priority::Interactive;
  if (interactive)
    ++interactiveWaiting_;
  while (true) {
    bool free = busy_ < slots_ && (interactive || interactiveWaiting_ == 0);
    if (free)
      break;
    if (cancelled && cancelled()) {
      if (interactive)
        --interactiveWaiting_;
      return Slot();
    }
    freed_.wait_for(lock, std::chrono::milliseconds(100));
  }
  if (interactive)
    --interactiveWaiting_;
  ++busy_;
  return Slot(this);
}

unsigned TaskSlots::busy() const {
  std::lock_guard lock(mutex_);
  return busy_;
}

void TaskSlots::release() {
  std::lock_guard lock(mutex_);
  --busy_;
  freed_.notify_all();
}

} // namespace flowc::scheduler
