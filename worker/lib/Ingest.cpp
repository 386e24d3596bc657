// Ingest: a model file (or a reproducer) to its graph IR, weight digests
// and manifest, touching no cache.
#include "flowc/worker/CompileExecutor.h"
#include "flowc/worker/Reproducer.h"

#include "TensorJson.h"

#include <nlohmann/json.hpp>

namespace flowc::worker {

using nlohmann::json;

std::vector<std::string_view> IngestedModel::weightViews() const {
  std::vector<std::string_view> views;
  for (const compiler::WeightRef &weight : graph.weights)
    views.push_back(weight.bytes);
  return views;
}

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
  ingested.weightDigests = cache::digestMany(ingested.weightViews());
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

} // namespace flowc::worker
