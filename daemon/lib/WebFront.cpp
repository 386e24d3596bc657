#include "WebFront.h"

#include "Auth.h"
#include "CacheService.h"
#include "GraphView.h"
#include "Metrics.h"
#include "Trace.h"
#include "WebUiFiles.h"

#include "flowc/cache/ModelViews.h"
#include "flowc/rpc/Json.h"
#include "flowc/support/Sha256.h"

#include <arpa/inet.h>
#include <netinet/tcp.h>
#include <atomic>
#include <charconv>
#include <fcntl.h>
#include <httplib.h>
#include <list>
#include <nlohmann/json.hpp>
#include <openssl/rand.h>
#include <set>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

namespace flowc::daemon {

namespace {

using nlohmann::json;

/// Event streams at once: each holds one of the server's threads.
constexpr int kMaxStreams = 8;
constexpr int kServerThreads = 16;
/// Points of the cache's hit history (one per kSampleSeconds with lookups).
constexpr size_t kHistoryPoints = 720;
constexpr int kSampleSeconds = 5;
constexpr const char *kJsonType = "application/json; charset=utf-8";
constexpr const char *kSvgType = "image/svg+xml; charset=utf-8";
/// Model drawings kept in memory (WebFront::State::drawings).
constexpr size_t kKeptDrawings = 16;

std::string hostOf(const std::string &address) {
  if (address.starts_with("[")) {
    size_t close = address.find(']');
    return close == std::string::npos ? address : address.substr(1, close - 1);
  }
  size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

int64_t nowMs() {
  using namespace std::chrono;
  return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

Expected<std::string> randomToken() {
  unsigned char bytes[24];
  if (RAND_bytes(bytes, sizeof bytes) != 1)
    return internalError("cannot draw the web UI's access token (OpenSSL RAND_bytes)");
  static const char *digits = "0123456789abcdef";
  std::string token;
  for (unsigned char byte : bytes) {
    token += digits[byte >> 4];
    token += digits[byte & 15];
  }
  return token;
}

/// Compares in time independent of where they differ.
bool sameToken(std::string_view given, std::string_view token) {
  if (given.size() != token.size())
    return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i)
    diff |= static_cast<unsigned char>(given[i] ^ token[i]);
  return diff == 0;
}

std::string queryToken(const httplib::Request &request) {
  return request.has_param("token") ? request.get_param_value("token") : "";
}

std::string cookieToken(const httplib::Request &request) {
  std::string cookies = request.get_header_value("Cookie");
  for (size_t at = 0; at < cookies.size();) {
    size_t end = cookies.find(';', at);
    std::string part = cookies.substr(at, end == std::string::npos ? end : end - at);
    while (!part.empty() && part.front() == ' ')
      part.erase(0, 1);
    if (part.starts_with("flowc_token="))
      return part.substr(12);
    if (end == std::string::npos)
      break;
    at = end + 1;
  }
  return "";
}

std::string contentType(std::string_view path) {
  if (path.ends_with(".html"))
    return "text/html; charset=utf-8";
  if (path.ends_with(".js"))
    return "text/javascript; charset=utf-8";
  if (path.ends_with(".css"))
    return "text/css; charset=utf-8";
  if (path.ends_with(".svg"))
    return kSvgType;
  if (path.ends_with(".png"))
    return "image/png";
  return "application/octet-stream";
}

json summaryJson(const JobSummary &job) {
  return {{"id", job.id},
          {"model", job.model},
          {"state", job.state},
          {"priority", job.priority},
          {"client", job.client},
          {"seconds", job.seconds},
          {"kernels_done", job.kernelsDone},
          {"kernels_total", job.kernelsTotal},
          {"kernels_cached", job.kernelsCached},
          {"tasks", job.tasks},
          {"error", job.error},
          {"phase", job.phase},
          {"model_digest", job.modelDigest},
          {"detailed", job.detailed}};
}

json workersJson(const flowc::v1::WorkersResponse &w) {
  json local = json::array();
  for (const flowc::v1::LocalWorker &each : w.local())
    local.push_back(
        {{"pid", each.pid()}, {"task", each.task()}, {"seconds", each.seconds()}});
  json remote = json::array();
  for (const flowc::v1::RemoteWorker &each : w.remote_workers())
    remote.push_back({{"name", each.name()},
                      {"tasks_done", each.tasks_done()},
                      {"tasks_failed", each.tasks_failed()}});
  return {{"slots", w.slots()},
          {"busy", w.busy()},
          {"local", local},
          {"tasks_run", w.tasks_run()},
          {"tasks_retried", w.tasks_retried()},
          {"tasks_failed", w.tasks_failed()},
          {"remote_url", w.remote_url()},
          {"remote_instance", w.remote_instance()},
          {"remote_state", w.remote_state()},
          {"remote_executed", w.remote_executed()},
          {"remote_cache_hits", w.remote_cache_hits()},
          {"remote_bytes_uploaded", w.remote_bytes_uploaded()},
          {"remote_bytes_downloaded", w.remote_bytes_downloaded()},
          {"remote_fallbacks", w.remote_fallbacks()},
          {"remote_fallback", w.remote_fallback()},
          {"local_device", w.local_device()},
          {"local_gpus",
           std::vector<std::string>(w.local_gpus().begin(), w.local_gpus().end())},
          {"local_gpus_absent", w.local_gpus_absent()},
          {"remote_platform", std::vector<std::string>(w.remote_platform().begin(),
                                                       w.remote_platform().end())},
          {"remote_gpus",
           std::vector<std::string>(w.remote_gpus().begin(), w.remote_gpus().end())},
          {"remote_workers", remote}};
}

json tuningJson(const cache::TuningRecord &r) {
  return {{"signature", r.signature},
          {"device", r.device},
          {"versions", r.versions},
          {"candidate", r.candidate},
          {"time_ns", r.timeNs},
          {"spread_ns", r.spreadNs},
          {"samples", r.samples},
          {"separated", r.separated},
          {"noise", r.noise},
          {"measured_ms", r.measuredMs},
          {"host", r.host}};
}

void sendJson(httplib::Response &response, const json &body, int status = 200) {
  response.status = status;
  // Model paths and errors are user data: never let bad UTF-8 throw.
  response.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace),
                       kJsonType);
}

void sendError(httplib::Response &response, int status, const std::string &message) {
  sendJson(response, {{"error", message}}, status);
}

} // namespace

bool isLoopbackAddress(const std::string &address) {
  std::string host = hostOf(address);
  if (host == "localhost" || host == "::1")
    return true;
  in_addr v4{};
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

struct WebFront::State {
  DaemonContext &context;
  /// An httplib::SSLServer off loopback.
  std::unique_ptr<httplib::Server> server;
  /// Off loopback: the TCP front's tokens (--tokens), any of which lets a
  /// request in (every page and endpoint only reads).
  std::vector<TokenEntry> tokens;
  /// Served over TLS: its cookie is Secure.
  bool secure = false;
  std::string token;
  std::string url;
  std::thread listener;
  std::thread sampler;
  std::atomic<bool> stopping{false};
  std::atomic<int> streams{0};
  std::mutex historyMutex;
  std::condition_variable sampleWake;
  /// (ms since the epoch, artifact hits, artifact misses), oldest first.
  std::deque<std::array<int64_t, 3>> history;

  State(DaemonContext &context, std::unique_ptr<httplib::Server> server)
      : context(context), server(std::move(server)) {}

  /// The daemon's token, or off loopback one of the TCP front's.
  bool validToken(const std::string &given) const;
  bool authorized(const httplib::Request &request) const;
  void routes();
  void sampleLoop();
  void metrics(httplib::Response &response);
  /// Job changes after change `since` as they happen.
  void events(uint64_t since, httplib::Response &response);
  void models(httplib::Response &response);
  void model(const std::string &digest, httplib::Response &response);
  void graph(const std::string &digest, const std::set<std::string> &open,
             httplib::Response &response);
  /// The model view of `digest` (cache/ModelViews.h), or the HTTP status
  /// and message saying why there is none.
  Expected<json> modelView(const std::string &digest);

  /// Recent drawings by (model, open groups): a page that reopens one
  /// does not wait for dot again.
  std::mutex drawingsMutex;
  std::list<std::pair<std::string, std::string>> drawings;
};

bool WebFront::State::validToken(const std::string &given) const {
  if (given.empty())
    return false;
  if (sameToken(given, token))
    return true;
  // The tokens file keeps digests: equal digests, equal tokens.
  Sha256 digest = sha256Of(given);
  auto bytes = [](const Sha256 &hash) {
    return std::string_view(reinterpret_cast<const char *>(hash.data()), hash.size());
  };
  bool known = false;
  for (const TokenEntry &entry : tokens)
    known |= sameToken(bytes(digest), bytes(entry.digest));
  return known;
}

bool WebFront::State::authorized(const httplib::Request &request) const {
  std::string header = request.get_header_value("Authorization");
  return (header.starts_with("Bearer ") && validToken(header.substr(7))) ||
         validToken(cookieToken(request)) || validToken(queryToken(request));
}

void WebFront::State::sampleLoop() {
  uint64_t lastLookups = UINT64_MAX;
  std::unique_lock lock(historyMutex);
  while (!stopping) {
    lock.unlock();
    auto stats = context.cache->stats();
    lock.lock();
    if (stats && stats->hits + stats->misses != lastLookups) {
      lastLookups = stats->hits + stats->misses;
      history.push_back({nowMs(), static_cast<int64_t>(stats->hits),
                         static_cast<int64_t>(stats->misses)});
      if (history.size() > kHistoryPoints)
        history.pop_front();
    }
    sampleWake.wait_for(lock, std::chrono::seconds(kSampleSeconds),
                        [this] { return stopping.load(); });
  }
}

void WebFront::State::events(uint64_t since, httplib::Response &response) {
  if (streams.fetch_add(1) >= kMaxStreams) {
    --streams;
    sendError(response, 503,
              "too many event streams open (" + std::to_string(kMaxStreams) + ")");
    return;
  }
  response.set_header("Cache-Control", "no-store");
  auto seen = std::make_shared<uint64_t>(since);
  auto lastWrite = std::make_shared<std::chrono::steady_clock::time_point>(
      std::chrono::steady_clock::now());
  response.set_chunked_content_provider(
      "text/event-stream",
      [this, seen, lastWrite](size_t, httplib::DataSink &sink) {
        // Wake at least every second so that a stopping daemon ends the
        // stream, and a keep-alive comment goes out on a quiet one.
        while (!stopping &&
               !context.registry.waitForChange(*seen, std::chrono::seconds(1))) {
          if (!sink.is_writable())
            return false;
          if (std::chrono::steady_clock::now() - *lastWrite > std::chrono::seconds(15)) {
            *lastWrite = std::chrono::steady_clock::now();
            return sink.write(": keep-alive\n\n", 14);
          }
        }
        if (stopping) {
          sink.done();
          return true;
        }
        // Coalesce a burst of kernel events into one write.
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::string text;
        for (const JobSummary &job : context.registry.changedSince(*seen, *seen))
          text += "event: job\ndata: " +
                  summaryJson(job).dump(-1, ' ', false, json::error_handler_t::replace) +
                  "\n\n";
        *lastWrite = std::chrono::steady_clock::now();
        return text.empty() || sink.write(text.data(), text.size());
      },
      [this](bool) { --streams; });
}

void WebFront::State::metrics(httplib::Response &response) {
  MetricsWriter out;
  scheduler::JobCounts counts = context.jobs->counts();
  out.family("flowc_jobs", "gauge", "Jobs queued and running now.");
  out.sample("flowc_jobs", {{"state", "queued"}}, counts.queued);
  out.sample("flowc_jobs", {{"state", "running"}}, counts.running);
  JobMetrics jobs = context.registry.metrics();
  out.family("flowc_jobs_finished_total", "counter", "Jobs that ended, by how.");
  for (const char *state : {"done", "failed", "cancelled", "superseded"}) {
    auto found = jobs.jobSeconds.find(state);
    out.sample("flowc_jobs_finished_total", {{"state", state}},
               found == jobs.jobSeconds.end() ? 0 : found->second.count());
  }
  out.family("flowc_job_duration_seconds", "histogram",
             "Wall time of finished jobs (compiles), by how they ended.");
  for (const auto &[state, histogram] : jobs.jobSeconds)
    out.histogram("flowc_job_duration_seconds", {{"state", state}}, histogram);
  out.family("flowc_task_duration_seconds", "histogram",
             "Wall time of finished tasks of finished jobs, by kind.");
  for (const auto &[kind, histogram] : jobs.taskSeconds)
    out.histogram("flowc_task_duration_seconds", {{"kind", kind}}, histogram);

  if (auto stats = context.cache->stats()) {
    out.family("flowc_cache_hits_total", "counter", "Cache lookups answered, by kind.");
    for (const auto &[kind, c] : stats->byKind)
      out.sample("flowc_cache_hits_total", {{"kind", kind}}, c.hits);
    out.family("flowc_cache_misses_total", "counter", "Cache lookups missed, by kind.");
    for (const auto &[kind, c] : stats->byKind)
      out.sample("flowc_cache_misses_total", {{"kind", kind}}, c.misses);
    out.family("flowc_cache_stored_bytes", "gauge", "Bytes the cache holds.");
    out.sample("flowc_cache_stored_bytes", {}, stats->blobBytes);
    out.family("flowc_cache_max_bytes", "gauge", "The cache's size cap (0: none).");
    out.sample("flowc_cache_max_bytes", {}, stats->maxBytes);
    out.family("flowc_cache_blobs", "gauge", "Blobs the cache holds.");
    out.sample("flowc_cache_blobs", {}, stats->blobCount);
    out.family("flowc_cache_deduplicated_bytes_total", "counter",
               "Bytes offered to the cache that it held already.");
    out.sample("flowc_cache_deduplicated_bytes_total", {}, stats->dedupBytes);
    out.family("flowc_cache_evicted_bytes_total", "counter",
               "Bytes evicted for the size cap or by gc.");
    out.sample("flowc_cache_evicted_bytes_total", {}, stats->evictedBytes);
    out.family("flowc_cache_evictions_total", "counter", "Blobs evicted.");
    out.sample("flowc_cache_evictions_total", {}, stats->evictions);
  }

  flowc::v1::WorkersResponse workers;
  context.tasks->describe(workers);
  out.family("flowc_worker_slots", "gauge", "Local task processes at most at once.");
  out.sample("flowc_worker_slots", {}, workers.slots());
  out.family("flowc_worker_busy", "gauge", "Local task processes running a task.");
  out.sample("flowc_worker_busy", {}, workers.busy());
  out.family("flowc_tasks_total", "counter", "Tasks run, retried and failed.");
  out.sample("flowc_tasks_total", {{"outcome", "run"}}, workers.tasks_run());
  out.sample("flowc_tasks_total", {{"outcome", "retried"}}, workers.tasks_retried());
  out.sample("flowc_tasks_total", {{"outcome", "failed"}}, workers.tasks_failed());
  out.family("flowc_remote_executor_actions_total", "counter",
             "Remote executor: actions executed, answered by its action cache, "
             "and run locally instead.");
  out.sample("flowc_remote_executor_actions_total", {{"outcome", "executed"}},
             workers.remote_executed());
  out.sample("flowc_remote_executor_actions_total", {{"outcome", "cache_hit"}},
             workers.remote_cache_hits());
  out.sample("flowc_remote_executor_actions_total", {{"outcome", "fallback"}},
             workers.remote_fallbacks());
  out.family("flowc_remote_executor_bytes_total", "counter",
             "Remote executor: bytes uploaded and downloaded.");
  out.sample("flowc_remote_executor_bytes_total", {{"direction", "upload"}},
             workers.remote_bytes_uploaded());
  out.sample("flowc_remote_executor_bytes_total", {{"direction", "download"}},
             workers.remote_bytes_downloaded());

  flowc::v1::RemoteCacheStatus remote;
  const flowc::v1::RemoteCacheCounters &c = remote.counters();
  bool configured = context.remoteCache->status(remote);
  out.family("flowc_remote_cache_lookups_total", "counter",
             "Remote cache tier: lookups by outcome (0 without --remote-cache).");
  out.sample("flowc_remote_cache_lookups_total", {{"outcome", "hit"}},
             configured ? c.hits() : 0);
  out.sample("flowc_remote_cache_lookups_total", {{"outcome", "miss"}},
             configured ? c.misses() : 0);
  out.family("flowc_remote_cache_uploads_total", "counter",
             "Remote cache tier: entries written.");
  out.sample("flowc_remote_cache_uploads_total", {}, configured ? c.uploads() : 0);
  out.family("flowc_remote_cache_bytes_total", "counter",
             "Remote cache tier: bytes uploaded and downloaded.");
  out.sample("flowc_remote_cache_bytes_total", {{"direction", "upload"}},
             configured ? c.bytes_uploaded() : 0);
  out.sample("flowc_remote_cache_bytes_total", {{"direction", "download"}},
             configured ? c.bytes_downloaded() : 0);
  out.family("flowc_remote_cache_errors_total", "counter",
             "Remote cache tier: failed requests.");
  out.sample("flowc_remote_cache_errors_total", {}, configured ? c.errors() : 0);
  response.set_content(out.text(), "text/plain; version=0.0.4; charset=utf-8");
}

void WebFront::State::models(httplib::Response &response) {
  auto index = context.cache->lookupAction(
      cache::ActionKind::Artifact, cache::modelIndexKey(), cache::Cache::CountLookup::No);
  if (!index)
    return sendError(response, 500, index.status().message());
  json models = json::array();
  if (*index)
    if (auto blob = context.cache->get(**index)) {
      json parsed = json::parse(blob->bytes(), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object() && parsed.contains("models") && parsed["models"].is_array())
        models = parsed["models"];
    }
  json listed = json::array();
  for (json &line : models) {
    if (!line.is_object())
      continue;
    auto artifact = cache::Digest::parse(line.value("artifact", ""));
    line["present"] = artifact && context.cache->contains(*artifact);
    listed.push_back(std::move(line));
  }
  sendJson(response, {{"models", listed}});
}

Expected<json> WebFront::State::modelView(const std::string &digest) {
  auto parsed = cache::Digest::parse(digest);
  if (!parsed)
    return invalidArgument("'" + digest + "' is not a model digest");
  auto entry = context.cache->lookupAction(cache::ActionKind::Artifact,
                                           cache::modelViewKey(*parsed),
                                           cache::Cache::CountLookup::No);
  if (!entry)
    return entry.status();
  if (!*entry)
    return notFound("no model " + digest +
                    " has been compiled into this cache (or its view was evicted): "
                    "submit it to see its graph");
  FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle blob, context.cache->get(**entry));
  json view = json::parse(blob.bytes(), nullptr, /*allow_exceptions=*/false);
  if (!view.is_object() || view.value("format", "") != cache::kModelViewFormat)
    return dataLoss("the model view of " + digest + " is damaged");
  return view;
}

static int httpStatusOf(const Status &status) {
  switch (status.code()) {
  case StatusCode::InvalidArgument:
    return 400;
  case StatusCode::NotFound:
    return 404;
  case StatusCode::ResourceExhausted:
    return 413;
  case StatusCode::Unavailable:
    return 503;
  default:
    return 500;
  }
}

void WebFront::State::model(const std::string &digest, httplib::Response &response) {
  Expected<json> view = modelView(digest);
  if (!view)
    return sendError(response, httpStatusOf(view.status()), view.status().message());
  // Which of the compile's entries the cache still holds.
  uint64_t present = 0;
  for (json &entry : (*view)["entries"]) {
    auto blob = cache::Digest::parse(entry.value("blob", ""));
    entry["bytes"] = blob ? blob->size : 0;
    entry["present"] = blob && context.cache->contains(*blob);
    if (entry["present"].get<bool>())
      present += blob->size;
  }
  (*view)["present_bytes"] = present;
  sendJson(response, *view);
}

void WebFront::State::graph(const std::string &digest, const std::set<std::string> &open,
                            httplib::Response &response) {
  std::string key = digest;
  for (const std::string &id : open)
    key += "\n" + id;
  {
    std::lock_guard lock(drawingsMutex);
    for (const auto &[drawn, svg] : drawings)
      if (drawn == key) {
        response.set_content(svg, kSvgType);
        return;
      }
  }
  Expected<json> view = modelView(digest);
  if (!view)
    return sendError(response, httpStatusOf(view.status()), view.status().message());
  Expected<GraphDrawing> drawing = drawGraph(*view, open);
  if (!drawing)
    return sendError(response, httpStatusOf(drawing.status()),
                     drawing.status().message());
  Expected<std::string> svg = renderSvg(*drawing);
  if (!svg)
    return sendError(response, httpStatusOf(svg.status()), svg.status().message());
  {
    std::lock_guard lock(drawingsMutex);
    drawings.emplace_front(key, *svg);
    if (drawings.size() > kKeptDrawings)
      drawings.pop_back();
  }
  response.set_content(*svg, kSvgType);
}

void WebFront::State::routes() {
  server->set_pre_routing_handler([this](const httplib::Request &request,
                                         httplib::Response &response) {
    // Responses go uncompressed: for a client that accepts brotli,
    // cpp-httplib compresses at brotli's slowest quality (440 ms for a
    // 230 KB model view, 20 ms for app.js), which loopback never repays.
    // The request is the server's own object, handed over as const.
    const_cast<httplib::Request &>(request).headers.erase("Accept-Encoding");
    if (!authorized(request)) {
      sendError(response, 401,
                "this page needs the daemon's token: open the URL that `flowc status` "
                "prints, or send 'Authorization: Bearer TOKEN' (the token is in "
                "<cache>/flowcd.http)");
      return httplib::Server::HandlerResponse::Handled;
    }
    // A browser that came with ?token= keeps it in a cookie, so that the
    // pages' own requests need not carry it.
    if (validToken(queryToken(request)))
      response.set_header("Set-Cookie", "flowc_token=" + queryToken(request) +
                                            "; Path=/; HttpOnly; SameSite=Strict" +
                                            (secure ? "; Secure" : ""));
    return httplib::Server::HandlerResponse::Unhandled;
  });
  server->Get("/api/jobs", [this](const httplib::Request &, httplib::Response &response) {
    json jobs = json::array();
    uint64_t change = 0;
    for (const JobSummary &job : context.registry.changedSince(0, change))
      jobs.push_back(summaryJson(job));
    sendJson(response, {{"jobs", jobs}, {"change", change}});
  });
  server->Get(R"(/api/jobs/([^/]+))", [this](const httplib::Request &request,
                                             httplib::Response &response) {
    std::string id = request.matches[1];
    auto info = isJobId(id) ? context.registry.job(id) : std::nullopt;
    auto summary = info ? context.registry.summary(id) : std::nullopt;
    if (!summary)
      return sendError(response, 404,
                       "no job '" + id + "' among the daemon's recent jobs");
    json tasks = json::array();
    for (const flowc::v1::TaskInfo &task : info->tasks())
      tasks.push_back(rpc::taskJson(task));
    json trace = json::parse(context.registry.trace(id).value_or("{}"), nullptr, false);
    sendJson(response, {{"summary", summaryJson(*summary)},
                        {"explain", info->explain()},
                        {"error", info->error()},
                        {"superseded_by", info->superseded_by()},
                        {"tasks", tasks},
                        {"trace", trace.is_discarded() ? json::object() : trace}});
  });
  server->Get("/api/workers",
              [this](const httplib::Request &, httplib::Response &response) {
                flowc::v1::WorkersResponse workers;
                context.describeWorkers(workers);
                sendJson(response, workersJson(workers));
              });
  server->Get("/api/cache", [this](const httplib::Request &,
                                   httplib::Response &response) {
    auto stats = context.cache->stats();
    if (!stats)
      return sendError(response, 500, stats.status().message());
    json points = json::array();
    {
      std::lock_guard lock(historyMutex);
      for (const auto &[ms, hits, misses] : history)
        points.push_back({{"time_ms", ms}, {"hits", hits}, {"misses", misses}});
    }
    points.push_back(
        {{"time_ms", nowMs()}, {"hits", stats->hits}, {"misses", stats->misses}});
    sendJson(response, {{"stats", rpc::cacheStatsJson(
                                      cacheStatsResponse(*stats, context.cache->root()))},
                        {"history", points}});
  });
  server->Get("/api/tuning",
              [this](const httplib::Request &, httplib::Response &response) {
                auto records = context.cache->listTuning();
                if (!records)
                  return sendError(response, 500, records.status().message());
                json out = json::array();
                for (const cache::TuningRecord &record : *records)
                  out.push_back(tuningJson(record));
                sendJson(response, {{"records", out}});
              });
  server->Get("/api/models", [this](const httplib::Request &,
                                    httplib::Response &response) { models(response); });
  server->Get(R"(/api/models/(sha256:[0-9a-f]{64}/[0-9]+))",
              [this](const httplib::Request &request, httplib::Response &response) {
                model(request.matches[1], response);
              });
  server->Get(R"(/api/models/(sha256:[0-9a-f]{64}/[0-9]+)/graph\.svg)",
              [this](const httplib::Request &request, httplib::Response &response) {
                std::set<std::string> open;
                for (size_t i = 0; i < request.get_param_value_count("open"); ++i)
                  open.insert(request.get_param_value("open", i));
                graph(request.matches[1], open, response);
              });
  server->Get("/api/events", [this](const httplib::Request &request,
                                    httplib::Response &response) {
    // ?since=CHANGE (from /api/jobs): only what changed after the list.
    uint64_t since = 0;
    if (request.has_param("since")) {
      std::string text = request.get_param_value("since");
      auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), since);
      if (error != std::errc() || end != text.data() + text.size())
        return sendError(response, 400, "since: not a change number: '" + text + "'");
    }
    events(since, response);
  });
  server->Get("/metrics", [this](const httplib::Request &, httplib::Response &response) {
    metrics(response);
  });
  // Browsers ask for it on every site; the pages have no icon.
  server->Get("/favicon.ico", [](const httplib::Request &, httplib::Response &response) {
    response.status = 204;
  });
  server->Get(R"(/.*)", [](const httplib::Request &request, httplib::Response &response) {
    std::string_view path = request.path == "/" ? "/index.html" : request.path;
    for (const EmbeddedFile &file : webUiFiles())
      if (file.path == path) {
        response.set_content(std::string(file.bytes), contentType(path).c_str());
        return;
      }
    sendError(response, 404, "no page '" + request.path + "'");
  });
}

WebFront::WebFront(std::unique_ptr<State> state) : state_(std::move(state)) {}

WebFront::~WebFront() { stop(); }

const std::string &WebFront::url() const { return state_->url; }

std::string WebFront::urlWithToken() const {
  return state_->url + "?token=" + state_->token;
}

void WebFront::stop() {
  State &state = *state_;
  if (state.stopping.exchange(true))
    return;
  {
    // Under the sampler's lock, so that it cannot miss the wake-up between
    // its check and its wait.
    std::lock_guard lock(state.historyMutex);
  }
  state.sampleWake.notify_all();
  state.server->stop();
  if (state.listener.joinable())
    state.listener.join();
  if (state.sampler.joinable())
    state.sampler.join();
  ::unlink((state.context.options.cacheDir + "/flowcd.http").c_str());
}

/// Writes the URL with its token where the owner's tools find it.
/// Off loopback, the web front is served as the TCP front is: with its
/// TLS certificate (and client CA, if set) and its tokens.
static Expected<std::unique_ptr<httplib::Server>>
tlsServer(const FrontDoorOptions &front, const std::string &address,
          std::vector<TokenEntry> &tokens) {
  std::string what = "--http '" + address + "' is not a loopback address";
  if (front.tlsCert.empty() || front.tlsKey.empty())
    return invalidArgument(what + ": it is served with TLS, and needs the TCP front's "
                                  "--tls-cert FILE and --tls-key FILE");
  if (front.tokensFile.empty())
    return invalidArgument(what + ": a request there presents one of the TCP front's "
                                  "tokens, and needs --tokens FILE");
  FLOWC_ASSIGN_OR_RETURN(tokens, loadTokensFile(front.tokensFile));
  auto server = std::make_unique<httplib::SSLServer>(
      front.tlsCert.c_str(), front.tlsKey.c_str(),
      front.tlsClientCa.empty() ? nullptr : front.tlsClientCa.c_str());
  if (!server->is_valid())
    return invalidArgument(
        "--http '" + address + "': cannot load the TLS certificate '" + front.tlsCert +
        "' and key '" + front.tlsKey + "'" +
        (front.tlsClientCa.empty() ? "" : " or client CA '" + front.tlsClientCa + "'"));
  return std::unique_ptr<httplib::Server>(std::move(server));
}

static Status writeUrlFile(const std::string &path, const std::string &text) {
  std::string temp = path + ".tmp";
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0)
    return errnoStatus(errno, "cannot write '" + temp + "'");
  bool written =
      ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written || ::rename(temp.c_str(), path.c_str()) != 0)
    return errnoStatus(errno, "cannot write '" + path + "'");
  return Status::ok();
}

Expected<std::unique_ptr<WebFront>> WebFront::start(DaemonContext &context,
                                                    const std::string &address) {
  bool automatic = address == "auto";
  bool loopback = automatic || isLoopbackAddress(address);
  std::string host = automatic ? "127.0.0.1" : hostOf(address);
  int port = 0;
  if (!automatic) {
    size_t colon = address.rfind(':');
    char *end = nullptr;
    long parsed = colon == std::string::npos
                      ? -1
                      : std::strtol(address.c_str() + colon + 1, &end, 10);
    if (parsed < 0 || parsed > 65535 || !end || *end)
      return invalidArgument("--http '" + address +
                             "' needs HOST:PORT (PORT 0 to 65535)");
    port = static_cast<int>(parsed);
  }
  std::vector<TokenEntry> tokens;
  FLOWC_ASSIGN_OR_RETURN(std::unique_ptr<httplib::Server> server,
                         loopback
                             ? Expected<std::unique_ptr<httplib::Server>>(
                                   std::make_unique<httplib::Server>())
                             : tlsServer(context.options.frontDoor, address, tokens));
  auto state = std::make_unique<State>(context, std::move(server));
  state->tokens = std::move(tokens);
  state->secure = !loopback;
  FLOWC_ASSIGN_OR_RETURN(state->token, randomToken());
  state->server->new_task_queue = [] { return new httplib::ThreadPool(kServerThreads); };
  state->server->set_keep_alive_max_count(100);
  // cpp-httplib's default adds SO_REUSEPORT, which would let a second
  // daemon of the same user bind a port in use and take half its requests.
  // TCP_NODELAY (inherited by accepted sockets): a response's header and
  // body go as two writes, and Nagle would hold the body for the client's
  // delayed ACK, 40 ms a request.
  state->server->set_socket_options([](socket_t socket) {
    int yes = 1;
    ::setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    ::setsockopt(socket, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
  });
  state->routes();
  int bound = -1;
  if (automatic) {
    for (int candidate = kDefaultPort; candidate < kDefaultPort + 10 && bound < 0;
         ++candidate)
      if (state->server->bind_to_port(host, candidate))
        bound = candidate;
    if (bound < 0)
      bound = state->server->bind_to_any_port(host);
  } else {
    bound = port == 0 ? state->server->bind_to_any_port(host)
                      : (state->server->bind_to_port(host, port) ? port : -1);
  }
  if (bound <= 0)
    return unavailable("cannot serve the web UI on '" + (automatic ? host : address) +
                       "' (port in use?)");
  std::string shownHost = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  state->url = std::string(loopback ? "http" : "https") + "://" + shownHost + ":" +
               std::to_string(bound) + "/";
  // A read-only cache (flowcd --read-only) has no room for it; `flowc
  // status` still prints the URL.
  if (Status written = writeUrlFile(context.options.cacheDir + "/flowcd.http",
                                    state->url + "?token=" + state->token + "\n");
      !written)
    spdlog::warn("web UI: {}; `flowc status` prints its URL", written.message());
  State *raw = state.get();
  state->listener = std::thread([raw] { raw->server->listen_after_bind(); });
  state->sampler = std::thread([raw] { raw->sampleLoop(); });
  spdlog::info("web UI {}", state->url);
  return std::unique_ptr<WebFront>(new WebFront(std::move(state)));
}

} // namespace flowc::daemon
