// Runs one task in a flowc-worker process: a crash, a runaway allocation or
// a kill in the compiler ends that task alone, never the daemon.
#pragma once

#include "flowc/support/Status.h"
#include "flowc/v1/flowc.pb.h"

#include <functional>
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
/// in those errors (e.g. the model path).
Status runWorkerTask(const std::string &executable, const flowc::v1::WorkerTask &task,
                     const std::string &what,
                     const std::function<void(flowc::v1::WorkerReply &&)> &onReply,
                     const std::function<bool()> &cancelled,
                     const TaskHandler &onTask = nullptr);

/// How a task process ended.
struct TaskProcessExit {
  int status = 0;        ///< As waitpid reports it.
  std::string lastLines; ///< The end of what it wrote to stdout and stderr.
  bool cancelled = false;
};

/// Runs `executable` with `args` (argv[1..]) in `workingDir`, in a process
/// group of its own, killed once `cancelled` says so; `onStart` gets its
/// pid. Unavailable if it cannot start.
Expected<TaskProcessExit> runTaskProcess(const std::string &executable,
                                         const std::vector<std::string> &args,
                                         const std::string &workingDir,
                                         const std::function<bool()> &cancelled,
                                         const std::function<void(pid_t)> &onStart);

/// "SIGSEGV (Segmentation fault)", for errors.
std::string signalName(int sig);

} // namespace flowc::daemon
