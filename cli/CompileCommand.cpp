// flowc compile MODEL -o OUT.fca: a compile in this process, no daemon.
#include "Commands.h"
#include "CompilerModule.h"
#include "RuntimeModule.h"

#include <mutex>

namespace flowc::cli {

Expected<const CompilerModule *> compilerModule() {
  static std::once_flag once;
  static Expected<const CompilerModule *> loaded = unavailable("not loaded");
  std::call_once(once, [] {
    auto module =
        loadCliModule("libflowc-cli-compiler.so", kCompilerModuleEntry, "compiler");
    if (!module)
      loaded = module.status();
    else
      loaded = static_cast<const CompilerModule *>(*module);
  });
  return loaded;
}

void addRemoteGpuFlag(CLI::App *cmd, std::vector<std::string> &remoteGpus) {
  cmd->add_option("--remote-gpu", remoteGpus,
                  "A GPU of the farm, e.g. \"NVIDIA H200 sm_90\", as the daemon's "
                  "--remote-gpu: cuda compiles key by its tuning records (repeatable)");
}

CommandRunner addCompileCommand(CLI::App &app, GlobalOptions &global) {
  auto options = std::make_shared<CompileCommandOptions>();
  CLI::App *cmd = app.add_subcommand(
      "compile", "Compile a model in this process, without a daemon (scripts, CI steps)");
  cmd->add_option("model", options->model, "ONNX model file or reproducer directory")
      ->required();
  cmd->add_option("-o,--output", options->output,
                  "Artifact path (default: MODEL_STEM.fca)");
  addCompileFlags(cmd, options->compile);
  addSearchBudgetFlag(cmd, options->compile);
  addRemoteGpuFlag(cmd, options->remoteGpus);
  cmd->add_option("--threads", options->threads,
                  "Compile tasks at once (default 0: one per core)");
  cmd->add_flag("--json", options->json, "Print one JSON object");
  cmd->add_flag("--progress", options->progress, "Print progress events on stderr");
  return [options, &global] {
    global.resolve();
    auto module = compilerModule();
    if (!module)
      return reportError(module.status());
    return (*module)->compile(*options, global);
  };
}

} // namespace flowc::cli
