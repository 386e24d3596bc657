// flowc cache stats|ls|gc|verify|pin|unpin|clear [--json]
#include "Commands.h"
#include "flowc/rpc/Json.h"
#include "CompilerModule.h"

#include "flowc/support/ByteSize.h"

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <optional>

namespace flowc::cli {

namespace {

struct CacheOptions {
  bool json = false;
  unsigned limit = 50;
  std::string maxSize;
  bool repair = false;
  bool zero = false;
  std::string digest;
  /// --max-size of gc, parsed before any daemon is asked.
  std::optional<uint64_t> maxBytes;
};

std::string humanBytes(uint64_t bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  std::ostringstream out;
  out << std::fixed << std::setprecision(unit ? 1 : 0) << value << " " << units[unit];
  return out.str();
}

nlohmann::json gcJson(const flowc::v1::CacheGcResponse &r) {
  return {{"evicted_blobs", r.evicted_blobs()},
          {"evicted_bytes", r.evicted_bytes()},
          {"dropped_actions", r.dropped_actions()},
          {"remaining_bytes", r.remaining_bytes()}};
}

void printGc(const char *what, const flowc::v1::CacheGcResponse &r) {
  std::cout << what << ": evicted " << r.evicted_blobs() << " blobs ("
            << humanBytes(r.evicted_bytes()) << "), dropped " << r.dropped_actions()
            << " cache entries; " << humanBytes(r.remaining_bytes()) << " remain"
            << std::endl;
}

int runStats(DaemonClient &client, const CacheOptions &options) {
  grpc::ClientContext context;
  flowc::v1::CacheStatsRequest request;
  request.set_zero(options.zero);
  flowc::v1::CacheStatsResponse r;
  if (Status s = fromGrpc(client.cache().Stats(&context, request, &r), "cache stats"); !s)
    return reportError(s);
  if (options.json) {
    printJson(rpc::cacheStatsJson(r));
    return 0;
  }
  std::cout << "cache:        " << r.cache_dir() << "\n"
            << "size:         " << humanBytes(r.blob_bytes()) << " of "
            << humanBytes(r.max_bytes()) << " in " << r.blob_count() << " blobs ("
            << r.inline_blobs() << " inline, " << r.pinned_blobs() << " pinned)\n"
            << "entries:      " << r.action_count() << " cached results\n";
  // Artifact first: what a user's submit hits.
  std::vector<std::string> kinds = {"artifact", "code", "kernel", "derived"};
  for (const auto &[kind, counts] : r.kinds())
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end())
      kinds.push_back(kind);
  for (const std::string &kind : kinds) {
    auto found = r.kinds().find(kind);
    uint64_t hits = found == r.kinds().end() ? 0 : found->second.hits();
    uint64_t misses = found == r.kinds().end() ? 0 : found->second.misses();
    std::cout << std::left << std::setw(14) << (kind + ":") << hits << " hits / "
              << misses << " misses (" << hitRateText(hits, misses) << ")\n";
  }
  std::cout << "evictions:    " << r.evictions() << " blobs, "
            << humanBytes(r.evicted_bytes()) << "\n"
            << "dedup saved:  " << humanBytes(r.dedup_bytes()) << "\n"
            << "stat memo:    " << r.stat_memo_entries() << " files" << std::endl;
  if (options.zero)
    std::cout << "counters zeroed" << std::endl;
  return 0;
}

int runList(DaemonClient &client, const CacheOptions &options) {
  grpc::ClientContext context;
  flowc::v1::CacheListRequest request;
  request.set_limit(options.limit);
  flowc::v1::CacheListResponse r;
  if (Status s = fromGrpc(client.cache().List(&context, request, &r), "cache ls"); !s)
    return reportError(s);
  nlohmann::json json = nlohmann::json::array();
  for (const auto &blob : r.blobs()) {
    if (options.json) {
      json.push_back({{"digest", blob.digest()},
                      {"inline", blob.inline_()},
                      {"created_ms", blob.created_ms()},
                      {"last_access_ms", blob.last_access_ms()},
                      {"pinned", blob.pinned()}});
      continue;
    }
    std::cout << blob.digest() << (blob.inline_() ? "  inline" : "  file  ")
              << (blob.pinned() ? "  pinned" : "") << "\n";
  }
  if (options.json)
    printJson(json);
  else
    std::cout.flush();
  return 0;
}

int runGc(DaemonClient &client, const CacheOptions &options) {
  flowc::v1::CacheGcRequest request;
  if (options.maxBytes)
    request.set_max_bytes(*options.maxBytes);
  grpc::ClientContext context;
  flowc::v1::CacheGcResponse r;
  if (Status s = fromGrpc(client.cache().Gc(&context, request, &r), "cache gc"); !s)
    return reportError(s);
  if (options.json)
    printJson(gcJson(r));
  else
    printGc("gc", r);
  return 0;
}

int runVerify(DaemonClient &client, const CacheOptions &options) {
  flowc::v1::CacheVerifyRequest request;
  request.set_repair(options.repair);
  grpc::ClientContext context;
  flowc::v1::CacheVerifyResponse r;
  if (Status s = fromGrpc(client.cache().Verify(&context, request, &r), "cache verify");
      !s)
    return reportError(s);
  bool clean = r.corrupt().empty() && r.unreadable().empty() && r.orphan_files() == 0;
  if (options.json) {
    printJson(
        {{"checked", r.checked()},
         {"corrupt", std::vector<std::string>(r.corrupt().begin(), r.corrupt().end())},
         {"unreadable",
          std::vector<std::string>(r.unreadable().begin(), r.unreadable().end())},
         {"quarantined", r.quarantined()},
         {"missing_files", r.missing_files()},
         {"orphan_files", r.orphan_files()},
         {"ok", clean}});
  } else {
    for (const std::string &bad : r.corrupt())
      std::cout << "corrupt: " << bad << "\n";
    for (const std::string &unreadable : r.unreadable())
      std::cout << "unreadable: " << unreadable << "\n";
    std::cout << "verify: " << r.checked() << " blobs checked, " << r.corrupt_size()
              << " bad, " << r.unreadable_size() << " unreadable, " << r.orphan_files()
              << " orphan files, " << r.quarantined() << " quarantined"
              << (options.repair ? " (repaired)" : "") << std::endl;
  }
  // Problems left unrepaired are a failure; an unreadable blob is one that
  // repair leaves alone.
  return clean || (options.repair && r.unreadable().empty()) ? 0 : 1;
}

int runPin(DaemonClient &client, const CacheOptions &options, bool pin) {
  flowc::v1::CachePinRequest request;
  request.set_digest(options.digest);
  grpc::ClientContext context;
  flowc::v1::CachePinResponse r;
  grpc::Status status = pin ? client.cache().Pin(&context, request, &r)
                            : client.cache().Unpin(&context, request, &r);
  if (Status s = fromGrpc(status, pin ? "cache pin" : "cache unpin"); !s)
    return reportError(s);
  if (options.json)
    printJson({{"digest", options.digest}, {"pinned", pin}});
  else
    std::cout << (pin ? "pinned " : "unpinned ") << options.digest << std::endl;
  return 0;
}

int runClear(DaemonClient &client, const CacheOptions &options) {
  grpc::ClientContext context;
  flowc::v1::CacheGcResponse r;
  if (Status s = fromGrpc(client.cache().Clear(&context, {}, &r), "cache clear"); !s)
    return reportError(s);
  if (options.json)
    printJson(gcJson(r));
  else
    printGc("clear", r);
  return 0;
}

} // namespace

CommandRunner addCacheCommand(CLI::App &app, GlobalOptions &global) {
  auto options = std::make_shared<CacheOptions>();
  CLI::App *cmd = app.add_subcommand("cache", "Inspect and maintain the daemon's cache");
  cmd->require_subcommand(1);
  auto sub = [&](const char *name, const char *help) {
    CLI::App *s = cmd->add_subcommand(name, help);
    s->add_flag("--json", options->json, "Print one JSON value");
    return s;
  };
  CLI::App *stats = sub("stats", "Sizes, hits and misses per kind (artifact, code, "
                                 "kernel, derived), evictions, bytes saved by dedup");
  stats->add_flag("--zero", options->zero,
                  "Then set every counter back to zero (the figures printed are from "
                  "before)");
  CLI::App *ls = sub("ls", "Blobs, most recently used first");
  ls->add_option("--limit", options->limit, "How many to list");
  CLI::App *gc = sub("gc", "Evict least-recently-used unpinned blobs down to a size");
  gc->add_option("--max-size", options->maxSize,
                 "Target size (default: the daemon's cap)");
  CLI::App *verify =
      sub("verify", "Re-hash every blob; exit 1 if any is corrupt (content "
                    "does not match its digest) or unreadable");
  verify->add_flag("--repair", options->repair,
                   "Quarantine corrupt blobs (after a second hash agrees) and fix the "
                   "index; unreadable blobs are reported, never quarantined");
  CLI::App *pin = sub("pin", "Never evict a blob");
  pin->add_option("digest", options->digest, "sha256:<hex>/<size>")->required();
  CLI::App *unpin = sub("unpin", "Let a pinned blob be evicted again");
  unpin->add_option("digest", options->digest, "sha256:<hex>/<size>")->required();
  CLI::App *clear = sub("clear", "Remove every unpinned blob and cached result");
  auto bundle = std::make_shared<BundleCommandOptions>();
  CLI::App *exporting = cmd->add_subcommand(
      "export", "Write a model's complete entries (artifact, code) and their blobs to a "
                "bundle (a tar) that `flowc cache import` reads into another cache");
  exporting->add_option("model", bundle->model, "The ONNX model, as it was submitted")
      ->required();
  exporting->add_option("-o,--output", bundle->bundle, "The bundle to write")->required();
  addCompileFlags(exporting, bundle->compile);
  addRemoteGpuFlag(exporting, bundle->remoteGpus);
  exporting->add_flag("--json", bundle->json, "Print one JSON object");
  CLI::App *importing = cmd->add_subcommand(
      "import", "Read a bundle's entries into this cache: every blob verified, every "
                "entry recorded at once, or nothing");
  importing->add_option("bundle", bundle->bundle, "A bundle from `flowc cache export`")
      ->required();
  importing->add_flag("--json", bundle->json, "Print one JSON object");
  return [=, &global] {
    if (exporting->parsed() || importing->parsed()) {
      global.resolve();
      auto module = compilerModule();
      if (!module)
        return reportError(module.status());
      return exporting->parsed() ? (*module)->exportBundle(*bundle, global)
                                 : (*module)->importBundle(*bundle, global);
    }
    if (!options->maxSize.empty()) {
      auto bytes = parseByteSize(options->maxSize);
      if (!bytes) {
        reportError(bytes.status().withContext("--max-size"));
        return kExitUsage;
      }
      options->maxBytes = *bytes;
    }
    global.resolve();
    auto client = DaemonClient::connect(global, /*autostart=*/true);
    if (!client)
      return reportError(client.status());
    DaemonClient &c = **client;
    if (stats->parsed())
      return runStats(c, *options);
    if (ls->parsed())
      return runList(c, *options);
    if (gc->parsed())
      return runGc(c, *options);
    if (verify->parsed())
      return runVerify(c, *options);
    if (pin->parsed() || unpin->parsed())
      return runPin(c, *options, pin->parsed());
    if (clear->parsed())
      return runClear(c, *options);
    return kExitUsage;
  };
}

} // namespace flowc::cli
