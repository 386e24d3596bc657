#include "flowc/support/Concurrently.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace flowc {

void forEachConcurrently(size_t count, size_t width,
                         const std::function<void(size_t)> &body) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < count; i = next++)
      body(i);
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < std::min(count, width); ++t)
    threads.emplace_back(work);
  work();
  for (std::thread &thread : threads)
    thread.join();
}

} // namespace flowc
