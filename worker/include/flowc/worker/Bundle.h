// Portable bundles of a model's cache entries (`flowc cache export` /
// `flowc cache import`): a POSIX tar whose first member, flowc-bundle.json,
// lists the entries (kind, key, result, dependencies) and whose other
// members, blobs/<sha256>-<size>, are the blobs they need. Export takes
// only complete entries; import verifies every blob against its digest and
// records every entry in one transaction, so a cache gains all of a bundle
// or nothing.
#pragma once

#include "flowc/cache/Cache.h"

#include <string>
#include <vector>

namespace flowc::worker {

struct BundleReport {
  size_t entries = 0;
  size_t blobs = 0;
  uint64_t bytes = 0;
  /// Import: blobs the cache held already (not written again).
  size_t blobsPresent = 0;
};

/// Writes `entries` and their blobs to `path` (through a temp file beside
/// it, renamed at the end). FailedPrecondition if a blob is gone.
Expected<BundleReport> writeBundle(cache::Cache &cache,
                                   const std::vector<cache::ActionRecord> &entries,
                                   const std::string &path);

/// Reads the bundle at `path` into `cache`. InvalidArgument or DataLoss
/// naming the member at fault for anything but a complete, intact bundle
/// (not a tar, truncated, no manifest, a blob whose bytes do not match its
/// name, an entry whose blob is not in the bundle); the cache's entries are
/// then unchanged.
Expected<BundleReport> readBundle(cache::Cache &cache, const std::string &path);

} // namespace flowc::worker
