#include "flowc/scheduler/JobQueue.h"

#include <gtest/gtest.h>

#include <future>

namespace flowc::scheduler {
namespace {

TEST(JobQueueTest, RunsEveryJob) {
  std::atomic<int> done{0};
  {
    JobQueue queue(2);
    std::vector<std::promise<void>> finished(10);
    for (auto &promise : finished)
      EXPECT_FALSE(queue
                       .submit(Priority::Batch,
                               [&] {
                                 ++done;
                                 promise.set_value();
                               })
                       .empty());
    for (auto &promise : finished)
      promise.get_future().wait();
  }
  EXPECT_EQ(done, 10);
}

TEST(JobQueueTest, InteractiveJobsRunBeforeQueuedBatchJobs) {
  JobQueue queue(1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<std::string> order;
  std::mutex mutex;
  std::promise<void> allDone;
  // Occupy the only worker, then queue batch before interactive.
  queue.submit(Priority::Batch, [released] { released.wait(); });
  queue.submit(Priority::Batch, [&] {
    std::lock_guard lock(mutex);
    order.push_back("batch");
    allDone.set_value();
  });
  queue.submit(Priority::Interactive, [&] {
    std::lock_guard lock(mutex);
    order.push_back("interactive");
  });
  release.set_value();
  allDone.get_future().wait();
  EXPECT_EQ(order, (std::vector<std::string>{"interactive", "batch"}));
}

TEST(JobQueueTest, GivesDistinctIdsAndRefusesJobsAfterShutdown) {
  JobQueue queue(1);
  std::string a = queue.submit(Priority::Batch, [] {});
  std::string b = queue.submit(Priority::Batch, [] {});
  EXPECT_NE(a, b);
  queue.shutdown();
  EXPECT_TRUE(queue.submit(Priority::Interactive, [] {}).empty());
}

TEST(JobQueueTest, ClientsOfOnePriorityTakeTurns) {
  JobQueue queue(1);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::vector<std::string> order;
  std::mutex mutex;
  std::promise<void> allDone;
  auto record = [&](std::string what, bool last = false) {
    return [&, what, last] {
      std::lock_guard lock(mutex);
      order.push_back(what);
      if (last)
        allDone.set_value();
    };
  };
  std::promise<void> occupied;
  queue.submit(
      Priority::Batch,
      [&occupied, released] {
        occupied.set_value();
        released.wait();
      },
      "ci");
  occupied.get_future().wait();
  // CI queues three jobs before a developer's one: the developer's runs
  // second, not fourth.
  queue.submit(Priority::Batch, record("ci-1"), "ci");
  queue.submit(Priority::Batch, record("ci-2"), "ci");
  queue.submit(Priority::Batch, record("ci-3", true), "ci");
  queue.submit(Priority::Batch, record("dev-1"), "dev");
  release.set_value();
  allDone.get_future().wait();
  EXPECT_EQ(order, (std::vector<std::string>{"ci-1", "dev-1", "ci-2", "ci-3"}));
}

} // namespace
} // namespace flowc::scheduler
