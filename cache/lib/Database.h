// RAII wrappers over SQLite: a connection with a prepared-statement cache,
// statements that reset themselves, and transactions that roll back unless
// committed. Busy handling: SQLite's busy timeout plus bounded, jittered
// retries of the whole step. Private to the cache component.
#pragma once

#include "flowc/cache/Cache.h"
#include "flowc/support/Status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

struct sqlite3;
struct sqlite3_stmt;

namespace flowc::cache {

class Database;

/// A cached prepared statement; bindings and state reset when it goes out of
/// scope. Obtain through Database::prepare.
class Statement {
public:
  Statement(Statement &&other) noexcept : db_(other.db_), stmt_(other.stmt_) {
    other.stmt_ = nullptr;
  }
  ~Statement();

  Statement &bind(int index, std::string_view text);
  Statement &bind(int index, int64_t value);
  Statement &bindBlob(int index, std::string_view bytes);
  /// Named apart from bind(int64_t), which an int argument would make
  /// ambiguous.
  Statement &bindReal(int index, double value);

  /// Runs to the next row: true if a row is available, false when done.
  Expected<bool> step();
  /// Runs a statement that returns no rows.
  Status run();

  std::string text(int column) const;
  int64_t integer(int column) const;
  double real(int column) const;
  std::string blob(int column) const;
  bool isNull(int column) const;

private:
  friend class Database;
  Statement(Database *db, sqlite3_stmt *stmt) : db_(db), stmt_(stmt) {}
  Database *db_;
  sqlite3_stmt *stmt_;
};

class Database {
public:
  ~Database();
  Database(const Database &) = delete;
  Database &operator=(const Database &) = delete;

  /// Opens or creates `path` in WAL mode with a busy timeout. Read-only
  /// opens an existing file and never writes (query_only); where its
  /// directory cannot be written (a read-only mount, so no -shm file can be
  /// made) it is opened immutable, which is what such a file is.
  static Expected<std::unique_ptr<Database>>
  open(const std::string &path, CacheAccess access = CacheAccess::ReadWrite);

  /// Executes one or more statements without results.
  Status exec(const std::string &sql);
  /// A statement prepared once per connection and reused. At most one
  /// Statement per SQL text may be alive at a time.
  Expected<Statement> prepare(const char *sql);

  /// Maps an SQLite result code to a Status naming `what`.
  Status check(int rc, const std::string &what) const;

  int64_t changes() const;
  const std::string &path() const { return path_; }

private:
  Database(sqlite3 *db, std::string path) : db_(db), path_(std::move(path)) {}
  sqlite3 *db_;
  std::string path_;
  std::map<const char *, sqlite3_stmt *> statements_;
  friend class Statement;
};

/// BEGIN IMMEDIATE ... COMMIT; rolls back on destruction unless commit() ran.
class Transaction {
public:
  static Expected<Transaction> begin(Database &db);
  Transaction(Transaction &&other) noexcept : db_(other.db_) { other.db_ = nullptr; }
  ~Transaction();
  Status commit();

private:
  explicit Transaction(Database *db) : db_(db) {}
  Database *db_;
};

} // namespace flowc::cache
