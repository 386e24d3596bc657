// Running other programs (the system linker, a background daemon).
#pragma once

#include "flowc/support/Status.h"

#include <string>
#include <vector>

namespace flowc {

/// Runs `argv` (argv[0] looked up in PATH) and waits. Returns Internal with
/// the program's stderr (last 2 KB) when it exits non-zero, Unavailable when
/// it cannot be started.
Status runProgram(const std::vector<std::string> &argv);

/// Starts `argv` detached in its own session with stdin from /dev/null and
/// stdout/stderr appended to `logPath`; does not wait.
Status spawnDetached(const std::vector<std::string> &argv, const std::string &logPath);

/// Directory that holds the running executable (/proc/self/exe).
std::string executableDirectory();

} // namespace flowc
