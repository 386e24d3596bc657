// flowc tuning ls|export|import|clear [--json]: search's tuning records in
// the cache directory, read and written in place without a daemon (as
// SQLite lets a daemon share the index). The work lives in the runtime
// module, which links the cache (TuningCommands.cpp).
#include "Commands.h"
#include "RuntimeModule.h"

namespace flowc::cli {

CommandRunner addTuningCommand(CLI::App &app, GlobalOptions &global) {
  using Action = TuningCommandOptions::Action;
  auto options = std::make_shared<TuningCommandOptions>();
  CLI::App *cmd = app.add_subcommand(
      "tuning", "Search's tuning records in the cache: list, export, import, clear");
  cmd->require_subcommand(1);
  auto sub = [&](const char *name, const char *help) {
    CLI::App *s = cmd->add_subcommand(name, help);
    s->add_flag("--json", options->json, "Print one JSON value");
    return s;
  };
  auto deviceOption = [&](CLI::App *s) {
    s->add_option("--device", options->device,
                  "Only the records of this device descriptor (as `ls` prints it)");
  };
  CLI::App *ls = sub("ls", "One line per record: kernel signature, device, candidate, "
                           "time with spread, samples, host, age");
  deviceOption(ls);
  CLI::App *exporting = sub(
      "export", "Write the records as a JSON document that `flowc tuning import` reads");
  deviceOption(exporting);
  exporting->add_option("-o,--output", options->file,
                        "The file to write, atomically (default: stdout)");
  CLI::App *importing =
      sub("import",
          "Read an export's records into this cache; a record replaces one of the same "
          "key only if it was measured later");
  importing->add_option("file", options->file, "A document from `flowc tuning export`")
      ->required();
  deviceOption(sub("clear", "Remove the records; prints how many went"));
  return [=, &global] {
    options->action = ls->parsed()          ? Action::List
                      : exporting->parsed() ? Action::Export
                      : importing->parsed() ? Action::Import
                                            : Action::Clear;
    global.resolve();
    auto module = runtimeModule();
    if (!module)
      return reportError(module.status());
    return (*module)->tuning(*options, global);
  };
}

} // namespace flowc::cli
