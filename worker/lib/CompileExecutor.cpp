#include "flowc/worker/CompileExecutor.h"

#include "ActionKeys.h"
#include "JobProgress.h"
#include "KeyFactors.h"

#include "flowc/runtime/BuildInfo.h"
#include "flowc/worker/Reproducer.h"
#include "flowc/worker/Tasks.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <thread>

namespace flowc::worker {

namespace {

using cache::Digest;
using nlohmann::json;

/// The kernel cache: objects of partitioned kernels as blobs, found by a
/// digest of the build and the compiler's kernel key. Every model and option
/// set whose kernels lower alike shares them. A cache that cannot answer
/// means a compile, never a failed job.
class CasKernelCache {
public:
  CasKernelCache(cache::Cache &cache, const std::string &buildId, RemoteTier *remote)
      : cache_(cache), buildId_(buildId), remote_(remote) {}

  std::optional<cache::BlobHandle> lookup(const std::string &key) {
    auto action = cache_.lookupAction(cache::ActionKind::Kernel, actionKey(key));
    if (!action) {
      spdlog::warn("kernel cache lookup failed: {}", action.status().toString());
      return std::nullopt;
    }
    if (!*action && remote_)
      *action = remote_->fetch(cache::ActionKind::Kernel, actionKey(key));
    if (!*action)
      return std::nullopt;
    auto blob = cache_.get(**action);
    if (!blob)
      return std::nullopt;
    return std::move(*blob);
  }

  /// Records `object`, already a blob, as the object of `key`.
  void record(const std::string &key, const Digest &object) {
    Status status =
        cache_.recordAction(cache::ActionKind::Kernel, actionKey(key), object);
    if (!status.isOk()) {
      spdlog::warn("kernel cache store failed: {}", status.toString());
      return;
    }
    if (remote_)
      remote_->publish(cache::ActionKind::Kernel, actionKey(key), TierEntry::of(object));
  }

  Digest actionKey(const std::string &key) const {
    return ActionKey("flowc.kernel.v2", buildId_).add(key).digest();
  }

private:
  cache::Cache &cache_;
  const std::string &buildId_;
  RemoteTier *remote_;
};

} // namespace

Digest CompileExecutor::artifactKey(const Digest &modelDigest,
                                    const compiler::CompileOptions &options,
                                    ArtifactKind kind,
                                    const std::string &tuningState) const {
  // The format version is part of the key: a runtime that reads only the
  // new format must never be served a cached artifact of the old one.
  ActionKey key(artifactFormat(), buildId_);
  key.add(compiler::hostTargetDescription())
      .add(options.canonical())
      .add(modelDigest.toString())
      .add(tuningState);
  if (kind == ArtifactKind::Thin)
    key.add("thin");
  return key.digest();
}

Expected<std::string>
CompileExecutor::tuningState(const compiler::CompileOptions &options) {
  FLOWC_ASSIGN_OR_RETURN(std::string state, cache_.tuningState(deviceDescriptor()));
  if (!isCudaTarget(options.target))
    return state;
  // The GPU's records decide the plan's library candidates.
  FLOWC_ASSIGN_OR_RETURN(std::optional<std::string> gpu,
                         gpuTuningDeviceFor(cache_, options.target, remoteGpus_.devices));
  if (!gpu)
    return state;
  FLOWC_ASSIGN_OR_RETURN(std::string gpuState, cache_.tuningState(*gpu));
  return state + "; " + *gpu + " " + gpuState;
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
  // A compile that searches looks for kernels with no record: it plans.
  if (isReproducerPath(file.path) || request.search.searches())
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
  FLOWC_ASSIGN_OR_RETURN(std::string state, tuningState(options));
  FLOWC_ASSIGN_OR_RETURN(
      auto artifact,
      cache_.lookupAction(cache::ActionKind::Artifact,
                          artifactKey(*modelDigest, options, request.kind, state)));
  if (!artifact || !servable(*artifact))
    return Result();
  CompileResult result;
  result.modelDigest = *modelDigest;
  result.artifactDigest = *artifact;
  result.cacheHit = result.codeCacheHit = true;
  result.answeredBy = "local";
  result.explain = "hit: answered by the local cache: the model file is unchanged since "
                   "it was compiled";
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
  if (!request.options.printIrAfter.empty() || request.explain)
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
                                                 const ProgressFn &sink) {
  auto start = std::chrono::steady_clock::now();
  JobProgress progress(sink);
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  };
  FLOWC_RETURN_IF_ERROR(request.options.validate());
  // Refused before any work: the library kernels it asks for do not exist
  // on this CPU, and a whole compile would fail only at link.
  if (request.options.precision == Precision::Bf16 &&
      !isCudaTarget(request.options.target))
    FLOWC_RETURN_IF_ERROR(runtime::bf16KernelsSupported());
  // The identity is taken before the file is read, so that a change while
  // reading is detected when the memo is recorded.
  FLOWC_ASSIGN_OR_RETURN(cache::FileIdentity file,
                         cache::FileIdentity::of(request.modelPath));
  // Printing IR means compiling: no cached answer has it.
  bool printsIr = !request.options.printIrAfter.empty();
  FLOWC_ASSIGN_OR_RETURN(auto memoized, memoizedResult(file, request));
  if (memoized && !printsIr && !request.explain) {
    memoized->seconds = elapsed();
    progress.countLookups("artifact", 1, 0);
    progress("cache", "hit " + memoized->artifactDigest.toString() + " (file unchanged)");
    return *memoized;
  }
  progress("ingest", request.modelPath);
  FLOWC_ASSIGN_OR_RETURN(IngestedModel ingested,
                         ingestModel(request.modelPath, request.inputShapes));
  // Ingest hashed every weight, the IR and the manifest once.
  progress.addBytesHashed(ingested.graph.parameterBytes() +
                          ingested.graph.irBytecode.size() + ingested.manifest.size());

  CompileResult result;
  result.modelDigest = ingested.modelDigest;
  result.opCounts = ingested.graph.opCounts;
  FLOWC_ASSIGN_OR_RETURN(std::string state, tuningState(request.options));
  Digest key = artifactKey(ingested.modelDigest, request.options, request.kind, state);
  std::string factors = keyFactors(ingested, request, buildId_, key, state).dump();
  std::string answeredBy, cachedFactors;
  // A compile that searches plans to find the kernels that have no record.
  bool looksUp = !printsIr && !request.search.searches();
  FLOWC_ASSIGN_OR_RETURN(
      auto cached, !looksUp ? std::optional<Digest>()
                            : lookupArtifact(key, ingested, answeredBy, &cachedFactors));
  if (looksUp)
    progress.countLookups("artifact", cached ? 1 : 0, cached ? 0 : 1);
  if (cached && cache_.contains(ingested.modelDigest) && servable(*cached)) {
    FLOWC_RETURN_IF_ERROR(recordMemo(file, ingested, request.inputShapes));
    if (!cache_.readOnly())
      recordModelView(ingested, request, key, *cached, nullptr, nullptr);
    result.artifactDigest = *cached;
    result.cacheHit = result.codeCacheHit = true;
    result.answeredBy = answeredBy;
    result.explain = explainHit(cachedFactors, answeredBy, factors);
    result.seconds = elapsed();
    progress("cache", answeredBy + " hit " + cached->toString());
    return result;
  }
  result.explain = explainMiss(factors);

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
                         cache_.putMany(ingested.weightViews()));
  progress.addBytesHashed(ingested.graph.parameterBytes());
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

  FLOWC_ASSIGN_OR_RETURN(CompiledCode code, codeFor(ingested, request, state, progress,
                                                    result.codeCacheHit));
  pins.add(code.object);
  result.kernelsCompiled = code.kernelsCompiled;
  result.kernelsReused = code.kernelsReused;
  result.search = code.search;
  // Search may have added records: the artifact is what this state makes.
  if (request.search.searches()) {
    FLOWC_ASSIGN_OR_RETURN(state, tuningState(request.options));
    key = artifactKey(ingested.modelDigest, request.options, request.kind, state);
    factors = keyFactors(ingested, request, buildId_, key, state).dump();
  }
  progress("link", "artifact");
  FLOWC_ASSIGN_OR_RETURN(LinkedArtifact linked,
                         linkArtifact(ingested, request, code, pins, progress));
  result.artifactDigest = linked.digest;
  pins.add(result.artifactDigest);
  FLOWC_RETURN_IF_ERROR(recordArtifact(key, result.artifactDigest, {manifest},
                                       linked.externalWeights, factors));
  FLOWC_RETURN_IF_ERROR(recordMemo(file, ingested, request.inputShapes));
  recordModelView(ingested, request, key, result.artifactDigest, &code, &linked);
  // Over the size cap, least-recently-used blobs go; this job's are pinned.
  if (eviction_ == Eviction::AfterCompile)
    if (auto gc = cache_.enforceLimit(); !gc)
      spdlog::warn("cache eviction failed: {}", gc.status().toString());
  result.seconds = elapsed();
  return result;
}

std::pair<Digest, Digest>
CompileExecutor::codeKeys(const IngestedModel &ingested,
                          const compiler::CompileOptions &options,
                          const std::string &tuningState) const {
  // Weight metadata, never contents: a fine-tune that keeps every shape
  // reuses the code and only re-links.
  ActionKey key("flowc.code.v2", buildId_);
  key.add(compiler::hostTargetDescription())
      .add(options.canonical())
      .add(ingested.irDigest.toString())
      .add(tuningState);
  for (const compiler::WeightRef &weight : ingested.graph.weights)
    key.add(weight.key + ":" + compiler::dtypeName(weight.info.dtype) + ":" +
            json(weight.info.shape).dump());
  return {key.digest(), key.digestOf("weights")};
}

Expected<std::vector<cache::ActionRecord>>
CompileExecutor::recordedEntries(const CompileRequest &request) {
  FLOWC_ASSIGN_OR_RETURN(IngestedModel ingested,
                         ingestModel(request.modelPath, request.inputShapes));
  FLOWC_ASSIGN_OR_RETURN(std::string state, tuningState(request.options));
  Digest key = artifactKey(ingested.modelDigest, request.options, request.kind, state);
  FLOWC_ASSIGN_OR_RETURN(auto artifact,
                         cache_.actionEntry(cache::ActionKind::Artifact, key));
  if (!artifact)
    return failedPrecondition(
        request.modelPath + " is not compiled with these options in '" + cache_.root() +
        "' (no complete artifact entry " + key.toString() + "): submit it first");
  std::vector<cache::ActionRecord> entries{*artifact};
  // The code entries let a reader re-link after a weights-only change.
  auto [codeKey, weightsKey] = codeKeys(ingested, request.options, state);
  FLOWC_ASSIGN_OR_RETURN(auto code, cache_.actionEntry(cache::ActionKind::Code, codeKey));
  FLOWC_ASSIGN_OR_RETURN(auto weights,
                         cache_.actionEntry(cache::ActionKind::Code, weightsKey));
  if (code && weights) {
    entries.push_back(*code);
    entries.push_back(*weights);
  }
  return entries;
}

Expected<CompileExecutor::CompiledCode>
CompileExecutor::codeFor(const IngestedModel &ingested, const CompileRequest &request,
                         const std::string &tuningState, JobProgress &progress,
                         bool &hit) {
  const compiler::CompileOptions &options = request.options;
  auto [codeKey, weightsKey] = codeKeys(ingested, options, tuningState);
  std::optional<Digest> cached;
  if (!request.search.searches()) {
    FLOWC_ASSIGN_OR_RETURN(cached, lookupTiered(cache::ActionKind::Code, codeKey));
    progress.countLookups("code", cached ? 1 : 0, cached ? 0 : 1);
  }
  // The weight list belongs to the same answer: one lookup in the figures.
  std::optional<Digest> cachedWeights;
  if (cached) {
    FLOWC_ASSIGN_OR_RETURN(
        cachedWeights,
        lookupTiered(cache::ActionKind::Code, weightsKey, cache::Cache::CountLookup::No));
  }
  if (cached && cachedWeights && options.printIrAfter.empty()) {
    auto blob = cache_.get(*cachedWeights);
    std::optional<compiler::CodeWeights> weights;
    std::vector<runtime::TunedKernelSpec> tuned;
    if (blob)
      weights = parseCodeWeights(blob->bytes(), &tuned);
    if (weights) {
      hit = true;
      progress("codegen", "code cache hit " + cached->toString());
      CompiledCode code;
      code.object = *cached;
      code.weights = std::move(*weights);
      code.tuned = std::move(tuned);
      code.fromCache = true;
      code.codeKey = codeKey;
      code.weightsKey = weightsKey;
      code.weightsBlob = *cachedWeights;
      return code;
    }
  }
  hit = false;
  // Printing IR shows every pass on every kernel: one in-process compile.
  FLOWC_ASSIGN_OR_RETURN(CompiledCode compiled,
                         options.printIrAfter.empty()
                             ? codeFromTasks(ingested, options, request.search, progress)
                             : printedCode(ingested, options, progress));
  // Stored under the state the search left, which decided its kernels.
  if (request.search.searches()) {
    FLOWC_ASSIGN_OR_RETURN(std::string state, this->tuningState(options));
    std::tie(codeKey, weightsKey) = codeKeys(ingested, options, state);
  }
  FLOWC_ASSIGN_OR_RETURN(Digest weights,
                         cache_.put(codeWeightsText(compiled.weights, compiled.tuned)));
  FLOWC_RETURN_IF_ERROR(
      cache_.recordAction(cache::ActionKind::Code, codeKey, compiled.object));
  FLOWC_RETURN_IF_ERROR(
      cache_.recordAction(cache::ActionKind::Code, weightsKey, weights));
  // The weight list first: a reader that finds the code finds its list.
  publish(cache::ActionKind::Code, weightsKey, TierEntry::of(weights));
  publish(cache::ActionKind::Code, codeKey, TierEntry::of(compiled.object));
  compiled.codeKey = codeKey;
  compiled.weightsKey = weightsKey;
  compiled.weightsBlob = weights;
  return compiled;
}

namespace {

/// "53 tunable kernels: 40 from records (12 measured now, 96 candidates,
/// 8.1 s)".
std::string searchSummaryText(const SearchSummary &summary) {
  if (!summary.gpuDevice.empty())
    return std::to_string(summary.tunableKernels) +
           " GPU library kernels: " + std::to_string(summary.tunedKernels) +
           " from the tuning records of " + summary.gpuDevice +
           ", the others choose by trial runs on the GPU when they first run";
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%.1f s", summary.seconds);
  return std::to_string(summary.tunableKernels) +
         " tunable kernels: " + std::to_string(summary.tunedKernels) +
         " from tuning records (" + std::to_string(summary.measuredKernels) +
         " measured now, " + std::to_string(summary.candidatesMeasured) +
         " candidates, " + seconds + (summary.budgetEnded ? ", the budget ended" : "") +
         "), the others run defaults";
}

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
                               const SearchBudget &budget, JobProgress &progress) {
  const compiler::CodeTarget &target = compiler::CodeTarget::host();
  progress("plan", "graph passes and partition for " + target.cpu);
  FLOWC_ASSIGN_OR_RETURN(
      Task planTask, makePlanTask(cache_, ingested.irDigest, options, target, buildId_));
  // The plan task's passes, where it runs in this process.
  TaskListener planListener;
  planListener.progress = [&](size_t, const ProgressEvent &event) {
    progress.emit(event);
  };
  auto planned = std::move(runner().run({planTask}, planListener).front());
  if (!planned)
    return planned.status();
  FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle planBlob, cache_.get(planned->outputs[0]));
  FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle graphBlob, cache_.get(planned->outputs[1]));
  FLOWC_ASSIGN_OR_RETURN(
      compiler::CompilePlan plan,
      parsePlanOutput(planBlob.bytes(), std::string(graphBlob.bytes())));

  // Search decides each tunable kernel's candidate before any is compiled.
  if (budget.searches())
    progress("search",
             "measuring kernels with no tuning record, budget " + budget.text());
  FLOWC_ASSIGN_OR_RETURN(SearchChoices choices,
                         searchKernels(cache_, remote_, runner(), plan, options, budget,
                                       remoteGpus_, buildId_,
                                       [&](const std::string &warning) {
                                         spdlog::warn("{}", warning);
                                         progress("search", warning);
                                       }));
  for (size_t i = 0; i < plan.kernels.size(); ++i)
    plan.kernels[i].candidate = choices.loopCandidates[i];
  if (choices.summary.tunableKernels > 0)
    progress("search", searchSummaryText(choices.summary));

  // The kernel cache first: only the kernels it misses become tasks.
  CasKernelCache kernelCache(cache_, buildId_, remote_);
  std::vector<std::string> objects(plan.kernels.size());
  std::vector<CompiledCode::KernelBuild> builds(plan.kernels.size());
  std::vector<size_t> missing;
  std::vector<Task> tasks;
  int calls = 0;
  for (size_t i = 0; i < plan.kernels.size(); ++i) {
    calls += plan.kernels[i].callSites;
    if (std::optional<cache::BlobHandle> object =
            kernelCache.lookup(plan.kernels[i].cacheKey())) {
      objects[i] = std::string(object->bytes());
      builds[i] = {"kernel cache", 0, "",
                   kernelCache.actionKey(plan.kernels[i].cacheKey()), object->digest()};
      continue;
    }
    FLOWC_ASSIGN_OR_RETURN(
        Task task, makeCodegenTask(cache_, plan.kernels[i], options, target, buildId_));
    task.cacheKey = kernelCache.actionKey(plan.kernels[i].cacheKey()).toString();
    missing.push_back(i);
    tasks.push_back(std::move(task));
  }
  size_t reused = plan.kernels.size() - missing.size();
  progress.countLookups("kernel", reused, missing.size());
  // The kernels the cache answered, once as a count; each compiled one
  // as its task ends.
  progress.beginKernels(static_cast<unsigned>(tasks.size()));
  if (!plan.kernels.empty()) {
    ProgressEvent codegen;
    codegen.stage = "codegen";
    codegen.detail = std::to_string(tasks.size()) + " kernels to compile, " +
                     std::to_string(reused) + " from the kernel cache";
    codegen.kernelCount = static_cast<unsigned>(tasks.size());
    progress.emit(std::move(codegen));
  }
  TaskListener kernelListener;
  kernelListener.done = [&](size_t m, const Expected<TaskOutcome> &outcome,
                            double seconds) {
    if (!outcome)
      return;
    bool remoteHit = outcome->executor == "remote action cache";
    progress.kernelDone(tasks[m].name, seconds, outcome->executor, remoteHit);
    CompiledCode::KernelBuild &build = builds[missing[m]];
    build.source = remoteHit ? "remote action cache" : "compiled";
    build.seconds = seconds;
    build.executor = outcome->executor;
  };
  std::vector<Expected<TaskOutcome>> outcomes = runner().run(tasks, kernelListener);
  for (size_t m = 0; m < missing.size(); ++m) {
    if (!outcomes[m])
      return outcomes[m].status();
    FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle object, cache_.get(outcomes[m]->outputs[0]));
    objects[missing[m]] = std::string(object.bytes());
    kernelCache.record(plan.kernels[missing[m]].cacheKey(), object.digest());
    builds[missing[m]].entry = kernelCache.actionKey(plan.kernels[missing[m]].cacheKey());
    builds[missing[m]].object = object.digest();
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
  compiled.tuned = std::move(choices.tuned);
  compiled.search = choices.summary;
  compiled.builds = std::move(builds);
  FLOWC_ASSIGN_OR_RETURN(compiled.object, cache_.put(library));
  return compiled;
}

Expected<CompileExecutor::CompiledCode>
CompileExecutor::printedCode(const IngestedModel &ingested,
                             const compiler::CompileOptions &options,
                             JobProgress &progress) {
  progress("codegen", std::string("lowering TOSA -> linalg -> LLVM for ") +
                          targetName(options.target));
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

} // namespace flowc::worker
