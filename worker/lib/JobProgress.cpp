#include "JobProgress.h"

namespace flowc::worker {

void JobProgress::operator()(const std::string &stage, const std::string &detail) {
  ProgressEvent event;
  event.stage = stage;
  event.detail = detail;
  emit(std::move(event));
}

void JobProgress::emit(ProgressEvent event) {
  std::lock_guard lock(mutex_);
  emitLocked(event);
}

void JobProgress::emitLocked(ProgressEvent &event) {
  event.cache = lookups_;
  event.bytesHashed = bytesHashed_;
  if (kernelsDone_ > 0 && kernelCount_ > 0) {
    // The kernels so far are the best guess for the rest: elapsed in
    // codegen over the kernels done, times the kernels left.
    double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - kernelsStart_)
            .count();
    unsigned left = kernelCount_ > kernelsDone_ ? kernelCount_ - kernelsDone_ : 0;
    event.etaSeconds = elapsed / kernelsDone_ * left;
  }
  if (sink_)
    sink_(event);
}

void JobProgress::countLookups(const std::string &kind, uint64_t hits, uint64_t misses) {
  std::lock_guard lock(mutex_);
  cache::LookupCounts &counts = lookups_[kind];
  counts.hits += hits;
  counts.misses += misses;
}

void JobProgress::addBytesHashed(uint64_t bytes) {
  std::lock_guard lock(mutex_);
  bytesHashed_ += bytes;
}

void JobProgress::beginKernels(unsigned count) {
  std::lock_guard lock(mutex_);
  kernelCount_ = count;
  kernelsDone_ = 0;
  kernelsStart_ = std::chrono::steady_clock::now();
}

void JobProgress::kernelDone(const std::string &symbol, double seconds,
                             const std::string &executor, bool cached) {
  std::lock_guard lock(mutex_);
  ++kernelsDone_;
  ProgressEvent event;
  event.stage = "kernel";
  event.kernel = symbol;
  event.kernelIndex = kernelsDone_;
  event.kernelCount = kernelCount_;
  event.kernelCached = cached;
  event.seconds = seconds;
  event.executor = executor;
  event.detail = std::to_string(kernelsDone_) + "/" + std::to_string(kernelCount_) + " " +
                 symbol + (cached ? " (cached)" : "") + " on " + executor;
  emitLocked(event);
}

} // namespace flowc::worker
