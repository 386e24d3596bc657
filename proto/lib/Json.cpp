#include "flowc/rpc/Json.h"

namespace flowc::rpc {

nlohmann::json hitRate(uint64_t hits, uint64_t misses) {
  if (hits + misses == 0)
    return nullptr;
  return static_cast<double>(hits) / static_cast<double>(hits + misses);
}

nlohmann::json cacheStatsJson(const flowc::v1::CacheStatsResponse &r) {
  nlohmann::json kinds = nlohmann::json::object();
  for (const auto &[kind, counts] : r.kinds())
    kinds[kind] = {{"hits", counts.hits()},
                   {"misses", counts.misses()},
                   {"hit_rate", hitRate(counts.hits(), counts.misses())}};
  return {{"cache_dir", r.cache_dir()},
          {"blobs", r.blob_count()},
          {"bytes", r.blob_bytes()},
          {"inline_blobs", r.inline_blobs()},
          {"pinned_blobs", r.pinned_blobs()},
          {"actions", r.action_count()},
          {"max_bytes", r.max_bytes()},
          {"hits", r.hits()},
          {"misses", r.misses()},
          {"hit_rate", hitRate(r.hits(), r.misses())},
          {"kinds", kinds},
          {"evictions", r.evictions()},
          {"evicted_bytes", r.evicted_bytes()},
          {"dedup_bytes", r.dedup_bytes()},
          {"stat_memo_entries", r.stat_memo_entries()}};
}

nlohmann::json taskJson(const flowc::v1::TaskInfo &task) {
  return {{"kind", task.kind()},
          {"name", task.name()},
          {"state", task.state()},
          {"executor", task.executor()},
          {"seconds", task.seconds()},
          {"input_bytes", task.input_bytes()},
          {"output_bytes", task.output_bytes()},
          {"attempts", task.attempts()},
          {"queued_at_seconds", task.queued_at_seconds()},
          {"error", task.error()}};
}

} // namespace flowc::rpc
