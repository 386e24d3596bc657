// flowc: the command-line client. Each subcommand lives in its own file.
#include "Commands.h"

#include <spdlog/spdlog.h>

int main(int argc, char **argv) {
  using namespace flowc::cli;
  CLI::App app{
      "flowc: compile ML models through the flowc daemon, and run the artifacts"};
  app.require_subcommand(1);
  GlobalOptions global;
  app.add_option("--cache-dir", global.cacheDir, "Cache directory (env FLOWC_CACHE_DIR)");
  app.add_option("--socket", global.socketPath, "Daemon socket (env FLOWC_SOCKET)");
  std::vector<std::pair<CLI::App *, CommandRunner>> commands;
  auto add = [&](CommandRunner (*adder)(CLI::App &, GlobalOptions &)) {
    CommandRunner runner = adder(app, global);
    commands.emplace_back(app.get_subcommands({}).back(), std::move(runner));
  };
  add(addSubmitCommand);
  add(addRunCommand);
  add(addInspectCommand);
  add(addReproCommand);
  add(addStatusCommand);
  add(addDaemonCommand);
  add(addCacheCommand);
  spdlog::set_level(spdlog::level::warn);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    // CLI11 prints the message; its own codes (105, 106, ...) would hide
    // that every parse failure is a usage error. --help stays 0.
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }
  for (auto &[command, runner] : commands)
    if (command->parsed())
      return runner();
  return kExitUsage;
}
