// A file that appears whole or not at all: written to a temp file beside
// its target, made durable, then renamed over it. Readers see the old file
// or the new one, never a partial one; a crash or an error leaves the
// target untouched and no temp file (but for a killed process's, which the
// name `<target>.tmp.<pid>.<n>` lets a sweep recognize).
#pragma once

#include "flowc/support/Status.h"

#include <string>
#include <string_view>
#include <sys/types.h>

namespace flowc {

/// What a stat mode is, for messages: "a directory", "a character device",
/// "a block device", "a FIFO", "a socket", "a file".
const char *fileKindName(mode_t mode);

/// Writes all of `bytes` to `fd`, retrying short and interrupted writes;
/// the error names `path` (ENOSPC is ResourceExhausted). `bytes` inside a
/// MappedFile whose file shrank is DataLoss naming that file instead.
[[nodiscard]] Status writeAll(int fd, std::string_view bytes, const std::string &path);

class AtomicFile {
public:
  /// Creates a fresh temp file (O_EXCL) in `path`'s directory with `mode`
  /// (less the umask). The error names the temp path. FailedPrecondition
  /// when `path` exists and is no regular file (a device, a pipe): the
  /// rename would replace it.
  [[nodiscard]] static Expected<AtomicFile> create(const std::string &path,
                                                   mode_t mode = 0644);

  AtomicFile(AtomicFile &&other) noexcept;
  AtomicFile &operator=(AtomicFile &&) = delete;
  AtomicFile(const AtomicFile &) = delete;
  /// Closes and removes the temp file unless commit() succeeded.
  ~AtomicFile();

  /// The temp file's descriptor, for writers that place bytes themselves
  /// (pwrite at an offset); valid until commit().
  int fd() const { return fd_; }
  const std::string &tempPath() const { return tempPath_; }
  const std::string &path() const { return path_; }

  /// Appends all of `bytes` (retrying short writes); the error names the
  /// temp path (ENOSPC reads "No space left on device").
  Status write(std::string_view bytes);

  /// fsyncs and closes the temp file and renames it over the target. After
  /// an error the temp file is still removed on destruction.
  Status commit();

private:
  AtomicFile(std::string path, std::string tempPath, int fd)
      : path_(std::move(path)), tempPath_(std::move(tempPath)), fd_(fd) {}

  std::string path_;
  std::string tempPath_;
  int fd_ = -1;
  bool committed_ = false;
};

} // namespace flowc
