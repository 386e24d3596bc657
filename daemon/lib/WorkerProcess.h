// Runs one task in a flowc-worker process: a crash, a runaway allocation or
// a kill in the compiler ends that task alone, never the daemon.
#pragma once

#include "flowc/support/Status.h"
#include "flowc/v1/flowc.pb.h"

#include <functional>
#include <string>

namespace flowc::daemon {

/// The flowc-worker binary next to the running flowcd; NotFound if absent.
Expected<std::string> workerExecutable();

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
                     const std::function<bool()> &cancelled);

} // namespace flowc::daemon
