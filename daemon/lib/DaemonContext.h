// What the gRPC services share: the components they call and the counters
// Admin.Stats reports.
#pragma once

#include "Jobs.h"
#include "RemoteCacheState.h"
#include "TaskExecutor.h"

#include "flowc/cache/Cache.h"
#include "flowc/daemon/Server.h"
#include "flowc/scheduler/JobQueue.h"
#include "flowc/worker/CompileExecutor.h"

#include <atomic>
#include <chrono>

namespace flowc::daemon {

/// Requests in flight and when the last one ended, for the idle timeout.
struct Activity {
  std::atomic<int> inFlight{0};
  std::atomic<int64_t> lastEndNs{
      std::chrono::steady_clock::now().time_since_epoch().count()};

  void begin() { ++inFlight; }
  void end() {
    lastEndNs = std::chrono::steady_clock::now().time_since_epoch().count();
    --inFlight;
  }
  /// Seconds since the last request ended, 0 while one is in flight.
  double idleSeconds() const {
    if (inFlight > 0)
      return 0;
    auto now = std::chrono::steady_clock::now().time_since_epoch().count();
    return static_cast<double>(now - lastEndNs) * 1e-9;
  }
};

struct DaemonContext {
  DaemonOptions options;
  std::unique_ptr<cache::Cache> cache;
  std::unique_ptr<worker::CompileExecutor> executor;
  /// Where jobs' tasks run; outlives the job queue that uses it.
  std::unique_ptr<TaskExecutor> tasks;
  JobRegistry registry;
  /// Stops queued and running jobs (Admin.Cancel).
  JobControls controls;
  /// --remote-cache: what jobs get and report.
  std::unique_ptr<RemoteCacheState> remoteCache;
  std::unique_ptr<scheduler::JobQueue> jobs;
  /// The flowc-worker binary every compile, inspect and repro runs in.
  std::string workerPath;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::atomic<uint64_t> cacheHits{0};
  std::atomic<uint64_t> cacheMisses{0};
  std::atomic<uint64_t> jobsFailed{0};
  Activity activity;
  /// The web UI's URL with its token (WebFront), empty when it is off.
  std::string webUrl;

  /// Where finished jobs' traces are written (Trace.h), the newest
  /// kKeptTraces of them.
  static constexpr size_t kKeptTraces = 200;
  std::string traceDir() const { return cache->root() + "/traces"; }

  /// `flowc workers`: the executors' state and the farm's GPUs.
  void describeWorkers(flowc::v1::WorkersResponse &out) const;
};

} // namespace flowc::daemon
