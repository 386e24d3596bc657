// The flowc subcommands. Each registers its flags on the app and returns
// the process exit code when run.
#pragma once

#include "Common.h"

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace flowc::cli {

/// Adds a subcommand; the returned callable runs it and yields the exit code.
using CommandRunner = std::function<int()>;

CommandRunner addSubmitCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addWatchCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addRunCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addInspectCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addStatusCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addDaemonCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addCacheCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addReproCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addCompileCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addJobsCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addWorkersCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addExplainCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addCancelCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addTraceCommand(CLI::App &app, GlobalOptions &global);
CommandRunner addTuningCommand(CLI::App &app, GlobalOptions &global);

/// The compile options `flowc submit` and `flowc compile` share.
struct CompileFlags {
  std::string target = "cpu";
  int optLevel = 2;
  std::string precision = "fp32";
  std::vector<std::string> disabledPasses;
  /// `--input-shape NAME=DIMS` values.
  std::vector<std::string> inputShapes;
  bool thin = false;
  /// `--search-budget`: SECONDS, none or exhaustive (SearchBudget::parse).
  std::string searchBudget = "none";
};

/// Registers --target, -O, --precision, --disable-pass, --input-shape and
/// --thin on `cmd`.
void addCompileFlags(CLI::App *cmd, CompileFlags &flags);
/// Registers --search-budget (submit, compile, watch).
void addSearchBudgetFlag(CLI::App *cmd, CompileFlags &flags);

// Shared by the model commands (ReproCommand.cpp) --------------------------

/// The absolute path of a model file or of a reproducer directory (which
/// the daemon validates); NotFound naming `path` otherwise.
Expected<std::string> absoluteModelOrReproducer(const std::string &path);

/// "1.23 GB", "512 B": decimal units, three significant digits.
std::string humanBytes(uint64_t bytes);
/// "3.61 GFLOPs", "840 FLOPs".
std::string humanFlops(uint64_t flops);

} // namespace flowc::cli
