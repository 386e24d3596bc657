#include "flowc/scheduler/TaskSlots.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace flowc::scheduler {
namespace {

TEST(TaskSlotsTest, NeverMoreHoldersThanSlots) {
  TaskSlots slots(2);
  std::atomic<int> holding{0}, most{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&] {
      TaskSlots::Slot slot = slots.acquire(Priority::Batch, nullptr);
      ASSERT_TRUE(slot);
      int now = ++holding;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      --holding;
    });
  for (std::thread &thread : threads)
    thread.join();
  EXPECT_EQ(most.load(), 2);
  EXPECT_EQ(slots.busy(), 0u);
}

TEST(TaskSlotsTest, AWaitingInteractiveTaskGoesFirst) {
  TaskSlots slots(1);
  auto held = std::make_unique<TaskSlots::Slot>(slots.acquire(Priority::Batch, nullptr));
  std::vector<std::string> order;
  std::mutex mutex;
  std::thread batch([&] {
    TaskSlots::Slot slot = slots.acquire(Priority::Batch, nullptr);
    std::lock_guard lock(mutex);
    order.push_back("batch");
  });
  // The batch task waits before the interactive one arrives.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::thread interactive([&] {
    TaskSlots::Slot slot = slots.acquire(Priority::Interactive, nullptr);
    std::lock_guard lock(mutex);
    order.push_back("interactive");
  });
  // Both wait now (a late start only delays the check, never passes it:
  // the batch task cannot take the slot while an interactive one waits).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  held.reset();
  batch.join();
  interactive.join();
  EXPECT_EQ(order, (std::vector<std::string>{"interactive", "batch"}));
}

TEST(TaskSlotsTest, ACancelledWaitGetsNoSlot) {
  TaskSlots slots(1);
  TaskSlots::Slot held = slots.acquire(Priority::Interactive, nullptr);
  TaskSlots::Slot none = slots.acquire(Priority::Interactive, [] { return true; });
  EXPECT_FALSE(none);
  EXPECT_EQ(slots.busy(), 1u);
}

} // namespace
} // namespace flowc::scheduler
