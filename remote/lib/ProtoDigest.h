// Conversions between flowc's cache::Digest and REAPI's Digest message, and
// the canonical serialization every REAPI message digest is taken over.
#pragma once

#include "flowc/cache/Digest.h"
#include "flowc/support/Status.h"

#include "build/bazel/remote/execution/v2/remote_execution.pb.h"

#include <string>

namespace flowc::remote {

namespace reapi = build::bazel::remote::execution::v2;

inline reapi::Digest toProto(const cache::Digest &digest) {
  reapi::Digest proto;
  proto.set_hash(digest.hex());
  proto.set_size_bytes(static_cast<int64_t>(digest.size));
  return proto;
}

/// A digest an engine sent: 64 lowercase hex characters and a size >= 0.
/// DataLoss naming `what` otherwise.
Expected<cache::Digest> fromProto(const reapi::Digest &proto, const std::string &what);

/// Deterministic serialization (field order; flowc's REAPI messages have no
/// maps), the bytes whose digest names the message.
std::string serializeCanonical(const google::protobuf::MessageLite &message);

} // namespace flowc::remote
