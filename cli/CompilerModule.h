// `flowc compile`: a compile in this process, with no daemon, for scripts
// and for places that cannot host one (a REAPI action, a container step).
// It needs the compiler (MLIR, LLVM, oneDNN), so it lives in a module,
// libflowc-cli-compiler.so, that flowc loads for this command only.
#pragma once

#include "Commands.h"

#include <string>
#include <vector>

namespace flowc::cli {

struct CompileCommandOptions {
  std::string model;
  std::string output;
  CompileFlags compile;
  /// `--remote-gpu "NAME sm_NN"` values: the farm's GPUs, as flowcd's.
  std::vector<std::string> remoteGpus;
  bool json = false;
  bool progress = false;
  /// Task threads; 0: one per core.
  unsigned threads = 0;
};

/// `flowc cache export MODEL -o BUNDLE` / `flowc cache import BUNDLE`.
struct BundleCommandOptions {
  std::string model;
  std::string bundle;
  CompileFlags compile;
  /// `--remote-gpu` values of export, as flowcd's.
  std::vector<std::string> remoteGpus;
  bool json = false;
};

struct CompilerModule {
  /// `flowc compile`; returns the exit status (errors reported on stderr).
  int (*compile)(const CompileCommandOptions &options, GlobalOptions &global);
  int (*exportBundle)(const BundleCommandOptions &options, GlobalOptions &global);
  int (*importBundle)(const BundleCommandOptions &options, GlobalOptions &global);
};

/// Registers --remote-gpu (compile, cache export): a cuda compile's key
/// names the tuning records of the GPU it is tuned for, which is a farm's
/// GPU where the daemon that compiled it was given one.
void addRemoteGpuFlag(CLI::App *cmd, std::vector<std::string> &remoteGpus);

inline constexpr const char *kCompilerModuleEntry = "flowcCliCompilerModule";

/// Loads libflowc-cli-compiler.so once.
Expected<const CompilerModule *> compilerModule();

} // namespace flowc::cli
