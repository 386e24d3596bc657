#include "Auth.h"

#include "flowc/support/MappedFile.h"

#include "flowc/v1/flowc.grpc.pb.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fcntl.h>
#include <grp.h>
#include <grpcpp/security/auth_metadata_processor.h>
#include <grpcpp/server_context.h>
#include <openssl/crypto.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace flowc::daemon {

namespace {

/// Every method of every flowc.v1 service and the role it needs. A method
/// missing here cannot be called over TCP at all, and the daemon refuses
/// to start (methodsWithoutRole()).
constexpr std::pair<std::string_view, Role> kMethodRoles[] = {
    {"/flowc.v1.Compiler/Submit", Role::Submit},
    {"/flowc.v1.Compiler/FetchArtifact", Role::Read},
    {"/flowc.v1.Compiler/Inspect", Role::Read},
    {"/flowc.v1.Compiler/Repro", Role::Read},
    {"/flowc.v1.Compiler/FindMissingBlobs", Role::Submit},
    {"/flowc.v1.Compiler/UploadBlob", Role::Submit},
    {"/flowc.v1.Compiler/QueryUpload", Role::Submit},
    {"/flowc.v1.Admin/Health", Role::Read},
    {"/flowc.v1.Admin/Stats", Role::Read},
    {"/flowc.v1.Admin/Shutdown", Role::Admin},
    {"/flowc.v1.Admin/Jobs", Role::Read},
    {"/flowc.v1.Admin/Workers", Role::Read},
    // Any submitter may cancel a job, as it may submit one that supersedes it.
    {"/flowc.v1.Admin/Cancel", Role::Submit},
    {"/flowc.v1.Admin/Trace", Role::Read},
    {"/flowc.v1.Cache/Stats", Role::Read},
    {"/flowc.v1.Cache/List", Role::Read},
    {"/flowc.v1.Cache/Gc", Role::Admin},
    {"/flowc.v1.Cache/Verify", Role::Admin},
    {"/flowc.v1.Cache/Pin", Role::Admin},
    {"/flowc.v1.Cache/Unpin", Role::Admin},
    {"/flowc.v1.Cache/Clear", Role::Admin},
};

constexpr size_t kMaxTokensFileBytes = 1 << 20;
constexpr std::string_view kDigestPrefix = "sha256:";
constexpr std::string_view kBearer = "bearer ";

std::optional<Role> parseRole(std::string_view text) {
  if (text == "read")
    return Role::Read;
  if (text == "submit")
    return Role::Submit;
  if (text == "admin")
    return Role::Admin;
  return std::nullopt;
}

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '-' || c == '@';
}

bool isValidName(std::string_view name) {
  return !name.empty() && name.size() <= 128 &&
         std::all_of(name.begin(), name.end(), isNameChar);
}

std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  size_t begin = 0;
  while (true) {
    begin = line.find_first_not_of(" \t\r", begin);
    if (begin == std::string_view::npos)
      return out;
    size_t end = std::min(line.find_first_of(" \t\r", begin), line.size());
    out.push_back(line.substr(begin, end - begin));
    begin = end;
  }
}

/// "Cache.Clear" from "/flowc.v1.Cache/Clear", for messages.
std::string shortMethod(std::string_view method) {
  std::string_view prefix = "/flowc.v1.";
  if (method.starts_with(prefix))
    method.remove_prefix(prefix.size());
  std::string text(method);
  std::replace(text.begin(), text.end(), '/', '.');
  return text;
}

std::string_view toView(const grpc::string_ref &ref) { return {ref.data(), ref.size()}; }

class TokenAuthProcessor final : public grpc::AuthMetadataProcessor {
public:
  TokenAuthProcessor(std::vector<TokenEntry> tokens, TokenMode mode)
      : tokens_(std::move(tokens)), mode_(mode) {}

  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata &metadata, grpc::AuthContext *context,
                       OutputMetadata *consumed, OutputMetadata *) override {
    auto path = metadata.find(":path");
    std::string_view method = path == metadata.end() ? "" : toView(path->second);
    std::optional<Role> needed = requiredRole(method);
    if (!needed)
      return refuse(grpc::StatusCode::PERMISSION_DENIED, method,
                    "method '" + std::string(method) + "' is not served over TCP");
    auto header = metadata.find("authorization");
    if (header != metadata.end())
      consumed->emplace(std::string(toView(header->first)),
                        std::string(toView(header->second)));
    if (mode_ == TokenMode::Open) {
      context->AddProperty("flowc-token", "-");
      return grpc::Status::OK;
    }
    if (header == metadata.end())
      return refuse(grpc::StatusCode::UNAUTHENTICATED, method,
                    "no bearer token: this daemon's TCP port needs an 'authorization: "
                    "Bearer TOKEN' header (flowc --token or FLOWC_TOKEN)");
    std::string_view value = toView(header->second);
    if (value.size() <= kBearer.size() ||
        !std::equal(kBearer.begin(), kBearer.end(), value.begin(),
                    [](char a, char b) { return a == std::tolower(b); }))
      return refuse(grpc::StatusCode::UNAUTHENTICATED, method,
                    "the authorization header is not 'Bearer TOKEN'");
    const TokenEntry *entry = find(value.substr(kBearer.size()));
    if (!entry)
      return refuse(grpc::StatusCode::UNAUTHENTICATED, method,
                    "unknown bearer token (not in the daemon's tokens file)");
    if (entry->role < *needed)
      return refuse(grpc::StatusCode::PERMISSION_DENIED, method,
                    "token '" + entry->name + "' has role " + roleName(entry->role) +
                        "; " + shortMethod(method) + " needs " + roleName(*needed),
                    entry->name);
    context->AddProperty("flowc-token", entry->name);
    return grpc::Status::OK;
  }

private:
  /// Compares with every entry in constant time each, so that the time
  /// taken says nothing about which digest bytes matched.
  const TokenEntry *find(std::string_view token) const {
    Sha256 digest = sha256Of(token);
    const TokenEntry *found = nullptr;
    for (const TokenEntry &entry : tokens_)
      if (CRYPTO_memcmp(entry.digest.data(), digest.data(), digest.size()) == 0)
        found = &entry;
    return found;
  }

  static grpc::Status refuse(grpc::StatusCode code, std::string_view method,
                             const std::string &why, const std::string &token = "-") {
    spdlog::warn("refused method={} token={} code={} reason=\"{}\"", method, token,
                 code == grpc::StatusCode::UNAUTHENTICATED ? "UNAUTHENTICATED"
                                                           : "PERMISSION_DENIED",
                 why);
    return grpc::Status(code, why);
  }

  const std::vector<TokenEntry> tokens_;
  const TokenMode mode_;
};

} // namespace

const char *roleName(Role role) {
  switch (role) {
  case Role::Read:
    return "read";
  case Role::Submit:
    return "submit";
  case Role::Admin:
    return "admin";
  }
  return "?";
}

Expected<std::vector<TokenEntry>> parseTokens(std::string_view text,
                                              const std::string &origin) {
  std::vector<TokenEntry> tokens;
  size_t lineNumber = 0;
  for (size_t begin = 0; begin < text.size();) {
    size_t end = std::min(text.find('\n', begin), text.size());
    std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    ++lineNumber;
    std::string where = origin + ":" + std::to_string(lineNumber);
    std::vector<std::string_view> parts = fields(line);
    if (parts.empty() || parts[0].starts_with("#"))
      continue;
    if (std::any_of(line.begin(), line.end(), [](char c) {
          return static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\r';
        }))
      return invalidArgument(where + ": control character in the line");
    for (std::string_view part : parts)
      if (part.starts_with("tenant="))
        return invalidArgument(where + ": '" + std::string(part) +
                               "': tenants are not supported yet (their entries would "
                               "not be kept apart)");
    if (parts.size() != 3)
      return invalidArgument(where + ": expected 'NAME ROLE sha256:HEX', got " +
                             std::to_string(parts.size()) + " fields");
    TokenEntry entry;
    if (!isValidName(parts[0]))
      return invalidArgument(where + ": token name '" + std::string(parts[0]) +
                             "' is not 1 to 128 of A-Z a-z 0-9 . _ - @");
    entry.name = std::string(parts[0]);
    std::optional<Role> role = parseRole(parts[1]);
    if (!role)
      return invalidArgument(where + ": unknown role '" + std::string(parts[1]) +
                             "' (read, submit or admin)");
    entry.role = *role;
    std::string_view credential = parts[2];
    std::optional<Sha256> digest;
    if (credential.starts_with(kDigestPrefix))
      digest = parseSha256Hex(credential.substr(kDigestPrefix.size()));
    // The token itself is not quoted back: a token pasted by mistake
    // would land in a log.
    if (!digest)
      return invalidArgument(where + ": the credential of '" + entry.name +
                             "' is not sha256: and 64 lowercase hex digits (store "
                             "the token's digest: printf %s TOKEN | sha256sum)");
    entry.digest = *digest;
    for (const TokenEntry &other : tokens) {
      if (other.name == entry.name)
        return invalidArgument(where + ": token name '" + entry.name + "' is used twice");
      if (other.digest == entry.digest)
        return invalidArgument(where + ": '" + entry.name + "' has the same token as '" +
                               other.name + "'");
    }
    tokens.push_back(std::move(entry));
  }
  if (tokens.empty())
    return invalidArgument(origin + ": no tokens (one 'NAME ROLE sha256:HEX' per line)");
  return tokens;
}

Status requirePrivateFile(const std::string &path, const std::string &what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return errno == ENOENT ? notFound(what + " '" + path + "' does not exist")
                           : errnoStatus(errno, what + " '" + path + "'");
  if (!S_ISREG(st.st_mode))
    return failedPrecondition(what + " '" + path + "' is not a regular file");
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return failedPrecondition(what + " '" + path + "' belongs to uid " +
                              std::to_string(st.st_uid) +
                              ", not to the daemon's user or root");
  if (st.st_mode & 077) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return failedPrecondition(what + " '" + path + "' has mode " + mode +
                              ": its group or others may access it; chmod 600 it");
  }
  return Status::ok();
}

Expected<std::vector<TokenEntry>> loadTokensFile(const std::string &path) {
  FLOWC_RETURN_IF_ERROR(requirePrivateFile(path, "tokens file"));
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 &&
      static_cast<size_t>(st.st_size) > kMaxTokensFileBytes)
    return invalidArgument("tokens file '" + path + "' is larger than 1 MiB");
  FLOWC_ASSIGN_OR_RETURN(std::string text, readFileToString(path));
  return parseTokens(text, path);
}

std::optional<Role> requiredRole(std::string_view method) {
  for (const auto &[name, role] : kMethodRoles)
    if (name == method)
      return role;
  return std::nullopt;
}

std::vector<std::string> methodsWithoutRole() {
  std::vector<std::string> missing;
  const google::protobuf::FileDescriptor *file =
      flowc::v1::SubmitRequest::descriptor()->file();
  for (int s = 0; s < file->service_count(); ++s) {
    const google::protobuf::ServiceDescriptor *service = file->service(s);
    for (int m = 0; m < service->method_count(); ++m) {
      std::string path = "/" + service->full_name() + "/" + service->method(m)->name();
      if (!requiredRole(path))
        missing.push_back(path);
    }
  }
  return missing;
}

std::shared_ptr<grpc::AuthMetadataProcessor>
makeTokenAuthProcessor(std::vector<TokenEntry> tokens, TokenMode mode) {
  return std::make_shared<TokenAuthProcessor>(std::move(tokens), mode);
}

namespace {

/// The socket of a unix-socket call: the listener hands each accepted
/// connection to gRPC as a file descriptor, which names the peer "fd:N".
/// A call holds its connection, so N is that connection while the call
/// runs.
std::optional<int> unixPeerFd(const grpc::ServerContext &context) {
  std::string peer = context.peer();
  std::string_view prefix = "fd:";
  if (!peer.starts_with(prefix))
    return std::nullopt;
  int fd = -1;
  auto [end, ec] =
      std::from_chars(peer.data() + prefix.size(), peer.data() + peer.size(), fd);
  if (ec != std::errc() || end != peer.data() + peer.size() || fd < 0)
    return std::nullopt;
  return fd;
}

/// The supplementary groups of `uid`'s user, with `gid`; just `gid` for a
/// uid without a passwd entry.
std::vector<gid_t> groupsOf(uid_t uid, gid_t gid) {
  std::vector<char> buffer(16384);
  passwd entry;
  passwd *found = nullptr;
  if (getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) != 0 || !found)
    return {gid};
  std::vector<gid_t> groups(64);
  int count = static_cast<int>(groups.size());
  if (getgrouplist(found->pw_name, gid, groups.data(), &count) < 0) {
    groups.resize(count);
    if (getgrouplist(found->pw_name, gid, groups.data(), &count) < 0)
      return {gid};
  }
  groups.resize(count);
  return groups;
}

} // namespace

bool isUnixPeer(const grpc::ServerContext &context) {
  return unixPeerFd(context).has_value();
}

Expected<PeerCredentials> unixPeerCredentials(const grpc::ServerContext &context) {
  std::optional<int> fd = unixPeerFd(context);
  if (!fd)
    return failedPrecondition("the call did not come in on the unix socket");
  ucred credentials{};
  socklen_t size = sizeof credentials;
  if (::getsockopt(*fd, SOL_SOCKET, SO_PEERCRED, &credentials, &size) != 0)
    return failedPrecondition(std::string("cannot read the unix-socket peer's "
                                          "credentials: ") +
                              std::strerror(errno));
  return PeerCredentials{credentials.uid, credentials.gid};
}

int openErrorAs(uid_t uid, gid_t gid, const std::string &path) {
  // Everything the child needs is ready before fork(): after it, in a
  // multi-threaded process, the child makes only system calls. The raw
  // syscalls change this thread's credentials alone (glibc's wrappers
  // would signal threads that the child does not have).
  std::vector<gid_t> groups = groupsOf(uid, gid);
  pid_t child = ::fork();
  if (child < 0)
    return -1;
  if (child == 0) {
    if (::syscall(SYS_setgroups, groups.size(), groups.data()) != 0 ||
        ::syscall(SYS_setresgid, gid, gid, gid) != 0 ||
        ::syscall(SYS_setresuid, uid, uid, uid) != 0)
      ::_exit(255);
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    ::_exit(fd >= 0 ? 0 : std::min(errno, 254));
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0)
    if (errno != EINTR)
      return -1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) == 255)
    return -1;
  return WEXITSTATUS(status);
}

Status authorizeModelPath(const grpc::ServerContext &context, const std::string &path) {
  if (path.empty())
    return Status::ok();
  if (!isUnixPeer(context))
    return failedPrecondition(
        "model_path '" + path +
        "' names a file on the daemon's machine, which only clients on its unix socket "
        "may do; over TCP, submit by upload (flowc --daemon grpcs://HOST:PORT submit "
        "sends the model's contents, never a path)");
  FLOWC_ASSIGN_OR_RETURN(PeerCredentials peer, unixPeerCredentials(context));
  // Root reads anything; a client of the daemon's own uid already has the
  // daemon's rights (it could ptrace it).
  if (peer.uid == 0 || peer.uid == ::geteuid())
    return Status::ok();
  int error = openErrorAs(peer.uid, peer.gid, path);
  if (error == 0)
    return Status::ok();
  std::string who =
      "model_path '" + path + "': the client (uid " + std::to_string(peer.uid) + ") ";
  if (error < 0)
    return failedPrecondition(who + "could not be checked: cannot run a process as it");
  if (error == ENOENT)
    return notFound(who + "cannot open it: no such file");
  return failedPrecondition(who + "cannot open it: " + std::strerror(error) +
                            " (the daemon opens only what its client could)");
}

} // namespace flowc::daemon
