// What the gRPC services share: the components they call and the counters
// Admin.Stats reports.
#pragma once

#include "flowc/cache/Cache.h"
#include "flowc/daemon/Server.h"
#include "flowc/scheduler/JobQueue.h"
#include "flowc/worker/CompileExecutor.h"

#include <atomic>
#include <chrono>

namespace flowc::daemon {

struct DaemonContext {
  DaemonOptions options;
  std::unique_ptr<cache::Cache> cache;
  std::unique_ptr<worker::CompileExecutor> executor;
  std::unique_ptr<scheduler::JobQueue> jobs;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::atomic<uint64_t> cacheHits{0};
  std::atomic<uint64_t> cacheMisses{0};
  std::atomic<uint64_t> jobsFailed{0};
};

} // namespace flowc::daemon
