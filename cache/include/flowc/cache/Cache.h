// The local content-addressed store. Large blobs are files under
// `cas/ab/cdef...`, written through `tmp/` (fsync + rename, never modified
// afterwards); small blobs live inside the SQLite index, so millions of
// kernel objects and IR blobs do not exhaust inodes. The index (WAL) also
// holds the action cache, kernel cache, derived weights, tuning records,
// pins, counters and the stat memo. One process (flowcd) owns a cache
// directory at a time for pinning and eviction; readers may share it.
#pragma once

#include "flowc/cache/Digest.h"
#include "flowc/support/MappedFile.h"
#include "flowc/support/SafeOpen.h"
#include "flowc/support/Status.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unistd.h>
#include <vector>

namespace flowc::cache {

class Index;
class PinTable;

/// How a cache is opened. Read-only serves what is cached and writes
/// nothing at all (no counters, no access times, no memo): for a cache on a
/// read-only mount, or one shared read-only on purpose.
enum class CacheAccess { ReadWrite, ReadOnly };

struct CacheOptions {
  /// Eviction starts when stored bytes exceed this (LRU by last access).
  uint64_t maxBytes = 20ull << 30;
  /// Blobs smaller than this are stored inside the index.
  uint64_t inlineThreshold = 64 << 10;
  CacheAccess access = CacheAccess::ReadWrite;
  /// The process whose temp entries (`tmp/<what>.<pid>.<random>`) this
  /// cache's writes are: 0 for this one. A daemon's worker processes name
  /// the daemon, so that a daemon killed with its workers leaves temp files
  /// its successor removes at once, even while a worker is still dying.
  pid_t tempOwner = 0;

  /// InvalidArgument naming the bad field.
  Status validate() const;
};

/// What an action-cache entry maps: a compile (IR + weight metadata + target
/// + options) to its code object; a whole model to its artifact; one
/// partitioned kernel to its object; (transform, input digests) to a derived
/// weight. Each kind is its own key space.
enum class ActionKind { Code, Artifact, Kernel, DerivedWeight };

/// One action-cache entry: (kind, key) -> result, and the further blobs the
/// result needs.
struct ActionRecord {
  ActionKind kind = ActionKind::Artifact;
  Digest key;
  Digest result;
  std::vector<Digest> deps;
};

/// One measured candidate of a tunable kernel on a device: search's result
/// (docs/search.md). The key is (signature, device, versions, candidate).
struct TuningRecord {
  /// What was tuned: a library kernel's kind and params, or a loop
  /// kernel's IR digest ("conv2d:...", "loop:sha256:...").
  std::string signature;
  /// The machine the time describes (CPU model, features, cores).
  std::string device;
  /// The library and compiler versions the time depends on.
  std::string versions;
  std::string candidate;
  /// Median, and half the 95% interval of the median.
  int64_t timeNs = 0;
  int64_t spreadNs = 0;
  int64_t samples = 0;
  /// The winner's interval separated from the runner-up's in that
  /// measurement.
  bool separated = false;
  /// The measurement's noise (Measurement::noise).
  double noise = 0;
  /// When (ms since the epoch) and where (host name) it was measured;
  /// recordTuning stamps 0 with the time it records it.
  int64_t measuredMs = 0;
  std::string host;

  /// InvalidArgument naming the first bad field: an empty signature,
  /// device, versions or candidate, a time that is not positive, a negative
  /// spread or measuredMs, no samples, a noise that is negative or not
  /// finite.
  Status validate() const;
};

/// What an import of tuning records did.
struct TuningImport {
  uint64_t imported = 0;
  /// Records refused (malformed, or not a record), each warned about.
  uint64_t ignored = 0;
  /// Valid records not taken: the cache holds the same key measured as late
  /// or later.
  uint64_t stale = 0;
};

/// Lookups of one kind of action-cache entry.
struct LookupCounts {
  uint64_t hits = 0;
  uint64_t misses = 0;
};

struct CacheStats {
  uint64_t blobCount = 0;
  uint64_t blobBytes = 0;
  uint64_t inlineBlobs = 0;
  uint64_t actionCount = 0;
  uint64_t pinnedBlobs = 0;
  uint64_t maxBytes = 0;
  /// Artifact lookups (whole-model hits), as byKind["artifact"].
  uint64_t hits = 0;
  uint64_t misses = 0;
  /// Per kind of entry: "artifact", "code", "kernel", "derived".
  std::map<std::string, LookupCounts> byKind;
  /// Blobs evicted for the size cap or by gc (not by clear).
  uint64_t evictions = 0;
  uint64_t evictedBytes = 0;
  /// Bytes that writers offered but the store already held.
  uint64_t dedupBytes = 0;
  uint64_t statMemoEntries = 0;
};

struct BlobInfo {
  Digest digest;
  bool isInline = false;
  int64_t createdMs = 0;
  int64_t lastAccessMs = 0;
  bool pinned = false;
};

struct GcReport {
  uint64_t evictedBlobs = 0;
  uint64_t evictedBytes = 0;
  uint64_t droppedActions = 0;
  uint64_t remainingBytes = 0;
};

struct VerifyReport {
  uint64_t checked = 0;
  /// Digests (and why) of blobs whose content does not match their digest
  /// (or whose file is missing); repair quarantines these.
  std::vector<std::string> corrupt;
  /// Digests (and why) of blobs that could not be read (EIO, EACCES, an
  /// index error): reported, never quarantined, as their content may be fine.
  std::vector<std::string> unreadable;
  uint64_t quarantined = 0;  ///< With repair: moved to quarantine/.
  uint64_t missingFiles = 0; ///< Index rows whose file is gone.
  uint64_t orphanFiles = 0;  ///< Files without an index row.
};

/// Identity of a file for the stat memo: an unchanged identity means
/// unchanged content (ccache's "direct mode").
struct FileIdentity {
  std::string path;
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t mtimeNs = 0;
  int64_t ctimeNs = 0;

  static Expected<FileIdentity> of(const std::string &path);
  /// The identity of a file already open (from fstat of its descriptor).
  static FileIdentity from(const std::string &path, const FileStat &stat);
  bool operator==(const FileIdentity &other) const = default;
};

/// Read-only bytes of a blob that stay valid, and the blob pinned against
/// eviction, while the handle lives. Move-only.
class BlobHandle {
public:
  BlobHandle(BlobHandle &&) noexcept;
  BlobHandle &operator=(BlobHandle &&) noexcept;
  ~BlobHandle();

  std::string_view bytes() const { return bytes_; }
  const Digest &digest() const { return digest_; }

private:
  friend class Cache;
  BlobHandle(Digest digest, std::shared_ptr<PinTable> pins);
  Digest digest_;
  std::shared_ptr<PinTable> pins_;
  MappedFile file_;
  // Heap-held so that moving the handle never moves the bytes (a short
  // std::string would carry them along in its inline buffer).
  std::shared_ptr<const std::string> owned_;
  std::string_view bytes_;
};

/// Pins a set of blobs (a running job's inputs and outputs) until destroyed.
class PinGuard {
public:
  PinGuard() = default;
  PinGuard(PinGuard &&) noexcept = default;
  PinGuard &operator=(PinGuard &&) noexcept;
  ~PinGuard();
  void add(const Digest &digest);

private:
  friend class Cache;
  explicit PinGuard(std::shared_ptr<PinTable> pins) : pins_(std::move(pins)) {}
  std::shared_ptr<PinTable> pins_;
  std::vector<Digest> digests_;
};

class Cache {
public:
  ~Cache();

  /// Opens (creating if needed) the cache rooted at `dir`: migrates the
  /// index schema and sweeps `tmp/` leftovers of crashed writers. The root
  /// and every directory under it are made 0700 and the index files 0600
  /// (existing ones owned by this user are fixed, and logged), whatever the
  /// umask. Unavailable, naming `dir` and the reason, if a read-write cache
  /// cannot be written (a read-only mount, no permission); a full disk is
  /// not refused (hits still work). With CacheAccess::ReadOnly nothing is
  /// created or written; FailedPrecondition if there is no index to read or
  /// its schema is older than this build's. Thread-safe after open.
  static Expected<std::unique_ptr<Cache>> open(const std::string &dir,
                                               const CacheOptions &options = {});

  const std::string &root() const { return root_; }
  const CacheOptions &options() const { return options_; }
  bool readOnly() const { return options_.access == CacheAccess::ReadOnly; }

  // Store ---------------------------------------------------------------

  /// Stores `bytes` unless present, hashing while copying (one pass);
  /// returns their digest. ResourceExhausted when the disk is full; on any
  /// error nothing becomes visible.
  Expected<Digest> put(std::string_view bytes);
  /// Stores bytes claimed to have `expected` digest, verifying while
  /// copying; DataLoss if they do not match (blobs from outside the process
  /// always come through here).
  Status putVerified(const Digest &expected, std::string_view bytes);
  /// Stores many blobs at once: hashed in parallel, written in parallel,
  /// made durable with one filesystem sync, indexed in one transaction.
  /// Returns digests in input order. On error, blobs already made durable
  /// stay (they are complete and valid); nothing partial is visible.
  Expected<std::vector<Digest>> putMany(const std::vector<std::string_view> &blobs);
  /// Streams a file into the store with a bounded buffer (memory does not
  /// grow with the file), hashing while copying.
  Expected<Digest> putFile(const std::string &path);
  /// Moves a finished file written inside tmpDir() into the store under its
  /// digest. It stays a file whatever its size (it is written already, and
  /// artifacts are handed to local clients as hard links of it). The file
  /// is gone afterwards whether or not this succeeds.
  Expected<Digest> adoptFile(const std::string &path);
  /// Where writers put files that they will adopt (same filesystem, swept
  /// at open).
  std::string tmpDir() const { return root_ + "/tmp"; }
  /// The pid that names this cache's temp entries (CacheOptions::tempOwner).
  pid_t tempOwner() const { return options_.tempOwner ? options_.tempOwner : ::getpid(); }

  // Read ----------------------------------------------------------------

  bool contains(const Digest &digest);
  /// The blob's bytes, pinned while the handle lives; NotFound if absent,
  /// DataLoss if its file has the wrong size.
  Expected<BlobHandle> get(const Digest &digest);
  /// Checks that a large blob's file was not written since it was stored
  /// (blob files are read-only, but hard links hand them to users, and root
  /// ignores modes): a file modified later is re-hashed, and quarantined
  /// with DataLoss if its bytes changed. One stat when it was not. OK for
  /// inline blobs; NotFound if absent.
  Status checkUnmodified(const Digest &digest);
  /// A handle that pins blobs for the duration of a job.
  PinGuard pinGuard() { return PinGuard(pins_); }

  // Action cache ----------------------------------------------------------

  /// Whether a lookup counts in the hit/miss statistics (a second lookup
  /// that belongs to the same answer does not).
  enum class CountLookup { Yes, No };
  /// The result stored for (kind, key), only if the result and every
  /// dependency recorded with it are present. Counts a hit or a miss.
  Expected<std::optional<Digest>> lookupAction(ActionKind kind, const Digest &key,
                                               CountLookup count = CountLookup::Yes);
  /// Records (kind, key) -> result; `deps` are further blobs the result needs
  /// (evicting any of them drops the entry).
  Status recordAction(ActionKind kind, const Digest &key, const Digest &result,
                      const std::vector<Digest> &deps = {});

  /// The entry for (kind, key) with its dependencies, only if the result
  /// and every dependency are present; not counted, no access time.
  Expected<std::optional<ActionRecord>> actionEntry(ActionKind kind, const Digest &key);
  /// Records every entry in one transaction: all of them or none (an
  /// imported bundle). FailedPrecondition naming a blob that is absent.
  Status recordActions(const std::vector<ActionRecord> &records);

  // Stat memo -------------------------------------------------------------

  /// The digest memoized for `file` under `purpose`, if its identity and
  /// that of every input recorded with it (re-stat'ed now, symlinks not
  /// followed) are unchanged since it was recorded.
  Expected<std::optional<Digest>> lookupStat(const FileIdentity &file,
                                             std::string_view purpose);
  /// Memoizes `digest` for `file` (identity taken *before* reading it) and
  /// the further files it was computed from (`inputs`, such as a model's
  /// external data, each with the identity of the descriptor that was read).
  /// Not recorded — and not an error — if any of them changed since, or was
  /// modified within the last two seconds, as a racing writer could still
  /// change it without changing its size or mtime granule; nor in a
  /// read-only cache. A failed write (full disk) is logged, not returned:
  /// the memo only saves work.
  Status recordStat(const FileIdentity &file, std::string_view purpose,
                    const Digest &digest, const std::vector<FileIdentity> &inputs = {});

  // Tuning records ----------------------------------------------------------

  /// Keeps `record`, replacing an earlier one of the same key.
  /// InvalidArgument naming the field for a record that is not valid
  /// (TuningRecord::validate); Unavailable in a read-only cache. A new best
  /// for its (signature, device, versions) changes tuningState, in the same
  /// transaction. Thread-safe, as is every call below.
  Status recordTuning(const TuningRecord &record);
  /// The fastest valid candidate recorded for (signature, device, versions)
  /// (ties: the lowest candidate); nullopt when there is none. A stored row
  /// that is not valid is skipped with a warning naming it.
  Expected<std::optional<TuningRecord>> bestTuning(std::string_view signature,
                                                   std::string_view device,
                                                   std::string_view versions);
  /// Every valid record (of `device` and `signature` when not empty), by
  /// signature, device, versions, then time; rows that are not valid are
  /// skipped with a warning.
  Expected<std::vector<TuningRecord>> listTuning(std::string_view device = {},
                                                 std::string_view signature = {});
  /// Every device with records whose name starts with `prefix` (all when
  /// empty), by name. Reads one row per device, never the records: every
  /// cache hit of a CUDA compile asks.
  Expected<std::vector<std::string>> tuningDevices(std::string_view prefix = {});
  /// The latest measuredMs of `device`'s records (0: none).
  Expected<int64_t> latestTuning(std::string_view device);
  /// `sha256:<hex>` over the best candidate of every (signature, versions)
  /// of `device`: equal for caches holding the same bests, whatever else
  /// they hold or the order they learned it in; a fixed value when there
  /// are none. One indexed row read (kept up to date by every write), as
  /// every compile asks. Part of artifact and code keys.
  Expected<std::string> tuningState(std::string_view device);
  /// Removes every record (of `device` when not empty); how many went.
  /// Unavailable in a read-only cache.
  Expected<uint64_t> clearTuning(std::string_view device = {});
  /// The valid records (of `device` and `signature` when not empty) as a
  /// JSON document ({"format": "flowc.tuning.v1", "records": [{signature,
  /// device, versions, candidate, time_ns, spread_ns, samples, separated,
  /// noise, measured_ms, host}, ...]}), for importTuning elsewhere.
  Expected<std::string> exportTuning(std::string_view device = {},
                                     std::string_view signature = {});
  /// Records from an exportTuning document, in one transaction: a record
  /// replaces the one of the same key only if it was measured later.
  /// InvalidArgument when the document is not JSON or not that format; a
  /// record in it that is not valid is ignored with a warning naming its
  /// position and counted. Unavailable in a read-only cache.
  Expected<TuningImport> importTuning(std::string_view document);
  /// `records` kept as an import keeps them: one transaction, a record
  /// replacing the one of the same key only if measured later, one that is
  /// not valid ignored with a warning and counted. Unavailable in a
  /// read-only cache.
  Expected<TuningImport> importTuning(const std::vector<TuningRecord> &records);

  // Maintenance -----------------------------------------------------------

  Status pin(const Digest &digest);
  Status unpin(const Digest &digest);
  /// Evicts least-recently-used unpinned blobs until at most `targetBytes`
  /// remain, dropping the action entries that depend on them.
  Expected<GcReport> collectGarbage(uint64_t targetBytes);
  /// Evicts down to options().maxBytes if above it.
  Expected<GcReport> enforceLimit();
  /// Re-hashes every blob without touching its access time (so it works on
  /// a full disk), telling blobs whose content does not match their digest
  /// (corrupt) from blobs that cannot be read (unreadable). With `repair`,
  /// a corrupt blob is hashed once more and, if it still does not match,
  /// moved to quarantine/ with its row and dependent entries removed; an
  /// unreadable one is only reported; the index is reconciled with the
  /// files. A quarantine that fails (full disk) is reported, not fatal.
  /// Unavailable for repair in a read-only cache.
  Expected<VerifyReport> verify(bool repair);
  /// After a crash: drops rows whose file is missing, indexes complete
  /// orphan files whose name matches their content, quarantines the rest.
  Expected<VerifyReport> reconcile();
  Expected<std::vector<BlobInfo>> list(size_t limit);
  /// Removes every unpinned blob and every action entry (not counted as
  /// evictions).
  Expected<GcReport> clear();
  Expected<CacheStats> stats();
  /// Sets every counter (hits, misses, evictions, dedup) back to zero.
  Status zeroCounters();

  /// The file of a large blob (small blobs have none; the file may not exist).
  std::string blobPath(const Digest &digest) const;

private:
  Cache(std::string root, CacheOptions options, std::unique_ptr<Index> index);
  Status storeLarge(const Digest *expected, std::string_view bytes, Digest &stored);
  Status storeInline(const Digest &digest, std::string_view bytes);
  Status quarantine(const Digest &digest, const std::string &why);
  Status reserve(uint64_t bytes);
  enum class CountEvictions { Yes, No };
  Expected<GcReport> evictDownTo(uint64_t targetBytes, CountEvictions count);

  /// A writer offered bytes the store already holds: counts what dedup
  /// saved and (Touch::Yes) refreshes the blob's last access, best-effort.
  enum class Touch { Yes, No };
  void recordDuplicate(const Digest &digest, Touch touch);
  /// Unavailable naming the root in a read-only cache.
  Status checkWritable(const char *what) const;
  /// Counters and access times only: skipped in a read-only cache, and a
  /// failure (full disk) is logged once at warn, never returned, so that a
  /// hit works where nothing can be written.
  void bestEffort(const Status &status, const char *what);

  std::string root_;
  CacheOptions options_;
  std::unique_ptr<Index> index_;
  std::shared_ptr<PinTable> pins_;
  std::atomic<bool> warnedBestEffort_{false};
};

} // namespace flowc::cache
