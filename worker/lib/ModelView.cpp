// The model page's view of a compile (flowc/cache/ModelViews.h): the
// imported graph, node by node with its static cost (Profile.h), the
// kernels and library calls the nodes became, and the cache entries the
// compile made. Written after the artifact is recorded; a view is what the
// page shows, so failing to write one costs the page, never the compile.
#include "flowc/worker/CompileExecutor.h"

#include "KeyFactors.h"
#include "TensorJson.h"

#include "flowc/cache/ModelViews.h"
#include "flowc/compiler/Profile.h"
#include "flowc/runtime/KernelAbi.h"

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

namespace flowc::worker {

namespace {

using cache::Digest;
using nlohmann::json;

/// Models the index keeps, newest first. Each compile rewrites it, and the
/// version it replaces stays a blob until eviction: 64 lines, ~22 KB.
constexpr size_t kIndexedModels = 64;
/// Longest attribute text kept per attribute (a Constant's tensor is not).
constexpr size_t kAttributeChars = 120;
std::string attributeText(const compiler::Attribute &attribute) {
  using Kind = compiler::Attribute::Kind;
  switch (attribute.kind) {
  case Kind::Int:
    return std::to_string(attribute.i);
  case Kind::Float:
    return json(attribute.f).dump();
  case Kind::String:
    return attribute.s;
  case Kind::Ints:
    return json(attribute.ints).dump();
  case Kind::Floats:
    return json(attribute.floats).dump();
  case Kind::Strings:
    return json(attribute.strings).dump(-1, ' ', false, json::error_handler_t::replace);
  case Kind::Tensor:
    return attribute.tensor ? "tensor " + json(attribute.tensor->info.shape).dump()
                            : "tensor";
  case Kind::Graph:
    return attribute.graph
               ? "graph of " + std::to_string(attribute.graph->nodes.size()) + " nodes"
               : "graph";
  case Kind::Other:
    break;
  }
  return "?";
}

json nodesJson(const IngestedModel &ingested) {
  const std::vector<compiler::NodeRecord> &records = ingested.graph.nodes;
  const std::vector<compiler::Node> &sources = ingested.model.nodes;
  json nodes = json::array();
  for (size_t i = 0; i < records.size(); ++i) {
    const compiler::NodeRecord &record = records[i];
    const compiler::Node *source = i < sources.size() ? &sources[i] : nullptr;
    compiler::NodeCost cost = compiler::nodeCost(record, source);
    json node = {{"name", record.name},
                 {"op", record.opType},
                 {"inputs", json::array()},
                 {"outputs", json::array()},
                 {"parameters", record.parameterCount},
                 {"flops", cost.flops},
                 {"bytes", cost.activationBytes},
                 {"estimated", cost.estimated},
                 {"folded", record.folded},
                 {"attributes", json::object()}};
    for (const compiler::TensorInfo &input : record.inputs)
      node["inputs"].push_back(tensorJson(input));
    for (const compiler::TensorInfo &output : record.outputs)
      node["outputs"].push_back(tensorJson(output));
    if (source)
      for (const auto &[name, attribute] : source->attributes)
        node["attributes"][name] = attributeText(attribute).substr(0, kAttributeChars);
    nodes.push_back(std::move(node));
  }
  return nodes;
}

const runtime::TunedKernelSpec *
tunedFor(const std::vector<runtime::TunedKernelSpec> &tuned, int64_t site,
         const std::string &kernel) {
  for (const runtime::TunedKernelSpec &spec : tuned)
    if ((site >= 0 && spec.site == site) || (!kernel.empty() && spec.kernel == kernel))
      return &spec;
  return nullptr;
}

void addTuned(json &kernel, const runtime::TunedKernelSpec *spec) {
  kernel["candidate"] = spec ? spec->candidate : "";
  kernel["measured_ms"] =
      spec && spec->timeNs > 0 ? json(static_cast<double>(spec->timeNs) / 1e6) : json();
}

json kernelsJson(const CompileExecutor::CompiledCode &code) {
  json kernels = json::array();
  for (const compiler::LibrarySite &site : code.weights.librarySites) {
    json kernel = {
        {"name", "site " + std::to_string(site.site)},
        {"library", true},
        {"kind", runtime::kernelKindName(static_cast<runtime::KernelKind>(site.kind))},
        {"site", site.site},
        {"call_sites", 1},
        {"nodes", site.nodes},
        // Library calls are not compiled: the runtime's oneDNN
        // builds them when a session starts.
        {"built", "library"},
        {"compile_seconds", json()}};
    addTuned(kernel, tunedFor(code.tuned, site.site, ""));
    kernels.push_back(std::move(kernel));
  }
  for (size_t i = 0; i < code.weights.loopKernels.size(); ++i) {
    const compiler::LoopKernelSource &source = code.weights.loopKernels[i];
    json kernel = {
        {"name", source.symbol},    {"library", false},
        {"kind", "loop"},           {"call_sites", source.callSites},
        {"nodes", source.nodes},    {"built", code.fromCache ? "code cache" : "compiled"},
        {"compile_seconds", json()}};
    if (i < code.builds.size()) {
      const auto &build = code.builds[i];
      kernel["built"] = build.source;
      if (build.source != "kernel cache")
        kernel["compile_seconds"] = build.seconds;
      kernel["executor"] = build.executor;
    }
    addTuned(kernel, tunedFor(code.tuned, -1, source.symbol));
    kernels.push_back(std::move(kernel));
  }
  return kernels;
}

json entryJson(const char *kind, const Digest &key, const Digest &blob) {
  return {{"kind", kind}, {"key", key.toString()}, {"blob", blob.toString()}};
}

json entriesJson(const IngestedModel &ingested, const Digest &artifactKey,
                 const Digest &artifact, const CompileExecutor::CompiledCode &code,
                 const CompileExecutor::LinkedArtifact &linked) {
  json entries = json::array({entryJson("artifact", artifactKey, artifact),
                              entryJson("code", code.codeKey, code.object),
                              entryJson("code", code.weightsKey, code.weightsBlob)});
  for (const auto &build : code.builds)
    if (build.object.size > 0)
      entries.push_back(entryJson("kernel", build.entry, build.object));
  for (const Digest &derived : linked.derivedWeights)
    entries.push_back({{"kind", "derived"}, {"blob", derived.toString()}});
  for (const Digest &weight : ingested.weightDigests)
    entries.push_back({{"kind", "weight"}, {"blob", weight.toString()}});
  return entries;
}

/// Serializes the read-modify-write of the model index across the
/// processes that compile into one cache (a lock file beside the index).
class IndexLock {
public:
  explicit IndexLock(const std::string &path)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)) {
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~IndexLock() {
    if (fd_ >= 0)
      ::close(fd_);
  }
  IndexLock(const IndexLock &) = delete;
  IndexLock &operator=(const IndexLock &) = delete;
  bool held() const { return fd_ >= 0; }

private:
  int fd_;
};

uint64_t entryBytes(const json &entries) {
  uint64_t bytes = 0;
  std::vector<std::string> seen;
  for (const json &entry : entries) {
    std::string blob = entry.value("blob", "");
    if (std::find(seen.begin(), seen.end(), blob) != seen.end())
      continue;
    seen.push_back(blob);
    if (auto digest = Digest::parse(blob))
      bytes += digest->size;
  }
  return bytes;
}

} // namespace

void CompileExecutor::recordModelView(const IngestedModel &ingested,
                                      const CompileRequest &request,
                                      const Digest &artifactKey, const Digest &artifact,
                                      const CompiledCode *code,
                                      const LinkedArtifact *linked) {
  Digest viewKey = cache::modelViewKey(ingested.modelDigest);
  auto warn = [&](const Status &status) {
    spdlog::warn("model view of {} not recorded: {}", request.modelPath,
                 status.toString());
  };
  // A hit writes a view only where there is none (the compile that made
  // the entries wrote a fuller one).
  if (!code) {
    auto existing = cache_.lookupAction(cache::ActionKind::Artifact, viewKey,
                                        cache::Cache::CountLookup::No);
    if (!existing || *existing)
      return;
  }
  json view = {{"format", cache::kModelViewFormat},
               {"digest", ingested.modelDigest.toString()},
               {"model", modelName(request.modelPath)},
               {"ir", ingested.irDigest.toString()},
               {"options", request.options.canonical()},
               {"compiled_at", static_cast<int64_t>(std::time(nullptr))},
               {"inputs", json::array()},
               {"outputs", json::array()},
               {"parameters", ingested.graph.parameterCount()},
               {"parameter_bytes", ingested.graph.parameterBytes()},
               {"nodes", nodesJson(ingested)},
               {"kernels", code ? kernelsJson(*code) : json::array()},
               {"code", !code             ? "artifact cache hit"
                        : code->fromCache ? "code cache hit"
                                          : "compiled"}};
  for (const auto &input : ingested.graph.inputs)
    view["inputs"].push_back(tensorJson(input));
  for (const auto &output : ingested.graph.outputs)
    view["outputs"].push_back(tensorJson(output));
  uint64_t flops = 0;
  for (const json &node : view["nodes"])
    flops += node["flops"].get<uint64_t>();
  view["flops"] = flops;
  view["entries"] = code && linked
                        ? entriesJson(ingested, artifactKey, artifact, *code, *linked)
                        : json::array({entryJson("artifact", artifactKey, artifact)});
  // Node -> kernels, so that a reader need not invert the kernels' lists.
  for (size_t k = 0; k < view["kernels"].size(); ++k)
    for (int32_t node : view["kernels"][k]["nodes"].get<std::vector<int32_t>>())
      if (node >= 0 && static_cast<size_t>(node) < view["nodes"].size())
        view["nodes"][node]["kernels"].push_back(k);

  // Names are the model's bytes: never let bad UTF-8 throw.
  auto blob = cache_.put(view.dump(-1, ' ', false, json::error_handler_t::replace));
  if (!blob)
    return warn(blob.status());
  if (Status status = cache_.recordAction(cache::ActionKind::Artifact, viewKey, *blob);
      !status.isOk())
    return warn(status);

  // The index: this model first, then the others as they were.
  IndexLock lock(cache_.root() + "/tmp/models.lock");
  if (!lock.held())
    return warn(Status(StatusCode::Unavailable, "cannot lock the model index"));
  Digest indexKey = cache::modelIndexKey();
  json models = json::array();
  if (auto index = cache_.lookupAction(cache::ActionKind::Artifact, indexKey,
                                       cache::Cache::CountLookup::No);
      index && *index)
    if (auto old = cache_.get(**index)) {
      json parsed = json::parse(old->bytes(), nullptr, /*allow_exceptions=*/false);
      if (parsed.is_object() && parsed.contains("models") && parsed["models"].is_array())
        models = parsed["models"];
    }
  json line = {{"digest", view["digest"]},
               {"model", view["model"]},
               {"options", view["options"]},
               {"compiled_at", view["compiled_at"]},
               {"nodes", view["nodes"].size()},
               {"flops", flops},
               {"parameter_bytes", view["parameter_bytes"]},
               {"artifact", artifact.toString()},
               {"bytes", entryBytes(view["entries"])}};
  json kept = json::array({line});
  for (const json &model : models)
    if (kept.size() < kIndexedModels && model.is_object() &&
        model.value("digest", "") != line["digest"])
      kept.push_back(model);
  json index = {{"format", cache::kModelIndexFormat}, {"models", kept}};
  auto indexBlob = cache_.put(index.dump(-1, ' ', false, json::error_handler_t::replace));
  if (!indexBlob)
    return warn(indexBlob.status());
  if (Status status =
          cache_.recordAction(cache::ActionKind::Artifact, indexKey, *indexBlob);
      !status.isOk())
    warn(status);
}

} // namespace flowc::worker
