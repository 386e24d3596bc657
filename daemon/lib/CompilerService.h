#pragma once

#include "DaemonContext.h"
#include "UploadService.h"

#include "flowc/v1/flowc.grpc.pb.h"

#include <memory>

namespace flowc::daemon {

/// flowc.v1.Compiler: validates each request, answers cache hits itself and
/// runs everything that reads or compiles a model in a flowc-worker process
/// (a compile through the job queue, once for identical concurrent
/// submits), streams progress back and logs one line per request.
class CompilerService final : public flowc::v1::Compiler::Service {
public:
  explicit CompilerService(DaemonContext &context);
  ~CompilerService() override;

  grpc::Status Submit(grpc::ServerContext *context,
                      const flowc::v1::SubmitRequest *request,
                      grpc::ServerWriter<flowc::v1::SubmitEvent> *writer) override;
  grpc::Status
  FetchArtifact(grpc::ServerContext *context,
                const flowc::v1::FetchArtifactRequest *request,
                grpc::ServerWriter<flowc::v1::ArtifactChunk> *writer) override;
  grpc::Status Inspect(grpc::ServerContext *context,
                       const flowc::v1::InspectRequest *request,
                       flowc::v1::InspectResponse *response) override;
  grpc::Status Repro(grpc::ServerContext *context, const flowc::v1::ReproRequest *request,
                     grpc::ServerWriter<flowc::v1::ReproChunk> *writer) override;
  // Remote submit's uploads (UploadService).
  grpc::Status FindMissingBlobs(grpc::ServerContext *context,
                                const flowc::v1::FindMissingBlobsRequest *request,
                                flowc::v1::FindMissingBlobsResponse *response) override;
  grpc::Status UploadBlob(grpc::ServerContext *context,
                          grpc::ServerReader<flowc::v1::UploadChunk> *reader,
                          flowc::v1::UploadBlobResponse *response) override;
  grpc::Status QueryUpload(grpc::ServerContext *context,
                           const flowc::v1::QueryUploadRequest *request,
                           flowc::v1::QueryUploadResponse *response) override;

private:
  struct Flight;
  struct Flights;

  /// Submit of a model path: the client's, or (`materialized`) the
  /// daemon's own copy of an uploaded model.
  grpc::Status submitPath(grpc::ServerContext *context,
                          const flowc::v1::SubmitRequest *request,
                          grpc::ServerWriter<flowc::v1::SubmitEvent> *writer,
                          const MaterializedModel *materialized);
  /// Queues the compile that `flight` stands for.
  Status startFlight(const std::shared_ptr<Flight> &flight,
                     const flowc::v1::SubmitRequest &request);
  /// Supersedes the older flight of the same client, path and options
  /// that `request`'s job `newer` replaces, if any (docs/jobs.md); `flight`
  /// is that job's, just started, or null for a submit the cache answered.
  void supersedeOlder(const std::shared_ptr<Flight> &flight, const std::string &newer,
                      const flowc::v1::SubmitRequest &request);
  /// Sends `flight`'s job id, streams its progress to this client and
  /// answers with its outcome, or with why it stopped.
  grpc::Status followFlight(grpc::ServerContext *context,
                            const std::shared_ptr<Flight> &flight,
                            const flowc::v1::SubmitRequest &request,
                            grpc::ServerWriter<flowc::v1::SubmitEvent> *writer,
                            bool leads);
  grpc::Status finishSubmit(grpc::ServerContext *context,
                            const flowc::v1::SubmitRequest &request,
                            const std::string &jobId, flowc::v1::CompileResult result,
                            grpc::ServerWriter<flowc::v1::SubmitEvent> *writer);

  DaemonContext &context_;
  std::shared_ptr<Flights> flights_;
  UploadService uploads_;
};

} // namespace flowc::daemon
