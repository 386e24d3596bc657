#include "Submit.h"

#include "PlaceArtifact.h"

#include "flowc/rpc/Vocabulary.h"
#include "flowc/support/AtomicFile.h"
#include "flowc/support/Environment.h"
#include "flowc/support/SearchBudget.h"

#include <cstdlib>
#include <functional>
#include <pwd.h>
#include <unistd.h>

namespace flowc::cli {

namespace {

/// Fetches the artifact `digest` from the daemon, handing each chunk to
/// `write`; the first error (of `write` or of the stream) is the result.
Status fetchChunks(DaemonClient &client, const std::string &digest,
                   const std::function<Status(const flowc::v1::ArtifactChunk &)> &write) {
  grpc::ClientContext context;
  flowc::v1::FetchArtifactRequest request;
  request.set_digest(digest);
  auto reader = client.compiler().FetchArtifact(&context, request);
  flowc::v1::ArtifactChunk chunk;
  Status status;
  while (status.isOk() && reader->Read(&chunk))
    status = write(chunk);
  if (!status.isOk())
    context.TryCancel();
  grpc::Status rpc = reader->Finish();
  FLOWC_RETURN_IF_ERROR(status);
  return fromGrpc(rpc, "fetch artifact " + digest);
}

/// Streams the artifact into the device or pipe `path`, in order.
Status downloadInto(DaemonClient &client, const std::string &digest,
                    const std::string &path, bool fifo) {
  FLOWC_ASSIGN_OR_RETURN(int fd, openWritten(path, fifo));
  uint64_t written = 0;
  Status status =
      fetchChunks(client, digest, [&](const flowc::v1::ArtifactChunk &chunk) -> Status {
        if (chunk.offset() != written)
          return dataLoss("fetch artifact " + digest + ": a chunk at offset " +
                          std::to_string(chunk.offset()) + " where " +
                          std::to_string(written) + " was next");
        written += chunk.data().size();
        return writeAll(fd, chunk.data(), path);
      });
  ::close(fd);
  return status;
}

/// Streams the artifact into `path` (AtomicFile: no partial artifact).
Status downloadArtifact(DaemonClient &client, const std::string &digest,
                        const std::string &path) {
  FLOWC_ASSIGN_OR_RETURN(std::optional<bool> stream, existingStream(path));
  if (stream)
    return downloadInto(client, digest, path, *stream);
  FLOWC_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::create(path));
  FLOWC_RETURN_IF_ERROR(
      fetchChunks(client, digest, [&](const flowc::v1::ArtifactChunk &chunk) -> Status {
        const std::string &data = chunk.data();
        if (::pwrite(file.fd(), data.data(), data.size(),
                     static_cast<off_t>(chunk.offset())) !=
            static_cast<ssize_t>(data.size()))
          return errnoStatus(errno, "cannot write '" + file.tempPath() + "'");
        return Status::ok();
      }));
  return file.commit();
}

Status buildRequest(DaemonClient &client, const GlobalOptions &global,
                    const SubmitSpec &spec, flowc::v1::SubmitRequest &request,
                    std::optional<UploadReport> &uploaded) {
  // A path means nothing on another machine, and the daemon refuses one
  // over TCP: the model goes by upload.
  if (spec.upload || client.isRemote()) {
    FLOWC_ASSIGN_OR_RETURN(
        uploaded, uploadModel(client, spec.model, global.cacheDir + "/client", request));
  } else {
    request.set_model_path(spec.model);
    request.set_want_local_path(true);
  }
  flowc::v1::CompileOptions &options = *request.mutable_options();
  FLOWC_RETURN_IF_ERROR(setCompileOptions(spec.compile.target, spec.compile.optLevel,
                                          spec.compile.precision, options));
  for (const std::string &pass : spec.compile.disabledPasses)
    options.add_disabled_passes(pass);
  options.set_print_ir_after(spec.printIrAfter);
  request.set_thin(spec.compile.thin);
  FLOWC_ASSIGN_OR_RETURN(SearchBudget budget,
                         SearchBudget::parse(spec.compile.searchBudget));
  *request.mutable_search_budget() = rpc::toProto(budget);
  request.set_client(clientIdentity());
  request.set_explain(spec.explain);
  request.set_detach(spec.detach);
  request.set_timeout_seconds(spec.timeoutSeconds);
  request.set_priority(spec.batch ? flowc::v1::PRIORITY_BATCH
                                  : flowc::v1::PRIORITY_INTERACTIVE);
  return addInputShapes(spec.compile.inputShapes, request);
}

} // namespace

Expected<SubmitReply> submitModel(DaemonClient &client, const GlobalOptions &global,
                                  const SubmitSpec &spec, grpc::ClientContext &context,
                                  const SubmitEventFn &onEvent) {
  flowc::v1::SubmitRequest request;
  SubmitReply reply;
  FLOWC_RETURN_IF_ERROR(buildRequest(client, global, spec, request, reply.uploaded));
  auto reader = client.compiler().Submit(&context, request);
  flowc::v1::SubmitEvent event;
  while (reader->Read(&event)) {
    if (event.has_result()) {
      reply.result = event.result();
      reply.jobId = event.result().job_id();
      continue;
    }
    if (event.has_accepted())
      reply.jobId = event.accepted().job_id();
    if (onEvent)
      onEvent(event);
  }
  FLOWC_RETURN_IF_ERROR(fromGrpc(reader->Finish(), "submit " + spec.model));
  return reply;
}

Expected<std::string> fetchArtifact(DaemonClient &client,
                                    const flowc::v1::CompileResult &result,
                                    const std::string &output) {
  const std::string &digest = result.artifact_digest();
  size_t slash = digest.rfind('/');
  uint64_t size = slash == std::string::npos
                      ? 0
                      : std::strtoull(digest.c_str() + slash + 1, nullptr, 10);
  if (!result.artifact_path().empty() && size > 0) {
    auto placed = placeLocalArtifact(result.artifact_path(), size, output);
    if (placed)
      return std::string(placementName(*placed));
    if (placed.status().code() != StatusCode::FailedPrecondition)
      return placed.status();
  }
  FLOWC_RETURN_IF_ERROR(downloadArtifact(client, result.artifact_digest(), output));
  return std::string("streamed");
}

std::string clientIdentity() {
  const passwd *user = getpwuid(getuid());
  return (user ? std::string(user->pw_name) : "uid" + std::to_string(getuid())) + "@" +
         hostName().value_or("");
}

} // namespace flowc::cli
