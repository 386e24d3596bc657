#include "flowc/support/Concurrently.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace flowc {
namespace {

// Every index is called once, whatever the width, and no more than
// `width` calls run at a time.
TEST(ConcurrentlyTest, CallsEachIndexOnceAndAtMostWidthAtATime) {
  for (size_t width : {1u, 3u, 8u, 200u}) {
    std::vector<std::atomic<int>> calls(100);
    std::atomic<size_t> running{0}, most{0};
    std::mutex mutex;
    std::set<std::thread::id> threads;
    forEachConcurrently(calls.size(), width, [&](size_t i) {
      size_t now = ++running;
      size_t seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      {
        std::lock_guard lock(mutex);
        threads.insert(std::this_thread::get_id());
      }
      ++calls[i];
      std::this_thread::yield();
      --running;
    });
    for (size_t i = 0; i < calls.size(); ++i)
      EXPECT_EQ(calls[i].load(), 1) << "index " << i << ", width " << width;
    EXPECT_LE(most.load(), width);
    EXPECT_LE(threads.size(), width);
    if (width == 1) {
      EXPECT_EQ(*threads.begin(), std::this_thread::get_id());
    }
  }
}

TEST(ConcurrentlyTest, NothingToDoCallsNothing) {
  bool called = false;
  forEachConcurrently(0, 8, [&](size_t) { called = true; });
  EXPECT_FALSE(called);
}

} // namespace
} // namespace flowc
