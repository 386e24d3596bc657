// What the REAPI executor and the remote cache clients share: gRPC status
// mapping, retry backoff, PEM files, deadlines and REAPI instance names.
// Private to remote/lib.
#pragma once

#include "flowc/support/Status.h"

#include <grpcpp/support/channel_arguments.h>
#include <grpcpp/support/status.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace flowc::remote {

/// Sleep before retry `attempt` (1-based): 100, 200, 400 ms... up to 1.6 s.
std::chrono::milliseconds backoff(int attempt);

/// now + `base` + one second per `bytesPerSecond` of `bytes`: a transfer's
/// deadline grows with its size, at the slowest rate still called working.
std::chrono::system_clock::time_point
deadlineFor(std::chrono::milliseconds base, uint64_t bytes, uint64_t bytesPerSecond);

/// "UNAVAILABLE" for 14; "UNKNOWN_CODE" outside google.rpc.Code.
const char *grpcCodeName(int code);

/// google.rpc.Code (the gRPC codes) to flowc's, as the executor reads
/// them. DEADLINE_EXCEEDED from an engine means the action ran out of its
/// time, a property of the task, so it is not Unavailable (which a caller
/// may answer by retrying elsewhere); PERMISSION_DENIED and
/// UNAUTHENTICATED are FailedPrecondition there.
StatusCode fromRpcCode(int code);

/// UNAVAILABLE, or CANCELLED on a call this client did not cancel (callers
/// check their own cancel flag first): a server shutting down cancels the
/// calls it has in flight ("Cancelling all calls").
bool isTransient(const grpc::Status &status);

/// A random version-4 UUID, for ByteStream upload resource names.
std::string randomUuid();

/// Messages up to `maxMessageBytes` both ways, and reconnects within 2 s:
/// gRPC waits up to 120 s between reconnects by default, failing every
/// call meanwhile, and a server that is back should be used at once.
grpc::ChannelArguments channelArguments(int maxMessageBytes);

enum class PemKind { Certificate, PrivateKey };

/// The text of the PEM file at `path` holding a `kind`; InvalidArgument
/// "`what` 'path': cannot be read" or "...: no PEM certificate in the file".
Expected<std::string> readPem(const std::string &path, std::string_view what,
                              PemKind kind = PemKind::Certificate);

/// REAPI's rules for an instance name: '/'-separated, no empty, "." or ".."
/// segment, none of the words resource names use ("blobs", "uploads", ...),
/// printable ASCII, at most 1024 bytes. InvalidArgument naming the bad part.
Status checkInstance(const std::string &instance);

/// "HOST[:PORT]" at the start of a URL's text after "SCHEME://": HOST a
/// name of [A-Za-z0-9._-] or a bracketed IPv6 address.
struct Authority {
  std::string host;
  /// 0: no ":PORT".
  unsigned port = 0;
  /// Characters of the text it spans; the caller checks what follows.
  size_t length = 0;
};

/// InvalidArgument saying why ("no host", "malformed IPv6 address", "port
/// must be a number in 1..65535") for the caller to put in context.
Expected<Authority> parseAuthority(std::string_view text);

} // namespace flowc::remote
