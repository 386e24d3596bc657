#include "flowc/worker/CompileExecutor.h"

#include "flowc/runtime/Artifact.h"

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

} // namespace

Expected<IngestedModel> ingestModel(const std::string &path) {
  IngestedModel ingested;
  FLOWC_ASSIGN_OR_RETURN(ingested.model, compiler::loadOnnxModel(path));
  FLOWC_ASSIGN_OR_RETURN(ingested.graph, compiler::importOnnx(ingested.model));
  ingested.irDigest = cache::digestOf(ingested.graph.irBytecode);
  json manifest = {{"format", "flowc.manifest.v1"}, {"ir", ingested.irDigest.toString()}};
  manifest["inputs"] = json::array();
  manifest["outputs"] = json::array();
  manifest["weights"] = json::array();
  for (const auto &input : ingested.graph.inputs)
    manifest["inputs"].push_back(tensorJson(input));
  for (const auto &output : ingested.graph.outputs)
    manifest["outputs"].push_back(tensorJson(output));
  for (const compiler::WeightRef &weight : ingested.graph.weights) {
    Digest digest = cache::digestOf(weight.bytes);
    ingested.weightDigests.push_back(digest);
    json entry = tensorJson(weight.info);
    entry["name"] = weight.key;
    entry["digest"] = digest.toString();
    manifest["weights"].push_back(entry);
  }
  ingested.manifest = manifest.dump();
  ingested.modelDigest = cache::digestOf(ingested.manifest);
  return ingested;
}

Expected<CompileResult> CompileExecutor::compile(const CompileRequest &request,
                                                 const ProgressFn &progress) {
  auto start = std::chrono::steady_clock::now();
  FLOWC_RETURN_IF_ERROR(request.options.validate());
  progress("ingest", request.modelPath);
  FLOWC_ASSIGN_OR_RETURN(IngestedModel ingested, ingestModel(request.modelPath));

  CompileResult result;
  result.modelDigest = ingested.modelDigest;
  result.opCounts = ingested.graph.opCounts;
  std::string target = compiler::hostTargetDescription();
  Digest artifactKey = cache::digestOf("flowc.artifact.v1\n" + buildId_ + "\n" + target +
                                       "\n" + request.options.canonical() + "\n" +
                                       ingested.modelDigest.toString());
  FLOWC_ASSIGN_OR_RETURN(auto cached,
                         cache_.lookupAction(cache::ActionKind::Artifact, artifactKey));
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  };
  if (cached) {
    result.artifactDigest = *cached;
    result.cacheHit = result.codeCacheHit = true;
    result.seconds = elapsed();
    progress("cache", "hit " + cached->toString());
    return result;
  }

  // Only now, with the model known to be valid, does the cache change:
  // weights, IR and manifest become blobs.
  progress("store", std::to_string(ingested.graph.weights.size()) + " weights");
  for (size_t i = 0; i < ingested.graph.weights.size(); ++i)
    if (!cache_.contains(ingested.weightDigests[i]))
      FLOWC_RETURN_IF_ERROR(
          cache_.putVerified(ingested.weightDigests[i], ingested.graph.weights[i].bytes));
  FLOWC_RETURN_IF_ERROR(cache_.put(ingested.graph.irBytecode).status());
  FLOWC_RETURN_IF_ERROR(cache_.put(ingested.manifest).status());

  FLOWC_ASSIGN_OR_RETURN(
      Digest code, codeFor(ingested, request.options, progress, result.codeCacheHit));
  progress("link", "artifact");
  FLOWC_ASSIGN_OR_RETURN(result.artifactDigest,
                         linkArtifact(ingested, request.options, code));
  FLOWC_RETURN_IF_ERROR(cache_.recordAction(cache::ActionKind::Artifact, artifactKey,
                                            result.artifactDigest));
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
  if (cached) {
    hit = true;
    progress("codegen", "code cache hit " + cached->toString());
    return *cached;
  }
  hit = false;
  progress("codegen", "lowering TOSA -> linalg -> LLVM for " + options.target);
  FLOWC_ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::create(cache_.tmpDir()));
  FLOWC_ASSIGN_OR_RETURN(std::string object,
                         compiler::compileToSharedObject(ingested.graph.irBytecode,
                                                         options, scratch.path()));
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
  std::vector<MappedFile> blobs;
  std::vector<std::string_view> pieces;
  uint64_t parameters = 0, parameterBytes = 0;
  for (size_t i = 0; i < graph.weights.size(); ++i) {
    FLOWC_ASSIGN_OR_RETURN(MappedFile blob, cache_.map(ingested.weightDigests[i]));
    pieces.push_back(blob.view());
    blobs.push_back(std::move(blob));
    parameters += static_cast<uint64_t>(graph.weights[i].info.elementCount());
    parameterBytes += graph.weights[i].bytes.size();
  }
  FLOWC_ASSIGN_OR_RETURN(MappedFile codeBlob, cache_.map(code));

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
                   {"parameters", parameters},
                   {"parameter_bytes", parameterBytes},
                   {"opset", ingested.model.opsetVersion}};

  FLOWC_ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::create(cache_.tmpDir()));
  std::string path = scratch.path() + "/artifact.fca";
  FLOWC_ASSIGN_OR_RETURN(auto writer, runtime::ArtifactWriter::create(path));
  FLOWC_RETURN_IF_ERROR(
      writer->addSection(runtime::SectionKind::Metadata, metadata.dump(2)));
  FLOWC_RETURN_IF_ERROR(
      writer->addSection(runtime::SectionKind::GraphIr, graph.irBytecode));
  FLOWC_RETURN_IF_ERROR(writer->addSection(runtime::SectionKind::Code, codeBlob.view()));
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
