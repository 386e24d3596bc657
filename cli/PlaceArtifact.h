// Handing a local daemon's artifact to the user without copying its bytes.
#pragma once

#include "flowc/support/Status.h"

#include <cstdint>
#include <optional>
#include <string>

namespace flowc::cli {

enum class Placement {
  Unchanged, ///< The target already is that file (same inode): nothing done.
  Linked,    ///< A hard link to the cache's read-only file.
  Cloned,    ///< A reflink (copy-on-write clone): no bytes copied.
  Copied,    ///< Another filesystem: copied in the kernel (copy_file_range).
  Written,   ///< Written into the device or pipe `target` names (/dev/null).
};

const char *placementName(Placement placement);

/// Puts the cache file `source` (an artifact of `size` bytes) at `target`,
/// atomically (a temp file beside `target`, then rename): a hard link when
/// both are on one filesystem, else a reflink, else a kernel copy. Into an
/// existing character device or pipe (`/dev/null`, `/dev/stdout`) the
/// bytes are written instead: a rename would replace it.
/// FailedPrecondition if `source` is not a regular file of `size` bytes
/// (the caller then streams the artifact); errno statuses naming `target`.
Expected<Placement> placeLocalArtifact(const std::string &source, uint64_t size,
                                       const std::string &target);

/// InvalidArgument naming `output` when it is a directory or its directory
/// does not exist or cannot be written: checked before anything compiles.
/// An existing character device or pipe is fine: the artifact is written
/// into it.
Status checkOutputPath(const std::string &output);

/// Whether `target` is an existing character device or FIFO that an
/// artifact is written into rather than replacing it: nothing for a file
/// or no file, true for a FIFO, false for a device; InvalidArgument for
/// other kinds (a block device, a socket).
Expected<std::optional<bool>> existingStream(const std::string &target);

/// When `output` is this process's standard output (`-o /dev/stdout` into
/// a pipe), the artifact's bytes go there: flowc's own report (the result
/// line, --json, progress) then goes to stderr.
void reportToStderrIfStandardOutput(const std::string &output);

/// Opens the device or pipe `target` (`fifo`: a FIFO) for writing. A FIFO
/// nobody reads is an error naming it, not a wait.
Expected<int> openWritten(const std::string &target, bool fifo);

} // namespace flowc::cli
