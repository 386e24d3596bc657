// Running other programs (the system linker, a background daemon).
#pragma once

#include "flowc/support/Status.h"

#include <string>
#include <string_view>
#include <vector>

namespace flowc {

/// Runs `argv` (argv[0] looked up in PATH) and waits. Returns Internal with
/// the program's stderr (last 2 KB) when it exits non-zero, Unavailable when
/// it cannot be started.
Status runProgram(const std::vector<std::string> &argv);

/// Runs `argv` (looked up in PATH) with `input` as its stdin and returns its
/// stdout. Killed after `timeoutSeconds` (Unavailable); Internal with
/// its stderr (last 2 KB) when it exits non-zero; ResourceExhausted when it
/// writes more than `maxOutput` bytes; Unavailable when it cannot start.
Expected<std::string> filterThroughProgram(const std::vector<std::string> &argv,
                                           std::string_view input, double timeoutSeconds,
                                           size_t maxOutput);

/// Starts `argv` detached in its own session with stdin from /dev/null and
/// stdout/stderr appended to `logPath`; does not wait.
Status spawnDetached(const std::vector<std::string> &argv, const std::string &logPath);

/// Directory that holds the running executable (/proc/self/exe).
std::string executableDirectory();

} // namespace flowc
