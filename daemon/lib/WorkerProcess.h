// flowc-worker processes: one per job (a compile's ingest and link, an
// inspect, a repro), and the local pool's task processes. A crash, a
// runaway allocation or a kill in the compiler ends that work alone, never
// the daemon.
#pragma once

#include "flowc/support/SafeOpen.h"
#include "flowc/support/Status.h"
#include "flowc/v1/flowc.pb.h"

#include <functional>
#include <optional>
#include <string>
#include <sys/types.h>
#include <vector>

namespace flowc::daemon {

/// The flowc-worker binary next to the running flowcd; NotFound if absent.
Expected<std::string> workerExecutable();

/// Answers a task a job's worker asked for; callable from any thread, also
/// after runWorkerTask returned (the answer is then dropped).
using TaskAnswer = std::function<void(const flowc::v1::TaskResult &)>;
/// Takes a task request of a job's worker (on runWorkerTask's thread; must
/// not block) and answers it once, later.
using TaskHandler = std::function<void(flowc::v1::TaskRequest &&, TaskAnswer)>;

/// Starts `executable` on `task`, calls `onReply` (on this thread) with each
/// progress, result, inspect or repro reply, and waits for the worker to
/// end. Returns the error the worker reported; Cancelled (the worker
/// killed) once `cancelled` says so, polled a few times a second; Internal
/// naming the signal, with the worker's last log line, when it died, and
/// ResourceExhausted when it was killed for memory. `what` names the task
/// in those errors (e.g. the model path). The compile tasks a job's worker
/// asks for go to `onTask`; their answers go back on the worker's stdin.
Status runWorkerTask(const std::string &executable, const flowc::v1::WorkerTask &task,
                     const std::string &what,
                     const std::function<void(flowc::v1::WorkerReply &&)> &onReply,
                     const std::function<bool()> &cancelled,
                     const TaskHandler &onTask = nullptr);

/// A long-lived `flowc-worker serve` process of the local pool: it runs one
/// task directory after another, so a task costs no process start (the
/// worker maps MLIR and LLVM once). Not thread-safe: one task at a time.
class ServeProcess {
public:
  /// Starts `executable serve ARGS...` in a process group of its own.
  static Expected<std::unique_ptr<ServeProcess>>
  start(const std::string &executable, const std::vector<std::string> &args);
  /// Lets the process go (closes its stdin), killing it if it lingers.
  ~ServeProcess();

  struct Outcome {
    Status status;     ///< The task's own result, when the process answered.
    bool died = false; ///< It ended without answering (waitStatus says how).
    /// It answered and ended, asking for a fresh process (its GPU faulted).
    bool retired = false;
    bool cancelled = false;
    int waitStatus = 0;
    std::string lastLine; ///< What it wrote last, for a death's message.
  };
  /// Runs the task in `input`, writing `output`; kills the process once
  /// `cancelled` says so (polled a few times a second). The progress frames
  /// it sends before its answer go to `onProgress` (may be null).
  Outcome run(const std::string &input, const std::string &output,
              const std::function<bool()> &cancelled,
              const std::function<void(flowc::v1::Progress &&)> &onProgress = nullptr);

  pid_t pid() const { return pid_; }
  bool alive() const { return pid_ > 0; }
  unsigned tasksRun() const { return tasksRun_; }

private:
  ServeProcess(pid_t pid, UniqueFd task, UniqueFd reply, UniqueFd log)
      : pid_(pid), task_(std::move(task)), reply_(std::move(reply)),
        log_(std::move(log)) {}
  /// Reaps the process after it ended or was killed.
  int reap();
  /// Lets the process go: closes its stdin and reaps it, killing it if it
  /// lingers.
  void release();

  pid_t pid_;
  UniqueFd task_, reply_, log_;
  std::string replies_, logTail_;
  unsigned tasksRun_ = 0;
};

/// A task process's answer: the task's result, and whether the process
/// ends after it (WorkerReply.retire).
struct ServeAnswer {
  Status status;
  bool retire = false;
};

/// What a task process's frames say, in order: progress events go to
/// `onProgress` (may be null); the first task_done or error is the task's
/// answer (the frames after it are ignored). None when no answer came yet.
std::optional<ServeAnswer>
takeServeAnswer(std::vector<flowc::v1::WorkerReply> &frames,
                const std::function<void(flowc::v1::Progress &&)> &onProgress);

/// Why a worker process that gave no answer ended as it did, `what` first:
/// ResourceExhausted for a SIGKILL (most likely out of memory), Internal
/// naming another signal or the exit status; with its last log line.
Status deathStatus(const std::string &what, pid_t pid, int status,
                   const std::string &lastLine);

/// "SIGSEGV (Segmentation fault)", for errors.
std::string signalName(int sig);

} // namespace flowc::daemon
