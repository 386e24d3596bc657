#include "Index.h"

#include "flowc/support/Sha256.h"

#include <chrono>
#include <cstring>
#include <set>
#include <spdlog/spdlog.h>

namespace flowc::cache {

namespace {

// Each entry migrates the schema from version i to i + 1, in one
// transaction. Never edit a shipped entry; append a new one.
constexpr const char *kMigrations[] = {
    // 0 -> 1: the foundation's blob and action tables.
    R"sql(
CREATE TABLE IF NOT EXISTS blobs (
  digest TEXT PRIMARY KEY,
  size INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  last_access_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS actions (
  kind TEXT NOT NULL,
  key TEXT NOT NULL,
  result TEXT NOT NULL,
  created_ms INTEGER NOT NULL,
  PRIMARY KEY (kind, key)
);
)sql",
    // 1 -> 2: blobs keyed by full digest text, inline small blobs, pins;
    // action dependencies; tuning records; stat memo; counters.
    R"sql(
ALTER TABLE blobs RENAME TO blobs_v1;
CREATE TABLE blobs (
  digest TEXT PRIMARY KEY,          -- sha256:<hex>/<size>
  size INTEGER NOT NULL,
  inline INTEGER NOT NULL DEFAULT 0,
  data BLOB,                        -- the bytes of an inline blob
  created_ms INTEGER NOT NULL,
  last_access_ms INTEGER NOT NULL,
  pinned INTEGER NOT NULL DEFAULT 0
);
INSERT INTO blobs(digest, size, created_ms, last_access_ms)
  SELECT 'sha256:' || digest || '/' || size, size, created_ms, last_access_ms FROM blobs_v1;
DROP TABLE blobs_v1;
CREATE INDEX blobs_lru ON blobs(pinned, last_access_ms);
CREATE INDEX actions_result ON actions(result);
CREATE TABLE action_deps (
  kind TEXT NOT NULL,
  key TEXT NOT NULL,
  digest TEXT NOT NULL,
  PRIMARY KEY (kind, key, digest)
);
CREATE INDEX action_deps_digest ON action_deps(digest);
CREATE TABLE tuning_records (
  signature TEXT NOT NULL,
  device TEXT NOT NULL,
  candidate TEXT NOT NULL,
  time_ns INTEGER NOT NULL,
  created_ms INTEGER NOT NULL,
  PRIMARY KEY (signature, device, candidate)
);
CREATE TABLE stat_memo (
  path TEXT NOT NULL,
  purpose TEXT NOT NULL,
  device INTEGER NOT NULL,
  inode INTEGER NOT NULL,
  size INTEGER NOT NULL,
  mtime_ns INTEGER NOT NULL,
  ctime_ns INTEGER NOT NULL,
  digest TEXT NOT NULL,
  PRIMARY KEY (path, purpose)
);
CREATE TABLE counters (
  name TEXT PRIMARY KEY,
  value INTEGER NOT NULL
);
)sql",
    // 2 -> 3: the files a memoized digest was computed from besides the
    // memoized file (a model's external data), each with its identity. Rows
    // recorded before could not list them, so they go: a memo only saves
    // work, and one without its inputs could answer for rewritten weights.
    R"sql(
CREATE TABLE stat_memo_inputs (
  path TEXT NOT NULL,
  purpose TEXT NOT NULL,
  input_path TEXT NOT NULL,
  device INTEGER NOT NULL,
  inode INTEGER NOT NULL,
  size INTEGER NOT NULL,
  mtime_ns INTEGER NOT NULL,
  ctime_ns INTEGER NOT NULL,
  PRIMARY KEY (path, purpose, input_path)
);
DELETE FROM stat_memo;
)sql",
    // 3 -> 4: tuning records keyed by the library versions too, with the
    // measurement's spread, samples, separation, noise, time and host
    // (search, docs/search.md); and each device's state digest, kept with
    // the records so that a compile reads it as one row. Nothing wrote the
    // old table, so its rows (if any) go.
    R"sql(
DROP TABLE tuning_records;
CREATE TABLE tuning_records (
  signature TEXT NOT NULL,
  device TEXT NOT NULL,
  versions TEXT NOT NULL,
  candidate TEXT NOT NULL,
  time_ns INTEGER NOT NULL,          -- median
  spread_ns INTEGER NOT NULL,        -- half the 95% interval of the median
  samples INTEGER NOT NULL,
  separated INTEGER NOT NULL,
  noise REAL NOT NULL,
  measured_ms INTEGER NOT NULL,
  host TEXT NOT NULL,
  PRIMARY KEY (signature, device, versions, candidate)
);
CREATE INDEX tuning_records_device ON tuning_records(device, signature, versions, time_ns);
CREATE TABLE tuning_state (
  device TEXT PRIMARY KEY,
  digest TEXT NOT NULL               -- sha256:<hex> of the device's bests
);
)sql",
};
constexpr int kSchemaVersion = sizeof(kMigrations) / sizeof(kMigrations[0]);

int64_t nowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

Expected<Digest> parseColumn(const Statement &stmt, int column) {
  return Digest::parse(stmt.text(column));
}

} // namespace

const char *actionKindName(ActionKind kind) {
  switch (kind) {
  case ActionKind::Code:
    return "code";
  case ActionKind::Artifact:
    return "artifact";
  case ActionKind::Kernel:
    return "kernel";
  case ActionKind::DerivedWeight:
    return "derived";
  }
  return "unknown";
}

Expected<std::unique_ptr<Index>> Index::open(const std::string &path,
                                             CacheAccess access) {
  FLOWC_ASSIGN_OR_RETURN(auto db, Database::open(path, access));
  std::unique_ptr<Index> index(new Index(std::move(db)));
  FLOWC_RETURN_IF_ERROR(index->migrate(access));
  return index;
}

Expected<int> Index::schemaVersion() {
  FLOWC_ASSIGN_OR_RETURN(Statement stmt, db_->prepare("PRAGMA user_version"));
  FLOWC_ASSIGN_OR_RETURN(bool row, stmt.step());
  return row ? static_cast<int>(stmt.integer(0)) : 0;
}

Status Index::migrate(CacheAccess access) {
  FLOWC_ASSIGN_OR_RETURN(int current, schemaVersion());
  if (current > kSchemaVersion)
    return failedPrecondition("cache index '" + db_->path() + "' has schema version " +
                              std::to_string(current) + "; this flowc knows up to " +
                              std::to_string(kSchemaVersion) +
                              " (a newer flowc wrote it)");
  if (access == CacheAccess::ReadOnly && current < kSchemaVersion)
    return failedPrecondition("cache index '" + db_->path() + "' has schema version " +
                              std::to_string(current) + "; this flowc needs " +
                              std::to_string(kSchemaVersion) +
                              ", and a read-only cache cannot be migrated (open it "
                              "once read-write)");
  for (int v = current; v < kSchemaVersion; ++v) {
    FLOWC_ASSIGN_OR_RETURN(Transaction txn, Transaction::begin(*db_));
    // Another process may have migrated while we waited for the lock.
    FLOWC_ASSIGN_OR_RETURN(int now, schemaVersion());
    if (now > v)
      continue;
    FLOWC_RETURN_IF_ERROR(db_->exec(kMigrations[v]));
    FLOWC_RETURN_IF_ERROR(db_->exec("PRAGMA user_version = " + std::to_string(v + 1)));
    FLOWC_RETURN_IF_ERROR(txn.commit());
  }
  return Status::ok();
}

static const char *kAddBlobSql =
    "INSERT INTO blobs(digest, size, inline, data, created_ms, last_access_ms) "
    "VALUES(?1, ?2, ?3, ?4, ?5, ?5) ON CONFLICT(digest) DO UPDATE SET "
    "last_access_ms = excluded.last_access_ms";

Status Index::addBlob(const Digest &digest, bool isInline, std::string_view data) {
  return addBlobs({digest}, {isInline}, {data});
}

Status Index::addBlobs(const std::vector<Digest> &digests,
                       const std::vector<bool> &isInline,
                       const std::vector<std::string_view> &data) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(Transaction txn, Transaction::begin(*db_));
  int64_t now = nowMs();
  for (size_t i = 0; i < digests.size(); ++i) {
    FLOWC_ASSIGN_OR_RETURN(Statement stmt, db_->prepare(kAddBlobSql));
    stmt.bind(1, digests[i].toString()).bind(2, static_cast<int64_t>(digests[i].size));
    stmt.bind(3, int64_t{isInline[i]}).bind(5, now);
    if (isInline[i])
      stmt.bindBlob(4, data[i]);
    FLOWC_RETURN_IF_ERROR(stmt.run());
  }
  return txn.commit();
}

Expected<std::optional<BlobRow>> Index::findBlob(const Digest &digest, bool withData) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->prepare(withData
                       ? "SELECT inline, data, created_ms, last_access_ms, pinned FROM "
                         "blobs WHERE digest = ?1"
                       : "SELECT inline, NULL, created_ms, last_access_ms, pinned FROM "
                         "blobs WHERE digest = ?1"));
  stmt.bind(1, digest.toString());
  FLOWC_ASSIGN_OR_RETURN(bool row, stmt.step());
  if (!row)
    return std::optional<BlobRow>();
  BlobRow blob{digest,          stmt.integer(0) != 0, stmt.blob(1),
               stmt.integer(2), stmt.integer(3),      stmt.integer(4) != 0};
  return std::optional<BlobRow>(std::move(blob));
}

Status Index::touchBlob(const Digest &digest) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->prepare("UPDATE blobs SET last_access_ms = ?2 WHERE digest = ?1"));
  stmt.bind(1, digest.toString()).bind(2, nowMs());
  return stmt.run();
}

Expected<EvictionResult> Index::removeBlob(const Digest &digest) {
  std::lock_guard lock(mutex_);
  std::string text = digest.toString();
  FLOWC_ASSIGN_OR_RETURN(Transaction txn, Transaction::begin(*db_));
  EvictionResult result;
  // Entries whose result is the blob, then entries that list it as a need.
  FLOWC_ASSIGN_OR_RETURN(Statement byResult,
                         db_->prepare("DELETE FROM actions WHERE result = ?1"));
  FLOWC_RETURN_IF_ERROR(byResult.bind(1, text).run());
  result.droppedActions += static_cast<uint64_t>(db_->changes());
  FLOWC_ASSIGN_OR_RETURN(
      Statement byDep,
      db_->prepare("DELETE FROM actions WHERE (kind, key) IN "
                   "(SELECT kind, key FROM action_deps WHERE digest = ?1)"));
  FLOWC_RETURN_IF_ERROR(byDep.bind(1, text).run());
  result.droppedActions += static_cast<uint64_t>(db_->changes());
  FLOWC_ASSIGN_OR_RETURN(Statement deps,
                         db_->prepare("DELETE FROM action_deps WHERE (kind, key) NOT IN "
                                      "(SELECT kind, key FROM actions)"));
  FLOWC_RETURN_IF_ERROR(deps.run());
  FLOWC_ASSIGN_OR_RETURN(Statement blob,
                         db_->prepare("DELETE FROM blobs WHERE digest = ?1"));
  FLOWC_RETURN_IF_ERROR(blob.bind(1, text).run());
  FLOWC_RETURN_IF_ERROR(txn.commit());
  return result;
}

/// Rows of a query that selects (digest, inline, created_ms, last_access_ms,
/// pinned).
static Expected<std::vector<BlobRow>> readBlobRows(Statement &stmt) {
  std::vector<BlobRow> rows;
  while (true) {
    FLOWC_ASSIGN_OR_RETURN(bool row, stmt.step());
    if (!row)
      break;
    FLOWC_ASSIGN_OR_RETURN(Digest digest, parseColumn(stmt, 0));
    rows.push_back({digest, stmt.integer(1) != 0, "", stmt.integer(2), stmt.integer(3),
                    stmt.integer(4) != 0});
  }
  return rows;
}

Expected<std::vector<BlobRow>> Index::blobsByLastAccess(size_t limit) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->prepare("SELECT digest, inline, created_ms, last_access_ms, pinned FROM blobs "
                   "WHERE pinned = 0 ORDER BY last_access_ms LIMIT ?1"));
  stmt.bind(1, static_cast<int64_t>(limit));
  return readBlobRows(stmt);
}

Expected<std::vector<BlobRow>> Index::allBlobs() {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->prepare("SELECT digest, inline, created_ms, last_access_ms, pinned FROM blobs "
                   "ORDER BY last_access_ms DESC"));
  return readBlobRows(stmt);
}

Status Index::setPinned(const Digest &digest, bool pinned) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(Statement stmt,
                         db_->prepare("UPDATE blobs SET pinned = ?2 WHERE digest = ?1"));
  FLOWC_RETURN_IF_ERROR(stmt.bind(1, digest.toString()).bind(2, int64_t{pinned}).run());
  if (db_->changes() == 0)
    return notFound("blob " + digest.toString() + " is not in the cache");
  return Status::ok();
}

Expected<std::optional<std::pair<Digest, std::vector<Digest>>>>
Index::getAction(ActionKind kind, const Digest &key) {
  using Result = std::optional<std::pair<Digest, std::vector<Digest>>>;
  std::lock_guard lock(mutex_);
  std::string keyText = key.toString();
  FLOWC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->prepare("SELECT result FROM actions WHERE kind = ?1 AND key = ?2"));
  stmt.bind(1, actionKindName(kind)).bind(2, keyText);
  FLOWC_ASSIGN_OR_RETURN(bool row, stmt.step());
  if (!row)
    return Result();
  FLOWC_ASSIGN_OR_RETURN(Digest result, parseColumn(stmt, 0));
  FLOWC_ASSIGN_OR_RETURN(
      Statement deps,
      db_->prepare("SELECT digest FROM action_deps WHERE kind = ?1 AND key = ?2"));
  deps.bind(1, actionKindName(kind)).bind(2, keyText);
  std::vector<Digest> needs;
  while (true) {
    FLOWC_ASSIGN_OR_RETURN(bool more, deps.step());
    if (!more)
      break;
    FLOWC_ASSIGN_OR_RETURN(Digest dep, parseColumn(deps, 0));
    needs.push_back(dep);
  }
  return Result(std::make_pair(result, std::move(needs)));
}

Status Index::putAction(ActionKind kind, const Digest &key, const Digest &result,
                        const std::vector<Digest> &deps) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(Transaction txn, Transaction::begin(*db_));
  FLOWC_RETURN_IF_ERROR(writeAction(kind, key, result, deps));
  return txn.commit();
}

Status Index::putActions(const std::vector<ActionRecord> &records) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(Transaction txn, Transaction::begin(*db_));
  for (const ActionRecord &record : records)
    FLOWC_RETURN_IF_ERROR(
        writeAction(record.kind, record.key, record.result, record.deps));
  return txn.commit();
}

Status Index::writeAction(ActionKind kind, const Digest &key, const Digest &result,
                          const std::vector<Digest> &deps) {
  std::string keyText = key.toString();
  FLOWC_ASSIGN_OR_RETURN(Statement action,
                         db_->prepare("INSERT OR REPLACE INTO actions(kind, key, result, "
                                      "created_ms) VALUES(?1, ?2, ?3, ?4)"));
  action.bind(1, actionKindName(kind)).bind(2, keyText).bind(3, result.toString());
  FLOWC_RETURN_IF_ERROR(action.bind(4, nowMs()).run());
  FLOWC_ASSIGN_OR_RETURN(
      Statement clear,
      db_->prepare("DELETE FROM action_deps WHERE kind = ?1 AND key = ?2"));
  FLOWC_RETURN_IF_ERROR(clear.bind(1, actionKindName(kind)).bind(2, keyText).run());
  for (const Digest &dep : deps) {
    FLOWC_ASSIGN_OR_RETURN(
        Statement add,
        db_->prepare(
            "INSERT OR IGNORE INTO action_deps(kind, key, digest) VALUES(?1, ?2, ?3)"));
    FLOWC_RETURN_IF_ERROR(
        add.bind(1, actionKindName(kind)).bind(2, keyText).bind(3, dep.toString()).run());
  }
  return Status::ok();
}

Status Index::zeroCounters() {
  std::lock_guard lock(mutex_);
  return db_->exec("DELETE FROM counters");
}

Expected<uint64_t> Index::clearActions() {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(Transaction txn, Transaction::begin(*db_));
  FLOWC_RETURN_IF_ERROR(db_->exec("DELETE FROM actions"));
  uint64_t dropped = static_cast<uint64_t>(db_->changes());
  FLOWC_RETURN_IF_ERROR(db_->exec("DELETE FROM action_deps"));
  FLOWC_RETURN_IF_ERROR(txn.commit());
  return dropped;
}

Expected<std::optional<StatMemo>> Index::getStat(const FileIdentity &file,
                                                 std::string_view purpose) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->prepare("SELECT digest FROM stat_memo WHERE path = ?1 AND purpose = ?2 AND "
                   "device = ?3 AND inode = ?4 AND size = ?5 AND mtime_ns = ?6 AND "
                   "ctime_ns = ?7"));
  stmt.bind(1, file.path).bind(2, purpose).bind(3, static_cast<int64_t>(file.device));
  stmt.bind(4, static_cast<int64_t>(file.inode)).bind(5, static_cast<int64_t>(file.size));
  stmt.bind(6, file.mtimeNs).bind(7, file.ctimeNs);
  FLOWC_ASSIGN_OR_RETURN(bool row, stmt.step());
  if (!row)
    return std::optional<StatMemo>();
  StatMemo memo;
  FLOWC_ASSIGN_OR_RETURN(memo.digest, parseColumn(stmt, 0));
  FLOWC_ASSIGN_OR_RETURN(
      Statement inputs,
      db_->prepare("SELECT input_path, device, inode, size, mtime_ns, ctime_ns FROM "
                   "stat_memo_inputs WHERE path = ?1 AND purpose = ?2"));
  inputs.bind(1, file.path).bind(2, purpose);
  while (true) {
    FLOWC_ASSIGN_OR_RETURN(bool more, inputs.step());
    if (!more)
      break;
    FileIdentity input;
    input.path = inputs.text(0);
    input.device = static_cast<uint64_t>(inputs.integer(1));
    input.inode = static_cast<uint64_t>(inputs.integer(2));
    input.size = static_cast<uint64_t>(inputs.integer(3));
    input.mtimeNs = inputs.integer(4);
    input.ctimeNs = inputs.integer(5);
    memo.inputs.push_back(std::move(input));
  }
  return std::optional<StatMemo>(std::move(memo));
}

Status Index::putStat(const FileIdentity &file, std::string_view purpose,
                      const Digest &digest, const std::vector<FileIdentity> &inputs) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(Transaction txn, Transaction::begin(*db_));
  FLOWC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->prepare("INSERT OR REPLACE INTO stat_memo(path, purpose, device, inode, size, "
                   "mtime_ns, ctime_ns, digest) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"));
  stmt.bind(1, file.path).bind(2, purpose).bind(3, static_cast<int64_t>(file.device));
  stmt.bind(4, static_cast<int64_t>(file.inode)).bind(5, static_cast<int64_t>(file.size));
  stmt.bind(6, file.mtimeNs).bind(7, file.ctimeNs).bind(8, digest.toString());
  FLOWC_RETURN_IF_ERROR(stmt.run());
  FLOWC_ASSIGN_OR_RETURN(
      Statement clear,
      db_->prepare("DELETE FROM stat_memo_inputs WHERE path = ?1 AND purpose = ?2"));
  FLOWC_RETURN_IF_ERROR(clear.bind(1, file.path).bind(2, purpose).run());
  for (const FileIdentity &input : inputs) {
    FLOWC_ASSIGN_OR_RETURN(
        Statement add,
        db_->prepare("INSERT OR REPLACE INTO stat_memo_inputs(path, purpose, input_path, "
                     "device, inode, size, mtime_ns, ctime_ns) VALUES(?1, ?2, ?3, ?4, "
                     "?5, ?6, ?7, ?8)"));
    add.bind(1, file.path).bind(2, purpose).bind(3, input.path);
    add.bind(4, static_cast<int64_t>(input.device))
        .bind(5, static_cast<int64_t>(input.inode));
    add.bind(6, static_cast<int64_t>(input.size)).bind(7, input.mtimeNs);
    FLOWC_RETURN_IF_ERROR(add.bind(8, input.ctimeNs).run());
  }
  return txn.commit();
}

namespace {

// Every column of a tuning row, in TuningRecord's order.
#define FLOWC_TUNING_COLUMNS                                                             \
  "signature, device, versions, candidate, time_ns, spread_ns, samples, separated, "     \
  "noise, measured_ms, host"

TuningRecord readTuningRow(const Statement &stmt) {
  TuningRecord record;
  record.signature = stmt.text(0);
  record.device = stmt.text(1);
  record.versions = stmt.text(2);
  record.candidate = stmt.text(3);
  record.timeNs = stmt.integer(4);
  record.spreadNs = stmt.integer(5);
  record.samples = stmt.integer(6);
  record.separated = stmt.integer(7) != 0;
  record.noise = stmt.real(8);
  record.measuredMs = stmt.integer(9);
  record.host = stmt.text(10);
  return record;
}

void bindTuningRow(Statement &stmt, const TuningRecord &record) {
  stmt.bind(1, record.signature).bind(2, record.device).bind(3, record.versions);
  stmt.bind(4, record.candidate).bind(5, record.timeNs).bind(6, record.spreadNs);
  stmt.bind(7, record.samples).bind(8, int64_t{record.separated});
  stmt.bindReal(9, record.noise).bind(10, record.measuredMs).bind(11, record.host);
}

/// The row's record if it is valid; otherwise a warning naming the row and
/// the index (a row written by something other than this cache, or
/// damaged), and nullopt, so that one bad row never fails a compile.
std::optional<TuningRecord> validTuningRow(const Statement &stmt,
                                           const std::string &indexPath) {
  TuningRecord record = readTuningRow(stmt);
  Status valid = record.validate();
  if (valid)
    return record;
  spdlog::warn("tuning record (signature '{}', device '{}', versions '{}', candidate "
               "'{}') in '{}' is ignored: {}",
               record.signature, record.device, record.versions, record.candidate,
               indexPath, valid.message());
  return std::nullopt;
}

/// Each field length-prefixed, so that no two different rows hash alike.
void hashField(Sha256Hasher &hasher, std::string_view field) {
  uint64_t size = field.size();
  uint8_t prefix[8];
  for (int i = 0; i < 8; ++i)
    prefix[i] = static_cast<uint8_t>(size >> (8 * i));
  hasher.update(prefix, sizeof(prefix));
  hasher.update(field);
}

constexpr std::string_view kTuningStateTag = "flowc.tuning.state.v1";

std::string noTuningState() {
  Sha256Hasher hasher;
  hashField(hasher, kTuningStateTag);
  return "sha256:" + sha256Hex(hasher.finish());
}

} // namespace

Status Index::putTuning(const TuningRecord &record) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(Transaction txn, Transaction::begin(*db_));
  FLOWC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->prepare("INSERT OR REPLACE INTO tuning_records(" FLOWC_TUNING_COLUMNS
                   ") VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, "
                   "?10, ?11)"));
  bindTuningRow(stmt, record);
  FLOWC_RETURN_IF_ERROR(stmt.run());
  FLOWC_RETURN_IF_ERROR(updateTuningStateLocked(record.device));
  return txn.commit();
}

Expected<uint64_t> Index::importTuning(const std::vector<TuningRecord> &records) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(Transaction txn, Transaction::begin(*db_));
  uint64_t written = 0;
  std::set<std::string> devices;
  for (const TuningRecord &record : records) {
    // A record measured no later than the row already held is older news.
    FLOWC_ASSIGN_OR_RETURN(
        Statement stmt,
        db_->prepare("INSERT INTO tuning_records(" FLOWC_TUNING_COLUMNS
                     ") VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) "
                     "ON CONFLICT(signature, device, versions, candidate) DO UPDATE SET "
                     "time_ns = excluded.time_ns, spread_ns = excluded.spread_ns, "
                     "samples = excluded.samples, separated = excluded.separated, "
                     "noise = excluded.noise, measured_ms = excluded.measured_ms, "
                     "host = excluded.host WHERE excluded.measured_ms > "
                     "tuning_records.measured_ms"));
    bindTuningRow(stmt, record);
    FLOWC_RETURN_IF_ERROR(stmt.run());
    if (db_->changes() == 0)
      continue;
    ++written;
    devices.insert(record.device);
  }
  for (const std::string &device : devices)
    FLOWC_RETURN_IF_ERROR(updateTuningStateLocked(device));
  FLOWC_RETURN_IF_ERROR(txn.commit());
  return written;
}

Status Index::updateTuningStateLocked(std::string_view device) {
  FLOWC_ASSIGN_OR_RETURN(
      Statement rows, db_->prepare("SELECT " FLOWC_TUNING_COLUMNS
                                   " FROM tuning_records WHERE device = ?1 "
                                   "ORDER BY signature, versions, time_ns, candidate"));
  rows.bind(1, device);
  Sha256Hasher hasher;
  hashField(hasher, kTuningStateTag);
  // The first valid row of each (signature, versions) is its best.
  std::optional<std::pair<std::string, std::string>> group;
  while (true) {
    FLOWC_ASSIGN_OR_RETURN(bool row, rows.step());
    if (!row)
      break;
    std::optional<TuningRecord> record = validTuningRow(rows, db_->path());
    if (!record)
      continue;
    auto key = std::make_pair(record->signature, record->versions);
    if (group == key)
      continue;
    group = std::move(key);
    hashField(hasher, record->signature);
    hashField(hasher, record->versions);
    hashField(hasher, record->candidate);
  }
  FLOWC_ASSIGN_OR_RETURN(
      Statement store,
      db_->prepare("INSERT OR REPLACE INTO tuning_state(device, digest) VALUES(?1, ?2)"));
  return store.bind(1, device).bind(2, "sha256:" + sha256Hex(hasher.finish())).run();
}

Expected<std::optional<TuningRecord>> Index::bestTuning(std::string_view signature,
                                                        std::string_view device,
                                                        std::string_view versions) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->prepare("SELECT " FLOWC_TUNING_COLUMNS
                   " FROM tuning_records WHERE signature = "
                   "?1 AND device = ?2 AND versions = ?3 ORDER BY time_ns, candidate"));
  stmt.bind(1, signature).bind(2, device).bind(3, versions);
  while (true) {
    FLOWC_ASSIGN_OR_RETURN(bool row, stmt.step());
    if (!row)
      return std::optional<TuningRecord>();
    if (std::optional<TuningRecord> record = validTuningRow(stmt, db_->path()))
      return record;
  }
}

Expected<std::vector<TuningRecord>> Index::listTuning(std::string_view device,
                                                      std::string_view signature) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->prepare("SELECT " FLOWC_TUNING_COLUMNS
                   " FROM tuning_records WHERE (?1 = '' OR "
                   "device = ?1) AND (?2 = '' OR signature = ?2) ORDER BY signature, "
                   "device, versions, time_ns, candidate"));
  stmt.bind(1, device).bind(2, signature);
  std::vector<TuningRecord> records;
  while (true) {
    FLOWC_ASSIGN_OR_RETURN(bool row, stmt.step());
    if (!row)
      return records;
    if (std::optional<TuningRecord> record = validTuningRow(stmt, db_->path()))
      records.push_back(std::move(*record));
  }
}

Expected<std::vector<std::string>> Index::tuningDevices(std::string_view prefix) {
  std::lock_guard lock(mutex_);
  // tuning_state has a row per device with records: a range of its key,
  // [prefix, prefix with its last byte one higher), reads no record.
  std::string end(prefix);
  while (!end.empty() && static_cast<unsigned char>(end.back()) == 0xff)
    end.pop_back();
  if (!end.empty())
    end.back() = static_cast<char>(static_cast<unsigned char>(end.back()) + 1);
  FLOWC_ASSIGN_OR_RETURN(
      Statement stmt, db_->prepare("SELECT device FROM tuning_state WHERE device >= ?1 "
                                   "AND (?2 = '' OR device < ?2) ORDER BY device"));
  stmt.bind(1, prefix).bind(2, std::string_view(end));
  std::vector<std::string> devices;
  while (true) {
    FLOWC_ASSIGN_OR_RETURN(bool row, stmt.step());
    if (!row)
      return devices;
    devices.push_back(stmt.text(0));
  }
}

Expected<int64_t> Index::latestTuning(std::string_view device) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->prepare("SELECT MAX(measured_ms) FROM tuning_records WHERE device = ?1"));
  stmt.bind(1, device);
  FLOWC_ASSIGN_OR_RETURN(bool row, stmt.step());
  return row && !stmt.isNull(0) ? stmt.integer(0) : 0;
}

Expected<std::string> Index::tuningState(std::string_view device) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(
      Statement stmt, db_->prepare("SELECT digest FROM tuning_state WHERE device = ?1"));
  stmt.bind(1, device);
  FLOWC_ASSIGN_OR_RETURN(bool row, stmt.step());
  if (!row) {
    static const std::string none = noTuningState();
    return none;
  }
  return stmt.text(0);
}

Expected<uint64_t> Index::clearTuning(std::string_view device) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(Transaction txn, Transaction::begin(*db_));
  FLOWC_ASSIGN_OR_RETURN(
      Statement records,
      db_->prepare("DELETE FROM tuning_records WHERE ?1 = '' OR device = ?1"));
  FLOWC_RETURN_IF_ERROR(records.bind(1, device).run());
  uint64_t removed = static_cast<uint64_t>(db_->changes());
  // No state row reads as no records.
  FLOWC_ASSIGN_OR_RETURN(
      Statement states,
      db_->prepare("DELETE FROM tuning_state WHERE ?1 = '' OR device = ?1"));
  FLOWC_RETURN_IF_ERROR(states.bind(1, device).run());
  FLOWC_RETURN_IF_ERROR(txn.commit());
  return removed;
}

#undef FLOWC_TUNING_COLUMNS

Status Index::bump(std::string_view counter, int64_t delta) {
  std::lock_guard lock(mutex_);
  FLOWC_ASSIGN_OR_RETURN(
      Statement stmt,
      db_->prepare(
          "INSERT INTO counters(name, value) VALUES(?1, ?2) ON CONFLICT(name) DO "
          "UPDATE SET value = value + excluded.value"));
  return stmt.bind(1, counter).bind(2, delta).run();
}

Expected<CacheStats> Index::stats() {
  std::lock_guard lock(mutex_);
  CacheStats stats;
  FLOWC_ASSIGN_OR_RETURN(
      Statement blobs,
      db_->prepare("SELECT COUNT(*), COALESCE(SUM(size), 0), COALESCE(SUM(inline), 0), "
                   "COALESCE(SUM(pinned), 0) FROM blobs"));
  FLOWC_RETURN_IF_ERROR(blobs.step().status());
  stats.blobCount = static_cast<uint64_t>(blobs.integer(0));
  stats.blobBytes = static_cast<uint64_t>(blobs.integer(1));
  stats.inlineBlobs = static_cast<uint64_t>(blobs.integer(2));
  stats.pinnedBlobs = static_cast<uint64_t>(blobs.integer(3));
  FLOWC_ASSIGN_OR_RETURN(Statement actions, db_->prepare("SELECT COUNT(*) FROM actions"));
  FLOWC_RETURN_IF_ERROR(actions.step().status());
  stats.actionCount = static_cast<uint64_t>(actions.integer(0));
  FLOWC_ASSIGN_OR_RETURN(Statement memo, db_->prepare("SELECT COUNT(*) FROM stat_memo"));
  FLOWC_RETURN_IF_ERROR(memo.step().status());
  stats.statMemoEntries = static_cast<uint64_t>(memo.integer(0));
  FLOWC_ASSIGN_OR_RETURN(Statement counters,
                         db_->prepare("SELECT name, value FROM counters"));
  while (true) {
    FLOWC_ASSIGN_OR_RETURN(bool row, counters.step());
    if (!row)
      break;
    std::string name = counters.text(0);
    uint64_t value = static_cast<uint64_t>(counters.integer(1));
    if (name.ends_with("_hits"))
      stats.byKind[name.substr(0, name.size() - 5)].hits = value;
    else if (name.ends_with("_misses"))
      stats.byKind[name.substr(0, name.size() - 7)].misses = value;
    else if (name == "evictions")
      stats.evictions = value;
    else if (name == "evicted_bytes")
      stats.evictedBytes = value;
    else if (name == "dedup_bytes")
      stats.dedupBytes = value;
  }
  // Every kind is reported, looked up or not.
  for (ActionKind kind : {ActionKind::Artifact, ActionKind::Code, ActionKind::Kernel,
                          ActionKind::DerivedWeight})
    stats.byKind[actionKindName(kind)];
  stats.hits = stats.byKind["artifact"].hits;
  stats.misses = stats.byKind["artifact"].misses;
  return stats;
}

} // namespace flowc::cache
