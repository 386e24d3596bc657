// The remote cache over Bazel's HTTP cache protocol (bazel-remote, nginx
// WebDAV, S3/GCS gateways), with libcurl:
//   GET/PUT/HEAD PREFIX[/INSTANCE]/ac/<sha256 hex>   a serialized REAPI
//                                                    ActionResult
//   GET/PUT/HEAD PREFIX[/INSTANCE]/cas/<sha256 hex>  the blob's bytes
// Bodies stream through libcurl's callbacks in its buffer-sized pieces, so
// memory does not grow with blob size; both directions are hashed as they
// go.
#include "ProtoDigest.h"
#include "RemoteCacheBackends.h"
#include "RemoteSupport.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

namespace flowc::remote {

namespace {

// An entry is a list of digests: a few KiB; more is not an entry.
constexpr uint64_t kMaxEntryBytes = 16 << 20;
constexpr int kAttempts = 3;
// A blob transfer's deadline: the request timeout plus 1 s per 16 MiB.
constexpr uint64_t kSlowestBytesPerSecond = 16 << 20;
constexpr long kTransferBufferBytes = 1 << 20;
// What of an error response's body goes into the message.
constexpr size_t kErrorBodyBytes = 200;

enum class Method { Get, Head, Put };

const char *methodName(Method method) {
  switch (method) {
  case Method::Get:
    return "GET";
  case Method::Head:
    return "HEAD";
  case Method::Put:
    return "PUT";
  }
  return "?";
}

bool isSuccess(long code) { return code >= 200 && code < 300; }

// Where libcurl could not finish the exchange: a refused or dropped
// connection, a timeout, a server that went away mid-transfer. The TLS
// setup errors are the configuration's, not the network's.
Status curlError(CURLcode code, const std::string &what, const char *detail) {
  std::string message = what + ": " + (detail[0] ? detail : curl_easy_strerror(code));
  switch (code) {
  case CURLE_PEER_FAILED_VERIFICATION:
  case CURLE_SSL_CACERT_BADFILE:
  case CURLE_SSL_CERTPROBLEM:
  case CURLE_SSL_CIPHER:
  case CURLE_SSL_ISSUER_ERROR:
    return failedPrecondition(message + " (check the CA file and client certificate)");
  case CURLE_UNSUPPORTED_PROTOCOL:
  case CURLE_URL_MALFORMAT:
    return invalidArgument(message);
  default:
    return unavailable(message);
  }
}

Status httpError(long code, const std::string &what, const std::string &body) {
  std::string message = what + ": HTTP " + std::to_string(code);
  if (!body.empty())
    message += " (" + body + ")";
  if (code == 401)
    return unauthenticated(message + ": no or bad credentials (--remote-header?)");
  if (code == 403 || code == 405)
    return permissionDenied(message +
                            ": the server refuses this (a read-only endpoint?)");
  if (code == 404)
    return notFound(message);
  if (code == 413)
    return resourceExhausted(message + ": over the server's size limit");
  if (code == 408 || code == 429 || code >= 500)
    return unavailable(message);
  return invalidArgument(message);
}

// One request's state, seen by libcurl's callbacks.
struct Exchange {
  // The body sent (PUT); `verify` set: its bytes must hash to it.
  const BlobSource *source = nullptr;
  const cache::Digest *verify = nullptr;
  uint64_t sent = 0;
  std::optional<cache::Hasher> sentHash{std::in_place};
  Status sourceError;

  // The body received: 2xx bodies go to the sink, at most `limit` bytes.
  std::function<Status(std::string_view)> sink;
  uint64_t limit = 0;
  uint64_t received = 0;
  std::optional<cache::Hasher> receivedHash{std::in_place};
  Status sinkError;
  std::string errorBody;
  CURL *curl = nullptr;
};

size_t readBody(char *buffer, size_t size, size_t count, void *user) {
  auto &exchange = *static_cast<Exchange *>(user);
  uint64_t left = exchange.source->size() - exchange.sent;
  size_t length = static_cast<size_t>(std::min<uint64_t>(left, size * count));
  if (length == 0)
    return 0;
  if (Status read = exchange.source->read(exchange.sent, buffer, length); !read) {
    exchange.sourceError = read;
    return CURL_READFUNC_ABORT;
  }
  exchange.sentHash->update(buffer, length);
  exchange.sent += length;
  // The last bytes are held back from a body that is not the digest's: the
  // server gets a short body and stores nothing.
  if (exchange.sent == exchange.source->size() && exchange.verify != nullptr) {
    Status match = checkUploadDigest(*exchange.verify, exchange.sentHash->finish(),
                                     exchange.source->describe());
    if (!match) {
      exchange.sourceError = match;
      return CURL_READFUNC_ABORT;
    }
  }
  return length;
}

size_t writeBody(char *data, size_t size, size_t count, void *user) {
  auto &exchange = *static_cast<Exchange *>(user);
  const size_t length = size * count;
  long code = 0;
  curl_easy_getinfo(exchange.curl, CURLINFO_RESPONSE_CODE, &code);
  if (!isSuccess(code)) {
    size_t room = kErrorBodyBytes - std::min(kErrorBodyBytes, exchange.errorBody.size());
    for (size_t i = 0; i < std::min(room, length); ++i) {
      char c = data[i];
      exchange.errorBody += (c >= 0x20 && c < 0x7f) ? c : ' ';
    }
    return length;
  }
  if (length > exchange.limit - exchange.received) {
    exchange.sinkError = dataLoss("the server sent more than the " +
                                  std::to_string(exchange.limit) + " bytes expected");
    return 0;
  }
  exchange.receivedHash->update(data, length);
  if (Status wrote = exchange.sink(std::string_view(data, length)); !wrote) {
    exchange.sinkError = wrote;
    return 0;
  }
  exchange.received += length;
  return length;
}

class HttpRemoteCache final : public RemoteCacheBase {
public:
  HttpRemoteCache(RemoteCacheOptions options, CacheUrl url)
      : RemoteCacheBase(std::move(options)), url_(std::move(url)) {
    base_ = url_.target + (options_.instance.empty() ? "" : "/" + options_.instance);
    for (const auto &[name, value] : options_.headers)
      headers_ = curl_slist_append(headers_, (name + ": " + value).c_str());
  }
  ~HttpRemoteCache() override {
    for (CURL *curl : idle_)
      curl_easy_cleanup(curl);
    curl_slist_free_all(headers_);
  }

  Expected<RemoteCapabilities> capabilities() override { return RemoteCapabilities{}; }
  Expected<std::optional<RemoteEntry>> getEntry(const cache::Digest &key) override;
  Status putEntry(const cache::Digest &key, const RemoteEntry &entry) override;
  Expected<std::vector<cache::Digest>>
  findMissing(const std::vector<cache::Digest> &digests) override;
  Status uploadBytes(const cache::Digest &digest, std::string_view bytes) override;
  Status uploadFile(const cache::Digest &digest, const std::string &path) override;
  Status downloadToFile(const cache::Digest &digest, int fd) override;
  Expected<std::string> downloadBytes(const cache::Digest &digest) override;

private:
  struct Response {
    long code = 0;
    curl_off_t contentLength = -1;
  };

  std::string casUrl(const cache::Digest &digest) const {
    return base_ + "/cas/" + digest.hex();
  }
  std::string acUrl(const cache::Digest &key) const { return base_ + "/ac/" + key.hex(); }

  CURL *acquire() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!idle_.empty()) {
        CURL *curl = idle_.back();
        idle_.pop_back();
        return curl;
      }
    }
    return curl_easy_init();
  }
  // Idle handles keep their connections open for the next request.
  void release(CURL *curl) {
    std::lock_guard<std::mutex> lock(mutex_);
    idle_.push_back(curl);
  }

  /// One request; a status only where libcurl could not finish it or a
  /// callback refused (the HTTP code is the caller's to read).
  Expected<Response> perform(Method method, const std::string &url, Exchange &exchange,
                             uint64_t bytes);
  /// perform() with retries for the failures a retry may cure
  /// (Unavailable); `reset` readies the exchange for another attempt.
  Expected<Response> performWithRetries(Method method, const std::string &url,
                                        Exchange &exchange, uint64_t bytes,
                                        const std::function<Status(Exchange &)> &reset);
  Status put(const std::string &url, const BlobSource &source,
             const cache::Digest *verify);
  Status get(const std::string &url, const cache::Digest *digest, uint64_t limit,
             const std::function<Status(std::string_view)> &sink,
             const std::function<Status()> &rewind);

  const CacheUrl url_;
  std::string base_;
  curl_slist *headers_ = nullptr;
  std::mutex mutex_;
  std::vector<CURL *> idle_; // guarded by mutex_
};

Expected<HttpRemoteCache::Response> HttpRemoteCache::perform(Method method,
                                                             const std::string &url,
                                                             Exchange &exchange,
                                                             uint64_t bytes) {
  CURL *curl = acquire();
  if (curl == nullptr)
    return internalError("remote cache " + describe() +
                         ": libcurl could not start a request");
  curl_easy_reset(curl);
  exchange.curl = curl;
  char detail[CURL_ERROR_SIZE] = "";
  const long timeoutMs =
      static_cast<long>((deadlineFor(options_.timeout, bytes, kSlowestBytesPerSecond) -
                         std::chrono::system_clock::now()) /
                        std::chrono::milliseconds(1));
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, detail);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, url_.tls ? "https" : "http");
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(options_.timeout.count()));
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, std::max(timeoutMs, 1L));
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers_);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "flowc");
  if (!options_.caFile.empty())
    curl_easy_setopt(curl, CURLOPT_CAINFO, options_.caFile.c_str());
  if (!options_.clientCertFile.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLCERT, options_.clientCertFile.c_str());
    curl_easy_setopt(curl, CURLOPT_SSLKEY, options_.clientKeyFile.c_str());
  }
  // libcurl's 16 KiB default buffers cost a system call and a callback
  // per 16 KiB; at LAN rates that, not the network, sets the pace.
  curl_easy_setopt(curl, CURLOPT_BUFFERSIZE, kTransferBufferBytes);
  curl_easy_setopt(curl, CURLOPT_UPLOAD_BUFFERSIZE, kTransferBufferBytes);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, writeBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &exchange);
  if (method == Method::Head)
    curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
  if (method == Method::Put) {
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_READFUNCTION, readBody);
    curl_easy_setopt(curl, CURLOPT_READDATA, &exchange);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE,
                     static_cast<curl_off_t>(exchange.source->size()));
  }
  ++requests_;
  CURLcode result = curl_easy_perform(curl);
  Response response;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.code);
  curl_easy_getinfo(curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &response.contentLength);
  release(curl);
  const std::string what = std::string(methodName(method)) + " " + url;
  if (!exchange.sourceError.isOk())
    return exchange.sourceError;
  if (!exchange.sinkError.isOk())
    return exchange.sinkError.code() == StatusCode::DataLoss
               ? dataLoss(what + ": " + exchange.sinkError.message() + " (not used)")
               : exchange.sinkError;
  if (result != CURLE_OK)
    return curlError(result, what, detail);
  return response;
}

Expected<HttpRemoteCache::Response>
HttpRemoteCache::performWithRetries(Method method, const std::string &url,
                                    Exchange &exchange, uint64_t bytes,
                                    const std::function<Status(Exchange &)> &reset) {
  Status last;
  for (int attempt = 1; attempt <= kAttempts; ++attempt) {
    if (attempt > 1) {
      std::this_thread::sleep_for(backoff(attempt - 1));
      FLOWC_RETURN_IF_ERROR(reset(exchange));
    }
    Expected<Response> response = perform(method, url, exchange, bytes);
    if (response) {
      bool retryable =
          response->code == 408 || response->code == 429 || response->code >= 500;
      if (!retryable)
        return response;
      last = httpError(response->code, std::string(methodName(method)) + " " + url,
                       exchange.errorBody);
    } else {
      last = response.status();
      if (last.code() != StatusCode::Unavailable)
        return last;
    }
    spdlog::debug("remote cache {}: {} (attempt {} of {})", describe(), last.message(),
                  attempt, kAttempts);
  }
  return last;
}

Status HttpRemoteCache::put(const std::string &url, const BlobSource &source,
                            const cache::Digest *verify) {
  Exchange exchange;
  exchange.source = &source;
  exchange.verify = verify;
  exchange.sink = [](std::string_view) { return Status::ok(); };
  exchange.limit = std::numeric_limits<uint64_t>::max();
  auto reset = [](Exchange &again) {
    again.sent = 0;
    again.sentHash.emplace();
    again.errorBody.clear();
    again.received = 0;
    return Status::ok();
  };
  FLOWC_ASSIGN_OR_RETURN(Response response, performWithRetries(Method::Put, url, exchange,
                                                               source.size(), reset));
  if (!isSuccess(response.code))
    return httpError(response.code, "PUT " + url, exchange.errorBody);
  return Status::ok();
}

Status HttpRemoteCache::get(const std::string &url, const cache::Digest *digest,
                            uint64_t limit,
                            const std::function<Status(std::string_view)> &sink,
                            const std::function<Status()> &rewind) {
  Exchange exchange;
  exchange.sink = sink;
  exchange.limit = limit;
  auto reset = [&](Exchange &again) {
    // What an attempt wrote is taken back; the next one starts over.
    if (again.received > 0)
      FLOWC_RETURN_IF_ERROR(rewind());
    again.received = 0;
    again.receivedHash.emplace();
    again.errorBody.clear();
    return Status::ok();
  };
  FLOWC_ASSIGN_OR_RETURN(
      Response response,
      performWithRetries(Method::Get, url, exchange, digest ? digest->size : 0, reset));
  if (!isSuccess(response.code))
    return httpError(response.code, "GET " + url, exchange.errorBody);
  if (digest == nullptr)
    return Status::ok();
  if (exchange.received != digest->size)
    return dataLoss("blob " + digest->toString() + " from " + describe() +
                    ": the server sent " + std::to_string(exchange.received) +
                    " of its " + std::to_string(digest->size) + " bytes (not used)");
  cache::Digest actual = exchange.receivedHash->finish();
  if (actual != *digest)
    return downloadMismatch(*digest, actual, describe());
  return Status::ok();
}

Expected<std::optional<RemoteEntry>> HttpRemoteCache::getEntry(const cache::Digest &key) {
  std::string bytes;
  auto [sink, rewind] = appendTo(bytes);
  Status status = get(acUrl(key), nullptr, kMaxEntryBytes, sink, rewind);
  if (status.code() == StatusCode::NotFound)
    return std::optional<RemoteEntry>();
  FLOWC_RETURN_IF_ERROR(status);
  reapi::ActionResult result;
  if (!result.ParseFromString(bytes))
    return dataLoss("entry " + key.toString() + " from " + describe() +
                    ": not a serialized ActionResult (" + std::to_string(bytes.size()) +
                    " bytes)");
  FLOWC_ASSIGN_OR_RETURN(RemoteEntry entry, fromActionResult(result, key, describe()));
  return std::optional<RemoteEntry>(std::move(entry));
}

Status HttpRemoteCache::putEntry(const cache::Digest &key, const RemoteEntry &entry) {
  FLOWC_ASSIGN_OR_RETURN(reapi::ActionResult result, toActionResult(entry, key));
  const std::string bytes = serializeCanonical(result);
  return put(acUrl(key), BlobSource::fromBytes(bytes), nullptr);
}

Expected<std::vector<cache::Digest>>
HttpRemoteCache::findMissing(const std::vector<cache::Digest> &digests) {
  std::vector<cache::Digest> missing;
  for (const cache::Digest &digest : digests) {
    // As in REAPI: the empty blob is always there (an HTTP cache may not
    // take an empty PUT).
    if (isEmptyBlob(digest))
      continue;
    Exchange exchange;
    exchange.sink = [](std::string_view) { return Status::ok(); };
    exchange.limit = std::numeric_limits<uint64_t>::max();
    FLOWC_ASSIGN_OR_RETURN(Response response,
                           performWithRetries(Method::Head, casUrl(digest), exchange, 0,
                                              [](Exchange &) { return Status::ok(); }));
    if (response.code == 404) {
      missing.push_back(digest);
      continue;
    }
    if (!isSuccess(response.code))
      return httpError(response.code, "HEAD " + casUrl(digest), exchange.errorBody);
    // A stored blob of the wrong size is as good as missing: uploading it
    // again replaces it.
    if (response.contentLength >= 0 &&
        static_cast<uint64_t>(response.contentLength) != digest.size)
      missing.push_back(digest);
  }
  return missing;
}

Status HttpRemoteCache::uploadBytes(const cache::Digest &digest, std::string_view bytes) {
  if (bytes.size() != digest.size)
    return invalidArgument("upload of " + digest.toString() + ": " +
                           std::to_string(bytes.size()) + " bytes given");
  if (!isEmptyBlob(digest))
    FLOWC_RETURN_IF_ERROR(put(casUrl(digest), BlobSource::fromBytes(bytes), &digest));
  ++blobsUploaded_;
  bytesUploaded_ += digest.size;
  return Status::ok();
}

Status HttpRemoteCache::uploadFile(const cache::Digest &digest, const std::string &path) {
  FLOWC_ASSIGN_OR_RETURN(BlobSource source, BlobSource::fromFile(path, digest));
  if (!isEmptyBlob(digest))
    FLOWC_RETURN_IF_ERROR(put(casUrl(digest), source, &digest));
  ++blobsUploaded_;
  bytesUploaded_ += digest.size;
  return Status::ok();
}

Status HttpRemoteCache::downloadToFile(const cache::Digest &digest, int fd) {
  if (isEmptyBlob(digest)) {
    ++blobsDownloaded_;
    return Status::ok();
  }
  const off_t start = ::lseek(fd, 0, SEEK_CUR);
  bool rewound = false;
  auto rewind = [&]() -> Status {
    // A pipe cannot take back what an attempt wrote: no retry then.
    if (start < 0 || ::lseek(fd, start, SEEK_SET) != start)
      return unavailable("download of " + digest.toString() + " from " + describe() +
                         " broke off, and what it wrote cannot be taken back");
    rewound = true;
    return Status::ok();
  };
  FLOWC_RETURN_IF_ERROR(get(
      casUrl(digest), &digest, digest.size,
      [fd](std::string_view data) { return writeAll(fd, data); }, rewind));
  // A longer earlier attempt may have left bytes past the blob.
  if (rewound) {
    struct stat info {};
    if (::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) &&
        ::ftruncate(fd, start + static_cast<off_t>(digest.size)) != 0)
      return errnoStatus(errno, "download of " + digest.toString());
  }
  ++blobsDownloaded_;
  bytesDownloaded_ += digest.size;
  return Status::ok();
}

Expected<std::string> HttpRemoteCache::downloadBytes(const cache::Digest &digest) {
  FLOWC_RETURN_IF_ERROR(checkInMemorySize(digest));
  std::string bytes;
  bytes.reserve(digest.size);
  auto [sink, rewind] = appendTo(bytes);
  if (!isEmptyBlob(digest))
    FLOWC_RETURN_IF_ERROR(get(casUrl(digest), &digest, digest.size, sink, rewind));
  ++blobsDownloaded_;
  bytesDownloaded_ += digest.size;
  return bytes;
}

} // namespace

Expected<std::unique_ptr<RemoteCache>> connectHttpCache(const RemoteCacheOptions &options,
                                                        const CacheUrl &url) {
  static std::once_flag initialized;
  static CURLcode initResult = CURLE_OK;
  std::call_once(initialized, [] { initResult = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (initResult != CURLE_OK)
    return internalError(std::string("libcurl did not initialize: ") +
                         curl_easy_strerror(initResult));
  // libcurl reads these at each request; unreadable ones fail here, once.
  if (!options.caFile.empty())
    FLOWC_RETURN_IF_ERROR(readPem(options.caFile, "remote cache CA file").status());
  if (!options.clientCertFile.empty()) {
    FLOWC_RETURN_IF_ERROR(
        readPem(options.clientCertFile, "remote cache client certificate").status());
    FLOWC_RETURN_IF_ERROR(
        readPem(options.clientKeyFile, "remote cache client key", PemKind::PrivateKey)
            .status());
  }
  return std::unique_ptr<RemoteCache>(std::make_unique<HttpRemoteCache>(options, url));
}

} // namespace flowc::remote
