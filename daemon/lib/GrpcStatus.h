// The one mapping between flowc Status codes and gRPC status codes.
#pragma once

#include "flowc/support/Status.h"

#include <grpcpp/support/status.h>

namespace flowc::daemon {

grpc::Status toGrpcStatus(const Status &status);

} // namespace flowc::daemon
