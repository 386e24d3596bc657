// SQLite index of the CAS: blob rows and action-cache rows. Private to the
// cache component; serialized by an internal mutex.
#pragma once

#include "flowc/cache/Cache.h"

#include <mutex>

struct sqlite3;
struct sqlite3_stmt;

namespace flowc::cache {

class Index {
public:
  ~Index();
  static Expected<std::unique_ptr<Index>> open(const std::string &path);

  Status addBlob(const Digest &digest);
  Status touchBlob(const Digest &digest);
  Status removeBlob(const Digest &digest);
  Expected<std::optional<Digest>> getAction(ActionKind kind, const Digest &key);
  Status putAction(ActionKind kind, const Digest &key, const Digest &result);
  Expected<CacheStats> stats();

private:
  explicit Index(sqlite3 *db) : db_(db) {}
  Status exec(const char *sql);
  Status check(int rc, const char *what);

  sqlite3 *db_;
  std::mutex mutex_;
};

} // namespace flowc::cache
