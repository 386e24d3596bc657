// Tasks as REAPI Actions on a remote engine (--remote-executor): the
// Command runs `bin/flowc-worker task --input in --output out`, with this
// daemon's own flowc-worker binary in the input root by digest (a worker
// of another build can never answer), the task's files under in/, and
// platform properties OSFamily and ISA plus --remote-platform. No task
// reads a weight: a compile of any model ships its IR and kernels only.
#pragma once

#include "TaskExecutor.h"

#include "flowc/daemon/Server.h"

#include <memory>

namespace flowc::daemon {

/// The remote executor in front of `local`, which runs the tasks the engine
/// cannot take when options.fallbackLocal is set (and never otherwise).
Expected<std::unique_ptr<TaskExecutor>>
makeRemoteTaskExecutor(cache::Cache &cache, const std::string &workerPath,
                       const RemoteOptions &options,
                       std::unique_ptr<LocalExecutor> local);

} // namespace flowc::daemon
