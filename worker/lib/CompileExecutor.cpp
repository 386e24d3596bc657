#include "flowc/worker/CompileExecutor.h"

#include "flowc/runtime/Artifact.h"
#include "flowc/worker/Reproducer.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

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

/// A scratch directory under the cache's tmp/, removed on scope exit.
class ScratchDir {
public:
  static Expected<ScratchDir> create(const std::string &parent) {
    std::string pattern = parent + "/compile.XXXXXX";
    if (!mkdtemp(pattern.data()))
      return errnoStatus(errno, "cannot create a scratch directory in '" + parent + "'");
    return ScratchDir(pattern);
  }
  ScratchDir(ScratchDir &&other) noexcept : path_(std::move(other.path_)) {
    other.path_.clear();
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty())
      std::filesystem::remove_all(path_, ec);
  }
  const std::string &path() const { return path_; }

private:
  explicit ScratchDir(std::string path) : path_(std::move(path)) {}
  std::string path_;
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

Digest CompileExecutor::artifactKey(const Digest &modelDigest,
                                    const compiler::CompileOptions &options) const {
  return cache::digestOf("flowc.artifact.v1\n" + buildId_ + "\n" +
                         compiler::hostTargetDescription() + "\n" + options.canonical() +
                         "\n" + modelDigest.toString());
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
  FLOWC_ASSIGN_OR_RETURN(auto artifact,
                         cache_.lookupAction(cache::ActionKind::Artifact,
                                             artifactKey(*modelDigest, options)));
  if (!artifact)
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
                                   const compiler::InputShapes &shapes,
                                   const Digest &modelDigest) {
  // A directory's stat does not change when a file in it is rewritten in
  // place, so a reproducer is always read (it is small; its weights are
  // generated, not read).
  if (isReproducerPath(file.path))
    return Status::ok();
  return cache_.recordStat(file, memoPurpose(shapes), modelDigest);
}

Expected<CompileResult> CompileExecutor::compile(const CompileRequest &request,
                                                 const ProgressFn &progress) {
  auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  };
  FLOWC_RETURN_IF_ERROR(request.options.validate());
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
  Digest key = artifactKey(ingested.modelDigest, request.options);
  FLOWC_ASSIGN_OR_RETURN(auto cached,
                         cache_.lookupAction(cache::ActionKind::Artifact, key));
  if (cached && cache_.contains(ingested.modelDigest) && !printsIr) {
    FLOWC_RETURN_IF_ERROR(recordMemo(file, request.inputShapes, ingested.modelDigest));
    result.artifactDigest = *cached;
    result.cacheHit = result.codeCacheHit = true;
    result.seconds = elapsed();
    progress("cache", "hit " + cached->toString());
    return result;
  }

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

  FLOWC_ASSIGN_OR_RETURN(
      Digest code, codeFor(ingested, request.options, progress, result.codeCacheHit));
  pins.add(code);
  progress("link", "artifact");
  FLOWC_ASSIGN_OR_RETURN(result.artifactDigest,
                         linkArtifact(ingested, request.options, code));
  pins.add(result.artifactDigest);
  FLOWC_RETURN_IF_ERROR(cache_.recordAction(cache::ActionKind::Artifact, key,
                                            result.artifactDigest, {manifest}));
  FLOWC_RETURN_IF_ERROR(recordMemo(file, request.inputShapes, ingested.modelDigest));
  // Over the size cap, least-recently-used blobs go; this job's are pinned.
  if (auto gc = cache_.enforceLimit(); !gc)
    spdlog::warn("cache eviction failed: {}", gc.status().toString());
  result.seconds = elapsed();
  return result;
}

Expected<Digest> CompileExecutor::codeFor(const IngestedModel &ingested,
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
  FLOWC_ASSIGN_OR_RETURN(auto cached,
                         cache_.lookupAction(cache::ActionKind::Code, codeKey));
  if (cached && options.printIrAfter.empty()) {
    hit = true;
    progress("codegen", "code cache hit " + cached->toString());
    return *cached;
  }
  hit = false;
  progress("codegen", "lowering TOSA -> linalg -> LLVM for " + options.target);
  FLOWC_ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::create(cache_.tmpDir()));
  std::string printedIr;
  FLOWC_ASSIGN_OR_RETURN(std::string object, compiler::compileToSharedObject(
                                                 ingested.graph.irBytecode, options,
                                                 scratch.path(), &printedIr));
  // The IR goes back as progress events of at most 1 MiB each.
  constexpr size_t kIrChunk = 1 << 20;
  for (size_t offset = 0; offset < printedIr.size(); offset += kIrChunk)
    progress("ir", printedIr.substr(offset, kIrChunk));
  FLOWC_ASSIGN_OR_RETURN(Digest code, cache_.put(object));
  FLOWC_RETURN_IF_ERROR(cache_.recordAction(cache::ActionKind::Code, codeKey, code));
  return code;
}

Expected<Digest> CompileExecutor::linkArtifact(const IngestedModel &ingested,
                                               const compiler::CompileOptions &options,
                                               const Digest &code) {
  const compiler::ImportedGraph &graph = ingested.graph;
  runtime::Plan plan;
  plan.entry = compiler::kEntrySymbol;
  for (const auto &input : graph.inputs)
    plan.inputs.push_back(tensorSpec(input));
  for (const auto &output : graph.outputs)
    plan.outputs.push_back(tensorSpec(output));

  // Weights are copied from their CAS blobs (one mapping each, no heap copy).
  std::vector<cache::BlobHandle> blobs;
  std::vector<std::string_view> pieces;
  for (size_t i = 0; i < graph.weights.size(); ++i) {
    FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle blob, cache_.get(ingested.weightDigests[i]));
    pieces.push_back(blob.bytes());
    blobs.push_back(std::move(blob));
  }
  FLOWC_ASSIGN_OR_RETURN(cache::BlobHandle codeBlob, cache_.get(code));

  json metadata = {{"format", "flowc.artifact.v1"},
                   {"model", ingested.model.path},
                   {"model_digest", ingested.modelDigest.toString()},
                   {"ir_digest", ingested.irDigest.toString()},
                   {"code_digest", code.toString()},
                   {"compiler", buildId_},
                   {"target", options.target},
                   {"target_description", compiler::hostTargetDescription()},
                   {"options", options.canonical()},
                   {"op_counts", graph.opCounts},
                   {"parameters", graph.parameterCount()},
                   {"parameter_bytes", graph.parameterBytes()},
                   {"opset", ingested.model.opsetVersion}};

  FLOWC_ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::create(cache_.tmpDir()));
  std::string path = scratch.path() + "/artifact.fca";
  FLOWC_ASSIGN_OR_RETURN(auto writer, runtime::ArtifactWriter::create(path));
  FLOWC_RETURN_IF_ERROR(
      writer->addSection(runtime::SectionKind::Metadata, metadata.dump(2)));
  FLOWC_RETURN_IF_ERROR(
      writer->addSection(runtime::SectionKind::GraphIr, graph.irBytecode));
  FLOWC_RETURN_IF_ERROR(writer->addSection(runtime::SectionKind::Code, codeBlob.bytes()));
  FLOWC_ASSIGN_OR_RETURN(std::vector<uint64_t> offsets, writer->addWeights(pieces));
  for (size_t i = 0; i < graph.weights.size(); ++i)
    plan.weights.push_back(runtime::WeightSpec{
        tensorSpec(graph.weights[i].info), ingested.weightDigests[i].toString(),
        offsets[i], graph.weights[i].bytes.size()});
  FLOWC_RETURN_IF_ERROR(
      writer->addSection(runtime::SectionKind::Plan, plan.toJson().dump(2)));
  FLOWC_RETURN_IF_ERROR(writer->finish());
  return cache_.adoptFile(path);
}

} // namespace flowc::worker
