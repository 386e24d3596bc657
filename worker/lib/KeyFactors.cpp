#include "KeyFactors.h"

#include "ActionKeys.h"

#include "flowc/support/Environment.h"

#include <filesystem>
#include <map>
#include <unistd.h>

namespace flowc::worker {

namespace {

using nlohmann::json;

std::string tensorText(const compiler::TensorInfo &info) {
  return info.name + ":" + compiler::dtypeName(info.dtype) + json(info.shape).dump();
}

/// A node's op, name and the tensors it reads and writes (attributes show
/// in the IR digest, not here).
std::string nodeSignature(const compiler::NodeRecord &node) {
  std::string text = node.opType + " " + node.name + " (";
  for (const compiler::TensorInfo &input : node.inputs)
    text += tensorText(input) + ",";
  text += ") -> (";
  for (const compiler::TensorInfo &output : node.outputs)
    text += tensorText(output) + ",";
  return text + ")";
}

std::string text(const json &value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
}

} // namespace

json keyFactors(const IngestedModel &ingested, const CompileRequest &request,
                const std::string &buildId, const cache::Digest &artifactKey,
                const std::string &tuningState) {
  json weights = json::array();
  for (size_t i = 0; i < ingested.graph.weights.size(); ++i) {
    const compiler::WeightRef &weight = ingested.graph.weights[i];
    weights.push_back(
        {weight.key,
         compiler::dtypeName(weight.info.dtype) + json(weight.info.shape).dump(),
         ingested.weightDigests[i].toString()});
  }
  json nodes = json::array();
  for (const compiler::NodeRecord &node : ingested.graph.nodes)
    nodes.push_back(nodeSignature(node));
  return {
      {"format", "flowc.key-factors.v1"},
      {"key", artifactKey.toString()},
      {"model", modelName(request.modelPath)},
      {"graph", ingested.irDigest.toString()},
      {"nodes", std::move(nodes)},
      {"weights", std::move(weights)},
      {"target", compiler::hostTargetDescription()},
      {"options", request.options.canonical() +
                      ";shapes=" + compiler::canonicalInputShapes(request.inputShapes) +
                      (request.kind == ArtifactKind::Thin ? ";thin" : "")},
      {"toolchain", buildId + " " + artifactFormat()},
      {"tuning", tuningState},
      {"host", hostName().value_or("?")},
      {"when", static_cast<int64_t>(::time(nullptr))},
  };
}

std::string modelName(const std::string &path) {
  std::filesystem::path file(path);
  std::string name = file.filename().string();
  return name.empty() ? file.parent_path().filename().string() : name;
}

namespace {

/// The first node that differs, or where one list ends early.
std::optional<std::string> graphDifference(const json &wanted, const json &nearest) {
  if (wanted.value("graph", "") == nearest.value("graph", ""))
    return std::nullopt;
  const json &a = wanted["nodes"], &b = nearest["nodes"];
  if (!a.is_array() || !b.is_array())
    return "graph: the IR differs";
  size_t count = std::min(a.size(), b.size());
  for (size_t i = 0; i < count; ++i)
    if (a[i] != b[i])
      return "graph: node " + std::to_string(i) + " differs: " + text(a[i]) +
             " (cached: " + text(b[i]) + ")";
  if (a.size() != b.size())
    return "graph: " + std::to_string(a.size()) +
           " nodes (cached: " + std::to_string(b.size()) + "); node " +
           std::to_string(count) +
           (a.size() > b.size() ? " is new: " + text(a[count])
                                : " is gone: " + text(b[count]));
  return "graph: every node's op and tensors are the same, so an attribute differs "
         "(IR " +
         text(wanted["graph"]) + ", cached " + text(nearest["graph"]) + ")";
}

std::optional<std::string> weightDifference(const json &wanted, const json &nearest) {
  std::map<std::string, json> cached;
  if (nearest["weights"].is_array())
    for (const json &weight : nearest["weights"])
      if (weight.is_array() && weight.size() == 3)
        cached[text(weight[0])] = weight;
  std::vector<std::string> changed;
  size_t count = 0;
  if (wanted["weights"].is_array())
    for (const json &weight : wanted["weights"]) {
      if (!weight.is_array() || weight.size() != 3)
        continue;
      auto it = cached.find(text(weight[0]));
      std::string why;
      if (it == cached.end())
        why = " (new)";
      else if (it->second[1] != weight[1])
        why = " (" + text(weight[1]) + ", cached " + text(it->second[1]) + ")";
      else if (it->second[2] != weight[2])
        why = " (contents)";
      if (it != cached.end())
        cached.erase(it);
      if (why.empty())
        continue;
      if (++count <= 5)
        changed.push_back(text(weight[0]) + why);
    }
  for (const auto &[name, weight] : cached)
    if (++count <= 5)
      changed.push_back(name + " (gone)");
  if (count == 0)
    return std::nullopt;
  std::string line = "weights: " + std::to_string(count) + " tensor(s) differ: ";
  for (size_t i = 0; i < changed.size(); ++i)
    line += (i ? ", " : "") + changed[i];
  return line + (count > changed.size() ? ", …" : "");
}

/// One line for a factor whose value is a single string.
std::optional<std::string> valueDifference(const json &wanted, const json &nearest,
                                           const char *factor) {
  if (wanted.value(factor, json()) == nearest.value(factor, json()))
    return std::nullopt;
  std::string a = text(wanted.value(factor, json())),
              b = text(nearest.value(factor, json()));
  // Long values (a target's feature list) differ in a few parts: name those.
  std::vector<std::string> partsA, partsB, only;
  auto split = [](const std::string &value, std::vector<std::string> &parts) {
    size_t start = 0;
    for (size_t i = 0; i <= value.size(); ++i)
      if (i == value.size() || value[i] == ',' || value[i] == ';' || value[i] == ' ') {
        if (i > start)
          parts.push_back(value.substr(start, i - start));
        start = i + 1;
      }
  };
  split(a, partsA);
  split(b, partsB);
  for (const std::string &part : partsA)
    if (std::find(partsB.begin(), partsB.end(), part) == partsB.end())
      only.push_back(part);
  std::string line = std::string(factor) + ": ";
  if (only.empty() || a.size() < 80)
    return line + a + " (cached: " + b + ")";
  for (size_t i = 0; i < only.size() && i < 8; ++i)
    line += (i ? " " : "") + only[i];
  return line + " here, not in the cached entry";
}

} // namespace

std::vector<std::string> factorDifferences(const json &wanted, const json &nearest) {
  std::vector<std::string> lines;
  for (const auto &difference :
       {graphDifference(wanted, nearest), weightDifference(wanted, nearest),
        valueDifference(wanted, nearest, "target"),
        valueDifference(wanted, nearest, "options"),
        valueDifference(wanted, nearest, "toolchain"),
        valueDifference(wanted, nearest, "tuning")})
    if (difference)
      lines.push_back(*difference);
  return lines;
}

size_t factorDistance(const json &wanted, const json &nearest) {
  return factorDifferences(wanted, nearest).size();
}

} // namespace flowc::worker
