// The files of web_ui/, built into flowcd (cmake/EmbedFiles.cmake).
#pragma once

#include <string_view>
#include <vector>

namespace flowc::daemon {

struct EmbeddedFile {
  /// "/index.html"
  std::string_view path;
  std::string_view bytes;
};

const std::vector<EmbeddedFile> &webUiFiles();

} // namespace flowc::daemon
