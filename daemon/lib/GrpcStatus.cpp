#include "GrpcStatus.h"

#include "flowc/support/ErrorFields.h"

namespace flowc::daemon {

flowc::v1::ErrorDetail errorDetailOf(const Status &status) {
  flowc::v1::ErrorDetail detail;
  detail.set_code(static_cast<int32_t>(status.code()));
  detail.set_kind(statusKindName(status.code()));
  // Proto3 strings must be UTF-8: a message quoting a hostile model's
  // bytes would otherwise not parse at the client.
  detail.set_message(validUtf8(status.message()));
  ErrorFields fields = parseErrorFields(status.message());
  detail.set_file(validUtf8(fields.file));
  detail.set_node(validUtf8(fields.node));
  detail.set_op(fields.op);
  detail.set_digest(fields.digest);
  return detail;
}

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
  std::string details;
  if (!errorDetailOf(status).SerializeToString(&details))
    details.clear();
  return grpc::Status(code, status.message(), details);
}

} // namespace flowc::daemon
