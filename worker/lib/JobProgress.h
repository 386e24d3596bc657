// One compile's progress as it goes: phase events with this compile's
// cache lookups and bytes hashed so far, and a kernel event with its
// index, count and the time left as each codegen task ends.
#pragma once

#include "flowc/worker/Progress.h"

#include <chrono>
#include <mutex>
#include <string>

namespace flowc::worker {

/// Thread-safe: kernel events come from the task runner's threads. The
/// sink is called under a lock, so it sees one event at a time.
class JobProgress {
public:
  explicit JobProgress(const ProgressFn &sink) : sink_(sink) {}

  /// A phase event ("ingest", "plan", ...) with the counters so far.
  void operator()(const std::string &stage, const std::string &detail);
  /// Any event: the counters so far and the estimate are filled in.
  void emit(ProgressEvent event);

  /// Action-cache lookups of `kind` ("artifact", "code", "kernel",
  /// "derived") by this compile.
  void countLookups(const std::string &kind, uint64_t hits, uint64_t misses);
  void addBytesHashed(uint64_t bytes);

  /// `count` kernels are about to be compiled: from now on kernel events
  /// carry their index of `count` and an estimate of the time left.
  void beginKernels(unsigned count);
  /// A kernel's codegen ended (`cached`: a cache answered its task).
  void kernelDone(const std::string &symbol, double seconds, const std::string &executor,
                  bool cached);

private:
  void emitLocked(ProgressEvent &event);

  const ProgressFn &sink_;
  std::mutex mutex_;
  std::map<std::string, cache::LookupCounts> lookups_;
  uint64_t bytesHashed_ = 0;
  unsigned kernelCount_ = 0;
  unsigned kernelsDone_ = 0;
  std::chrono::steady_clock::time_point kernelsStart_;
};

} // namespace flowc::worker
