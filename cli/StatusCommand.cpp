// flowc status [--json]; flowc daemon start|stop
#include "Commands.h"
#include "flowc/rpc/Json.h"

#include <fstream>
#include <iostream>
#include <thread>

namespace flowc::cli {

namespace {

/// "a, b, c", or "none" from a daemon that names none.
std::string optionalPassList(const flowc::v1::HealthResponse &health) {
  std::string list;
  for (const std::string &pass : health.optional_passes())
    list += (list.empty() ? "" : ", ") + pass;
  return list.empty() ? "none" : list;
}

int runStatus(GlobalOptions &global, bool json) {
  global.resolve();
  auto client = DaemonClient::connect(global, /*autostart=*/false);
  // A socket that is not to be trusted is an error, not "not running".
  if (!client && client.status().code() != StatusCode::Unavailable)
    return reportError(client.status());
  if (!client) {
    if (json)
      printJson({{"running", false}, {"socket", global.socketPath}});
    else
      std::cout << "flowcd: not running (socket " << global.socketPath << ")"
                << std::endl;
    return 0;
  }
  auto health = (*client)->health();
  if (!health)
    return reportError(health.status());
  grpc::ClientContext context;
  flowc::v1::StatsResponse stats;
  if (Status status = fromGrpc((*client)->admin().Stats(&context, {}, &stats), "stats");
      !status)
    return reportError(status);
  grpc::ClientContext cacheContext;
  flowc::v1::CacheStatsResponse cache;
  if (Status status =
          fromGrpc((*client)->cache().Stats(&cacheContext, {}, &cache), "cache stats");
      !status)
    return reportError(status);
  // The cache's figures under the names `cache stats --json` uses.
  nlohmann::json out = rpc::cacheStatsJson(cache);
  out.update({{"running", true},
              {"socket", global.socketPath},
              {"daemon", (*client)->endpoint()},
              {"pid", health->pid()},
              {"version", health->version()},
              {"uptime_seconds", health->uptime_seconds()},
              {"workers", health->workers()},
              {"http_url", health->http_url()},
              {"jobs_queued", stats.jobs_queued()},
              {"jobs_running", stats.jobs_running()},
              {"jobs_completed", stats.jobs_completed()},
              {"jobs_failed", stats.jobs_failed()},
              {"remote_cache", nullptr}});
  out["optional_passes"] = std::vector<std::string>(health->optional_passes().begin(),
                                                    health->optional_passes().end());
  if (stats.has_remote_cache()) {
    const flowc::v1::RemoteCacheStatus &remote = stats.remote_cache();
    const flowc::v1::RemoteCacheCounters &c = remote.counters();
    out["remote_cache"] = {{"url", remote.url()},
                           {"instance", remote.instance()},
                           {"mode", remote.mode()},
                           {"identity", remote.identity()},
                           {"state", remote.state()},
                           {"hits", c.hits()},
                           {"misses", c.misses()},
                           {"uploads", c.uploads()},
                           {"blobs_uploaded", c.blobs_uploaded()},
                           {"bytes_uploaded", c.bytes_uploaded()},
                           {"bytes_downloaded", c.bytes_downloaded()},
                           {"errors", c.errors()},
                           {"data_loss", c.data_loss()},
                           {"too_large", c.too_large()},
                           {"too_large_bytes", c.too_large_bytes()},
                           {"bad_signatures", c.bad_signatures()}};
  }
  if (json) {
    printJson(out);
    return 0;
  }
  std::cout << "flowcd: running pid " << health->pid() << " (" << health->version()
            << "), " << health->workers() << " workers, up "
            << static_cast<int>(health->uptime_seconds()) << " s\n"
            << "web UI: "
            << (health->http_url().empty() ? "off (flowcd --http)" : health->http_url())
            << "\n"
            << ((*client)->isRemote() ? "daemon: " + (*client)->endpoint()
                                      : "socket: " + global.socketPath)
            << "\ncache: " << health->cache_dir() << ", " << cache.blob_count()
            << " blobs, " << humanBytes(cache.blob_bytes()) << ", "
            << cache.action_count() << " actions; artifact hits " << cache.hits()
            << " / misses " << cache.misses() << " ("
            << hitRateText(cache.hits(), cache.misses()) << ")\n"
            << "jobs: " << stats.jobs_running() << " running, " << stats.jobs_queued()
            << " queued, " << stats.jobs_completed() << " done, " << stats.jobs_failed()
            << " failed\n"
            << "optional passes (--disable-pass): " << optionalPassList(*health)
            << std::endl;
  if (stats.has_remote_cache()) {
    const flowc::v1::RemoteCacheStatus &remote = stats.remote_cache();
    const flowc::v1::RemoteCacheCounters &c = remote.counters();
    std::cout << "remote cache: " << remote.url()
              << (remote.instance().empty() ? "" : " instance " + remote.instance())
              << ", " << remote.mode() << ", as " << remote.identity() << "; "
              << remote.state() << "\n  hits " << c.hits() << " / misses " << c.misses()
              << ", " << c.uploads() << " entries uploaded (" << c.blobs_uploaded()
              << " blobs, " << humanBytes(c.bytes_uploaded()) << "), "
              << humanBytes(c.bytes_downloaded()) << " downloaded, " << c.errors()
              << " errors, " << c.data_loss() << " corrupt, " << c.too_large()
              << " too large (" << humanBytes(c.too_large_bytes()) << "), "
              << c.bad_signatures() << " bad signatures" << std::endl;
  }
  return 0;
}

/// Whether process `pid` exists and has not exited (a zombie, whose parent
/// has yet to reap it, has exited).
bool processRuns(int64_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!stat || !std::getline(stat, text))
    return false;
  size_t close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] != 'Z';
}

int runDaemonStop(GlobalOptions &global) {
  global.resolve();
  auto client = DaemonClient::connect(global, /*autostart=*/false);
  if (!client) {
    std::cout << "flowcd: not running (socket " << global.socketPath << ")" << std::endl;
    return 0;
  }
  auto health = (*client)->health();
  grpc::ClientContext context;
  flowc::v1::ShutdownResponse response;
  if (Status status =
          fromGrpc((*client)->admin().Shutdown(&context, {}, &response), "stop");
      !status)
    return reportError(status);
  // Wait until the socket stops answering so that a following start works.
  for (int i = 0; i < 600 && (*client)->health(200); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Then until a local daemon's process is gone: it closes the cache (and
  // checkpoints its index) after the socket, and a caller that goes on to
  // copy or mount the cache must not see it half closed.
  if (health && !(*client)->isRemote() && health->pid() > 0)
    for (int i = 0; i < 600 && processRuns(health->pid()); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::cout << "flowcd: stopped" << std::endl;
  return 0;
}

int runDaemonStart(GlobalOptions &global) {
  global.resolve();
  auto client = DaemonClient::connect(global, /*autostart=*/true);
  if (!client)
    return reportError(client.status());
  auto health = (*client)->health();
  std::cout << "flowcd: running pid " << (health ? health->pid() : 0) << " on "
            << global.socketPath << std::endl;
  return 0;
}

} // namespace

CommandRunner addStatusCommand(CLI::App &app, GlobalOptions &global) {
  auto json = std::make_shared<bool>(false);
  CLI::App *cmd =
      app.add_subcommand("status", "Show the daemon's state and cache figures");
  cmd->add_flag("--json", *json, "Print one JSON object");
  return [json, &global] { return runStatus(global, *json); };
}

CommandRunner addDaemonCommand(CLI::App &app, GlobalOptions &global) {
  CLI::App *cmd = app.add_subcommand("daemon", "Start or stop the background daemon");
  cmd->require_subcommand(1);
  CLI::App *stop =
      cmd->add_subcommand("stop", "Stop the daemon (running compiles finish)");
  CLI::App *start = cmd->add_subcommand("start", "Start the daemon if none is running");
  return [stop, start, &global] {
    if (stop->parsed())
      return runDaemonStop(global);
    if (start->parsed())
      return runDaemonStart(global);
    return kExitUsage;
  };
}

} // namespace flowc::cli
