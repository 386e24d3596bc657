// A client of a remote cache that many machines share: an action cache of
// entries (ActionResults whose outputs are CAS blobs) over a CAS. Two wire
// protocols behind one interface:
//   grpc://HOST:PORT, grpcs://HOST:PORT   REAPI v2: Capabilities, CAS,
//                                          ActionCache, ByteStream
//                                          (bazel-remote, BuildBuddy,
//                                          Buildbarn, NativeLink, BuildGrid)
//   http://HOST[:PORT]/PREFIX, https://…  Bazel's HTTP cache protocol:
//                                          PREFIX/ac/<sha256>, PREFIX/cas/<sha256>
//                                          (bazel-remote, nginx WebDAV, S3/GCS
//                                          gateways)
// Blobs stream to and from files, so memory does not grow with blob size.
// gRPC and libcurl types stay in remote/lib.
#pragma once

#include "flowc/cache/Digest.h"
#include "flowc/support/Status.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flowc::remote {

struct RemoteCacheOptions {
  /// grpc://, grpcs://, http:// or https://.
  std::string url;
  /// REAPI instance_name (grpc only; for http it is a path segment after
  /// PREFIX when set). Checked by REAPI's rules.
  std::string instance;
  /// Sent with every request: gRPC metadata (names lower-cased) or HTTP
  /// headers ("authorization" = "Bearer …").
  std::vector<std::pair<std::string, std::string>> headers;
  /// PEM roots for grpcs/https; empty: the system's.
  std::string caFile;
  /// Client certificate and key (PEM) for mutual TLS; both or neither.
  std::string clientCertFile, clientKeyFile;
  /// Per request; a blob transfer gets this plus 1 s per 16 MiB.
  std::chrono::milliseconds timeout{10000};

  /// InvalidArgument naming the bad field (scheme, host, port, instance,
  /// a header name or value with a newline, a cert without its key).
  Status validate() const;
};

/// One output of an entry: a name inside the entry and the blob.
struct EntryOutput {
  std::string path;
  cache::Digest digest;
};

/// An action-cache entry: REAPI's ActionResult, output files only.
struct RemoteEntry {
  std::vector<EntryOutput> outputs;
};

struct RemoteCapabilities {
  /// The largest blob the server takes; 0: no limit stated.
  uint64_t maxBlobBytes = 0;
  /// Whether the server lets this client write the action cache (REAPI's
  /// action_cache_update_capabilities; true for http, where a PUT tells).
  bool actionCacheWritable = true;
};

/// What one client sent and received since connect; monotonic.
struct TransferCounters {
  uint64_t requests = 0;
  uint64_t blobsUploaded = 0, bytesUploaded = 0;
  uint64_t blobsDownloaded = 0, bytesDownloaded = 0;
  /// Of the blobs above, those that went through ByteStream Write/Read
  /// (gRPC, over the batch limit); 0 for http, where every blob streams.
  uint64_t blobsStreamed = 0;
};

/// A connection to one remote cache. Thread-safe. Every call is bounded by
/// the timeout and retried (3 tries, backoff) only where a retry is safe.
/// Errors name the endpoint: Unavailable (unreachable, timed out, 5xx),
/// Unauthenticated / PermissionDenied (401/403 or the gRPC codes),
/// InvalidArgument (4xx the request caused), DataLoss (bytes that do not
/// match their digest), ResourceExhausted (a blob over the server's limit).
class RemoteCache {
public:
  /// Creates the client; makes no request. InvalidArgument for bad options
  /// or unreadable TLS files.
  static Expected<std::unique_ptr<RemoteCache>>
  connect(const RemoteCacheOptions &options);
  virtual ~RemoteCache() = default;

  /// REAPI GetCapabilities (must take SHA256); for http, no request: no
  /// limit, writable.
  virtual Expected<RemoteCapabilities> capabilities() = 0;

  /// The entry stored under `key`; nullopt on a miss (NOT_FOUND / 404).
  /// DataLoss when the stored entry does not parse.
  virtual Expected<std::optional<RemoteEntry>> getEntry(const cache::Digest &key) = 0;
  /// Stores `entry` under `key` (UpdateActionResult / PUT ac/). Its blobs
  /// must be uploaded first.
  virtual Status putEntry(const cache::Digest &key, const RemoteEntry &entry) = 0;

  /// Those of `digests` the server lacks (FindMissingBlobs; for http a HEAD
  /// per blob), in input order.
  virtual Expected<std::vector<cache::Digest>>
  findMissing(const std::vector<cache::Digest> &digests) = 0;
  /// Uploads bytes held in memory (BatchUpdateBlobs when small, ByteStream
  /// Write otherwise; PUT cas/).
  virtual Status uploadBytes(const cache::Digest &digest, std::string_view bytes) = 0;
  /// Uploads the file at `path`, whose content has `digest`, streaming it
  /// in chunks (memory does not grow with its size).
  virtual Status uploadFile(const cache::Digest &digest, const std::string &path) = 0;
  /// Writes the blob into the open file `fd` (at its current offset),
  /// streaming and hashing as it arrives; DataLoss if the bytes do not
  /// match `digest` (the file then holds garbage the caller discards),
  /// NotFound if the server does not have it.
  virtual Status downloadToFile(const cache::Digest &digest, int fd) = 0;
  /// A small blob (at most 64 MiB) into memory, verified.
  virtual Expected<std::string> downloadBytes(const cache::Digest &digest) = 0;

  virtual TransferCounters counters() const = 0;
  /// "grpcs://cache.example:443 instance main".
  virtual std::string describe() const = 0;
};

} // namespace flowc::remote
