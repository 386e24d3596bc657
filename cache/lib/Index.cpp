#include "Index.h"

#include <chrono>
#include <sqlite3.h>

namespace flowc::cache {

namespace {

// Version 1 of the index. Later versions add migrations keyed on
// `PRAGMA user_version`.
constexpr const char *kSchemaV1 = R"sql(
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
PRAGMA user_version = 1;
)sql";

int64_t nowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

const char *kindName(ActionKind kind) {
  return kind == ActionKind::Code ? "code" : "artifact";
}

/// A prepared statement finalized on scope exit.
class Statement {
public:
  Statement(sqlite3 *db, const char *sql) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  bool prepared() const { return rc_ == SQLITE_OK; }
  void bind(int i, const std::string &text) {
    sqlite3_bind_text(stmt_, i, text.c_str(), -1, SQLITE_TRANSIENT);
  }
  void bind(int i, int64_t value) { sqlite3_bind_int64(stmt_, i, value); }
  int step() { return sqlite3_step(stmt_); }
  std::string text(int col) {
    auto *p = reinterpret_cast<const char *>(sqlite3_column_text(stmt_, col));
    return p ? p : "";
  }
  int64_t integer(int col) { return sqlite3_column_int64(stmt_, col); }

private:
  sqlite3_stmt *stmt_ = nullptr;
  int rc_;
};

} // namespace

Index::~Index() { sqlite3_close(db_); }

Expected<std::unique_ptr<Index>> Index::open(const std::string &path) {
  sqlite3 *db = nullptr;
  int rc = sqlite3_open_v2(
      path.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return unavailable("cannot open cache index '" + path + "': " + message);
  }
  std::unique_ptr<Index> index(new Index(db));
  sqlite3_busy_timeout(db, 5000);
  FLOWC_RETURN_IF_ERROR(index->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;")
                            .withContext("cache index '" + path + "'"));
  FLOWC_RETURN_IF_ERROR(index->exec(kSchemaV1).withContext("cache index '" + path + "'"));
  return index;
}

Status Index::exec(const char *sql) {
  char *error = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &error);
  if (rc == SQLITE_OK)
    return Status::ok();
  std::string message = error ? error : sqlite3_errstr(rc);
  sqlite3_free(error);
  return rc == SQLITE_FULL ? resourceExhausted("sqlite: " + message)
                           : internalError("sqlite: " + message);
}

Status Index::check(int rc, const char *what) {
  if (rc == SQLITE_OK || rc == SQLITE_DONE || rc == SQLITE_ROW)
    return Status::ok();
  std::string message = std::string(what) + ": " + sqlite3_errmsg(db_);
  if (rc == SQLITE_FULL)
    return resourceExhausted(message);
  if (rc == SQLITE_BUSY || rc == SQLITE_LOCKED)
    return unavailable(message);
  return internalError(message);
}

Status Index::addBlob(const Digest &digest) {
  std::lock_guard lock(mutex_);
  Statement stmt(db_, "INSERT INTO blobs(digest, size, created_ms, last_access_ms) "
                      "VALUES(?1, ?2, ?3, ?3) ON CONFLICT(digest) DO UPDATE SET "
                      "last_access_ms = excluded.last_access_ms");
  stmt.bind(1, digest.hex());
  stmt.bind(2, static_cast<int64_t>(digest.size));
  stmt.bind(3, nowMs());
  return check(stmt.step(), "record blob");
}

Status Index::touchBlob(const Digest &digest) {
  std::lock_guard lock(mutex_);
  Statement stmt(db_, "UPDATE blobs SET last_access_ms = ?2 WHERE digest = ?1");
  stmt.bind(1, digest.hex());
  stmt.bind(2, nowMs());
  return check(stmt.step(), "touch blob");
}

Status Index::removeBlob(const Digest &digest) {
  std::lock_guard lock(mutex_);
  Statement stmt(db_, "DELETE FROM blobs WHERE digest = ?1");
  stmt.bind(1, digest.hex());
  return check(stmt.step(), "remove blob");
}

Expected<std::optional<Digest>> Index::getAction(ActionKind kind, const Digest &key) {
  std::lock_guard lock(mutex_);
  Statement stmt(db_, "SELECT result FROM actions WHERE kind = ?1 AND key = ?2");
  stmt.bind(1, kindName(kind));
  stmt.bind(2, key.toString());
  int rc = stmt.step();
  if (rc == SQLITE_DONE)
    return std::optional<Digest>();
  FLOWC_RETURN_IF_ERROR(check(rc, "look up action"));
  FLOWC_ASSIGN_OR_RETURN(Digest result, Digest::parse(stmt.text(0)));
  return std::optional<Digest>(result);
}

Status Index::putAction(ActionKind kind, const Digest &key, const Digest &result) {
  std::lock_guard lock(mutex_);
  Statement stmt(db_, "INSERT OR REPLACE INTO actions(kind, key, result, created_ms) "
                      "VALUES(?1, ?2, ?3, ?4)");
  stmt.bind(1, kindName(kind));
  stmt.bind(2, key.toString());
  stmt.bind(3, result.toString());
  stmt.bind(4, nowMs());
  return check(stmt.step(), "record action");
}

Expected<CacheStats> Index::stats() {
  std::lock_guard lock(mutex_);
  CacheStats stats;
  Statement blobs(db_, "SELECT COUNT(*), COALESCE(SUM(size), 0) FROM blobs");
  FLOWC_RETURN_IF_ERROR(check(blobs.step(), "count blobs"));
  stats.blobCount = static_cast<uint64_t>(blobs.integer(0));
  stats.blobBytes = static_cast<uint64_t>(blobs.integer(1));
  Statement actions(db_, "SELECT COUNT(*) FROM actions");
  FLOWC_RETURN_IF_ERROR(check(actions.step(), "count actions"));
  stats.actionCount = static_cast<uint64_t>(actions.integer(0));
  return stats;
}

} // namespace flowc::cache
