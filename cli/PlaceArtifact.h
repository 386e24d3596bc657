// Handing a local daemon's artifact to the user without copying its bytes.
#pragma once

#include "flowc/support/Status.h"

#include <cstdint>
#include <string>

namespace flowc::cli {

enum class Placement {
  Unchanged, ///< The target already is that file (same inode): nothing done.
  Linked,    ///< A hard link to the cache's read-only file.
  Cloned,    ///< A reflink (copy-on-write clone): no bytes copied.
  Copied,    ///< Another filesystem: copied in the kernel (copy_file_range).
};

const char *placementName(Placement placement);

/// Puts the cache file `source` (an artifact of `size` bytes) at `target`,
/// atomically (a temp file beside `target`, then rename): a hard link when
/// both are on one filesystem, else a reflink, else a kernel copy.
/// FailedPrecondition if `source` is not a regular file of `size` bytes
/// (the caller then streams the artifact); errno statuses naming `target`.
Expected<Placement> placeLocalArtifact(const std::string &source, uint64_t size,
                                       const std::string &target);

/// InvalidArgument naming `output` when it is a directory or its directory
/// does not exist or cannot be written: checked before anything compiles.
Status checkOutputPath(const std::string &output);

} // namespace flowc::cli
