// The local executor's dispatch overhead: no-op tasks (a task that reads
// its task.json and does nothing) through the daemon's LocalExecutor (its
// pooled flowc-worker processes), next to the same tasks in process, to a
// fresh `flowc-worker task` process per task, and to a bare spawn of
// /bin/true (the floor of any process per task). Prints figures; asserts
// nothing.
//
//   task_dispatch_bench [--tasks 400] [--dir /tmp]
#include "TaskExecutor.h"

#include "flowc/support/Subprocess.h"
#include "flowc/support/Target.h"
#include "flowc/worker/Tasks.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <spawn.h>
#include <string>
#include <thread>
#include <sys/wait.h>
#include <vector>

extern char **environ;

namespace {

using namespace flowc;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Figures {
  double seconds = 0;
  std::vector<double> latencies;
};

/// Prints the figures; returns the median latency.
double print(const char *what, size_t tasks, Figures figures) {
  std::sort(figures.latencies.begin(), figures.latencies.end());
  auto at = [&](double q) {
    return figures.latencies.empty()
               ? 0.0
               : figures
                     .latencies[static_cast<size_t>(q * (figures.latencies.size() - 1))];
  };
  std::printf("%-34s %8.1f tasks/s   per task p50 %7.2f ms  p99 %7.2f ms\n", what,
              tasks / figures.seconds, at(0.5) * 1e3, at(0.99) * 1e3);
  return at(0.5);
}

/// Runs `argv` to its end; false if it did not start or failed.
bool spawnAndWait(std::vector<std::string> argv) {
  std::vector<char *> words;
  for (std::string &word : argv)
    words.push_back(word.data());
  words.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, words[0], nullptr, nullptr, words.data(), environ) != 0)
    return false;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/// Runs `one(i)` for i < tasks on `threads` threads; each call timed.
template <typename One> Figures timed(size_t tasks, unsigned threads, One one) {
  Figures figures;
  figures.latencies.resize(tasks);
  std::atomic<size_t> next{0};
  auto start = Clock::now();
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (size_t i; (i = next++) < tasks;) {
        auto begin = Clock::now();
        one(i);
        figures.latencies[i] = since(begin);
      }
    });
  for (std::thread &thread : pool)
    thread.join();
  figures.seconds = since(start);
  return figures;
}

} // namespace

int main(int argc, char **argv) {
  size_t tasks = 400;
  std::string dir = "/tmp";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--tasks") == 0)
      tasks = std::strtoull(argv[i + 1], nullptr, 10);
    else if (std::strcmp(argv[i], "--dir") == 0)
      dir = argv[i + 1];
  }
  std::string root = dir + "/flowc-dispatch-bench." + std::to_string(getpid());
  auto cache = cache::Cache::open(root, {});
  if (!cache) {
    std::fprintf(stderr, "%s\n", cache.status().toString().c_str());
    return 1;
  }
  std::string worker = executableDirectory() + "/flowc-worker";
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  auto task = worker::makeNoopTask(**cache, "noop", FLOWC_BUILD_ID);
  if (!task) {
    std::fprintf(stderr, "%s\n", task.status().toString().c_str());
    return 1;
  }
  std::printf("CPU: %s\n%zu no-op tasks, %u slots\n", hostCpuDescription().c_str(), tasks,
              cores);

  daemon::LocalExecutor local(**cache, {worker, cores, 0});
  std::atomic<size_t> failed{0};
  Figures pool = timed(tasks, cores, [&](size_t) {
    daemon::TaskRun run{*task, scheduler::Priority::Interactive, nullptr, nullptr};
    failed += !local.run(run);
  });
  double poolMedian = print("local executor (pooled processes)", tasks, pool);

  worker::InProcessTaskRunner inProcess(**cache, FLOWC_BUILD_ID, 1);
  Figures inside =
      timed(tasks, cores, [&](size_t) { failed += !inProcess.run({*task}).front(); });
  print("in process (scratch dir + files)", tasks, inside);

  // The task directory the fresh processes run (each writes nothing).
  auto fresh = worker::prepareTask(**cache, *task);
  if (!fresh) {
    std::fprintf(stderr, "%s\n", fresh.status().toString().c_str());
    return 1;
  }
  Figures processes = timed(tasks, cores, [&](size_t) {
    failed +=
        !spawnAndWait({worker, "task", "--input", fresh->in, "--output", fresh->out});
  });
  print("a flowc-worker task process each", tasks, processes);
  Figures spawn =
      timed(tasks, cores, [&](size_t) { failed += !spawnAndWait({"/bin/true"}); });
  double spawnMedian = print("peer: posix_spawn of /bin/true", tasks, spawn);
  std::printf("local executor vs a bare spawn: %.2f ms more per task (median), %.1fx the "
              "spawn's throughput\n",
              (poolMedian - spawnMedian) * 1e3,
              (tasks / pool.seconds) / (tasks / spawn.seconds));
  if (failed)
    std::printf("%zu tasks FAILED\n", failed.load());
  std::error_code ec;
  cache->reset();
  std::filesystem::remove_all(root, ec);
  return failed ? 1 : 0;
}
