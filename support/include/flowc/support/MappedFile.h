// Read-only memory mapping of a whole file. Weights and artifacts are read
// through mappings so that memory never grows with weight size.
#pragma once

#include "flowc/support/Status.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace flowc {

class MappedFile {
public:
  MappedFile() = default;
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;
  MappedFile(MappedFile &&other) noexcept;
  MappedFile &operator=(MappedFile &&other) noexcept;
  ~MappedFile();

  /// Maps `path` read-only. NotFound if it does not exist; InvalidArgument,
  /// without blocking, for anything but a regular file (a FIFO, a device);
  /// an empty file maps to an empty view. Thread-safe to read once constructed.
  static Expected<MappedFile> open(const std::string &path);
  /// Maps the file open on `fd` (not taken: the caller closes it; the
  /// mapping outlives it), so that the file that was checked is the one
  /// read. `displayPath` names it in messages and path(). InvalidArgument
  /// for anything but a regular file.
  static Expected<MappedFile> fromFd(int fd, const std::string &displayPath);

  const uint8_t *data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {reinterpret_cast<const char *>(data_), size_}; }
  const std::string &path() const { return path_; }

  /// Copies the path of the live mapping that holds `address` into `out`
  /// (NUL-terminated, truncated to `capacity`) and returns its length, 0 if
  /// no MappedFile maps it. Async-signal-safe: a SIGBUS handler names the
  /// file that shrank under its mapping with it.
  static size_t nameOfAddress(const void *address, char *out, size_t capacity);

  /// Whether `bytes` (non-empty) lies inside the mapping of a live
  /// MappedFile. Thread-safe.
  static bool isMapped(std::string_view bytes);

  /// Drops this process's pages of `bytes` if the view lies inside the
  /// mapping of a live MappedFile (widened to whole pages, clipped to that
  /// mapping) and returns true; any other memory is left alone (false). The
  /// mappings are read-only, so no page can hold data that the file does
  /// not: the page cache keeps the bytes and a later read faults them back
  /// in, without I/O while they stay cached. Thread-safe: the mapping cannot
  /// be unmapped meanwhile.
  static bool releasePages(std::string_view bytes);

  /// Starts reading `bytes` into the page cache if the view lies inside the
  /// mapping of a live MappedFile (it maps nothing into this process, so
  /// resident memory does not grow); returns whether it did. Thread-safe.
  static bool readAhead(std::string_view bytes);

private:
  void reset();

  const uint8_t *data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

/// Bytes per window of visitInWindows() unless told otherwise.
inline constexpr size_t kDefaultWindowBytes = 4 << 20;

/// Calls `visit` on successive windows of `bytes`, in order, each at most
/// `windowBytes` and, but for the last, ending on a page boundary. Where the
/// view lies inside a MappedFile's mapping, the next window is read ahead
/// while `visit` runs and each window's pages are released after it, so
/// this process's resident memory grows by about one window, whatever the
/// size of `bytes` (other memory is visited the same way, and left alone).
/// Stops at, and returns, the first error of `visit`. `windowBytes` must be
/// at least a page. Thread-safe if `visit` is.
Status visitInWindows(std::string_view bytes, size_t windowBytes,
                      const std::function<Status(std::string_view)> &visit);

/// Reads a whole (small) file into a string.
Expected<std::string> readFileToString(const std::string &path);

/// Writes `bytes` to `path` through a temp file + fsync + rename, so readers
/// never see a partial file.
Status writeFileAtomically(const std::string &path, std::string_view bytes);

} // namespace flowc
