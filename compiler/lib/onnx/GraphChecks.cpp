// Structural checks of an ONNX graph, before any op is looked at: the
// importer (and everything after it) may then take one writer per value,
// defined-before-use and distinct outputs for granted.
#include "flowc/compiler/OnnxModel.h"

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace flowc::compiler {

namespace {

/// Who writes a value: a graph input, an initializer or node `index`.
struct Writer {
  enum class Kind { Input, Initializer, Node } kind;
  size_t index = 0;
};

std::string describeWriter(const OnnxModel &model, const Writer &writer) {
  switch (writer.kind) {
  case Writer::Kind::Input:
    return "graph input #" + std::to_string(writer.index);
  case Writer::Kind::Initializer:
    return "initializer #" + std::to_string(writer.index);
  case Writer::Kind::Node:
    break;
  }
  return model.nodes[writer.index].describe();
}

/// Node indices along some cycle of `deps` (node -> the nodes it reads
/// from), each reading from the next and the last from the first; empty
/// when there is none. One iterative depth-first search: O(nodes + edges).
std::vector<size_t> findCycle(const std::vector<std::vector<size_t>> &deps) {
  enum class Color : uint8_t { White, Grey, Black };
  std::vector<Color> color(deps.size(), Color::White);
  for (size_t root = 0; root < deps.size(); ++root) {
    if (color[root] != Color::White)
      continue;
    std::vector<std::pair<size_t, size_t>> stack{{root, 0}}; // node, next dep
    color[root] = Color::Grey;
    while (!stack.empty()) {
      auto &[node, next] = stack.back();
      if (next == deps[node].size()) {
        color[node] = Color::Black;
        stack.pop_back();
        continue;
      }
      size_t dep = deps[node][next++];
      if (color[dep] == Color::Grey) {
        // On the stack: the stack from `dep` up is the cycle.
        std::vector<size_t> cycle;
        for (auto it = stack.begin(); it != stack.end(); ++it)
          if (!cycle.empty() || it->first == dep)
            cycle.push_back(it->first);
        return cycle;
      }
      if (color[dep] == Color::White) {
        color[dep] = Color::Grey;
        stack.emplace_back(dep, 0);
      }
    }
  }
  return {};
}

} // namespace

Status validateGraph(const OnnxModel &model) {
  auto fail = [&](const std::string &message) {
    return invalidArgument(model.path + ": " + message);
  };
  std::map<std::string, Writer> writers;
  auto claim = [&](const std::string &name, Writer writer,
                   const std::string &what) -> Status {
    auto [it, inserted] = writers.emplace(name, writer);
    if (inserted)
      return Status::ok();
    return fail(what + " writes '" + name + "', which " +
                describeWriter(model, it->second) +
                " already defines (every value has one writer)");
  };
  for (size_t i = 0; i < model.inputs.size(); ++i) {
    if (model.inputs[i].name.empty())
      return fail("graph input #" + std::to_string(i) + " has no name");
    FLOWC_RETURN_IF_ERROR(claim(model.inputs[i].name, {Writer::Kind::Input, i},
                                "graph input #" + std::to_string(i)));
  }
  for (size_t i = 0; i < model.initializers.size(); ++i) {
    const std::string &name = model.initializers[i].info.name;
    if (name.empty())
      return fail("initializer #" + std::to_string(i) + " has no name");
    FLOWC_RETURN_IF_ERROR(
        claim(name, {Writer::Kind::Initializer, i}, "initializer #" + std::to_string(i)));
  }
  for (size_t i = 0; i < model.nodes.size(); ++i)
    for (const std::string &output : model.nodes[i].outputs)
      if (!output.empty()) // an omitted optional output
        FLOWC_RETURN_IF_ERROR(
            claim(output, {Writer::Kind::Node, i}, model.nodes[i].describe()));

  // Inputs read before they are written: a cycle, or nodes out of order.
  std::vector<std::vector<size_t>> deps(model.nodes.size());
  std::optional<std::pair<size_t, std::string>> firstEarlyRead;
  for (size_t i = 0; i < model.nodes.size(); ++i) {
    const Node &node = model.nodes[i];
    for (const std::string &input : node.inputs) {
      if (input.empty()) // an omitted optional input
        continue;
      auto it = writers.find(input);
      if (it == writers.end())
        return fail(node.describe() + " reads '" + input +
                    "', which no node, graph input or initializer defines");
      if (it->second.kind != Writer::Kind::Node)
        continue;
      deps[i].push_back(it->second.index);
      if (it->second.index >= i && !firstEarlyRead)
        firstEarlyRead.emplace(i, input);
    }
  }
  if (firstEarlyRead) {
    auto [reader, value] = *firstEarlyRead;
    if (std::vector<size_t> cycle = findCycle(deps); !cycle.empty()) {
      // Data flows against `deps`: from the cycle's last node to its first.
      std::string path;
      for (auto it = cycle.rbegin(); it != cycle.rend(); ++it)
        path += model.nodes[*it].describe() + " -> ";
      return fail("the graph has a cycle: " + path +
                  model.nodes[cycle.back()].describe());
    }
    return fail(model.nodes[reader].describe() + " reads '" + value + "' before " +
                describeWriter(model, writers.at(value)) +
                " writes it (ONNX nodes are listed in topological order)");
  }

  std::map<std::string, size_t> outputs;
  for (size_t i = 0; i < model.outputs.size(); ++i) {
    const std::string &name = model.outputs[i].name;
    auto [it, inserted] = outputs.emplace(name, i);
    if (!inserted)
      return fail("graph output '" + name + "' is listed twice (graph.output[" +
                  std::to_string(it->second) + "] and [" + std::to_string(i) + "])");
    if (!writers.count(name))
      return fail("graph output '" + name + "' is not computed by any node");
  }
  return Status::ok();
}

} // namespace flowc::compiler
