// The flowc subcommands. Each registers its flags on the app and returns
// the process exit code when run.
#pragma once

#include "Common.h"

#include <CLI/CLI.hpp>
#include <functional>

namespace flowc::cli {

/// Adds a subcommand; the returned callable runs it and yields the exit code.
using CommandRunner = std::function<int()>;

CommandRunner addSubmitCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addRunCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addInspectCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addStatusCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addDaemonCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addCacheCommand(CLI::App &app, GlobalOptions &global);

} // namespace flowc::cli
