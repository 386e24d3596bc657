// The remote cache's two backends, behind RemoteCache::connect. Private to
// remote/lib.
#pragma once

#include "flowc/remote/RemoteCache.h"

#include "ProtoDigest.h"

#include <atomic>
#include <functional>

namespace flowc::remote {

/// Where a validated URL points: grpc[s]://HOST:PORT or
/// http[s]://HOST[:PORT][/PREFIX] (PREFIX without a trailing '/').
struct CacheUrl {
  bool tls = false;
  bool http = false;
  /// "HOST:PORT" for gRPC; "http[s]://HOST[:PORT]/PREFIX" for HTTP.
  std::string target;
};

/// What both backends share: their options, their counters and their name.
class RemoteCacheBase : public RemoteCache {
public:
  explicit RemoteCacheBase(RemoteCacheOptions options) : options_(std::move(options)) {}
  TransferCounters counters() const final;
  std::string describe() const final;

protected:
  const RemoteCacheOptions options_;
  std::atomic<uint64_t> requests_{0}, blobsUploaded_{0}, bytesUploaded_{0},
      blobsDownloaded_{0}, bytesDownloaded_{0}, blobsStreamed_{0};
};

/// A sink appending to `bytes`, and the rewind that empties it again.
std::pair<std::function<Status(std::string_view)>, std::function<Status()>>
appendTo(std::string &bytes);

/// The empty blob, which every REAPI server holds without an upload and
/// flowc never sends or fetches.
bool isEmptyBlob(const cache::Digest &digest);

/// InvalidArgument for a blob over the 64 MiB downloadBytes() takes.
Status checkInMemorySize(const cache::Digest &digest);

/// Splits a URL that RemoteCacheOptions::validate() accepted.
CacheUrl splitCacheUrl(const std::string &url);

/// REAPI v2 over gRPC. InvalidArgument for unreadable TLS files.
Expected<std::unique_ptr<RemoteCache>> connectGrpcCache(const RemoteCacheOptions &options,
                                                        const CacheUrl &url);
/// Bazel's HTTP cache protocol over libcurl. InvalidArgument for
/// unreadable TLS files.
Expected<std::unique_ptr<RemoteCache>> connectHttpCache(const RemoteCacheOptions &options,
                                                        const CacheUrl &url);

/// The bytes a transfer reads: a view of memory or a file read at offsets.
class BlobSource {
public:
  /// `bytes` must outlive the source.
  static BlobSource fromBytes(std::string_view bytes);
  /// Opens `path`; NotFound/Internal naming it. The file's size must be
  /// `digest.size` (InvalidArgument otherwise).
  static Expected<BlobSource> fromFile(const std::string &path,
                                       const cache::Digest &digest);
  BlobSource(BlobSource &&other) noexcept;
  BlobSource &operator=(BlobSource &&other) = delete;
  ~BlobSource();

  uint64_t size() const { return size_; }
  /// Exactly `length` bytes from `offset` into `out`; FailedPrecondition if
  /// the file shrank meanwhile.
  Status read(uint64_t offset, char *out, size_t length) const;
  /// "file 'x'" or "the bytes given", for messages.
  std::string describe() const;

private:
  BlobSource() = default;
  std::string_view bytes_;
  int fd_ = -1;
  std::string path_;
  uint64_t size_ = 0;
};

/// Writes all of `data` to `fd`, riding out short writes and EINTR.
Status writeAll(int fd, std::string_view data);

/// InvalidArgument unless `bytes` hash to `digest`: an upload never
/// stores bytes under a name that is not theirs.
Status checkUploadDigest(const cache::Digest &digest, const cache::Digest &actual,
                         const std::string &source);

/// DataLoss: what `where` sent for `digest` hashes to `actual`.
Status downloadMismatch(const cache::Digest &digest, const cache::Digest &actual,
                        const std::string &where);

/// An entry as REAPI's ActionResult (output files only), and back.
/// InvalidArgument for an output with an empty path or a repeated one;
/// DataLoss (naming `where`) for a stored result with a malformed digest.
Expected<reapi::ActionResult> toActionResult(const RemoteEntry &entry,
                                             const cache::Digest &key);
Expected<RemoteEntry> fromActionResult(const reapi::ActionResult &result,
                                       const cache::Digest &key,
                                       const std::string &where);

/// Headers flowc sets itself, which a --remote-header may not replace.
bool isReservedHeader(std::string_view lowerName);

} // namespace flowc::remote
