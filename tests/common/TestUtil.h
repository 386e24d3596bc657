// Helpers shared by flowc's unit tests.
#pragma once

#include "flowc/support/Status.h"

#include <cstdlib>
#include <filesystem>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <string>

namespace flowc::testing {

/// A fresh directory under $TMPDIR, removed with its contents at scope exit.
class TempDir {
public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "flowc-test.XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const { return path_ + "/" + name; }

private:
  std::string path_;
};

/// Matches a Status or Expected whose code is `code` and whose message
/// contains `text`.
MATCHER_P2(StatusIs, code, text,
           std::string("status ") + statusCodeName(code) + " containing '" + text + "'") {
  const Status &status = [&]() -> const Status & {
    if constexpr (std::is_same_v<std::decay_t<decltype(arg)>, Status>)
      return arg;
    else
      return arg.status();
  }();
  *result_listener << "got " << status.toString();
  return status.code() == code && status.message().find(text) != std::string::npos;
}

} // namespace flowc::testing
