// The commands that need the runtime (and with it oneDNN and OpenMP):
// running an artifact, describing one, the library versions; and the
// tuning database's, which open the cache (SQLite) themselves. They live in a
// module, libflowc-cli-runtime.so, that flowc loads only for them, so that
// every other command (a cache hit above all) starts without mapping and
// relocating those libraries.
#pragma once

#include "Common.h"

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace flowc::cli {

/// flowc run's options.
struct RunOptions {
  std::string artifact;
  std::vector<std::string> inputs;
  /// Where OUTPUT.npy files go; empty: nothing is written, values are
  /// printed.
  std::string outputDir;
  bool json = false;
  size_t printCount = 8;
  /// Timed iterations after warm-up; 0 runs once without timing.
  unsigned bench = 0;
  /// Threads for library kernels; 0: all cores.
  int threads = 0;
  /// --no-verify: skip the artifact's digests at open (bounds are checked).
  bool noVerify = false;
  /// --profile: time each kernel call over `bench` runs (10 without it).
  bool profile = false;
  /// --profile-top: the slowest calls listed.
  size_t profileTop = 25;
  /// --gpu-trials: CUDA library kernels' candidates timed per site.
  int gpuTrials = 8;
  /// --gpu-device: the driver's ordinal of the GPU CUDA artifacts run on.
  int gpuDevice = 0;
  /// --gpu-devices: replicas on these GPUs, ordinals or "all" (empty: one
  /// session, on gpuDevice).
  std::vector<std::string> gpuDevices;
  /// --no-gpu-records: CUDA library kernels neither use nor keep tuning
  /// records in the cache.
  bool noGpuRecords = false;
};

/// `flowc tuning ls|export|import|clear`'s options.
struct TuningCommandOptions {
  enum class Action { List, Export, Import, Clear };
  Action action = Action::List;
  /// --device: only this device's records (ls, export, clear).
  std::string device;
  /// import's FILE, or export's -o FILE (empty: stdout).
  std::string file;
  bool json = false;
};

/// What the module offers; its functions may be called from any thread.
struct RuntimeModule {
  /// `flowc run`; returns the exit status (errors reported on stderr).
  int (*run)(const RunOptions &options, GlobalOptions &global);
  /// `flowc inspect ARTIFACT` as JSON; errors naming the file.
  Expected<nlohmann::json> (*describeArtifact)(const std::string &path,
                                               GlobalOptions &global);
  /// The `--version` text of `program`.
  std::string (*versionText)(const std::string &program);
  /// `flowc watch --run`: runs `options.artifact` once on `options.inputs`
  /// and then three times more for its latency. Returns {"outputs": [{name,
  /// shape, dtype, min, max, mean, nan, values (the first
  /// options.printCount)}], "first_run_ms" (open, session and first run),
  /// "latency_ms" (the median of the three)}; min, max and mean leave NaNs
  /// out and are null when nothing is left. Errors naming the artifact or
  /// the input file; nothing is printed.
  Expected<nlohmann::json> (*runSummary)(const RunOptions &options,
                                         GlobalOptions &global);
  /// `flowc tuning`, on the cache directory itself (no daemon): returns
  /// the exit status (errors reported on stderr).
  int (*tuning)(const TuningCommandOptions &options, GlobalOptions &global);
};

/// The symbol the module exports: `const RuntimeModule *flowcCliRuntimeModule()`.
inline constexpr const char *kRuntimeModuleEntry = "flowcCliRuntimeModule";

/// Loads `library` from ../lib beside this executable and returns what its
/// `entrySymbol` function returns; Unavailable naming the path and the
/// loader's words when it cannot.
Expected<const void *> loadCliModule(const std::string &library, const char *entrySymbol,
                                     const std::string &what);

/// Loads the module from ../lib beside this executable, once. Unavailable
/// naming the module's path and the loader's words when it cannot.
Expected<const RuntimeModule *> runtimeModule();

} // namespace flowc::cli
