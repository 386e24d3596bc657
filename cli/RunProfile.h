// `flowc run --profile`: where a run's time goes, kernel call by kernel call
// (what `trtexec --dumpProfile` and OpenVINO's `benchmark_app -pc` show).
// The session times each call (runtime/Session.h); the artifact's metadata
// names the graph nodes each call computes, with their static FLOPs and the
// tensors they read and write.
#pragma once

#include "flowc/runtime/Session.h"

#include <nlohmann/json.hpp>
#include <ostream>

namespace flowc::cli {

/// The profile of the runs between `before` and `after` (two snapshots of
/// one session's profile): per kernel call, by time, its share of the run,
/// calls, ms per run, achieved GFLOP/s and GB/s, the implementation and the
/// nodes; and the same summed per kind and per op type. `metadata` is the
/// artifact's; without its "nodes" (an artifact from before them) calls are
/// listed without names, FLOPs or bytes.
nlohmann::json profileJson(const runtime::RunProfile &before,
                           const runtime::RunProfile &after,
                           const nlohmann::json &metadata, const runtime::Plan &plan,
                           int threads);

/// The profile as tables: the `top` slowest calls, then the sums.
void printProfile(const nlohmann::json &profile, size_t top, std::ostream &out);

} // namespace flowc::cli
