#pragma once

#include "DaemonContext.h"

#include "flowc/v1/flowc.grpc.pb.h"

namespace flowc::daemon {

/// flowc.v1.Admin: health, statistics, jobs (list, cancel, trace), workers
/// and shutdown.
class AdminService final : public flowc::v1::Admin::Service {
public:
  explicit AdminService(DaemonContext &context) : context_(context) {}

  grpc::Status Health(grpc::ServerContext *, const flowc::v1::HealthRequest *,
                      flowc::v1::HealthResponse *response) override;
  grpc::Status Stats(grpc::ServerContext *, const flowc::v1::StatsRequest *,
                     flowc::v1::StatsResponse *response) override;
  grpc::Status Shutdown(grpc::ServerContext *, const flowc::v1::ShutdownRequest *,
                        flowc::v1::ShutdownResponse *) override;
  grpc::Status Jobs(grpc::ServerContext *, const flowc::v1::JobsRequest *,
                    flowc::v1::JobsResponse *response) override;
  grpc::Status Workers(grpc::ServerContext *, const flowc::v1::WorkersRequest *,
                       flowc::v1::WorkersResponse *response) override;
  /// Stops a queued or running job; its clients end with CANCELLED naming
  /// the caller. The state of a job that had ended; NOT_FOUND otherwise.
  grpc::Status Cancel(grpc::ServerContext *context,
                      const flowc::v1::CancelRequest *request,
                      flowc::v1::CancelResponse *response) override;
  /// A running or recent job's trace, or one written to the trace
  /// directory; NOT_FOUND otherwise.
  grpc::Status Trace(grpc::ServerContext *, const flowc::v1::TraceRequest *request,
                     flowc::v1::TraceResponse *response) override;

private:
  DaemonContext &context_;
};

} // namespace flowc::daemon
