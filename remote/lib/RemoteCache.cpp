#include "flowc/remote/RemoteCache.h"

#include "RemoteCacheBackends.h"
#include "RemoteSupport.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <set>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace flowc::remote {

namespace {

constexpr size_t kMaxUrlBytes = 2048;
constexpr size_t kMaxHeaderBytes = 8192;
constexpr auto kMaxTimeout = std::chrono::hours(1);

Status badUrl(const std::string &url, const std::string &why) {
  return invalidArgument("remote cache URL '" + url.substr(0, 200) + "': " + why +
                         " (expected grpc://HOST:PORT, grpcs://HOST:PORT, "
                         "http://HOST[:PORT]/PREFIX or https://HOST[:PORT]/PREFIX)");
}

bool isUrlPathChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '.' || c == '_' || c == '~' || c == '/';
}

// '/'-separated segments of unreserved characters, none empty, "." or
// "..": the server sees exactly the path flowc means (no percent-escapes,
// no query, no traversal).
Status checkUrlPath(std::string_view path, const std::string &what) {
  for (char c : path)
    if (!isUrlPathChar(c))
      return invalidArgument(what + " holds '" + std::string(1, c) +
                             "' (only A-Z a-z 0-9 - . _ ~ and '/')");
  size_t start = 0;
  while (start < path.size()) {
    size_t end = std::min(path.find('/', start), path.size());
    std::string_view segment = path.substr(start, end - start);
    if (segment.empty())
      return invalidArgument(what + " has an empty segment ('//')");
    if (segment == "." || segment == "..")
      return invalidArgument(what + " has a '" + std::string(segment) + "' segment");
    start = end + 1;
  }
  return Status::ok();
}

struct Scheme {
  std::string_view prefix;
  bool tls, http;
};
constexpr std::array<Scheme, 4> kSchemes = {{{"grpcs://", true, false},
                                             {"grpc://", false, false},
                                             {"https://", true, true},
                                             {"http://", false, true}}};

const Scheme *schemeOf(std::string_view url) {
  for (const Scheme &scheme : kSchemes)
    if (url.starts_with(scheme.prefix))
      return &scheme;
  return nullptr;
}

Status checkUrl(const std::string &url) {
  if (url.empty())
    return badUrl(url, "empty");
  if (url.size() > kMaxUrlBytes)
    return badUrl(url, "longer than " + std::to_string(kMaxUrlBytes) + " bytes");
  const Scheme *scheme = schemeOf(url);
  if (scheme == nullptr)
    return badUrl(url, "scheme must be grpc://, grpcs://, http:// or https://");
  std::string_view rest = std::string_view(url).substr(scheme->prefix.size());
  Expected<Authority> authority = parseAuthority(rest);
  if (!authority)
    return badUrl(url, authority.status().message());
  std::string_view after = rest.substr(authority->length);
  if (!scheme->http) {
    if (authority->port == 0)
      return badUrl(url, after.empty() ? "no port"
                                       : "unexpected '" + std::string(1, after.front()) +
                                             "' after the host (no user, path or query)");
    if (!after.empty())
      return badUrl(url, "unexpected text after the port (no path for gRPC)");
    return Status::ok();
  }
  if (!after.empty() && after.front() != '/')
    return badUrl(url, authority->port != 0
                           ? "unexpected text after the port"
                           : "unexpected '" + std::string(1, after.front()) +
                                 "' after the host (no user or query)");
  // A trailing '/' is tolerated: "http://h/cache/" is "http://h/cache".
  std::string_view path = after;
  while (!path.empty() && path.back() == '/')
    path.remove_suffix(1);
  Status pathStatus = checkUrlPath(path.empty() ? path : path.substr(1), "path");
  if (!pathStatus)
    return badUrl(url, pathStatus.message());
  return Status::ok();
}

bool isHeaderNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '-' || c == '_' || c == '.';
}

std::string lowered(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower;
}

// Names that are both HTTP tokens and gRPC metadata keys once lower-cased;
// values of visible ASCII, spaces and tabs (no CR/LF: no header injection).
Status checkHeader(const std::string &name, const std::string &value) {
  auto bad = [&](const std::string &why) {
    return invalidArgument("remote header '" + name.substr(0, 100) + "': " + why);
  };
  if (name.empty())
    return invalidArgument("remote header with an empty name (expected NAME=VALUE)");
  if (!std::all_of(name.begin(), name.end(), isHeaderNameChar))
    return bad("the name may hold only A-Z a-z 0-9 - _ .");
  const std::string lower = lowered(name);
  if (lower.starts_with("grpc-") || lower.ends_with("-bin"))
    return bad("names starting 'grpc-' or ending '-bin' are gRPC's own");
  if (isReservedHeader(lower))
    return bad("flowc sets this header itself");
  if (name.size() + value.size() > kMaxHeaderBytes)
    return bad("longer than " + std::to_string(kMaxHeaderBytes) + " bytes");
  for (char c : value) {
    auto byte = static_cast<unsigned char>(c);
    if ((byte < 0x20 && byte != '\t') || byte >= 0x7f)
      return bad("the value holds a control or non-ASCII byte (a newline?)");
  }
  return Status::ok();
}

} // namespace

bool isReservedHeader(std::string_view lowerName) {
  static constexpr std::array<std::string_view, 10> kReserved = {
      "host",       "content-length", "content-type", "transfer-encoding",
      "connection", "expect",         "te",           "range",
      "user-agent", "upgrade"};
  return std::find(kReserved.begin(), kReserved.end(), lowerName) != kReserved.end();
}

TransferCounters RemoteCacheBase::counters() const {
  TransferCounters counters;
  counters.requests = requests_;
  counters.blobsUploaded = blobsUploaded_;
  counters.bytesUploaded = bytesUploaded_;
  counters.blobsDownloaded = blobsDownloaded_;
  counters.bytesDownloaded = bytesDownloaded_;
  counters.blobsStreamed = blobsStreamed_;
  return counters;
}

std::string RemoteCacheBase::describe() const {
  if (options_.instance.empty())
    return options_.url;
  return options_.url + " instance " + options_.instance;
}

std::pair<std::function<Status(std::string_view)>, std::function<Status()>>
appendTo(std::string &bytes) {
  return {[&bytes](std::string_view data) {
            bytes.append(data);
            return Status::ok();
          },
          [&bytes] {
            bytes.clear();
            return Status::ok();
          }};
}

bool isEmptyBlob(const cache::Digest &digest) {
  static const cache::Digest kEmpty = cache::digestOf("");
  return digest == kEmpty;
}

Status checkInMemorySize(const cache::Digest &digest) {
  constexpr uint64_t kMaxInMemoryBytes = uint64_t(64) << 20;
  if (digest.size <= kMaxInMemoryBytes)
    return Status::ok();
  return invalidArgument("blob " + digest.toString() + " is over the " +
                         std::to_string(kMaxInMemoryBytes >> 20) +
                         " MiB read into memory (download it to a file)");
}

CacheUrl splitCacheUrl(const std::string &url) {
  const Scheme *scheme = schemeOf(url);
  assert(scheme && "splitCacheUrl on a URL validate() refused");
  CacheUrl split;
  split.tls = scheme->tls;
  split.http = scheme->http;
  if (!split.http) {
    split.target = url.substr(scheme->prefix.size());
    return split;
  }
  split.target = url;
  while (split.target.size() > scheme->prefix.size() && split.target.back() == '/')
    split.target.pop_back();
  return split;
}

BlobSource BlobSource::fromBytes(std::string_view bytes) {
  BlobSource source;
  source.bytes_ = bytes;
  source.size_ = bytes.size();
  return source;
}

Expected<BlobSource> BlobSource::fromFile(const std::string &path,
                                          const cache::Digest &digest) {
  BlobSource source;
  source.path_ = path;
  source.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (source.fd_ < 0)
    return errnoStatus(errno, "upload of '" + path + "'");
  struct stat info {};
  if (::fstat(source.fd_, &info) != 0)
    return errnoStatus(errno, "upload of '" + path + "'");
  if (!S_ISREG(info.st_mode))
    return invalidArgument("upload of '" + path + "': not a regular file");
  source.size_ = static_cast<uint64_t>(info.st_size);
  if (source.size_ != digest.size)
    return invalidArgument("upload of '" + path + "': the file holds " +
                           std::to_string(source.size_) + " bytes, its digest " +
                           digest.toString() + " says " + std::to_string(digest.size));
  return source;
}

BlobSource::BlobSource(BlobSource &&other) noexcept
    : bytes_(other.bytes_), fd_(std::exchange(other.fd_, -1)),
      path_(std::move(other.path_)), size_(other.size_) {}

BlobSource::~BlobSource() {
  if (fd_ >= 0)
    ::close(fd_);
}

Status BlobSource::read(uint64_t offset, char *out, size_t length) const {
  if (fd_ < 0) {
    std::copy_n(bytes_.data() + offset, length, out);
    return Status::ok();
  }
  while (length > 0) {
    ssize_t got = ::pread(fd_, out, length, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return errnoStatus(errno, "upload of '" + path_ + "'");
    if (got == 0)
      return failedPrecondition("upload of '" + path_ +
                                "': the file shrank while it was sent");
    out += got;
    offset += static_cast<uint64_t>(got);
    length -= static_cast<size_t>(got);
  }
  return Status::ok();
}

std::string BlobSource::describe() const {
  return fd_ >= 0 ? "file '" + path_ + "'" : std::string("the bytes given");
}

Status writeAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t wrote = ::write(fd, data.data(), data.size());
    if (wrote < 0 && errno == EINTR)
      continue;
    if (wrote < 0)
      return errnoStatus(errno, "writing a downloaded blob");
    data.remove_prefix(static_cast<size_t>(wrote));
  }
  return Status::ok();
}

Status checkUploadDigest(const cache::Digest &digest, const cache::Digest &actual,
                         const std::string &source) {
  if (actual == digest)
    return Status::ok();
  return invalidArgument("upload of " + source + ": its bytes hash to " +
                         actual.toString() + ", not to the digest given, " +
                         digest.toString());
}

Status downloadMismatch(const cache::Digest &digest, const cache::Digest &actual,
                        const std::string &where) {
  return dataLoss("blob " + digest.toString() + " from " + where +
                  ": the bytes received hash to " + actual.toString() +
                  " (a corrupt or tampered blob; not used)");
}

Expected<reapi::ActionResult> toActionResult(const RemoteEntry &entry,
                                             const cache::Digest &key) {
  reapi::ActionResult result;
  std::set<std::string_view> seen;
  for (const EntryOutput &output : entry.outputs) {
    if (output.path.empty() || output.path.find('\0') != std::string::npos)
      return invalidArgument("entry " + key.toString() +
                             ": an output with an empty path or a NUL");
    if (!seen.insert(output.path).second)
      return invalidArgument("entry " + key.toString() + ": output '" + output.path +
                             "' appears twice");
    reapi::OutputFile *file = result.add_output_files();
    file->set_path(output.path);
    *file->mutable_digest() = toProto(output.digest);
  }
  return result;
}

Expected<RemoteEntry> fromActionResult(const reapi::ActionResult &result,
                                       const cache::Digest &key,
                                       const std::string &where) {
  RemoteEntry entry;
  for (const reapi::OutputFile &file : result.output_files()) {
    if (file.path().empty())
      return dataLoss("entry " + key.toString() + " from " + where +
                      ": an output with an empty path");
    FLOWC_ASSIGN_OR_RETURN(
        cache::Digest digest,
        fromProto(file.digest(), "entry " + key.toString() + " from " + where +
                                     ", output '" + file.path().substr(0, 200) + "'"));
    entry.outputs.push_back({file.path(), digest});
  }
  return entry;
}

Status RemoteCacheOptions::validate() const {
  FLOWC_RETURN_IF_ERROR(checkUrl(url));
  const Scheme *scheme = schemeOf(url);
  FLOWC_RETURN_IF_ERROR(checkInstance(instance));
  if (scheme->http && !instance.empty())
    FLOWC_RETURN_IF_ERROR(
        checkUrlPath(instance, "remote instance name '" + instance.substr(0, 200) + "'")
            .withContext("for " + url.substr(0, 200)));
  for (const auto &[name, value] : headers)
    FLOWC_RETURN_IF_ERROR(checkHeader(name, value));
  if (!scheme->tls) {
    const std::string &tlsFile = !caFile.empty()           ? caFile
                                 : !clientCertFile.empty() ? clientCertFile
                                                           : clientKeyFile;
    if (!tlsFile.empty())
      return invalidArgument("remote cache TLS file '" + tlsFile +
                             "' given for the plaintext URL " + url.substr(0, 200) +
                             " (use grpcs:// or https://)");
  }
  if (clientCertFile.empty() != clientKeyFile.empty())
    return invalidArgument(
        clientCertFile.empty()
            ? "remote cache client key '" + clientKeyFile + "' without its certificate"
            : "remote cache client certificate '" + clientCertFile + "' without its key");
  if (timeout <= std::chrono::milliseconds(0) || timeout > kMaxTimeout)
    return invalidArgument("remote cache timeout " + std::to_string(timeout.count()) +
                           " ms: must be 1 ms..1 h");
  return Status::ok();
}

Expected<std::unique_ptr<RemoteCache>>
RemoteCache::connect(const RemoteCacheOptions &options) {
  FLOWC_RETURN_IF_ERROR(options.validate());
  CacheUrl url = splitCacheUrl(options.url);
  if (url.http)
    return connectHttpCache(options, url);
  return connectGrpcCache(options, url);
}

} // namespace flowc::remote
