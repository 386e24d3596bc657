// The daemon's view of its remote cache (--remote-cache): the settings each
// job's worker gets, the counters the jobs report, and the backoff after a
// failure. Each job talks to the remote itself (it holds the model's bytes);
// a job that found the remote unreachable makes the next jobs go local for
// a while (5 s, doubling to 5 min) instead of each waiting for its timeout.
#pragma once

#include "flowc/daemon/Server.h"

#include "flowc/v1/flowc.pb.h"

#include <chrono>
#include <mutex>
#include <optional>
#include <string>

namespace flowc::daemon {

class RemoteCacheState {
public:
  explicit RemoteCacheState(const DaemonOptions &options);

  bool configured() const { return !config_.url().empty(); }
  /// The settings for a job's worker; nullopt without a remote cache, or
  /// while backing off after a failure.
  std::optional<flowc::v1::RemoteCacheConfig> forJob();
  /// Adds what one job did; an error starts (or lengthens) the backoff and
  /// is logged once per outage; a clean job after one ends it.
  void record(const flowc::v1::RemoteCacheCounters &job);
  /// For Admin.Stats; false without a remote cache.
  bool status(flowc::v1::RemoteCacheStatus &out);

private:
  flowc::v1::RemoteCacheConfig config_;
  std::string identity_;
  std::mutex mutex_;
  flowc::v1::RemoteCacheCounters total_;
  std::string state_ = "ok";
  std::chrono::steady_clock::time_point retryAt_{};
  std::chrono::seconds backoff_{0};
};

} // namespace flowc::daemon
