#include "flowc/worker/CompileExecutor.h"

#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/BuildInfo.h"
#include "flowc/runtime/PackedWeights.h"
#include "flowc/worker/Reproducer.h"
#include "flowc/worker/Tasks.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <unistd.h>

namespace flowc::worker {

namespace {

using cache::Digest;
using nlohmann::json;

json tensorJson(const compiler::TensorInfo &info) {
  return {{"name", info.name},
          {"dtype", compiler::dtypeName(info.dtype)},
          {"shape", info.shape}};
}

runtime::TensorSpec tensorSpec(const compiler::TensorInfo &info) {
  return {info.name, compiler::dtypeName(info.dtype), info.shape};
}

/// The kernel cache: objects of partitioned kernels as blobs, found by a
/// digest of the build and the compiler's kernel key. Every model and option
/// set whose kernels lower alike shares them. A cache that cannot answer
/// means a compile, never a failed job.
class CasKernelCache final : public compiler::KernelObjectCache {
public:
  CasKernelCache(cache::Cache &cache, const std::string &buildId)
      : cache_(cache), buildId_(buildId) {}

  std::optional<std::string> lookup(const std::string &key) override {
    auto action = cache_.lookupAction(cache::ActionKind::Kernel, actionKey(key));
    if (!action) {
      spdlog::warn("kernel cache lookup failed: {}", action.status().toString());
      return std::nullopt;
    }
    if (!*action)
      return std::nullopt;
    auto blob = cache_.get(**action);
    if (!blob)
      return std::nullopt;
    return std::string(blob->bytes());
  }

  void store(const std::string &key, const std::string &object) override {
    auto digest = cache_.put(object);
    if (!digest) {
      spdlog::warn("kernel cache store failed: {}", digest.status().toString());
      return;
    }
    record(key, *digest);
  }

  /// Records `object`, already a blob, as the object of `key`.
  void record(const std::string &key, const Digest &object) {
    Status status =
        cache_.recordAction(cache::ActionKind::Kernel, actionKey(key), object);
    if (!status.isOk())
      spdlog::warn("kernel cache store failed: {}", status.toString());
  }

private:
  Digest actionKey(const std::string &key) const {
    return cache::digestOf("flowc.kernel.v1\n" + buildId_ + "\n" + key);
  }

  cache::Cache &cache_;
  const std::string &buildId_;
};

std::vector<std::string_view> weightViews(const compiler::ImportedGraph &graph) {
  std::vector<std::string_view> views;
  for (const compiler::WeightRef &weight : graph.weights)
    views.push_back(weight.bytes);
  return views;
}

} // namespace

Expected<IngestedModel> ingestModel(const std::string &path,
                                    const compiler::InputShapes &inputShapes) {
  IngestedModel ingested;
  if (isReproducerPath(path)) {
    if (!inputShapes.empty())
      return invalidArgument(path + ": a reproducer's shapes are fixed; --input-shape "
                                    "applies to ONNX models");
    // Weights generated from seeds; hashed below like any others.
    FLOWC_ASSIGN_OR_RETURN(LoadedReproducer reproducer, loadReproducer(path));
    ingested.model = std::move(reproducer.model);
    ingested.graph = std::move(reproducer.graph);
  } else {
    FLOWC_ASSIGN_OR_RETURN(ingested.model, compiler::loadOnnxModel(path));
    FLOWC_RETURN_IF_ERROR(compiler::bindInputShapes(ingested.model, inputShapes));
    FLOWC_ASSIGN_OR_RETURN(ingested.graph, compiler::importOnnx(ingested.model));
  }
  ingested.irDigest = cache::digestOf(ingested.graph.irBytecode);
  json manifest = {{"format", "flowc.manifest.v1"}, {"ir", ingested.irDigest.toString()}};
  manifest["inputs"] = json::array();
  manifest["outputs"] = json::array();
  manifest["weights"] = json::array();
  for (const auto &input : ingested.graph.inputs)
    manifest["inputs"].push_back(tensorJson(input));
  for (const auto &output : ingested.graph.outputs)
    manifest["outputs"].push_back(tensorJson(output));
  ingested.weightDigests = cache::digestMany(weightViews(ingested.graph));
  for (size_t i = 0; i < ingested.graph.weights.size(); ++i) {
    const compiler::WeightRef &weight = ingested.graph.weights[i];
    json entry = tensorJson(weight.info);
    entry["name"] = weight.key;
    entry["digest"] = ingested.weightDigests[i].toString();
    manifest["weights"].push_back(entry);
  }
  manifest["op_counts"] = ingested.graph.opCounts;
  ingested.manifest = manifest.dump();
  ingested.modelDigest = cache::digestOf(ingested.manifest);
  return ingested;
}

namespace {
/// "flowc.artifact.v2": the artifact format these keys and metadata name.
std::string artifactFormat() {
  return "flowc.artifact.v" + std::to_string(runtime::kArtifactVersion);
}
} // namespace

Digest CompileExecutor::artifactKey(const Digest &modelDigest,
                                    const compiler::CompileOptions &options,
                                    ArtifactKind kind) const {
  // The format version is part of the key: a runtime that reads only the
  // new format must never be served a cached artifact of the old one.
  return cache::digestOf(artifactFormat() + "\n" + buildId_ + "\n" +
                         compiler::hostTargetDescription() + "\n" + options.canonical() +
                         "\n" + modelDigest.toString() +
                         (kind == ArtifactKind::Thin ? "\nthin" : ""));
}

bool CompileExecutor::servable(const Digest &artifact) {
  Status unmodified = cache_.checkUnmodified(artifact);
  if (!unmodified)
    spdlog::warn("not serving artifact={}: {}", artifact.toString(),
                 unmodified.message());
  return unmodified.isOk();
}

Expected<std::optional<CompileResult>>
CompileExecutor::memoizedResult(const cache::FileIdentity &file,
                                const CompileRequest &request) {
  const compiler::CompileOptions &options = request.options;
  using Result = std::optional<CompileResult>;
  if (isReproducerPath(file.path))
    return Result();
  FLOWC_ASSIGN_OR_RETURN(auto modelDigest,
                         cache_.lookupStat(file, memoPurpose(request.inputShapes)));
  if (!modelDigest)
    return Result();
  // The manifest first: without it the lookup below would count a hit that
  // this path cannot answer.
  auto manifest = cache_.get(*modelDigest);
  if (!manifest)
    return Result();
  FLOWC_ASSIGN_OR_RETURN(
      auto artifact,
      cache_.lookupAction(cache::ActionKind::Artifact,
                          artifactKey(*modelDigest, options, request.kind)));
  if (!artifact || !servable(*artifact))
    return Result();
  CompileResult result;
  result.modelDigest = *modelDigest;
  result.artifactDigest = *artifact;
  result.cacheHit = result.codeCacheHit = true;
  auto parsed = json::parse(manifest->bytes(), nullptr, /*allow_exceptions=*/false);
  if (parsed.is_object() && parsed.contains("op_counts"))
    result.opCounts = parsed["op_counts"].get<std::map<std::string, int>>();
  return Result(std::move(result));
}

Status CompileExecutor::recordMemo(const cache::FileIdentity &file,
                                   const IngestedModel &ingested,
                                   const compiler::InputShapes &shapes) {
  // A directory's stat does not change when a file in it is rewritten in
  // place, so a reproducer is always read (it is small; its weights are
  // generated, not read).
  if (isReproducerPath(file.path))
    return Status::ok();
  // The weights in external data files are part of the digest: each file
  // is recorded with the identity of the descriptor that was mapped, so a
  // rewrite of one (even one made while it was read) is a miss.
  std::vector<cache::FileIdentity> inputs;
  for (const auto &[path, external] : ingested.model.externalFiles)
    inputs.push_back(cache::FileIdentity::from(path, external.identity));
  return cache_.recordStat(file, memoPurpose(shapes), ingested.modelDigest, inputs);
}

Expected<std::optional<CompileResult>>
CompileExecutor::cachedResult(const CompileRequest &request) {
  auto start = std::chrono::steady_clock::now();
  if (!request.options.printIrAfter.empty())
    return std::optional<CompileResult>();
  FLOWC_ASSIGN_OR_RETURN(cache::FileIdentity file,
                         cache::FileIdentity::of(request.modelPath));
  FLOWC_ASSIGN_OR_RETURN(auto memoized, memoizedResult(file, request));
  if (memoized)
    memoized->seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return memoized;
}

Expected<CompileResult> CompileExecutor::compile(const CompileRequest &request,
                                                 const ProgressFn &progress) {
  auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  };
  FLOWC_RETURN_IF_ERROR(request.options.validate());
  // Refused before any work: the library kernels it asks for do not exist
  // on this CPU, and a whole compile would fail only at link.
  if (request.options.precision == "bf16")
    FLOWC_RETURN_IF_ERROR(runtime::bf16KernelsSupported());
  // The identity is taken before the file is read, so that a change while
  // reading is detected when the memo is recorded.
  FLOWC_ASSIGN_OR_RETURN(cache::FileIdentity file,
                         cache::FileIdentity::of(request.modelPath));
  // Printing IR means compiling: no cached answer has it.
  bool printsIr = !request.options.printIrAfter.empty();
  FLOWC_ASSIGN_OR_RETURN(auto memoized, memoizedResult(file, request));
  if (memoized && !printsIr) {
    memoized->seconds = elapsed();
    progress("cache", "hit " + memoized->artifactDigest.toString() + " (file unchanged)");
    return *memoized;
  }
  progress("ingest", request.modelPath);
  FLOWC_ASSIGN_OR_RETURN(IngestedModel ingested,
                         ingestModel(request.modelPath, request.inputShapes));

  CompileResult result;
  result.modelDigest = ingested.modelDigest;
  result.opCounts = ingested.graph.opCounts;
  Digest key = artifactKey(ingested.modelDigest, request.options, request.kind);
  FLOWC_ASSIGN_OR_RETURN(auto cached,
                         cache_.lookupAction(cache::ActionKind::Artifact, key));
  if (cached && cache_.contains(ingested.modelDigest) && !printsIr && servable(*cached)) {
    FLOWC_RETURN_IF_ERROR(recordMemo(file, ingested, request.inputShapes));
    result.artifactDigest = *cached;
    result.cacheHit = result.codeCacheHit = true;
    result.seconds = elapsed();
    progress("cache", "hit " + cached->toString());
    return result;
  }

  // A read-only cache answers hits only (it was opened so on purpose).
  if (cache_.readOnly())
    return unavailable("the cache '" + cache_.root() +
                       "' is read-only (--read-only); cannot compile " +
                       request.modelPath + " (not cached)");
  // Only now, with the model known to be valid, does the cache change:
  // weights, IR and manifest become blobs, pinned until the job ends.
  cache::PinGuard pins = cache_.pinGuard();
  progress("store", std::to_string(ingested.graph.weights.size()) + " weights");
  // putMany hashes again while storing: the model file may have changed
  // since it was read, and the cache stores only what it verified.
  FLOWC_ASSIGN_OR_RETURN(std::vector<Digest> stored,
                         cache_.putMany(weightViews(ingested.graph)));
  for (size_t i = 0; i < stored.size(); ++i) {
    if (!(stored[i] == ingested.weightDigests[i]))
      return dataLoss(request.modelPath + ": weight '" + ingested.graph.weights[i].key +
                      "' changed while it was read");
    pins.add(stored[i]);
  }
  FLOWC_ASSIGN_OR_RETURN(Digest ir, cache_.put(ingested.graph.irBytecode));
  pins.add(ir);
  FLOWC_ASSIGN_OR_RETURN(Digest manifest, cache_.put(ingested.manifest));
  pins.add(manifest);

  FLOWC_ASSIGN_OR_RETURN(CompiledCode code, codeFor(ingested, request.options, progress,
                                                    result.codeCacheHit));
  pins.add(code.object);
  result.kernelsCompiled = code.kernelsCompiled;
  result.kernelsReused = code.kernelsReused;
  progress("link", "artifact");
  FLOWC_ASSIGN_OR_RETURN(LinkedArtifact linked,
                         linkArtifact(ingested, request, code, pins, progress));
  result.artifactDigest = linked.digest;
  pins.add(result.artifactDigest);
  std::vector<Digest> deps = std::move(linked.externalWeights);
  deps.push_back(manifest);
  FLOWC_RETURN_IF_ERROR(
      cache_.recordAction(cache::ActionKind::Artifact, key, result.artifactDigest, deps));
  FLOWC_RETURN_IF_ERROR(recordMemo(file, ingested, request.inputShapes));
  // Over the size cap, least-recently-used blobs go; this job's are pinned.
  if (eviction_ == Eviction::AfterCompile)
    if (auto gc = cache_.enforceLimit(); !gc)
      spdlog::warn("cache eviction failed: {}", gc.status().toString());
  result.seconds = elapsed();
  return result;
}

Expected<CompileExecutor::CompiledCode>
CompileExecutor::codeFor(const IngestedModel &ingested,
                         const compiler::CompileOptions &options,
                         const ProgressFn &progress, bool &hit) {
  // Weight metadata, never contents: a fine-tune that keeps every shape
  // reuses the code and only re-links.
  std::string key = "flowc.code.v1\n" + buildId_ + "\n" +
                    compiler::hostTargetDescription() + "\n" + options.canonical() +
                    "\n" + ingested.irDigest.toString() + "\n";
  for (const compiler::WeightRef &weight : ingested.graph.weights)
    key += weight.key + ":" + compiler::dtypeName(weight.info.dtype) + ":" +
           json(weight.info.shape).dump() + "\n";
  Digest codeKey = cache::digestOf(key);
  Digest weightsKey = cache::digestOf(key + "weights\n");
  FLOWC_ASSIGN_OR_RETURN(auto cached,
                         cache_.lookupAction(cache::ActionKind::Code, codeKey));
  // The weight list belongs to the same answer: one lookup in the figures.
  FLOWC_ASSIGN_OR_RETURN(auto cachedWeights,
                         cache_.lookupAction(cache::ActionKind::Code, weightsKey,
                                             cache::Cache::CountLookup::No));
  if (cached && cachedWeights && options.printIrAfter.empty()) {
    auto blob = cache_.get(*cachedWeights);
    std::optional<compiler::CodeWeights> weights;
    if (blob)
      weights = parseCodeWeights(blob->bytes());
    if (weights) {
      hit = true;
      progress("codegen", "code cache hit " + cached->toString());
      return CompiledCode{*cached, std::move(*weights)};
    }
  }
  hit = false;
  // Printing IR shows every pass on every kernel: one in-process compile.
  FLOWC_ASSIGN_OR_RETURN(CompiledCode compiled,
                         options.printIrAfter.empty()
                             ? codeFromTasks(ingested, options, progress)
                             : printedCode(ingested, options, progress));
  FLOWC_ASSIGN_OR_RETURN(Digest weights, cache_.put(codeWeightsText(compiled.weights)));
  FLOWC_RETURN_IF_ERROR(
      cache_.recordAction(cache::ActionKind::Code, codeKey, compiled.object));
  FLOWC_RETURN_IF_ERROR(
      cache_.recordAction(cache::ActionKind::Code, weightsKey, weights));
  return compiled;
}

namespace {

std::string kernelSummary(int calls, size_t distinct, size_t compiled) {
  return std::to_string(calls) + " loop nests, " + std::to_string(distinct) +
         " distinct kernels (" + std::to_string(compiled) + " compiled, " +
         std::to_string(distinct - compiled) + " cached)";
}

/// "12 local, 3 remote bot-2": where a job's tasks ran, for its progress.
std::string executorSummary(const std::vector<Expected<TaskOutcome>> &outcomes) {
  std::map<std::string, int> counts;
  for (const auto &outcome : outcomes)
    if (outcome)
      ++counts[outcome->executor.substr(0, outcome->executor.find(" pid "))];
  std::string text;
  for (const auto &[executor, count] : counts)
    text += (text.empty() ? "" : ", ") + std::to_string(count) + " " + executor;
  return text;
}

} // namespace

TaskRunner &CompileExecutor::runner() {
  if (runner_)
    return *runner_;
  std::call_once(ownRunnerOnce_, [this] {
    ownRunner_ = std::make_unique<InProcessTaskRunner>(
        cache_, buildId_, std::max(1u, std::thread::hardware_concurrency()));
  });
  return *ownRunner_;
}

Expected<CompileExecutor::CompiledCode>
CompileExecutor::codeFromTasks(const IngestedModel &ingested,
                               const compiler::CompileOptions &options,
                               const ProgressFn &progress) {
  const compiler::CodeTarget &target = compiler::CodeTarget::host();
  progress("plan", "graph passes and partition for " + target.cpu);
  FLOWC_ASSIGN_OR_RETURN(
      Task planTask, makePlanTask(cache_, ingested.irDigest, options, target, buildId_));
  auto planned = std::move(runner().run({planTask}).front());
  if (!planned)
    return planned.status();
  FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle planBlob, cache_.get(planned->outputs[0]));
  FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle graphBlob, cache_.get(planned->outputs[1]));
  FLOWC_ASSIGN_OR_RETURN(
      compiler::CompilePlan plan,
      parsePlanOutput(planBlob.bytes(), std::string(graphBlob.bytes())));

  // The kernel cache first: only the kernels it misses become tasks.
  CasKernelCache kernelCache(cache_, buildId_);
  std::vector<std::string> objects(plan.kernels.size());
  std::vector<size_t> missing;
  std::vector<Task> tasks;
  int calls = 0;
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    calls += plan.kernels[i].callSites;
    if (std::optional<std::string> object = kernelCache.lookup(plan.kernels[i].key)) {
      objects[i] = std::move(*object);
      continue;
    }
    FLOWC_ASSIGN_OR_RETURN(
        Task task, makeCodegenTask(cache_, plan.kernels[i], options, target, buildId_));
    missing.push_back(i);
    tasks.push_back(std::move(task));
  }
  std::vector<Expected<TaskOutcome>> outcomes = runner().run(tasks);
  for (size_t m = 0; m < missing.size(); ++m) {
    if (!outcomes[m])
      return outcomes[m].status();
    FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle object, cache_.get(outcomes[m]->outputs[0]));
    objects[missing[m]] = std::string(object.bytes());
    kernelCache.record(plan.kernels[missing[m]].key, object.digest());
  }
  if (!plan.kernels.empty())
    progress("kernels",
             kernelSummary(calls, plan.kernels.size(), missing.size()) +
                 (tasks.empty() ? "" : "; tasks: " + executorSummary(outcomes)));
  FLOWC_ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::create(cache_, "compile"));
  FLOWC_ASSIGN_OR_RETURN(std::string library,
                         compiler::linkSharedObject(plan, objects, scratch.path()));
  CompiledCode compiled;
  compiled.weights = std::move(plan.weights);
  compiled.kernelsCompiled = static_cast<unsigned>(missing.size());
  compiled.kernelsReused = static_cast<unsigned>(plan.kernels.size() - missing.size());
  FLOWC_ASSIGN_OR_RETURN(compiled.object, cache_.put(library));
  return compiled;
}

Expected<CompileExecutor::CompiledCode>
CompileExecutor::printedCode(const IngestedModel &ingested,
                             const compiler::CompileOptions &options,
                             const ProgressFn &progress) {
  progress("codegen", "lowering TOSA -> linalg -> LLVM for " + options.target);
  FLOWC_ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::create(cache_, "compile"));
  compiler::CompileReport report;
  FLOWC_ASSIGN_OR_RETURN(std::string object, compiler::compileToSharedObject(
                                                 ingested.graph.irBytecode, options,
                                                 scratch.path(), &report));
  if (report.loopKernelCalls > 0)
    progress("kernels", kernelSummary(report.loopKernelCalls, report.loopKernels,
                                      report.loopKernels));
  // The IR goes back as progress events of at most 1 MiB each.
  constexpr size_t kIrChunk = 1 << 20;
  for (size_t offset = 0; offset < report.printedIr.size(); offset += kIrChunk)
    progress("ir", report.printedIr.substr(offset, kIrChunk));
  CompiledCode compiled;
  compiled.weights = std::move(report.weights);
  compiled.kernelsCompiled = report.loopKernels;
  FLOWC_ASSIGN_OR_RETURN(compiled.object, cache_.put(object));
  return compiled;
}

Expected<std::optional<cache::BlobHandle>>
CompileExecutor::cachedDerivation(const Digest &key, cache::PinGuard &pins) {
  FLOWC_ASSIGN_OR_RETURN(auto cached,
                         cache_.lookupAction(cache::ActionKind::DerivedWeight, key));
  if (!cached)
    return std::optional<cache::BlobHandle>();
  // A blob that cannot be read is a miss: the caller derives it again.
  auto blob = cache_.get(*cached);
  if (!blob)
    return std::optional<cache::BlobHandle>();
  pins.add(*cached);
  return std::optional<cache::BlobHandle>(std::move(*blob));
}

Expected<cache::BlobHandle> CompileExecutor::storeDerivation(const Digest &key,
                                                             std::string_view bytes,
                                                             cache::PinGuard &pins) {
  FLOWC_ASSIGN_OR_RETURN(Digest digest, cache_.put(bytes));
  pins.add(digest);
  FLOWC_RETURN_IF_ERROR(
      cache_.recordAction(cache::ActionKind::DerivedWeight, key, digest));
  return cache_.get(digest);
}

Expected<cache::BlobHandle>
CompileExecutor::derivedWeight(const IngestedModel &ingested,
                               const compiler::DerivedWeight &weight,
                               cache::PinGuard &pins, int &computed) {
  // The recipe and the sources' contents decide the result (and the build
  // that evaluates it): a fine-tune recomputes, another option set reuses.
  std::string key = "flowc.derived.v1\n" + buildId_ + "\n" + weight.recipe + "\n";
  std::vector<Digest> sourceDigests;
  for (const std::string &input : weight.inputs) {
    std::optional<size_t> index = ingested.graph.weightIndex(input);
    if (!index)
      return internalError("derived weight '" + weight.key + "' reads weight '" + input +
                           "', which the model does not have");
    sourceDigests.push_back(ingested.weightDigests[*index]);
    key += sourceDigests.back().toString() + "\n";
  }
  Digest actionKey = cache::digestOf(key);
  FLOWC_ASSIGN_OR_RETURN(auto cached, cachedDerivation(actionKey, pins));
  if (cached)
    return std::move(*cached);
  // A miss: only now are the sources mapped.
  std::vector<cache::BlobHandle> sources;
  std::vector<std::string_view> views;
  for (const Digest &digest : sourceDigests) {
    FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle blob, cache_.get(digest));
    views.push_back(blob.bytes());
    sources.push_back(std::move(blob));
  }
  FLOWC_ASSIGN_OR_RETURN(std::string bytes,
                         compiler::evaluateDerivedWeight(weight, views));
  ++computed;
  return storeDerivation(actionKey, bytes, pins);
}

Expected<std::optional<CompileExecutor::PackedBlob>>
CompileExecutor::packedWeight(const compiler::KernelWeight &weight,
                              const cache::BlobHandle &source, cache::PinGuard &pins,
                              int &computed) {
  // The layout depends on the kernel, the CPU and the library build; the
  // bytes on the source's contents too.
  std::string key = "flowc.packed.v1\n" + buildId_ + "\n" +
                    compiler::hostTargetDescription() + "\n" +
                    json({weight.kind, weight.buffer, weight.params}).dump() + "\n" +
                    source.digest().toString() + "\n";
  Digest bytesKey = cache::digestOf(key), layoutKey = cache::digestOf(key + "layout\n");
  FLOWC_ASSIGN_OR_RETURN(auto layout, cachedDerivation(layoutKey, pins));
  if (layout) {
    // An empty layout records that the kernel reads the weight as it is.
    if (layout->bytes().empty())
      return std::optional<PackedBlob>();
    FLOWC_ASSIGN_OR_RETURN(auto bytes, cachedDerivation(bytesKey, pins));
    if (bytes)
      return std::optional<PackedBlob>(
          PackedBlob{std::string(layout->bytes()), std::move(*bytes)});
  }
  FLOWC_ASSIGN_OR_RETURN(
      std::optional<runtime::PackedWeight> packed,
      runtime::packKernelWeight(static_cast<runtime::KernelKind>(weight.kind),
                                weight.params, weight.buffer, source.bytes()));
  // The source was read whole: its pages go, so linking a model costs no
  // resident memory per weight byte (the artifact writer does the same).
  MappedFile::releasePages(source.bytes());
  FLOWC_RETURN_IF_ERROR(
      storeDerivation(layoutKey, packed ? packed->layout : "", pins).status());
  if (!packed)
    return std::optional<PackedBlob>();
  FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle blob,
                         storeDerivation(bytesKey, packed->bytes, pins));
  ++computed;
  return std::optional<PackedBlob>(
      PackedBlob{std::move(packed->layout), std::move(blob)});
}

Expected<CompileExecutor::LinkedArtifact>
CompileExecutor::linkArtifact(const IngestedModel &ingested,
                              const CompileRequest &request, const CompiledCode &code,
                              cache::PinGuard &pins, const ProgressFn &progress) {
  const compiler::CompileOptions &options = request.options;
  const compiler::ImportedGraph &graph = ingested.graph;
  runtime::Plan plan;
  plan.entry = compiler::kEntrySymbol;
  for (const auto &input : graph.inputs)
    plan.inputs.push_back(tensorSpec(input));
  for (const auto &output : graph.outputs)
    plan.outputs.push_back(tensorSpec(output));

  // Weights are copied from their CAS blobs (one mapping each, no heap
  // copy), in the order the code binds them.
  std::vector<cache::BlobHandle> blobs;
  std::vector<std::string_view> pieces;
  std::vector<runtime::WeightSpec> specs;
  int computed = 0;
  for (const std::string &key : code.weights.keys) {
    runtime::WeightSpec spec;
    auto source = [&]() -> Expected<cache::BlobHandle> {
      if (const compiler::DerivedWeight *derived = code.weights.findDerived(key)) {
        spec.tensor = tensorSpec(derived->info);
        return derivedWeight(ingested, *derived, pins, computed);
      }
      std::optional<size_t> index = graph.weightIndex(key);
      if (!index)
        return internalError("the code binds weight '" + key +
                             "', which the model does not have");
      spec.tensor = tensorSpec(graph.weights[*index].info);
      return cache_.get(ingested.weightDigests[*index]);
    };
    FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle blob, source());
    spec.tensor.name = key;
    spec.digest = blob.digest().toString();
    spec.size = blob.bytes().size();
    pieces.push_back(blob.bytes());
    specs.push_back(std::move(spec));
    blobs.push_back(std::move(blob));
  }
  if (!code.weights.derived.empty())
    progress("derive",
             std::to_string(code.weights.derived.size()) + " derived weights (" +
                 std::to_string(computed) + " computed, " +
                 std::to_string(code.weights.derived.size() - computed) + " cached)");
  // The library kernels' constant weights in the layouts their kernels
  // read on this CPU, after the bound weights: sessions map them in place.
  std::vector<runtime::PackedWeightSpec> packedSpecs;
  int packedComputed = 0;
  for (const compiler::KernelWeight &weight : code.weights.kernelWeights) {
    auto bound =
        std::find(code.weights.keys.begin(), code.weights.keys.end(), weight.key);
    if (bound == code.weights.keys.end())
      return internalError("kernel site " + std::to_string(weight.site) +
                           " reads weight '" + weight.key +
                           "', which the code does not bind");
    FLOWC_ASSIGN_OR_RETURN(std::optional<PackedBlob> packed,
                           packedWeight(weight, blobs[bound - code.weights.keys.begin()],
                                        pins, packedComputed));
    if (!packed)
      continue;
    packedSpecs.push_back({weight.site, weight.buffer, std::move(packed->layout),
                           packed->blob.digest().toString(), 0,
                           packed->blob.bytes().size()});
    pieces.push_back(packed->blob.bytes());
    blobs.push_back(std::move(packed->blob));
  }
  if (!packedSpecs.empty())
    progress("pack", std::to_string(packedSpecs.size()) +
                         " kernel weights in the library's layouts (" +
                         std::to_string(packedComputed) + " packed, " +
                         std::to_string(packedSpecs.size() - packedComputed) +
                         " cached)");
  FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle codeBlob, cache_.get(code.object));

  json metadata = {{"format", artifactFormat()},
                   {"model", ingested.model.path},
                   {"model_digest", ingested.modelDigest.toString()},
                   {"ir_digest", ingested.irDigest.toString()},
                   {"code_digest", code.object.toString()},
                   {"compiler", buildId_},
                   {"target", options.target},
                   {"target_description", compiler::hostTargetDescription()},
                   {"options", options.canonical()},
                   {"op_counts", graph.opCounts},
                   {"parameters", graph.parameterCount()},
                   {"parameter_bytes", graph.parameterBytes()},
                   {"opset", ingested.model.opsetVersion},
                   {"thin", request.kind == ArtifactKind::Thin}};
  // Where a thin artifact's weights are found when it runs.
  if (request.kind == ArtifactKind::Thin)
    metadata["weights_cache"] = cache_.root();

  FLOWC_ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::create(cache_, "compile"));
  std::string path = scratch.path() + "/artifact.fca";
  FLOWC_ASSIGN_OR_RETURN(auto writer, runtime::ArtifactWriter::create(path));
  FLOWC_RETURN_IF_ERROR(
      writer->addSection(runtime::SectionKind::Metadata, metadata.dump(2)));
  FLOWC_RETURN_IF_ERROR(
      writer->addSection(runtime::SectionKind::GraphIr, graph.irBytecode));
  FLOWC_RETURN_IF_ERROR(writer->addSection(runtime::SectionKind::Code, codeBlob.bytes()));
  // A thin artifact refers to every weight that is a file in the cache by
  // digest; small ones (inside the index, no file to map) travel along.
  LinkedArtifact linked;
  std::vector<std::string_view> embedded;
  // pieces[i] are the bytes of blobs[i]: the bound weights, then the packed.
  auto place = [&](auto &spec, size_t piece) {
    if (request.kind == ArtifactKind::Thin &&
        pieces[piece].size() >= cache_.options().inlineThreshold) {
      spec.external = true;
      linked.externalWeights.push_back(blobs[piece].digest());
      return;
    }
    embedded.push_back(pieces[piece]);
  };
  for (size_t i = 0; i < specs.size(); ++i)
    place(specs[i], i);
  for (size_t i = 0; i < packedSpecs.size(); ++i)
    place(packedSpecs[i], specs.size() + i);
  FLOWC_ASSIGN_OR_RETURN(std::vector<uint64_t> offsets, writer->addWeights(embedded));
  size_t next = 0;
  for (runtime::WeightSpec &spec : specs) {
    if (!spec.external)
      spec.offset = offsets[next++];
    plan.weights.push_back(std::move(spec));
  }
  for (runtime::PackedWeightSpec &spec : packedSpecs) {
    if (!spec.external)
      spec.offset = offsets[next++];
    plan.packed.push_back(std::move(spec));
  }
  FLOWC_RETURN_IF_ERROR(
      writer->addSection(runtime::SectionKind::Plan, plan.toJson().dump(2)));
  FLOWC_RETURN_IF_ERROR(writer->finish());
  FLOWC_ASSIGN_OR_RETURN(linked.digest, cache_.adoptFile(path));
  return linked;
}

} // namespace flowc::worker
