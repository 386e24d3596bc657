// What an artifact's key was made from, kept with its entry (locally and
// remotely) so that a miss can be explained afterwards and on another
// machine: the graph (IR digest and a signature per node), the weights
// (name, dtype, shape, digest), the target, the options and the toolchain.
// Nothing in it depends on a path, a working directory or a cache location.
#pragma once

#include "flowc/worker/CompileExecutor.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace flowc::worker {

/// The manifest of one artifact compile (JSON). `tuningState`: the tuning
/// records' state it was compiled under (Cache::tuningState).
nlohmann::json keyFactors(const IngestedModel &ingested, const CompileRequest &request,
                          const std::string &buildId, const cache::Digest &artifactKey,
                          const std::string &tuningState);

/// The model's name for the name index: the file's name without its
/// directory, so the same model under another path finds its entries.
std::string modelName(const std::string &path);

/// What differs between `wanted` and `nearest`, one line per factor (graph:
/// the first differing node; weights: which tensors; target, options,
/// toolchain: which value); empty when nothing does.
std::vector<std::string> factorDifferences(const nlohmann::json &wanted,
                                           const nlohmann::json &nearest);

/// How many factors differ (the nearest entry has the fewest).
size_t factorDistance(const nlohmann::json &wanted, const nlohmann::json &nearest);

} // namespace flowc::worker
