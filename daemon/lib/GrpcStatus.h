// The one mapping between flowc Status codes and gRPC status codes.
#pragma once

#include "flowc/support/Status.h"

#include "flowc/v1/flowc.pb.h"

#include <grpcpp/support/status.h>

namespace flowc::daemon {

/// `status` with its code, its message, and its fields (the file, node, op
/// and digest the message names) as a flowc.v1.ErrorDetail in the binary
/// details (trailer grpc-status-details-bin), so that no client parses
/// the text.
grpc::Status toGrpcStatus(const Status &status);

/// The fields of `status`: what toGrpcStatus sends.
flowc::v1::ErrorDetail errorDetailOf(const Status &status);

} // namespace flowc::daemon
