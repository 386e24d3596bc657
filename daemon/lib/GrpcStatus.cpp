#include "GrpcStatus.h"

namespace flowc::daemon {

grpc::Status toGrpcStatus(const Status &status) {
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  switch (status.code()) {
  case StatusCode::Ok:
    return grpc::Status::OK;
  case StatusCode::InvalidArgument:
    code = grpc::StatusCode::INVALID_ARGUMENT;
    break;
  case StatusCode::NotFound:
    code = grpc::StatusCode::NOT_FOUND;
    break;
  case StatusCode::AlreadyExists:
    code = grpc::StatusCode::ALREADY_EXISTS;
    break;
  case StatusCode::DataLoss:
    code = grpc::StatusCode::DATA_LOSS;
    break;
  case StatusCode::Unavailable:
    code = grpc::StatusCode::UNAVAILABLE;
    break;
  case StatusCode::ResourceExhausted:
    code = grpc::StatusCode::RESOURCE_EXHAUSTED;
    break;
  case StatusCode::FailedPrecondition:
    code = grpc::StatusCode::FAILED_PRECONDITION;
    break;
  case StatusCode::Unimplemented:
    code = grpc::StatusCode::UNIMPLEMENTED;
    break;
  case StatusCode::Internal:
    code = grpc::StatusCode::INTERNAL;
    break;
  case StatusCode::Cancelled:
    code = grpc::StatusCode::CANCELLED;
    break;
  case StatusCode::Unauthenticated:
    code = grpc::StatusCode::UNAUTHENTICATED;
    break;
  case StatusCode::PermissionDenied:
    code = grpc::StatusCode::PERMISSION_DENIED;
    break;
  }
  return grpc::Status(code, status.message());
}

} // namespace flowc::daemon
