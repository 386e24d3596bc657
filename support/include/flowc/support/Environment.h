// The FLOWC_* environment variables: one list of the names flowc reads, so
// that a misspelt one is reported instead of silently ignored.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowc {

struct EnvironmentVariable {
  std::string_view name;
  /// Read by flowc or flowcd (documented for users); otherwise by the
  /// project's scripts and test suites only.
  bool readByBinaries;
};

/// Every FLOWC_* variable that flowc's binaries, scripts or tests read.
const std::vector<EnvironmentVariable> &knownEnvironmentVariables();

/// The FLOWC_* variables set in this process's environment that are not
/// known, e.g. FLOWC_CACHE_DIRS, sorted. Thread-compatible (reads `environ`).
std::vector<std::string> unknownEnvironmentVariables();

/// This machine's host name (gethostname); nullopt when it cannot say.
std::optional<std::string> hostName();

/// The cache directory when neither a flag nor FLOWC_CACHE_DIR names one:
/// $XDG_CACHE_HOME/flowc, else ~/.cache/flowc.
std::string defaultCacheDir();

/// One message per unknown FLOWC_* variable, naming the ones the binaries
/// read: "ignoring unknown environment variable FLOWC_X (flowc reads ...)".
std::vector<std::string> unknownEnvironmentWarnings();

} // namespace flowc
