#pragma once

#include "DaemonContext.h"

#include "flowc/v1/flowc.grpc.pb.h"

namespace flowc::daemon {

/// flowc.v1.Compiler: validates each request, hands the compile to the job
/// queue, streams progress back and logs one line per request.
class CompilerService final : public flowc::v1::Compiler::Service {
public:
  explicit CompilerService(DaemonContext &context) : context_(context) {}

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

private:
  DaemonContext &context_;
};

} // namespace flowc::daemon
