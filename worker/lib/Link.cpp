// Link: the weights the code binds (derived ones evaluated, library
// kernels' ones packed, each cached by its inputs' digests), the code and
// the plan into an artifact in the cache. Runs where the weights are.
#include "flowc/worker/CompileExecutor.h"

#include "ActionKeys.h"
#include "JobProgress.h"

#include "flowc/compiler/Profile.h"
#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/PackedWeights.h"
#include "flowc/support/Concurrently.h"
#include "flowc/support/MappedFile.h"
#include "flowc/worker/Tasks.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace flowc::worker {

namespace {

using cache::Digest;
using nlohmann::json;

runtime::TensorSpec tensorSpec(const compiler::TensorInfo &info) {
  return {info.name, compiler::dtypeName(info.dtype), info.shape};
}

/// [[name, bytes], ...] of `tensors` (omitted optional inputs left out).
json tensorBytesJson(const std::vector<compiler::TensorInfo> &tensors) {
  json list = json::array();
  for (const compiler::TensorInfo &tensor : tensors) {
    if (tensor.name.empty())
      continue;
    int64_t elements = tensor.elementCount();
    uint64_t bytes = elements < 0 ? 0
                                  : static_cast<uint64_t>(elements) *
                                        compiler::dtypeSize(tensor.dtype);
    list.push_back({tensor.name, bytes});
  }
  return list;
}

/// What `flowc run --profile` names a kernel call's nodes by and divides
/// its time into: per graph node (in graph order, as the code's profile
/// calls number them), its name, op, static FLOPs (Profile.h) and the
/// tensors it reads and writes.
json profileNodesJson(const IngestedModel &ingested) {
  const std::vector<compiler::NodeRecord> &records = ingested.graph.nodes;
  const std::vector<compiler::Node> &sources = ingested.model.nodes;
  json nodes = json::array();
  for (size_t i = 0; i < records.size(); ++i) {
    const compiler::NodeRecord &record = records[i];
    // Names come from the model: invalid UTF-8 must not make dump() throw.
    json node = {{"name", record.name}, {"op", record.opType}};
    if (record.folded) {
      node["folded"] = true;
      nodes.push_back(std::move(node));
      continue;
    }
    const compiler::Node *source = i < sources.size() ? &sources[i] : nullptr;
    node["flops"] = compiler::nodeCost(record, source).flops;
    node["in"] = tensorBytesJson(record.inputs);
    node["out"] = tensorBytesJson(record.outputs);
    nodes.push_back(std::move(node));
  }
  return nodes;
}

} // namespace

Expected<std::optional<cache::BlobHandle>>
CompileExecutor::cachedDerivation(const Digest &key, cache::PinGuard &pins,
                                  bool remoteAsked) {
  FLOWC_ASSIGN_OR_RETURN(auto cached,
                         remoteAsked
                             ? cache_.lookupAction(cache::ActionKind::DerivedWeight, key)
                             : lookupTiered(cache::ActionKind::DerivedWeight, key));
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
  publish(cache::ActionKind::DerivedWeight, key, TierEntry::of(digest));
  return cache_.get(digest);
}

Expected<cache::BlobHandle>
CompileExecutor::derivedWeight(const IngestedModel &ingested,
                               const compiler::DerivedWeight &weight,
                               cache::PinGuard &pins, int &computed) {
  // The recipe and the sources' contents decide the result (and the build
  // that evaluates it): a fine-tune recomputes, another option set reuses.
  ActionKey key("flowc.derived.v1", buildId_);
  key.add(weight.recipe);
  std::vector<Digest> sourceDigests;
  for (const std::string &input : weight.inputs) {
    std::optional<size_t> index = ingested.graph.weightIndex(input);
    if (!index)
      return internalError("derived weight '" + weight.key + "' reads weight '" + input +
                           "', which the model does not have");
    sourceDigests.push_back(ingested.weightDigests[*index]);
    key.add(sourceDigests.back().toString());
  }
  Digest actionKey = key.digest();
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

namespace {

/// The candidate search chose for library kernel site `site` (empty: the
/// default).
std::string candidateOf(const std::vector<runtime::TunedKernelSpec> &tuned,
                        int64_t site) {
  for (const runtime::TunedKernelSpec &spec : tuned)
    if (spec.site == site)
      return spec.candidate;
  return "";
}

} // namespace

void CompileExecutor::prefetchRemote(cache::ActionKind kind,
                                     const std::vector<Digest> &keys) {
  if (!remote_)
    return;
  std::vector<Digest> missing;
  for (const Digest &key : keys) {
    auto cached = cache_.lookupAction(kind, key, cache::Cache::CountLookup::No);
    if (cached && !*cached)
      missing.push_back(key);
  }
  forEachConcurrently(missing.size(), kRemoteLookupsInFlight,
                      [&](size_t i) { remote_->fetch(kind, missing[i]); });
}

void CompileExecutor::prefetchPacked(const std::vector<PackedKeys> &keys) {
  if (!remote_)
    return;
  std::vector<Digest> layouts;
  for (const PackedKeys &key : keys)
    layouts.push_back(key.layout);
  prefetchRemote(cache::ActionKind::DerivedWeight, layouts);
  // The bytes of those with a layout (an empty one: the kernel reads the
  // weight as it is), as packedWeight would ask for them.
  std::vector<Digest> bytes;
  for (const PackedKeys &key : keys) {
    auto layout = cache_.lookupAction(cache::ActionKind::DerivedWeight, key.layout,
                                      cache::Cache::CountLookup::No);
    if (layout && *layout && (*layout)->size > 0)
      bytes.push_back(key.bytes);
  }
  prefetchRemote(cache::ActionKind::DerivedWeight, bytes);
}

CompileExecutor::PackedKeys
CompileExecutor::packedKeys(const compiler::KernelWeight &weight,
                            const std::string &candidate, const Digest &source) const {
  // The layout depends on the kernel, the candidate it runs, the CPU and
  // the library build; the bytes on the source's contents too.
  ActionKey key("flowc.packed.v2", buildId_);
  key.add(compiler::hostTargetDescription())
      .add(json({weight.kind, weight.buffer, weight.params}).dump())
      .add(candidate)
      .add(source.toString());
  return {key.digestOf("layout"), key.digest()};
}

Expected<std::optional<CompileExecutor::PackedBlob>>
CompileExecutor::packedWeight(const compiler::KernelWeight &weight,
                              const std::string &candidate, const PackedKeys &keys,
                              const cache::BlobHandle &source, cache::PinGuard &pins,
                              int &computed) {
  const auto &[layoutKey, bytesKey] = keys;
  FLOWC_ASSIGN_OR_RETURN(auto layout,
                         cachedDerivation(layoutKey, pins, /*remoteAsked=*/true));
  if (layout) {
    // An empty layout records that the kernel reads the weight as it is.
    if (layout->bytes().empty())
      return std::optional<PackedBlob>();
    FLOWC_ASSIGN_OR_RETURN(auto bytes,
                           cachedDerivation(bytesKey, pins, /*remoteAsked=*/true));
    if (bytes)
      return std::optional<PackedBlob>(
          PackedBlob{std::string(layout->bytes()), std::move(*bytes)});
  }
  FLOWC_ASSIGN_OR_RETURN(
      std::optional<runtime::PackedWeight> packed,
      runtime::packKernelWeight(static_cast<runtime::KernelKind>(weight.kind),
                                weight.params, weight.buffer, source.bytes(), candidate));
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
                              cache::PinGuard &pins, JobProgress &progress) {
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
  LinkedArtifact linked;
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
    if (code.weights.findDerived(key))
      linked.derivedWeights.push_back(blob.digest());
    spec.tensor.name = key;
    spec.digest = blob.digest().toString();
    spec.size = blob.bytes().size();
    pieces.push_back(blob.bytes());
    specs.push_back(std::move(spec));
    blobs.push_back(std::move(blob));
  }
  if (!code.weights.derived.empty()) {
    progress.countLookups("derived",
                          code.weights.derived.size() - static_cast<size_t>(computed),
                          static_cast<size_t>(computed));
    progress("derive",
             std::to_string(code.weights.derived.size()) + " derived weights (" +
                 std::to_string(computed) + " computed, " +
                 std::to_string(code.weights.derived.size() - computed) + " cached)");
  }
  // The library kernels' constant weights in the layouts their kernels
  // read on this CPU, after the bound weights: sessions map them in place.
  // Each one's source (the index of its bound weight's blob), candidate
  // and cache keys; the keys are asked of the remote tier all at once.
  std::vector<size_t> packedSources;
  std::vector<std::string> candidates;
  std::vector<PackedKeys> keys;
  for (const compiler::KernelWeight &weight : code.weights.kernelWeights) {
    auto bound =
        std::find(code.weights.keys.begin(), code.weights.keys.end(), weight.key);
    if (bound == code.weights.keys.end())
      return internalError("kernel site " + std::to_string(weight.site) +
                           " reads weight '" + weight.key +
                           "', which the code does not bind");
    packedSources.push_back(static_cast<size_t>(bound - code.weights.keys.begin()));
    candidates.push_back(candidateOf(code.tuned, weight.site));
    keys.push_back(
        packedKeys(weight, candidates.back(), blobs[packedSources.back()].digest()));
  }
  prefetchPacked(keys);
  std::vector<runtime::PackedWeightSpec> packedSpecs;
  int packedComputed = 0;
  for (size_t i = 0; i < code.weights.kernelWeights.size(); ++i) {
    const compiler::KernelWeight &weight = code.weights.kernelWeights[i];
    FLOWC_ASSIGN_OR_RETURN(std::optional<PackedBlob> packed,
                           packedWeight(weight, candidates[i], keys[i],
                                        blobs[packedSources[i]], pins, packedComputed));
    if (!packed)
      continue;
    packedSpecs.push_back({weight.site, weight.buffer, std::move(packed->layout),
                           packed->blob.digest().toString(), 0,
                           packed->blob.bytes().size()});
    linked.derivedWeights.push_back(packed->blob.digest());
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
                   {"target", targetName(options.target)},
                   {"target_description", compiler::hostTargetDescription()},
                   {"options", options.canonical()},
                   {"op_counts", graph.opCounts},
                   {"parameters", graph.parameterCount()},
                   {"parameter_bytes", graph.parameterBytes()},
                   {"opset", ingested.model.opsetVersion},
                   {"thin", request.kind == ArtifactKind::Thin},
                   {"nodes", profileNodesJson(ingested)}};
  // Where a thin artifact's weights are found when it runs.
  if (request.kind == ArtifactKind::Thin)
    metadata["weights_cache"] = cache_.root();

  FLOWC_ASSIGN_OR_RETURN(ScratchDir scratch, ScratchDir::create(cache_, "compile"));
  std::string path = scratch.path() + "/artifact.fca";
  FLOWC_ASSIGN_OR_RETURN(auto writer, runtime::ArtifactWriter::create(path));
  FLOWC_RETURN_IF_ERROR(
      writer->addSection(runtime::SectionKind::Metadata,
                         metadata.dump(-1, ' ', false, json::error_handler_t::replace)));
  FLOWC_RETURN_IF_ERROR(
      writer->addSection(runtime::SectionKind::GraphIr, graph.irBytecode));
  FLOWC_RETURN_IF_ERROR(writer->addSection(runtime::SectionKind::Code, codeBlob.bytes()));
  // A thin artifact refers to every weight that is a file in the cache by
  // digest; small ones (inside the index, no file to map) travel along.
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
  plan.tuned = code.tuned;
  FLOWC_RETURN_IF_ERROR(
      writer->addSection(runtime::SectionKind::Plan, plan.toJson().dump(2)));
  FLOWC_RETURN_IF_ERROR(writer->finish());
  FLOWC_ASSIGN_OR_RETURN(linked.digest, cache_.adoptFile(path));
  return linked;
}

} // namespace flowc::worker
