// The daemon's front door: who may call what.
//
// The TCP port checks a bearer token on every call in one place, an
// AuthMetadataProcessor on that port's credentials (gRPC C++ 1.51's server
// interceptors cannot fail a call before its handler runs; the processor
// can, with the status it returns). The unix socket is its owner's alone
// and has every right; a model path named on it is opened only if the
// peer's uid (SO_PEERCRED) could open it.
#pragma once

#include "flowc/support/Sha256.h"
#include "flowc/support/Status.h"

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace grpc {
class AuthMetadataProcessor;
class ServerContext;
} // namespace grpc

namespace flowc::daemon {

/// What a token may do; each role includes the ones before it.
enum class Role {
  /// Fetch artifacts, inspect, status, jobs, workers, cache stats and list.
  Read = 1,
  /// Submit (and upload the blobs of a submit).
  Submit = 2,
  /// Cache gc, clear, verify, pin, unpin; shutdown.
  Admin = 3,
};

const char *roleName(Role role);

/// One line of a tokens file: a name for logs, a role and the SHA-256 of
/// the token (the token itself is never stored).
struct TokenEntry {
  std::string name;
  Role role = Role::Read;
  Sha256 digest{};
};

/// Parses a tokens file's text: one `NAME ROLE sha256:HEX` per line, `#`
/// comments and blank lines skipped. InvalidArgument naming `origin:line`
/// and what is wrong (an unknown role, a digest that is not 64 hex digits,
/// a name or digest used twice, a tenant, which this daemon cannot keep
/// apart yet).
Expected<std::vector<TokenEntry>> parseTokens(std::string_view text,
                                              const std::string &origin);

/// Reads and parses the tokens file at `path`. NotFound if it is missing;
/// FailedPrecondition if it is not a regular file, is owned by another
/// user than the daemon's or root, or grants its group or others any
/// access; InvalidArgument from parseTokens.
Expected<std::vector<TokenEntry>> loadTokensFile(const std::string &path);

/// FailedPrecondition naming `what` and `path` unless the file is regular,
/// owned by this process's user or root, and has no group or other
/// permission bits (as ssh demands of private keys). NotFound if missing.
Status requirePrivateFile(const std::string &path, const std::string &what);

/// The role a method needs, by its gRPC path ("/flowc.v1.Cache/Clear");
/// nullopt for a method the table lacks, which no token may call.
std::optional<Role> requiredRole(std::string_view method);

/// The gRPC paths of every method of every flowc.v1 service that
/// requiredRole() does not know; empty when the table is complete.
std::vector<std::string> methodsWithoutRole();

/// Whether calls need a token.
enum class TokenMode {
  /// Every call presents a token from the table.
  Required,
  /// No token: every call has every role (--insecure-loopback without
  /// --tokens, for development).
  Open,
};

/// The processor for the TCP port's credentials: it fails a call with
/// UNAUTHENTICATED (no token, a malformed header, an unknown token) or
/// PERMISSION_DENIED (a role too low, a method not in the table) before
/// its handler runs, and logs one line per refusal (never the token).
/// Thread-safe; never blocks.
std::shared_ptr<grpc::AuthMetadataProcessor>
makeTokenAuthProcessor(std::vector<TokenEntry> tokens, TokenMode mode);

/// True for a call that came in on the daemon's unix socket.
bool isUnixPeer(const grpc::ServerContext &context);

/// The uid and gid of the process that connected a unix-socket call.
struct PeerCredentials {
  uid_t uid = 0;
  gid_t gid = 0;
};

/// The unix-socket peer's credentials (SO_PEERCRED, taken at connect);
/// FailedPrecondition for a TCP call or a socket that will not say.
Expected<PeerCredentials> unixPeerCredentials(const grpc::ServerContext &context);

/// Whether the daemon may open `path` for this call: only on the unix
/// socket (FailedPrecondition over TCP, saying to submit by upload), and
/// only if the peer's uid could open it itself: root and the daemon's own
/// user can; for another uid, a child process takes the peer's uid, gid
/// and groups and opens the file (FailedPrecondition, or NotFound, with
/// what that open said). An empty path names nothing and passes.
Status authorizeModelPath(const grpc::ServerContext &context, const std::string &path);

/// Opens `path` read-only in a child process running as `uid`/`gid` with
/// the user's supplementary groups: 0 if it opened, else the errno that
/// open() failed with, or -1 if the child could not be run. Thread-safe.
int openErrorAs(uid_t uid, gid_t gid, const std::string &path);

} // namespace flowc::daemon
