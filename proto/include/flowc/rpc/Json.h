// The JSON forms of wire messages that more than one program prints: the
// CLI's `--json` and the daemon's web API give the same keys and values
// (docs/api.yaml), because both come from here.
#pragma once

#include "flowc/v1/flowc.pb.h"

#include <cstdint>
#include <nlohmann/json.hpp>

namespace flowc::rpc {

/// hits / (hits + misses); null before any lookup.
nlohmann::json hitRate(uint64_t hits, uint64_t misses);

/// `flowc cache stats --json`, and the `stats` of /api/cache.
nlohmann::json cacheStatsJson(const flowc::v1::CacheStatsResponse &stats);

/// One task of a job, as `flowc jobs --json` and /api/jobs/ID list it.
nlohmann::json taskJson(const flowc::v1::TaskInfo &task);

} // namespace flowc::rpc
