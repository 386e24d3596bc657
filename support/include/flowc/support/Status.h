// Errors as values: every public API across a component boundary returns a
// Status or an Expected<T>. Messages name the file, node, op or digest at
// fault so that the one-line error a user sees is actionable.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace flowc {

enum class StatusCode {
  Ok,
  InvalidArgument,
  NotFound,
  AlreadyExists,
  DataLoss,
  Unavailable,
  ResourceExhausted,
  FailedPrecondition,
  Unimplemented,
  Internal,
  Cancelled,
  /// No or bad credentials (HTTP 401, gRPC UNAUTHENTICATED).
  Unauthenticated,
  /// Credentials that do not allow the operation (HTTP 403, gRPC
  /// PERMISSION_DENIED): a read-only token or endpoint asked to write.
  PermissionDenied,
};

/// Short stable name of a code ("InvalidArgument"), used in logs and JSON.
const char *statusCodeName(StatusCode code);

class [[nodiscard]] Status {
public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool isOk() const { return code_ == StatusCode::Ok; }
  explicit operator bool() const { return isOk(); }
  StatusCode code() const { return code_; }
  const std::string &message() const { return message_; }

  /// Prefixes the message with where the error happened ("ingest model.onnx: ...").
  Status withContext(const std::string &context) const {
    if (isOk())
      return *this;
    return Status(code_, context + ": " + message_);
  }

  /// "InvalidArgument: message", for logs.
  std::string toString() const;

private:
  StatusCode code_ = StatusCode::Ok;
  std::string message_;
};

inline Status invalidArgument(std::string m) {
  return Status(StatusCode::InvalidArgument, std::move(m));
}
inline Status notFound(std::string m) {
  return Status(StatusCode::NotFound, std::move(m));
}
inline Status dataLoss(std::string m) {
  return Status(StatusCode::DataLoss, std::move(m));
}
inline Status unavailable(std::string m) {
  return Status(StatusCode::Unavailable, std::move(m));
}
inline Status resourceExhausted(std::string m) {
  return Status(StatusCode::ResourceExhausted, std::move(m));
}
inline Status failedPrecondition(std::string m) {
  return Status(StatusCode::FailedPrecondition, std::move(m));
}
inline Status unimplemented(std::string m) {
  return Status(StatusCode::Unimplemented, std::move(m));
}
inline Status unauthenticated(std::string m) {
  return Status(StatusCode::Unauthenticated, std::move(m));
}
inline Status permissionDenied(std::string m) {
  return Status(StatusCode::PermissionDenied, std::move(m));
}
inline Status internalError(std::string m) {
  return Status(StatusCode::Internal, std::move(m));
}

/// Status from errno after a failed system call: ENOSPC becomes
/// ResourceExhausted, ENOENT NotFound, the rest Internal/Unavailable.
Status errnoStatus(int err, const std::string &what);

/// A value or the Status explaining why there is none.
template <typename T> class [[nodiscard]] Expected {
public:
  Expected(T value) : storage_(std::move(value)) {}
  Expected(Status status) : storage_(std::move(status)) {
    assert(!std::get<Status>(storage_).isOk() && "Expected built from an ok Status");
  }

  bool hasValue() const { return std::holds_alternative<T>(storage_); }
  explicit operator bool() const { return hasValue(); }

  T &operator*() { return std::get<T>(storage_); }
  const T &operator*() const { return std::get<T>(storage_); }
  T *operator->() { return &std::get<T>(storage_); }
  const T *operator->() const { return &std::get<T>(storage_); }
  T &value() { return std::get<T>(storage_); }
  T takeValue() { return std::move(std::get<T>(storage_)); }

  const Status &status() const {
    static const Status okStatus;
    return hasValue() ? okStatus : std::get<Status>(storage_);
  }

private:
  std::variant<T, Status> storage_;
};

} // namespace flowc

/// Returns early from the enclosing function when `expr` is not ok.
#define FLOWC_RETURN_IF_ERROR(expr)                                                      \
  do {                                                                                   \
    ::flowc::Status flowcStatus_ = (expr);                                               \
    if (!flowcStatus_.isOk())                                                            \
      return flowcStatus_;                                                               \
  } while (0)

#define FLOWC_CONCAT_INNER(a, b) a##b
#define FLOWC_CONCAT(a, b) FLOWC_CONCAT_INNER(a, b)

/// `FLOWC_ASSIGN_OR_RETURN(auto x, f());` binds the value or returns the error.
#define FLOWC_ASSIGN_OR_RETURN(lhs, expr)                                                \
  FLOWC_ASSIGN_OR_RETURN_IMPL(FLOWC_CONCAT(flowcExpected_, __LINE__), lhs, expr)
#define FLOWC_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr)                                      \
  auto tmp = (expr);                                                                     \
  if (!tmp.hasValue())                                                                   \
    return tmp.status();                                                                 \
  lhs = tmp.takeValue()
