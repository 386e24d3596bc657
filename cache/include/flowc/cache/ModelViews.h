// Where the model page's documents are kept: action entries (of the
// artifact kind, never counted as lookups) that compiles write and the
// daemon's web front reads.
//  - A model's view (flowc.model-view.v1, docs/web-ui.md): its imported
//    graph with each node's static cost, the kernels and library calls the
//    nodes became with their build and measured times, and the cache entries
//    the compile made. Keyed by the model's digest; the newest compile's.
//  - The model index (flowc.models.v1): the most recently compiled models,
//    newest first, with their sizes, for the cache page.
#pragma once

#include "flowc/cache/Digest.h"

#include <string>

namespace flowc::cache {

inline constexpr const char *kModelViewFormat = "flowc.model-view.v1";
inline constexpr const char *kModelIndexFormat = "flowc.models.v1";

inline Digest modelViewKey(const Digest &modelDigest) {
  return digestOf(std::string(kModelViewFormat) + "\n" + modelDigest.toString() + "\n");
}

inline Digest modelIndexKey() { return digestOf(std::string(kModelIndexFormat) + "\n"); }

} // namespace flowc::cache
