// Abandons gRPC calls once a caller's cancellation predicate says so: a
// thread polls it about every 100 ms and cancels the call in flight.
#pragma once

#include <grpcpp/client_context.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace flowc::remote {

/// One per execute() call; no thread when there is no predicate. The
/// predicate is called from this watch's thread and the caller's.
class CancelWatch {
public:
  explicit CancelWatch(std::function<bool()> cancelled)
      : cancelled_(std::move(cancelled)) {
    if (cancelled_)
      thread_ = std::thread([this] { run(); });
  }
  ~CancelWatch() {
    if (!thread_.joinable())
      return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  CancelWatch(const CancelWatch &) = delete;
  CancelWatch &operator=(const CancelWatch &) = delete;

  bool cancelled() const { return cancelled_ && cancelled_(); }

  /// Sleeps `duration`, waking early when cancelled; false if cancelled.
  bool sleepFor(std::chrono::milliseconds duration) {
    auto until = std::chrono::steady_clock::now() + duration;
    while (std::chrono::steady_clock::now() < until) {
      if (cancelled())
        return false;
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          kPoll, until - std::chrono::steady_clock::now()));
    }
    return !cancelled();
  }

  /// The call on `context` is cancelled if the flag rises while in scope.
  class Scope {
  public:
    Scope(CancelWatch &watch, grpc::ClientContext &context) : watch_(watch) {
      std::lock_guard<std::mutex> lock(watch_.mutex_);
      watch_.context_ = &context;
      // TryCancel before the call starts cancels it as it starts.
      if (watch_.cancelled())
        context.TryCancel();
    }
    ~Scope() {
      std::lock_guard<std::mutex> lock(watch_.mutex_);
      watch_.context_ = nullptr;
    }
    Scope(const Scope &) = delete;
    Scope &operator=(const Scope &) = delete;

  private:
    CancelWatch &watch_;
  };

private:
  static constexpr std::chrono::milliseconds kPoll{100};

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      wake_.wait_for(lock, kPoll);
      if (context_ && cancelled_())
        context_->TryCancel();
    }
  }

  std::function<bool()> cancelled_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;                  // guarded by mutex_
  grpc::ClientContext *context_ = nullptr; // guarded by mutex_
  std::thread thread_;
};

} // namespace flowc::remote
