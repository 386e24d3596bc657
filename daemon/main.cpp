// flowcd: the flowc daemon. Runs in the foreground; `flowc` starts it in the
// background on demand.
#include "flowc/daemon/Server.h"
#include "flowc/support/ByteSize.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <iostream>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace {

std::string defaultCacheDir() {
  if (const char *dir = std::getenv("FLOWC_CACHE_DIR"); dir && *dir)
    return dir;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    return std::string(xdg) + "/flowc";
  const char *home = std::getenv("HOME");
  return std::string(home ? home : "/tmp") + "/.cache/flowc";
}

} // namespace

int main(int argc, char **argv) {
  CLI::App app{"flowcd: the flowc compile daemon"};
  flowc::daemon::DaemonOptions options;
  options.cacheDir = defaultCacheDir();
  if (const char *socket = std::getenv("FLOWC_SOCKET"))
    options.socketPath = socket;
  app.add_option("--cache-dir", options.cacheDir,
                 "Cache directory (env FLOWC_CACHE_DIR)");
  app.add_option(
      "--socket", options.socketPath,
      "Unix socket to listen on (env FLOWC_SOCKET; default CACHE_DIR/flowcd.sock)");
  app.add_option("--listen", options.tcpAddress, "Also listen on TCP host:port");
  app.add_option("--workers", options.workers,
                 "Embedded worker threads (default: cores)");
  CLI11_PARSE(app, argc, argv);

  // Logs go to stderr, leaving stdout for nothing but the process itself.
  spdlog::set_default_logger(spdlog::stderr_logger_mt("flowcd"));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %l flowcd %v");
  // Before any thread exists, so every thread inherits the mask.
  flowc::daemon::blockShutdownSignals();
  auto server = flowc::daemon::Server::start(options);
  if (!server) {
    std::cerr << "flowcd: error: " << server.status().message() << "\n";
    return 1;
  }
  (*server)->runUntilShutdown();
  return 0;
}
