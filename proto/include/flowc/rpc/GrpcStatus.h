// The one mapping between flowc Status and gRPC status, for the daemon
// (which answers with it) and the CLI (which reads it back).
#pragma once

#include "flowc/support/Status.h"

#include "flowc/v1/flowc.pb.h"

#include <grpcpp/support/status.h>

#include <optional>
#include <string_view>

namespace flowc::rpc {

/// `status` with its code, its message, and its fields (the file, node, op
/// and digest the message names) as a flowc.v1.ErrorDetail in the binary
/// details (trailer grpc-status-details-bin), so that no client parses
/// the text.
grpc::Status toGrpcStatus(const Status &status);

/// The fields of `status`: what toGrpcStatus sends.
flowc::v1::ErrorDetail errorDetailOf(const Status &status);

/// The Status a finished call carries: the code toGrpcStatus maps back
/// (gRPC codes flowc does not use, such as DEADLINE_EXCEEDED, become
/// Internal), the server's message unchanged; Ok for an OK call.
Status fromGrpcStatus(const grpc::Status &status);

/// The ErrorDetail in a failed call's binary details, as toGrpcStatus
/// wrote it; nullopt when the server sent none or the bytes do not parse.
std::optional<flowc::v1::ErrorDetail> parseErrorDetail(std::string_view details);

} // namespace flowc::rpc
