#include "flowc/support/Status.h"

#include <cerrno>
#include <cstring>

namespace flowc {

const char *statusCodeName(StatusCode code) {
  switch (code) {
  case StatusCode::Ok:
    return "Ok";
  case StatusCode::InvalidArgument:
    return "InvalidArgument";
  case StatusCode::NotFound:
    return "NotFound";
  case StatusCode::AlreadyExists:
    return "AlreadyExists";
  case StatusCode::DataLoss:
    return "DataLoss";
  case StatusCode::Unavailable:
    return "Unavailable";
  case StatusCode::ResourceExhausted:
    return "ResourceExhausted";
  case StatusCode::FailedPrecondition:
    return "FailedPrecondition";
  case StatusCode::Unimplemented:
    return "Unimplemented";
  case StatusCode::Internal:
    return "Internal";
  case StatusCode::Cancelled:
    return "Cancelled";
  case StatusCode::Unauthenticated:
    return "Unauthenticated";
  case StatusCode::PermissionDenied:
    return "PermissionDenied";
  }
  return "Unknown";
}

std::string Status::toString() const {
  if (isOk())
    return "Ok";
  return std::string(statusCodeName(code_)) + ": " + message_;
}

Status errnoStatus(int err, const std::string &what) {
  std::string message = what + ": " + std::strerror(err);
  switch (err) {
  case ENOSPC:
  case EDQUOT:
  case ENOMEM:
    return resourceExhausted(message);
  case ENOENT:
    return notFound(message);
  case EACCES:
  case EPERM:
    return failedPrecondition(message);
  case EIO:
    return dataLoss(message);
  default:
    return internalError(message);
  }
}

} // namespace flowc
