// Read-only memory mapping of a whole file. Weights and artifacts are read
// through mappings so that memory never grows with weight size.
#pragma once

#include "flowc/support/Status.h"

#include <cstddef>
#include <cstdint>
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

  /// Maps `path` read-only. NotFound if it does not exist; an empty file maps
  /// to an empty view. Thread-safe to read once constructed.
  static Expected<MappedFile> open(const std::string &path);

  const uint8_t *data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {reinterpret_cast<const char *>(data_), size_}; }
  const std::string &path() const { return path_; }

private:
  void reset();

  const uint8_t *data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
};

/// Reads a whole (small) file into a string.
Expected<std::string> readFileToString(const std::string &path);

/// Writes `bytes` to `path` through a temp file + fsync + rename, so readers
/// never see a partial file.
Status writeFileAtomically(const std::string &path, std::string_view bytes);

} // namespace flowc
