// The SQLite index of the cache: schema, migrations and every query.
// Private to the cache component; one connection serialized by a mutex.
#pragma once

#include "flowc/cache/Cache.h"

#include "Database.h"

#include <mutex>

namespace flowc::cache {

struct BlobRow {
  Digest digest;
  bool isInline = false;
  std::string data; ///< Inline blobs only.
  int64_t createdMs = 0;
  int64_t lastAccessMs = 0;
  bool pinned = false;
};

/// A stat-memo row: the digest and the further files it was computed from.
struct StatMemo {
  Digest digest;
  std::vector<FileIdentity> inputs;
};

struct EvictionResult {
  uint64_t droppedActions = 0;
};

class Index {
public:
  /// Opens `path` and migrates its schema to the current version (read-only:
  /// FailedPrecondition if it is not current, as it cannot be migrated).
  static Expected<std::unique_ptr<Index>> open(const std::string &path,
                                               CacheAccess access);

  Status addBlob(const Digest &digest, bool isInline, std::string_view data);
  /// addBlob for many, in one transaction. `data[i]` is used for inline ones.
  Status addBlobs(const std::vector<Digest> &digests, const std::vector<bool> &isInline,
                  const std::vector<std::string_view> &data);
  Expected<std::optional<BlobRow>> findBlob(const Digest &digest, bool withData);
  Status touchBlob(const Digest &digest);
  /// Deletes the blob's row and every action that needs it, atomically.
  Expected<EvictionResult> removeBlob(const Digest &digest);
  /// Unpinned blobs, least recently used first.
  Expected<std::vector<BlobRow>> blobsByLastAccess(size_t limit);
  Expected<std::vector<BlobRow>> allBlobs();
  Status setPinned(const Digest &digest, bool pinned);

  /// Result and dependencies of (kind, key).
  Expected<std::optional<std::pair<Digest, std::vector<Digest>>>>
  getAction(ActionKind kind, const Digest &key);
  Status putAction(ActionKind kind, const Digest &key, const Digest &result,
                   const std::vector<Digest> &deps);
  /// putAction for many, in one transaction.
  Status putActions(const std::vector<ActionRecord> &records);
  Expected<uint64_t> clearActions();

  Expected<std::optional<StatMemo>> getStat(const FileIdentity &file,
                                            std::string_view purpose);
  /// The row and its inputs replace any earlier ones, in one transaction.
  Status putStat(const FileIdentity &file, std::string_view purpose, const Digest &digest,
                 const std::vector<FileIdentity> &inputs);

  /// Keeps a valid `record`, replacing the row of its key, and recomputes
  /// its device's tuning state, in one transaction.
  Status putTuning(const TuningRecord &record);
  /// Valid records, in one transaction: each replaces the row of its key
  /// only if it was measured later; the state of every device touched is
  /// recomputed. How many rows were written.
  Expected<uint64_t> importTuning(const std::vector<TuningRecord> &records);
  /// The fastest valid row of the key (ties: the lowest candidate); rows
  /// that are not valid are skipped with a warning.
  Expected<std::optional<TuningRecord>> bestTuning(std::string_view signature,
                                                   std::string_view device,
                                                   std::string_view versions);
  /// Valid rows (of `device` when not empty) by signature, device, versions,
  /// time; rows that are not valid are skipped with a warning.
  Expected<std::vector<TuningRecord>> listTuning(std::string_view device,
                                                 std::string_view signature);
  /// The stored state digest of `device`, or that of no records.
  Expected<std::vector<std::string>> tuningDevices(std::string_view prefix);
  Expected<int64_t> latestTuning(std::string_view device);
  Expected<std::string> tuningState(std::string_view device);
  /// Deletes the rows (of `device` when not empty) and their states.
  Expected<uint64_t> clearTuning(std::string_view device);

  Status bump(std::string_view counter, int64_t delta);
  Expected<CacheStats> stats();
  Status zeroCounters();

private:
  explicit Index(std::unique_ptr<Database> db) : db_(std::move(db)) {}
  Status migrate(CacheAccess access);
  /// One entry's rows, inside the caller's transaction and lock.
  Status writeAction(ActionKind kind, const Digest &key, const Digest &result,
                     const std::vector<Digest> &deps);
  Expected<int> schemaVersion();
  /// Recomputes tuning_state's row of `device` from its valid bests, inside
  /// the caller's transaction and lock.
  Status updateTuningStateLocked(std::string_view device);

  std::unique_ptr<Database> db_;
  std::mutex mutex_;
};

/// "code", "artifact", "kernel", "derived".
const char *actionKindName(ActionKind kind);

} // namespace flowc::cache
