// The pipe between flowcd and a flowc-worker process: frames of a 4-byte
// little-endian length and a serialized message (see WorkerTask in
// flowc.proto), and the conversions both ends share.
#pragma once

#include "flowc/support/Status.h"
#include "flowc/v1/flowc.pb.h"
#include "flowc/worker/CompileExecutor.h"
#include "flowc/worker/Tasks.h"

#include <string>

namespace flowc::worker {

/// No frame is larger: progress carries at most 1 MiB of IR, results less.
inline constexpr uint32_t kMaxFrameBytes = 64u << 20;

/// The file descriptor a worker writes its replies to.
inline constexpr int kWorkerReplyFd = 3;

/// Writes `message` as one frame; retries short writes and EINTR.
Status writeFrame(int fd, const google::protobuf::MessageLite &message);

/// Reads one frame from a blocking `fd` into `message`. Returns false at
/// end of file before a frame begins; DataLoss for a truncated or
/// oversized frame or bytes that do not parse.
Expected<bool> readFrame(int fd, google::protobuf::MessageLite &message);

/// Splits complete frames off the front of `buffer` (bytes read so far
/// from a non-blocking pipe) and parses each into a reply; DataLoss as above.
Expected<std::vector<flowc::v1::WorkerReply>> takeFrames(std::string &buffer);

void toProto(const CompileResult &result, flowc::v1::CompileResult &out);
void toProto(const ProgressEvent &event, flowc::v1::Progress &out);
void toProto(const RemoteTierCounters &counters, flowc::v1::RemoteCacheCounters &out);
/// The remote tier's options as the daemon sends them; InvalidArgument
/// naming the bad field.
Expected<RemoteTierOptions> fromProto(const flowc::v1::RemoteCacheConfig &config);

/// What `flowc inspect` shows of a model: identity, signature, op counts,
/// the profile. Reads and imports the model.
Expected<flowc::v1::InspectResponse> inspectModel(const std::string &path,
                                                  const compiler::InputShapes &shapes);

/// The reproducer of a model compiled with `options`: its files, IR first
/// (a client writing them as they complete never has a manifest without
/// its graph), as chunks of at most 1 MiB.
Expected<std::vector<flowc::v1::ReproChunk>>
reproChunks(const std::string &path, const compiler::CompileOptions &options,
            const compiler::InputShapes &shapes, const std::string &buildId);

/// A reply that ends a task with `status`.
flowc::v1::WorkerReply errorReply(const Status &status);

/// The status a WorkerError carries.
Status statusOf(const flowc::v1::WorkerError &error);

/// A task as it crosses the pipe, and back (InvalidArgument for a digest
/// that does not parse).
flowc::v1::TaskRequest toProto(const Task &task, uint64_t id);
Expected<Task> taskFromProto(const flowc::v1::TaskRequest &request);

/// Runs a job's tasks on the daemon's executors: each task goes to the
/// daemon as a TaskRequest frame on fd 3 (kWorkerReplyFd), and its
/// TaskResult comes back on stdin. For the flowc-worker process of a job.
class DaemonTaskRunner final : public TaskRunner {
public:
  using TaskRunner::run;
  /// Tells `listener.done` as each TaskResult frame arrives (on the calling
  /// thread); a task's own progress goes from its process to the daemon.
  std::vector<Expected<TaskOutcome>> run(const std::vector<Task> &tasks,
                                         const TaskListener &listener) override;

private:
  uint64_t nextId_ = 1;
};

} // namespace flowc::worker
