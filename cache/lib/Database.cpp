#include "Database.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <unistd.h>
#include <random>
#include <sqlite3.h>
#include <thread>

namespace flowc::cache {

namespace {

constexpr int kBusyTimeoutMs = 5000;
constexpr int kBusyRetries = 8;

bool isBusy(int rc) {
  int primary = rc & 0xff;
  return primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
}

/// Sleeps a few jittered milliseconds, longer with each attempt, so that
/// processes contending for the write lock do not retry in lockstep.
void backoff(int attempt) {
  thread_local std::minstd_rand rng(std::random_device{}());
  int ms = (1 << std::min(attempt, 6)) + static_cast<int>(rng() % 10);
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

} // namespace

Statement::~Statement() {
  if (!stmt_)
    return;
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

Statement &Statement::bind(int index, std::string_view text) {
  // SQLite binds a null pointer as NULL; an empty view (a defaulted
  // argument's has none) is the empty text.
  sqlite3_bind_text(stmt_, index, text.data() ? text.data() : "",
                    static_cast<int>(text.size()), SQLITE_TRANSIENT);
  return *this;
}

Statement &Statement::bind(int index, int64_t value) {
  sqlite3_bind_int64(stmt_, index, value);
  return *this;
}

Statement &Statement::bindBlob(int index, std::string_view bytes) {
  sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT);
  return *this;
}

Statement &Statement::bindReal(int index, double value) {
  sqlite3_bind_double(stmt_, index, value);
  return *this;
}

Expected<bool> Statement::step() {
  for (int attempt = 0;; ++attempt) {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW)
      return true;
    if (rc == SQLITE_DONE)
      return false;
    if (isBusy(rc) && attempt < kBusyRetries) {
      sqlite3_reset(stmt_);
      backoff(attempt);
      continue;
    }
    return db_->check(rc, sqlite3_sql(stmt_));
  }
}

Status Statement::run() {
  FLOWC_ASSIGN_OR_RETURN(bool row, step());
  (void)row;
  return Status::ok();
}

std::string Statement::text(int column) const {
  auto *p = reinterpret_cast<const char *>(sqlite3_column_text(stmt_, column));
  return p ? std::string(p, static_cast<size_t>(sqlite3_column_bytes(stmt_, column)))
           : "";
}

int64_t Statement::integer(int column) const {
  return sqlite3_column_int64(stmt_, column);
}

double Statement::real(int column) const { return sqlite3_column_double(stmt_, column); }

std::string Statement::blob(int column) const {
  const void *p = sqlite3_column_blob(stmt_, column);
  return p ? std::string(static_cast<const char *>(p),
                         static_cast<size_t>(sqlite3_column_bytes(stmt_, column)))
           : "";
}

bool Statement::isNull(int column) const {
  return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
}

Database::~Database() {
  for (auto &[sql, stmt] : statements_)
    sqlite3_finalize(stmt);
  sqlite3_close(db_);
}

namespace {

/// `path` as an SQLite URI: the characters a URI gives meaning to escaped.
std::string fileUri(const std::string &path, const char *query) {
  std::string uri = "file:";
  for (char c : path) {
    if (c == '%' || c == '?' || c == '#') {
      char escaped[4];
      std::snprintf(escaped, sizeof(escaped), "%%%02X", static_cast<unsigned char>(c));
      uri += escaped;
      continue;
    }
    uri += c;
  }
  return uri + query;
}

} // namespace

Expected<std::unique_ptr<Database>> Database::open(const std::string &path,
                                                   CacheAccess access) {
  bool readOnly = access == CacheAccess::ReadOnly;
  std::string name = path;
  int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
  if (readOnly) {
    flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX;
    // A WAL database needs its -shm file, which a reader creates unless the
    // directory cannot be written: then nothing can change the file either.
    std::string dir = std::filesystem::path(path).parent_path().string();
    name = fileUri(
        path, ::access(dir.empty() ? "." : dir.c_str(), W_OK) == 0 ? "" : "?immutable=1");
  }
  sqlite3 *db = nullptr;
  int rc = sqlite3_open_v2(name.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return unavailable("cannot open cache index '" + path + "': " + message);
  }
  std::unique_ptr<Database> database(new Database(db, path));
  sqlite3_busy_timeout(db, kBusyTimeoutMs);
  sqlite3_extended_result_codes(db, 1);
  if (readOnly) {
    FLOWC_RETURN_IF_ERROR(database->exec("PRAGMA query_only=1"));
    return database;
  }
  FLOWC_RETURN_IF_ERROR(database->exec("PRAGMA journal_mode=WAL"));
  // NORMAL is durable across process crashes in WAL mode; a power loss may
  // drop the last transactions, never corrupt the file.
  FLOWC_RETURN_IF_ERROR(
      database->exec("PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON"));
  return database;
}

Status Database::check(int rc, const std::string &what) const {
  int primary = rc & 0xff;
  if (primary == SQLITE_OK || primary == SQLITE_DONE || primary == SQLITE_ROW)
    return Status::ok();
  std::string message =
      "cache index '" + path_ + "': " + sqlite3_errmsg(db_) + " (" + what + ")";
  switch (primary) {
  case SQLITE_FULL:
    return resourceExhausted("no space left on device: " + message);
  case SQLITE_BUSY:
  case SQLITE_LOCKED:
    return unavailable(message);
  case SQLITE_CORRUPT:
  case SQLITE_NOTADB:
  case SQLITE_IOERR:
    return dataLoss(message);
  case SQLITE_READONLY:
  case SQLITE_CANTOPEN:
  case SQLITE_PERM:
    return failedPrecondition(message);
  default:
    return internalError(message);
  }
}

Status Database::exec(const std::string &sql) {
  for (int attempt = 0;; ++attempt) {
    char *error = nullptr;
    int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error);
    sqlite3_free(error);
    if (rc == SQLITE_OK)
      return Status::ok();
    if (isBusy(rc) && attempt < kBusyRetries) {
      backoff(attempt);
      continue;
    }
    return check(rc, sql.substr(0, 60));
  }
}

Expected<Statement> Database::prepare(const char *sql) {
  auto it = statements_.find(sql);
  if (it != statements_.end())
    return Statement(this, it->second);
  sqlite3_stmt *stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK)
    return check(rc, std::string("prepare ") + sql);
  statements_[sql] = stmt;
  return Statement(this, stmt);
}

int64_t Database::changes() const { return sqlite3_changes64(db_); }

Expected<Transaction> Transaction::begin(Database &db) {
  FLOWC_RETURN_IF_ERROR(db.exec("BEGIN IMMEDIATE"));
  return Transaction(&db);
}

Transaction::~Transaction() {
  if (db_)
    (void)db_->exec("ROLLBACK");
}

Status Transaction::commit() {
  Status status = db_->exec("COMMIT");
  if (status.isOk())
    db_ = nullptr;
  return status;
}

} // namespace flowc::cache
