// The client's half of a submit, shared by `flowc submit` and `flowc watch`:
// the request built from the command's options, the event stream read, and
// the artifact placed where the user asked.
#pragma once

#include "Commands.h"
#include "RemoteSubmit.h"

#include "flowc/support/Status.h"

#include <functional>
#include <optional>
#include <string>

namespace flowc::cli {

/// What to compile and how.
struct SubmitSpec {
  std::string model; ///< Absolute path of a model file or reproducer directory.
  CompileFlags compile;
  std::string printIrAfter;
  bool batch = false;
  bool explain = false;
  /// Upload the model's blobs instead of naming its path (RemoteSubmit.h);
  /// always so for a daemon on TCP.
  bool upload = false;
  /// Return once the job is accepted; it runs on without this client.
  bool detach = false;
  double timeoutSeconds = 0;
};

struct SubmitReply {
  std::string jobId;
  /// Absent for a detached submit.
  std::optional<flowc::v1::CompileResult> result;
  std::optional<UploadReport> uploaded;
};

/// Called with every event but the result, on the calling thread.
using SubmitEventFn = std::function<void(const flowc::v1::SubmitEvent &)>;

/// Submits `spec` and reads its events until the result. `context` lets
/// another thread cancel the submit (TryCancel). The daemon's status on
/// failure, with its message.
Expected<SubmitReply> submitModel(DaemonClient &client, const GlobalOptions &global,
                                  const SubmitSpec &spec, grpc::ClientContext &context,
                                  const SubmitEventFn &onEvent);

/// Places the artifact at `output`: linked, cloned or copied from the
/// daemon's cache file where it can be, else streamed. Says which
/// ("hardlink", "reflink", "copy", "streamed", ...).
Expected<std::string> fetchArtifact(DaemonClient &client,
                                    const flowc::v1::CompileResult &result,
                                    const std::string &output);

/// "user@host": whom the daemon's fair share and supersede count a submit for.
std::string clientIdentity();

} // namespace flowc::cli
