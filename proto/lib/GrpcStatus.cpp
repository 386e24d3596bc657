#include "flowc/rpc/GrpcStatus.h"

#include "flowc/support/ErrorFields.h"

#include <array>
#include <utility>

namespace flowc::rpc {

namespace {

/// Both directions read this table: a code sent is the code read back.
constexpr std::array<std::pair<StatusCode, grpc::StatusCode>, 13> kCodes = {{
    {StatusCode::Ok, grpc::StatusCode::OK},
    {StatusCode::InvalidArgument, grpc::StatusCode::INVALID_ARGUMENT},
    {StatusCode::NotFound, grpc::StatusCode::NOT_FOUND},
    {StatusCode::AlreadyExists, grpc::StatusCode::ALREADY_EXISTS},
    {StatusCode::DataLoss, grpc::StatusCode::DATA_LOSS},
    {StatusCode::Unavailable, grpc::StatusCode::UNAVAILABLE},
    {StatusCode::ResourceExhausted, grpc::StatusCode::RESOURCE_EXHAUSTED},
    {StatusCode::FailedPrecondition, grpc::StatusCode::FAILED_PRECONDITION},
    {StatusCode::Unimplemented, grpc::StatusCode::UNIMPLEMENTED},
    {StatusCode::Internal, grpc::StatusCode::INTERNAL},
    {StatusCode::Cancelled, grpc::StatusCode::CANCELLED},
    {StatusCode::Unauthenticated, grpc::StatusCode::UNAUTHENTICATED},
    {StatusCode::PermissionDenied, grpc::StatusCode::PERMISSION_DENIED},
}};

} // namespace

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
  if (status.isOk())
    return grpc::Status::OK;
  grpc::StatusCode code = grpc::StatusCode::UNKNOWN;
  for (const auto &[ours, theirs] : kCodes)
    if (ours == status.code())
      code = theirs;
  std::string details;
  if (!errorDetailOf(status).SerializeToString(&details))
    details.clear();
  return grpc::Status(code, status.message(), details);
}

Status fromGrpcStatus(const grpc::Status &status) {
  for (const auto &[ours, theirs] : kCodes)
    if (theirs == status.error_code())
      return Status(ours, status.error_message());
  return internalError(status.error_message());
}

std::optional<flowc::v1::ErrorDetail> parseErrorDetail(std::string_view details) {
  if (details.empty())
    return std::nullopt;
  flowc::v1::ErrorDetail detail;
  if (!detail.ParseFromArray(details.data(), static_cast<int>(details.size())))
    return std::nullopt;
  return detail;
}

} // namespace flowc::rpc
