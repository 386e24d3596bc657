// flowc run ARTIFACT --input NAME=FILE.npy ... [--output-dir DIR] [--bench N]
//           [--profile [--profile-top K]] [--threads T] [--gpu-trials N]
//           [--gpu-device N | --gpu-devices N,M,...|all] [--no-gpu-records] [--json]
//           [--no-verify]: options here, the work in the runtime module
//           (RuntimeCommands.cpp).
#include "Commands.h"
#include "RuntimeModule.h"

#include <algorithm>
#include <charconv>

namespace flowc::cli {

CommandRunner addRunCommand(CLI::App &app, GlobalOptions &global) {
  auto options = std::make_shared<RunOptions>();
  CLI::App *cmd = app.add_subcommand(
      "run", "Run an artifact (CPU code, or CUDA code on an NVIDIA GPU)");
  cmd->add_option("artifact", options->artifact, "Artifact (.fca)")->required();
  cmd->add_option("-i,--input", options->inputs,
                  "NAME=FILE.npy (float32, float16, int64, int32, int8, uint8 or bool), "
                  "once per input");
  cmd->add_option("--output-dir", options->outputDir,
                  "Write OUTPUT_NAME.npy files here (default: write nothing, print the "
                  "outputs)");
  cmd->add_option("--print", options->printCount,
                  "Values printed per output (with --json and no --output-dir: the "
                  "values listed)");
  cmd->add_option("--bench", options->bench,
                  "Time N runs after 3 warm-up runs; print median and p90 latency")
      ->check(CLI::Range(1u, 1000000u));
  cmd->add_option("--threads", options->threads,
                  "Threads for convolutions and matrix products (default: all cores)")
      ->check(CLI::Range(1, 4096));
  CLI::Option *profile = cmd->add_flag(
      "--profile", options->profile,
      "After 3 warm-up runs, time each kernel call over the --bench runs (10 "
      "without --bench): share, calls, GFLOP/s, GB/s, implementation, nodes");
  cmd->add_option("--profile-top", options->profileTop,
                  "Kernel calls listed by --profile, slowest first (default 25; "
                  "--json lists all)")
      ->check(CLI::Range(size_t{1}, size_t{1000000}));
  cmd->add_option(
         "--gpu-trials", options->gpuTrials,
         "CUDA artifacts: candidates of cuDNN and cuBLASLt each convolution and "
         "matrix product times on its first run, keeping the fastest (default 8; "
         "1: the libraries' first choice)")
      ->check(CLI::Range(1, 64));
  CLI::Option *device =
      cmd->add_option("--gpu-device", options->gpuDevice,
                      "CUDA artifacts: the GPU to run on, by the driver's ordinal as "
                      "`flowc workers` lists them (default 0); its tuning records are "
                      "the ones used")
          ->check(CLI::Range(0, 1023));
  cmd->add_option(
         "--gpu-devices", options->gpuDevices,
         "CUDA artifacts: run on each of these GPUs (ordinals, comma-separated, or "
         "`all` of the artifact's compute capability), the weights read once and "
         "broadcast from the first through NCCL; the first's outputs are printed and "
         "the others' compared with them, and --bench runs all at once")
      ->delimiter(',')
      ->check(CLI::Validator(
          [](std::string &value) -> std::string {
            if (value == "all")
              return "";
            int ordinal = -1;
            auto [end, error] =
                std::from_chars(value.data(), value.data() + value.size(), ordinal);
            bool whole = error == std::errc() && end == value.data() + value.size();
            return whole && ordinal >= 0 && ordinal <= 1023
                       ? ""
                       : "'" + value + "' is neither a GPU ordinal 0..1023 nor all";
          },
          "N,M,...|all"))
      ->excludes(device)
      ->excludes(profile);
  cmd->add_flag("--no-gpu-records", options->noGpuRecords,
                "CUDA artifacts: neither use the cache's tuning records for the "
                "convolutions' and products' candidates nor record what trial runs find");
  cmd->add_flag("--json", options->json, "Print one JSON object");
  cmd->add_flag("--no-verify", options->noVerify,
                "Skip the artifact's digest checks at open (for benchmarks only; "
                "bounds are still checked)");
  return [options, &global] {
    const std::vector<std::string> &devices = options->gpuDevices;
    if (devices.size() > 1 && std::count(devices.begin(), devices.end(), "all") > 0) {
      reportError(invalidArgument("--gpu-devices: 'all' names every device; it stands "
                                  "alone"));
      return kExitUsage;
    }
    auto module = runtimeModule();
    if (!module)
      return reportError(module.status());
    return (*module)->run(*options, global);
  };
}

} // namespace flowc::cli
