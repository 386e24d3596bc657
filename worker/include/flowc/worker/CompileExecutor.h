// One compile: ingest the model (Ingest.cpp), consult the action cache
// (keys: ActionKeys.h), on a miss get the code from tasks (Tasks.h: plan,
// the kernels the kernel cache misses) or from the code cache when only
// weights changed, and link the artifact where the weights are (Link.cpp).
#pragma once

#include "flowc/cache/Cache.h"
#include "flowc/compiler/Compiler.h"
#include "flowc/worker/Progress.h"
#include "flowc/worker/RemoteTier.h"
#include "flowc/worker/Search.h"
#include "flowc/worker/Tasks.h"

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace flowc::worker {

class JobProgress;

enum class ArtifactKind { Packed, Thin };

struct CompileRequest {
  /// An ONNX file or a reproducer directory.
  std::string modelPath;
  compiler::CompileOptions options;
  /// Shapes for inputs with symbolic dimensions (ONNX models only).
  compiler::InputShapes inputShapes;
  /// Link a thin artifact: weights stored as files in this cache are
  /// referred to by digest instead of copied in (part of the artifact key).
  ArtifactKind kind = ArtifactKind::Packed;
  /// Say which entry answered, or what differs from the nearest entry for
  /// the same model name (CompileResult::explain). Never the memo's answer.
  bool explain = false;
  /// New measurements search may make (Search.h); a compile that searches
  /// plans even when its artifact is cached, to find kernels with no record.
  SearchBudget search;
};

struct CompileResult {
  cache::Digest artifactDigest;
  cache::Digest modelDigest;
  /// The whole artifact came from the action cache.
  bool cacheHit = false;
  /// Code came from the cache (only weights changed, or an artifact hit).
  bool codeCacheHit = false;
  /// Partitioned kernels compiled by this request, and reused from the
  /// kernel cache; both 0 when the code object came from the cache.
  unsigned kernelsCompiled = 0;
  unsigned kernelsReused = 0;
  double seconds = 0;
  std::map<std::string, int> opCounts;
  /// Which tier answered the artifact: "local", "remote", or "" (compiled).
  std::string answeredBy;
  /// Which entry answered, or what differs from the nearest one (first
  /// line "hit: …" or "miss: …", then one line per differing factor).
  std::string explain;
  /// What the remote tier did for this compile (all zero without one).
  RemoteTierCounters remote;
  /// What search did (all zero on a hit).
  SearchSummary search;
};

/// A model's identity without touching the cache: its graph, the manifest
/// (IR digest + weight table) and the manifest's digest.
struct IngestedModel {
  compiler::OnnxModel model;
  compiler::ImportedGraph graph;
  cache::Digest irDigest;
  std::vector<cache::Digest> weightDigests; ///< In graph.weights order.
  std::string manifest;                     ///< JSON text.
  cache::Digest modelDigest;

  /// The weights' bytes, in graph.weights order.
  std::vector<std::string_view> weightViews() const;
};

/// Parses, imports and hashes `path`: an ONNX file, or a reproducer
/// directory (see Reproducer.h) whose weights are generated. Nothing is
/// written anywhere, so bad input leaves every cache untouched.
Expected<IngestedModel> ingestModel(const std::string &path,
                                    const compiler::InputShapes &inputShapes = {});

class CompileExecutor {
public:
  /// Whether a compile ends by evicting down to the cache's size cap. A
  /// worker process leaves that to the daemon: pins are per process, so it
  /// cannot see what another worker is using.
  enum class Eviction { AfterCompile, Never };

  /// `buildId` identifies the compiler build in every action key. The
  /// plan and codegen tasks of a compile go to `runner`; without one they
  /// run in this process, on a thread per core.
  CompileExecutor(cache::Cache &cache, std::string buildId,
                  Eviction eviction = Eviction::AfterCompile,
                  TaskRunner *runner = nullptr)
      : cache_(cache), buildId_(std::move(buildId)), eviction_(eviction),
        runner_(runner) {}

  /// The complete entries a compile of `request` recorded in this cache:
  /// its artifact, and its code object and weight list when present (a
  /// bundle's contents). Reads the model (to make the keys); compiles
  /// nothing. FailedPrecondition when the artifact entry is not complete.
  Expected<std::vector<cache::ActionRecord>>
  recordedEntries(const CompileRequest &request);

  /// Consults `tier` after each local miss and publishes to it what is
  /// recorded locally; it must outlive the executor's compiles.
  void setRemoteTier(RemoteTier *tier) { remote_ = tier; }

  /// The farm's GPUs (`flowcd --remote-gpu`): CUDA compiles key by them and,
  /// where the task runner's engine offers them, measure on them. Set
  /// before the first compile.
  void setRemoteGpus(RemoteGpus gpus) { remoteGpus_ = std::move(gpus); }

  /// Thread-safe; compiles run concurrently. Errors name the model and the
  /// node or op at fault; on error the cache keeps only complete blobs.
  /// `progress` hears of each phase, pass (when the passes run in this
  /// process) and kernel (Progress.h), one event at a time.
  Expected<CompileResult> compile(const CompileRequest &request,
                                  const ProgressFn &progress);

  /// The answer to `request` if the cache has it without reading the model
  /// (its files are unchanged since they were last ingested); nullopt when
  /// it takes a compile (also whenever the request prints IR). Cheap: a few
  /// stats and index lookups, no MLIR, so a daemon answers hits with it
  /// in-process.
  Expected<std::optional<CompileResult>> cachedResult(const CompileRequest &request);

private:
  /// Memo purpose: the model digest depends on the importer, so on the build.
  /// The digest also depends on the input shapes bound.
  std::string memoPurpose(const compiler::InputShapes &shapes) const {
    return "model-digest:" + buildId_ + ":" + compiler::canonicalInputShapes(shapes);
  }
  /// `tuningState`: the tuning records' state (Cache::tuningState), which
  /// decides the candidates kernels run.
  cache::Digest artifactKey(const cache::Digest &modelDigest,
                            const compiler::CompileOptions &options, ArtifactKind kind,
                            const std::string &tuningState) const;
  /// The records' state a compile with `options` runs under: this CPU's,
  /// and for a CUDA target also its GPU's (gpuTuningDeviceFor).
  Expected<std::string> tuningState(const compiler::CompileOptions &options);
  /// Whether a cached artifact's file is as it was stored (it is linked
  /// into users' directories); a damaged one is quarantined and linked anew.
  bool servable(const cache::Digest &artifact);
  /// A complete answer without reading the model: its file is unchanged
  /// since it was last ingested and its artifact is still cached.
  Expected<std::optional<CompileResult>> memoizedResult(const cache::FileIdentity &file,
                                                        const CompileRequest &request);
  /// Memoizes a model file's digest with the external data files it read;
  /// never a reproducer directory's.
  Status recordMemo(const cache::FileIdentity &file, const IngestedModel &ingested,
                    const compiler::InputShapes &shapes);

public:
  // What a compile made, public for ModelView.cpp's helpers.
  /// The code object and the weights it binds, both cached under the code
  /// key (the weight list is a second blob).
  struct CompiledCode {
    cache::Digest object;
    compiler::CodeWeights weights;
    /// Partitioned kernels compiled now and taken from the kernel cache
    /// (both 0 when the code object itself came from the cache).
    unsigned kernelsCompiled = 0;
    unsigned kernelsReused = 0;
    /// The kernels search chose a candidate for (the artifact's Plan::tuned).
    std::vector<runtime::TunedKernelSpec> tuned;
    SearchSummary search;
    /// It came from the code cache (no plan ran).
    bool fromCache = false;
    /// Its entries' keys (CompileExecutor::codeKeys), for the model view.
    cache::Digest codeKey, weightsKey, weightsBlob;
    /// How each loop kernel (weights.loopKernels order) was built; empty
    /// when the code came from the cache or from one in-process compile.
    struct KernelBuild {
      /// "compiled", "kernel cache" or "remote action cache".
      std::string source;
      double seconds = 0;
      std::string executor;
      cache::Digest entry, object;
    };
    std::vector<KernelBuild> builds;
  };

private:
  /// The code from tasks: plan, the kernels the kernel cache misses, link.
  Expected<CompiledCode> codeFromTasks(const IngestedModel &ingested,
                                       const compiler::CompileOptions &options,
                                       const SearchBudget &budget, JobProgress &progress);
  /// The code from one in-process compile that prints IR after each pass.
  Expected<CompiledCode> printedCode(const IngestedModel &ingested,
                                     const compiler::CompileOptions &options,
                                     JobProgress &progress);
  TaskRunner &runner();
  /// The code object's key and its weight list's.
  std::pair<cache::Digest, cache::Digest>
  codeKeys(const IngestedModel &ingested, const compiler::CompileOptions &options,
           const std::string &tuningState) const;
  /// The code for `request`: from the code cache (unless it searches), or
  /// from tasks, stored under the code keys of the tuning state after its
  /// search.
  Expected<CompiledCode> codeFor(const IngestedModel &ingested,
                                 const CompileRequest &request,
                                 const std::string &tuningState, JobProgress &progress,
                                 bool &hit);
  /// What the action cache derived under `key` (a `derived` entry), pinned
  /// by `pins`; nullopt on a miss, also when its blob cannot be read. With
  /// `remoteAsked` (prefetchRemote asked it already) the local cache alone.
  Expected<std::optional<cache::BlobHandle>> cachedDerivation(const cache::Digest &key,
                                                              cache::PinGuard &pins,
                                                              bool remoteAsked = false);
  /// Asks the remote tier, kRemoteLookupsInFlight at a time, for the `kind`
  /// entries of `keys` the local cache lacks; hits are recorded locally.
  void prefetchRemote(cache::ActionKind kind, const std::vector<cache::Digest> &keys);
  /// Stores `bytes` as what `key` derives; the blob, pinned by `pins`.
  Expected<cache::BlobHandle> storeDerivation(const cache::Digest &key,
                                              std::string_view bytes,
                                              cache::PinGuard &pins);
  /// A derived weight's blob: cached by (recipe, source digests), computed
  /// from the source blobs on a miss. Pinned by `pins`.
  Expected<cache::BlobHandle> derivedWeight(const IngestedModel &ingested,
                                            const compiler::DerivedWeight &weight,
                                            cache::PinGuard &pins, int &computed);
  struct PackedBlob {
    std::string layout;
    cache::BlobHandle blob;
  };
  /// Where a packed weight's layout and bytes are cached: by (build,
  /// target, kernel, candidate, source digest).
  struct PackedKeys {
    cache::Digest layout, bytes;
  };
  PackedKeys packedKeys(const compiler::KernelWeight &weight,
                        const std::string &candidate, const cache::Digest &source) const;
  /// Asks the remote tier for a link's packed weights before they are
  /// linked one by one: each layout, then the bytes of each it found.
  void prefetchPacked(const std::vector<PackedKeys> &keys);
  /// A library kernel's constant weight packed into the layout its kernel
  /// reads on this CPU: found under `keys` in the local cache
  /// (prefetchPacked asked the tier already), packed from `source` on a
  /// miss; nullopt when the kernel reads the weight as it is. Pinned by
  /// `pins`.
  Expected<std::optional<PackedBlob>> packedWeight(const compiler::KernelWeight &weight,
                                                   const std::string &candidate,
                                                   const PackedKeys &keys,
                                                   const cache::BlobHandle &source,
                                                   cache::PinGuard &pins, int &computed);

public:
  /// The artifact's digest, and the external weights a thin one refers to
  /// (its cache entry goes when one of them is evicted).
  struct LinkedArtifact {
    cache::Digest digest;
    std::vector<cache::Digest> externalWeights;
    /// Blobs of the derived and packed weights it binds.
    std::vector<cache::Digest> derivedWeights;
  };

private:
  Expected<LinkedArtifact> linkArtifact(const IngestedModel &ingested,
                                        const CompileRequest &request,
                                        const CompiledCode &code, cache::PinGuard &pins,
                                        JobProgress &progress);

  /// The artifact for `key`: the local action cache, else the remote tier
  /// (whose hit is then local too); sets `answeredBy`.
  Expected<std::optional<cache::Digest>> lookupArtifact(const cache::Digest &key,
                                                        const IngestedModel &ingested,
                                                        std::string &answeredBy,
                                                        std::string *factors);
  /// Records and publishes the artifact's entry and its model-name index.
  /// Writes the model page's view of this compile and its line in the
  /// model index (flowc/cache/ModelViews.h); `code` and `linked` are null
  /// on an artifact hit, which writes a view only where there is none.
  /// Failing to is logged, never the compile's failure.
  void recordModelView(const IngestedModel &ingested, const CompileRequest &request,
                       const cache::Digest &artifactKey, const cache::Digest &artifact,
                       const CompiledCode *code, const LinkedArtifact *linked);
  Status recordArtifact(const cache::Digest &key, const cache::Digest &artifact,
                        const std::vector<cache::Digest> &deps,
                        const std::vector<cache::Digest> &weights,
                        const std::string &factors);
  /// The --explain text of a hit (which entry) or a miss (what differs).
  std::string explainHit(const std::string &factors, const std::string &answeredBy,
                         const std::string &wantedFactors);
  std::string explainMiss(const std::string &wantedFactors);
  /// Local lookup of (kind, key), then the remote tier's.
  Expected<std::optional<cache::Digest>>
  lookupTiered(cache::ActionKind kind, const cache::Digest &key,
               cache::Cache::CountLookup count = cache::Cache::CountLookup::Yes);
  /// Publishes a locally recorded entry (no-op without a tier).
  void publish(cache::ActionKind kind, const cache::Digest &key, TierEntry entry);

  cache::Cache &cache_;
  RemoteTier *remote_ = nullptr;
  RemoteGpus remoteGpus_;
  std::string buildId_;
  Eviction eviction_;
  TaskRunner *runner_;
  std::once_flag ownRunnerOnce_;
  std::unique_ptr<TaskRunner> ownRunner_;
};

} // namespace flowc::worker
