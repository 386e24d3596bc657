// flowc: the command-line client. Each subcommand lives in its own file.
#include "Commands.h"
#include "RuntimeModule.h"

#include "flowc/support/Environment.h"
#include "flowc/support/Logging.h"

#include <grpc/support/log.h>
#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace {

/// gRPC's own log lines (connection failures, retries) would bury the one
/// error line flowc prints; what went wrong reaches the user through the
/// RPC's status instead.
void discardGrpcLog(gpr_log_func_args *) {}

/// Lets global options follow the subcommand (`flowc submit m.onnx
/// --socket S`): options a subcommand does not know fall through to the
/// parent, at every depth.
void letGlobalOptionsFallThrough(CLI::App &app) {
  for (CLI::App *sub : app.get_subcommands({})) {
    sub->fallthrough();
    letGlobalOptionsFallThrough(*sub);
  }
}

/// Whether the parsed command (at any depth) was given --json: its errors
/// are then an object on stdout too (Common.h, setErrorFormat).
bool wantsJson(const CLI::App &app) {
  for (const CLI::App *sub : app.get_subcommands()) {
    const CLI::Option *json = sub->get_option_no_throw("--json");
    if ((json && json->count() > 0) || wantsJson(*sub))
      return true;
  }
  return false;
}

} // namespace

int main(int argc, char **argv) {
  using namespace flowc::cli;
  CLI::App app{
      "flowc: compile ML models through the flowc daemon, and run the artifacts"};
  app.require_subcommand(1);
  GlobalOptions global;
  app.add_option("--cache-dir", global.cacheDir, "Cache directory (env FLOWC_CACHE_DIR)");
  app.add_option("--socket", global.socketPath, "Daemon socket (env FLOWC_SOCKET)");
  app.add_option(
      "--daemon", global.daemonUrl,
      "The daemon to use: unix:/PATH, grpcs://HOST:PORT, or grpc://HOST:PORT on "
      "loopback only (env FLOWC_DAEMON; default the unix socket)");
  app.add_option("--tls-ca", global.tlsCa,
                 "PEM CA bundle that signed a grpcs:// daemon's certificate (env "
                 "FLOWC_TLS_CA; default the system's)");
  app.add_option("--tls-cert", global.tlsCert,
                 "PEM client certificate for a grpcs:// daemon that requires one (env "
                 "FLOWC_TLS_CERT)");
  app.add_option("--tls-key", global.tlsKey,
                 "PEM private key of --tls-cert (env FLOWC_TLS_KEY)");
  app.add_option("--token", global.token,
                 "Bearer token for a TCP daemon (env FLOWC_TOKEN, which other users "
                 "cannot see in ps)");
  app.add_flag("--trust-daemon", global.trustForeignDaemon,
               "Use a daemon socket that another user owns (flowc runs the code such a "
               "daemon returns; refused by default)");
  std::vector<std::pair<CLI::App *, CommandRunner>> commands;
  auto add = [&](CommandRunner (*adder)(CLI::App &, GlobalOptions &)) {
    CommandRunner runner = adder(app, global);
    commands.emplace_back(app.get_subcommands({}).back(), std::move(runner));
  };
  add(addSubmitCommand);
  add(addWatchCommand);
  add(addCompileCommand);
  add(addRunCommand);
  add(addInspectCommand);
  add(addReproCommand);
  add(addStatusCommand);
  add(addDaemonCommand);
  add(addCacheCommand);
  add(addJobsCommand);
  add(addWorkersCommand);
  add(addExplainCommand);
  add(addCancelCommand);
  add(addTraceCommand);
  add(addTuningCommand);
  letGlobalOptionsFallThrough(app);
  app.set_version_flag(
      "--version",
      []() -> std::string {
        auto module = flowc::cli::runtimeModule();
        if (!module)
          return "flowc: error: " + module.status().message();
        std::string text = (*module)->versionText("flowc");
        text.pop_back(); // CLI11 ends the text with its own newline
        return text;
      },
      "Print the version, build id and library versions");
  // The libraries' warnings (the runtime's, the cache's) go to stderr as
  // flowc's own do: spdlog's default logger writes stdout, where they would
  // break a --json answer or an export.
  flowc::logWarningsToStderr("flowc");
  gpr_set_log_function(discardGrpcLog);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError &e) {
    // --help and --version print and succeed; every other parse failure is
    // a usage error (CLI11's own codes, 105, 106, ..., would hide that),
    // said in one line like every other error.
    if (e.get_exit_code() == 0)
      return app.exit(e);
    std::string message = std::string(e.what()) + " (see flowc --help)";
    std::cerr << "flowc: error: " << message << std::endl;
    if (wantsJson(app)) {
      nlohmann::json error = errorJson(flowc::invalidArgument(message));
      error["exit_code"] = kExitUsage;
      printJson({{"error", error}});
    }
    return kExitUsage;
  }
  if (wantsJson(app))
    setErrorFormat(ErrorFormat::Json, global.started);
  for (const std::string &warning : flowc::unknownEnvironmentWarnings())
    std::cerr << "flowc: warning: " << warning << std::endl;
  for (auto &[command, runner] : commands) {
    if (!command->parsed())
      continue;
    int status = runner();
    // Everything the command owed is written; gRPC's threads and the
    // libraries' static destructors have nothing left to do but cost a
    // short command milliseconds at exit.
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    std::_Exit(status);
  }
  return kExitUsage;
}
