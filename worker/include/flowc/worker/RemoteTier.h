// The remote tier behind the local cache: a miss in the local action cache
// asks a remote cache that many machines share, and what a compile records
// locally is published there too. An entry is an ActionResult whose output
// files are the entry's blobs:
//   result        the value (artifact, code object, kernel object, …)
//   dep/N         blobs the value needs (an artifact's manifest)
//   weight/N      model weights the value needs; a reader that has the
//                 model stores them from it instead of downloading them
//   factors       what the key was made from (KeyFactors.h), for --explain
//   signature     Ed25519 over all of the above, with --sign-key
// A remote hit is copied into the local CAS and recorded in the local
// action cache, so the next hit is local. The remote never fails a compile:
// an error is counted, logged once, and the tier stays off for the rest of
// the process (the daemon backs off before handing it to the next job).
#pragma once

#include "flowc/cache/Cache.h"
#include "flowc/remote/RemoteCache.h"

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace flowc::worker {

/// Lookups a compile keeps in flight at once when it has many to make (its
/// kernels' tuning records, its packed weights): each waits on a round trip
/// or two, and a model has dozens.
inline constexpr size_t kRemoteLookupsInFlight = 8;

/// Whether model weights (and values derived from them) go to the remote.
enum class UploadWeights { Missing, Never };

struct RemoteTierOptions {
  remote::RemoteCacheOptions client;
  /// Read hits, write nothing (PR builds of a CI farm).
  bool readOnly = false;
  UploadWeights uploadWeights = UploadWeights::Missing;
  /// Ed25519 private key (PEM) that signs every entry written.
  std::string signKeyFile;
  /// Ed25519 public keys (PEM): when any is given, entries not signed by
  /// one of them are refused.
  std::vector<std::string> trustKeyFiles;
};

/// What the tier did in this process; as RemoteCacheCounters on the wire.
struct RemoteTierCounters {
  uint64_t hits = 0, misses = 0;
  uint64_t uploads = 0, blobsUploaded = 0, bytesUploaded = 0;
  uint64_t bytesDownloaded = 0;
  uint64_t errors = 0, dataLoss = 0;
  uint64_t tooLarge = 0, tooLargeBytes = 0;
  uint64_t badSignatures = 0;
  std::string lastError;
};

/// An entry's blobs, as the local action cache records them.
struct TierEntry {
  cache::Digest result;
  std::vector<cache::Digest> deps;
  std::vector<cache::Digest> weights;
  /// The key-factor manifest (JSON), or empty.
  std::string factors;

  /// An entry that is its result alone (a kernel object, a code object).
  static TierEntry of(const cache::Digest &result) {
    TierEntry entry;
    entry.result = result;
    return entry;
  }
};

/// Bytes the caller holds for a digest (the ingested model's weights), so
/// that a hit does not download what is already at hand; nullptr if not.
using LocalBytes = std::function<const std::string_view *(const cache::Digest &)>;

class RemoteTier {
public:
  /// Reads the keys and creates the client (no request yet).
  /// InvalidArgument for bad options or a key that is not Ed25519 PEM.
  static Expected<std::unique_ptr<RemoteTier>> open(cache::Cache &local,
                                                    RemoteTierOptions options);
  ~RemoteTier();

  /// After a local miss of (kind, key): the remote's entry, its blobs
  /// verified into the local CAS and the entry recorded locally; nullopt on
  /// a miss and on any failure (counted and logged). `factors`, when given,
  /// receives the entry's key-factor manifest.
  std::optional<cache::Digest> fetch(cache::ActionKind kind, const cache::Digest &key,
                                     const LocalBytes &local = nullptr,
                                     std::string *factors = nullptr);
  /// The remote's entry with its blobs copied into the local CAS, neither
  /// recorded locally nor counted (the model-name index of --explain).
  std::optional<TierEntry> fetchEntry(cache::ActionKind kind, const cache::Digest &key);
  /// After recording (kind, key) locally: uploads the blobs the remote lacks
  /// (within the server's blob size cap and the weights policy), then the
  /// entry. Nothing in read-only mode. Failures are counted and logged.
  void publish(cache::ActionKind kind, const cache::Digest &key, const TierEntry &entry);

  RemoteTierCounters counters() const;
  /// "grpc://host:port instance main".
  std::string describe() const;

private:
  struct Impl;
  explicit RemoteTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// What open() would refuse, without a cache: the client's options and the
/// keys. The daemon checks its settings with it at start.
Status checkRemoteTierOptions(const RemoteTierOptions &options);

/// "artifact", "code", "kernel", "derived".
const char *actionKindName(cache::ActionKind kind);

} // namespace flowc::worker
