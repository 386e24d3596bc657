#include "flowc/support/Environment.h"

#include <algorithm>
#include <cstdlib>
#include <unistd.h>

extern char **environ;

namespace flowc {

const std::vector<EnvironmentVariable> &knownEnvironmentVariables() {
  static const std::vector<EnvironmentVariable> variables = {
      {"FLOWC_AUTOSTART", true},
      {"FLOWC_CACHE_DIR", true},
      {"FLOWC_CACHE_MAX_SIZE", true},
      {"FLOWC_CACHE_READ_ONLY", true},
      {"FLOWC_CONFIG", true},
      {"FLOWC_DAEMON", true},
      {"FLOWC_HTTP", true},
      {"FLOWC_REMOTE_CACHE", true},
      {"FLOWC_REMOTE_EXECUTOR", true},
      {"FLOWC_REMOTE_READ_ONLY", true},
      {"FLOWC_SOCKET", true},
      {"FLOWC_TLS_CA", true},
      {"FLOWC_TLS_CERT", true},
      {"FLOWC_TLS_KEY", true},
      {"FLOWC_TOKEN", true},
      {"FLOWC_BIN_DIR", false},
      {"FLOWC_CRASH_KILLS", false},
      {"FLOWC_JOBS", false},
      {"FLOWC_FRESH_BASE_MAX_AGE_DAYS", false},
      {"FLOWC_FRESH_CACHE_DIR", false},
      {"FLOWC_FRESH_WORK_DIR", false},
      {"FLOWC_ONNX_NODE_FILTER", false},
      {"FLOWC_ONNX_NODE_JOBS", false},
      {"FLOWC_WORKER_TEST_CRASH", true},
  };
  return variables;
}

std::optional<std::string> hostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0)
    return std::nullopt;
  return std::string(name);
}

std::string defaultCacheDir() {
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/flowc";
  const char *home = std::getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.cache/flowc";
}

std::vector<std::string> unknownEnvironmentVariables() {
  const auto &known = knownEnvironmentVariables();
  std::vector<std::string> unknown;
  for (char **entry = environ; entry && *entry; ++entry) {
    std::string_view variable(*entry);
    std::string_view name = variable.substr(0, variable.find('='));
    if (!name.starts_with("FLOWC_"))
      continue;
    if (std::none_of(known.begin(), known.end(),
                     [&](const EnvironmentVariable &v) { return v.name == name; }))
      unknown.emplace_back(name);
  }
  std::sort(unknown.begin(), unknown.end());
  return unknown;
}

std::vector<std::string> unknownEnvironmentWarnings() {
  std::vector<std::string> warnings;
  std::vector<std::string> unknown = unknownEnvironmentVariables();
  if (unknown.empty())
    return warnings;
  std::string readable;
  for (const EnvironmentVariable &variable : knownEnvironmentVariables())
    if (variable.readByBinaries)
      readable += (readable.empty() ? "" : ", ") + std::string(variable.name);
  for (const std::string &name : unknown)
    warnings.push_back("ignoring unknown environment variable " + name +
                       " (flowc reads " + readable + ")");
  return warnings;
}

} // namespace flowc
