// A compile's progress as structured events: phases, the graph passes, each
// kernel's codegen, with the cache lookups and bytes hashed so far. The
// wire form is flowc.v1.Progress; docs/progress.md is the client's view.
#pragma once

#include "flowc/cache/Cache.h"

#include <cstdint>
#include <functional>
#include <map>
#include <string>

namespace flowc::worker {

struct ProgressEvent {
  /// "ingest", "cache", "store", "plan", "pass", "codegen", "kernel",
  /// "kernels", "derive", "pack", "link", "ir".
  std::string stage;
  std::string detail;
  /// A pass that just ended (stage "pass").
  std::string pass;
  /// A kernel whose codegen just ended (stage "kernel"): its symbol, how
  /// many of kernelCount are done, whether a cache answered its task.
  std::string kernel;
  unsigned kernelIndex = 0;
  unsigned kernelCount = 0;
  bool kernelCached = false;
  /// The pass's or the kernel's wall time; where the kernel's task ran.
  double seconds = 0;
  std::string executor;
  /// This compile's lookups so far per kind ("artifact", "code", "kernel",
  /// "derived") and the model bytes it hashed so far.
  std::map<std::string, cache::LookupCounts> cache;
  uint64_t bytesHashed = 0;
  /// Seconds left, estimated once kernels have started; -1 before.
  double etaSeconds = -1;
};

/// Receives a compile's events, one at a time (never concurrently), in
/// the order they happened.
using ProgressFn = std::function<void(const ProgressEvent &event)>;

} // namespace flowc::worker
