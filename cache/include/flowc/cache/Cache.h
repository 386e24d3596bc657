// The local content-addressed store: blob files under `cas/ab/cdef...`,
// written through `tmp/` (fsync + rename, never modified afterwards), and a
// SQLite index (WAL) of blobs and action-cache entries.
#pragma once

#include "flowc/cache/Digest.h"
#include "flowc/support/MappedFile.h"
#include "flowc/support/Status.h"

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace flowc::cache {

class Index;

/// What an action-cache entry maps: a compile (IR + weight metadata + target
/// + options) to its code object, or a whole model to its artifact.
enum class ActionKind { Code, Artifact };

struct CacheStats {
  uint64_t blobCount = 0;
  uint64_t blobBytes = 0;
  uint64_t actionCount = 0;
};

class Cache {
public:
  ~Cache();

  /// Opens (creating if needed) the cache rooted at `dir` and sweeps `tmp/`
  /// leftovers of crashed writers. Thread-safe after open.
  static Expected<std::unique_ptr<Cache>> open(const std::string &dir);

  const std::string &root() const { return root_; }

  /// Stores `bytes` unless already present; returns their digest. Errors:
  /// ResourceExhausted (disk full), Internal/DataLoss on I/O failure. On
  /// error nothing becomes visible.
  Expected<Digest> put(std::string_view bytes);

  /// Stores bytes whose digest the caller claims; DataLoss if they do not
  /// hash to `expected` (blobs from outside are always verified).
  Status putVerified(const Digest &expected, std::string_view bytes);

  /// Moves a finished file that the caller wrote inside tmpDir() into the
  /// CAS under its digest (hashed from a read-only mapping). The file is
  /// removed whether or not this succeeds.
  Expected<Digest> adoptFile(const std::string &path);

  /// Where writers put files that they will adopt: same filesystem as the
  /// CAS, swept at start.
  std::string tmpDir() const { return root_ + "/tmp"; }

  bool contains(const Digest &digest) const;

  /// Maps a blob read-only; NotFound if absent. The mapping stays valid
  /// while the returned object lives, even if the blob is later removed.
  Expected<MappedFile> map(const Digest &digest) const;

  /// The blob's file path (it may not exist).
  std::string blobPath(const Digest &digest) const;

  /// The result stored for (kind, key), only if its blob is present.
  Expected<std::optional<Digest>> lookupAction(ActionKind kind, const Digest &key);
  Status recordAction(ActionKind kind, const Digest &key, const Digest &result);

  Expected<CacheStats> stats();

private:
  Cache(std::string root, std::unique_ptr<Index> index);
  Status storeFile(const Digest &digest, std::string_view bytes);

  std::string root_;
  std::unique_ptr<Index> index_;
};

} // namespace flowc::cache
