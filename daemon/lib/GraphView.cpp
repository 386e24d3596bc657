#include "GraphView.h"

#include "flowc/support/Subprocess.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

namespace flowc::daemon {

namespace {

using nlohmann::json;

/// dot's time and output on the largest drawing allowed.
constexpr double kDotSeconds = 30;
constexpr size_t kDotOutputBytes = 64 << 20;

struct Group {
  std::string id; ///< The scope path joined by '/'; "" for the whole graph.
  std::string label;
  size_t parent = 0;
  std::vector<size_t> groups; ///< Child groups, by first appearance.
  std::vector<size_t> nodes;  ///< Nodes directly in it.
  size_t total = 0;           ///< Nodes in it and below.
  uint64_t flops = 0;
  /// Op types and output shapes of every node in it, in graph order: equal
  /// for groups that compute alike (a transformer's layers).
  std::string signature;
  bool open = false;
};

std::vector<std::string> scopeOf(const std::string &name) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= name.size()) {
    size_t slash = name.find('/', start);
    if (slash == std::string::npos)
      slash = name.size();
    if (slash > start)
      parts.push_back(name.substr(start, slash - start));
    start = slash + 1;
  }
  // The last part names the node itself.
  if (!parts.empty())
    parts.pop_back();
  return parts;
}

std::string dotString(const std::string &text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\')
      out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  }
  return out + "\"";
}

std::string flopsText(uint64_t flops) {
  char text[32];
  if (flops >= 1'000'000'000)
    std::snprintf(text, sizeof text, "%.2f GFLOP", static_cast<double>(flops) / 1e9);
  else if (flops >= 1'000'000)
    std::snprintf(text, sizeof text, "%.1f MFLOP", static_cast<double>(flops) / 1e6);
  else if (flops >= 1000)
    std::snprintf(text, sizeof text, "%.1f kFLOP", static_cast<double>(flops) / 1e3);
  else
    std::snprintf(text, sizeof text, "%llu FLOP", static_cast<unsigned long long>(flops));
  return text;
}

std::string shapeText(const json &tensor) {
  if (!tensor.is_object() || !tensor.contains("shape") || !tensor["shape"].is_array())
    return "";
  std::string text;
  for (const json &dim : tensor["shape"])
    text += (text.empty() ? "" : "x") +
            (dim.is_number_integer() ? std::to_string(dim.get<int64_t>()) : "?");
  return text.empty() ? "scalar" : text;
}

class Drawer {
public:
  explicit Drawer(const json &view) : view_(view), nodes_(view["nodes"]) {}

  Status build() {
    groups_.push_back(Group{});
    groups_[0].open = true;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      const json &node = nodes_[i];
      if (!node.is_object())
        return invalidArgument("node " + std::to_string(i) + " is not an object");
      if (node.value("folded", false))
        continue;
      size_t at = 0;
      std::string path;
      for (const std::string &part : scopeOf(node.value("name", ""))) {
        path += (path.empty() ? "" : "/") + part;
        at = child(at, path, part);
      }
      groups_[at].nodes.push_back(i);
      std::string signature =
          node.value("op", "?") + ":" + shapeText(firstOutput(node)) + ";";
      uint64_t flops = node.value("flops", uint64_t(0));
      for (size_t g = at;; g = groups_[g].parent) {
        ++groups_[g].total;
        groups_[g].flops += flops;
        groups_[g].signature += signature;
        if (g == 0)
          break;
      }
      ++drawn_;
    }
    return Status::ok();
  }

  /// Opens what `open` names (with the groups above), then single-child
  /// chains, then the largest groups while the boxes fit the budget.
  void choose(const std::set<std::string> &open) {
    for (size_t g = 1; g < groups_.size(); ++g)
      if (open.count("g:" + groups_[g].id))
        for (size_t at = g; at != 0; at = groups_[at].parent)
          groups_[at].open = true;
    unfolded_ = open;
    for (;;) {
      size_t best = 0;
      size_t boxes = countBoxes();
      for (size_t g = 1; g < groups_.size(); ++g) {
        if (groups_[g].open || !shown(g))
          continue;
        size_t units = groups_[g].groups.size() + groups_[g].nodes.size();
        bool chain = units == 1;
        if (!chain && boxes - 1 + units > kGraphBoxBudget)
          continue;
        if (chain) {
          best = g;
          break;
        }
        if (!best || groups_[g].total > groups_[best].total)
          best = g;
      }
      if (!best)
        return;
      groups_[best].open = true;
    }
  }

  Expected<GraphDrawing> draw() {
    GraphDrawing drawing;
    drawing.nodes = drawn_;
    unitOf_.assign(nodes_.size(), "");
    std::string body;
    emitGroup(0, body, 1);
    drawing.boxes = boxes_;
    if (boxes_ > kGraphBoxLimit)
      return Status(StatusCode::ResourceExhausted,
                    "the drawing would have " + std::to_string(boxes_) +
                        " boxes (at most " + std::to_string(kGraphBoxLimit) +
                        "): open fewer groups");
    drawing.dot =
        "digraph model {\n"
        "  graph [rankdir=TB, nodesep=0.25, ranksep=0.35, fontname=\"sans-serif\", "
        "fontsize=11, bgcolor=\"transparent\"];\n"
        "  node [shape=box, style=\"rounded,filled\", fillcolor=\"#ffffff\", "
        "color=\"#7a8699\", fontname=\"sans-serif\", fontsize=10, "
        "margin=\"0.08,0.04\"];\n"
        "  edge [color=\"#8a94a6\", arrowsize=0.6];\n" +
        body + edges() + "}\n";
    return drawing;
  }

private:
  static json firstOutput(const json &node) {
    return node.contains("outputs") && node["outputs"].is_array() &&
                   !node["outputs"].empty()
               ? node["outputs"][0]
               : json();
  }

  size_t child(size_t parent, const std::string &id, const std::string &label) {
    auto [it, added] = byId_.try_emplace(id, groups_.size());
    if (added) {
      Group group;
      group.id = id;
      group.label = label;
      group.parent = parent;
      groups_.push_back(std::move(group));
      groups_[parent].groups.push_back(it->second);
    }
    return it->second;
  }

  /// Whether group `g` is drawn as a box of its own (its parents open, not
  /// folded into a run).
  bool shown(size_t g) const {
    for (size_t at = g; at != 0; at = groups_[at].parent) {
      if (inRun(at))
        return false;
      if (at != g && !groups_[at].open)
        return false;
    }
    return true;
  }

  /// Whether sibling groups `a` and `b` repeat one block: they compute
  /// alike and are named alike but for numbers ("layer.3", "layer.4").
  bool alike(size_t a, size_t b) const {
    auto pattern = [](const std::string &label) {
      std::string out;
      for (char c : label)
        if (c < '0' || c > '9')
          out += c;
      return out;
    };
    return groups_[a].signature == groups_[b].signature &&
           pattern(groups_[a].label) == pattern(groups_[b].label);
  }

  /// The index of the first group of the run `g` is a later member of, if
  /// the run is folded: runs of three or more alike groups are, unless
  /// opened ("r:<first>").
  std::optional<size_t> runStart(size_t g) const {
    const std::vector<size_t> &siblings = groups_[groups_[g].parent].groups;
    auto it = std::find(siblings.begin(), siblings.end(), g);
    if (it == siblings.begin() || it == siblings.end())
      return std::nullopt;
    auto first = it, last = it;
    while (first != siblings.begin() && alike(*(first - 1), g))
      --first;
    while (last + 1 != siblings.end() && alike(*(last + 1), g))
      ++last;
    if (first == it || last - first < 2 || unfolded_.count("r:" + groups_[*first].id))
      return std::nullopt;
    return *first;
  }
  bool inRun(size_t g) const { return runStart(g).has_value(); }

  size_t countBoxes() const {
    size_t boxes = 0;
    std::vector<size_t> stack{0};
    while (!stack.empty()) {
      size_t g = stack.back();
      stack.pop_back();
      boxes += groups_[g].nodes.size();
      const std::vector<size_t> &children = groups_[g].groups;
      for (size_t i = 0; i < children.size(); ++i) {
        size_t c = children[i];
        if (inRun(c)) {
          // One box for a run's later members together (a run's first
          // group never is one of them, so a new run starts after one).
          if (!inRun(children[i - 1]))
            ++boxes;
          continue;
        }
        if (groups_[c].open)
          stack.push_back(c);
        else
          ++boxes;
      }
    }
    return boxes;
  }

  void assignUnit(size_t g, const std::string &unit) {
    for (size_t n : groups_[g].nodes)
      unitOf_[n] = unit;
    for (size_t c : groups_[g].groups)
      assignUnit(c, unit);
  }

  std::string nodeLabel(size_t i) const {
    const json &node = nodes_[i];
    std::string op = node.value("op", "?");
    std::string name = node.value("name", "");
    std::string shortName =
        name.substr(name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1);
    std::string label = op;
    if (!shortName.empty() && shortName != op)
      label += "  " + shortName;
    std::string shape = shapeText(firstOutput(node));
    if (!shape.empty())
      label += "\n" + shape;
    uint64_t flops = node.value("flops", uint64_t(0));
    if (flops)
      label += "\n" + flopsText(flops);
    std::string kernels = kernelText(node);
    if (!kernels.empty())
      label += "\n→ " + kernels;
    return label;
  }

  std::string kernelText(const json &node) const {
    if (!node.contains("kernels") || !node["kernels"].is_array())
      return "";
    const json &kernels = view_["kernels"];
    std::string text;
    size_t shown = 0;
    for (const json &index : node["kernels"]) {
      if (!index.is_number_unsigned() || index.get<size_t>() >= kernels.size())
        continue;
      if (++shown > 2) {
        text += " +" + std::to_string(node["kernels"].size() - 2);
        break;
      }
      const json &kernel = kernels[index.get<size_t>()];
      std::string name = kernel.value("name", "?");
      text += (text.empty() ? "" : ", ") +
              (kernel.value("library", false)
                   ? kernel.value("kind", "?") + " (" + name + ")"
                   : "loop " + name.substr(0, std::min<size_t>(name.size(), 20)));
    }
    return text;
  }

  std::string fillOf(const json &node) const {
    if (!node.contains("kernels") || !node["kernels"].is_array() ||
        node["kernels"].empty())
      return "#ffffff";
    size_t k = node["kernels"][0].get<size_t>();
    bool library =
        k < view_["kernels"].size() && view_["kernels"][k].value("library", false);
    return library ? "#dbe8fb" : "#fdf3d0";
  }

  void box(std::string &out, int depth, const std::string &id, const std::string &label,
           const std::string &tooltip, const std::string &attributes) {
    ++boxes_;
    out += std::string(depth * 2, ' ') + dotString(id) + " [id=" + dotString(id) +
           ", label=" + dotString(label) + ", tooltip=" + dotString(tooltip) +
           (attributes.empty() ? "" : ", " + attributes) + "];\n";
  }

  std::string groupLabel(const Group &group) const {
    return group.label + "\n" + std::to_string(group.total) + " nodes · " +
           flopsText(group.flops);
  }

  void emitGroup(size_t g, std::string &out, int depth) {
    const Group &group = groups_[g];
    for (size_t n : group.nodes) {
      std::string id = "n" + std::to_string(n);
      unitOf_[n] = id;
      box(out, depth, id, nodeLabel(n), nodes_[n].value("name", ""),
          "fillcolor=" + dotString(fillOf(nodes_[n])));
    }
    for (size_t i = 0; i < group.groups.size(); ++i) {
      size_t c = group.groups[i];
      if (std::optional<size_t> first = runStart(c)) {
        // A run's later members: one box, drawn at its first later member.
        if (i > 0 && inRun(group.groups[i - 1]))
          continue;
        size_t end = i;
        while (end + 1 < group.groups.size() && inRun(group.groups[end + 1]) &&
               runStart(group.groups[end + 1]) == first)
          ++end;
        std::string id = "r:" + groups_[*first].id;
        for (size_t m = i; m <= end; ++m)
          assignUnit(group.groups[m], id);
        size_t count = end - i + 1;
        std::string label = groups_[c].label +
                            (count > 1 ? " … " + groups_[group.groups[end]].label : "") +
                            "\n×" + std::to_string(count) + " like " +
                            groups_[*first].label;
        box(out, depth, id, label, "repeated blocks: open to draw each",
            "shape=box3d, style=filled, fillcolor=\"#eceff4\"");
        continue;
      }
      if (groups_[c].open) {
        out += std::string(depth * 2, ' ') + "subgraph " +
               dotString("cluster:" + groups_[c].id) + " {\n" +
               std::string(depth * 2 + 2, ' ') + "id=" + dotString("c:" + groups_[c].id) +
               "; label=" + dotString(groups_[c].label) +
               "; style=\"rounded\"; color=\"#c5ccd8\";\n";
        emitGroup(c, out, depth + 1);
        out += std::string(depth * 2, ' ') + "}\n";
        continue;
      }
      std::string id = "g:" + groups_[c].id;
      assignUnit(c, id);
      box(out, depth, id, groupLabel(groups_[c]),
          groups_[c].id + ": open to draw its nodes",
          "style=\"filled\", fillcolor=\"#eceff4\"");
    }
  }

  std::string edges() {
    std::map<std::string, std::string> producer;
    std::string out;
    for (const json &input : view_.value("inputs", json::array())) {
      std::string name = input.value("name", "");
      std::string id = "in:" + name;
      producer[name] = id;
      out += "  " + dotString(id) + " [id=" + dotString(id) +
             ", label=" + dotString(name + "\n" + shapeText(input)) +
             ", shape=ellipse, style=filled, fillcolor=\"#e3f4e1\"];\n";
      ++boxes_;
    }
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (!unitOf_[i].empty())
        for (const json &output : nodes_[i].value("outputs", json::array()))
          producer[output.value("name", "")] = unitOf_[i];
    std::set<std::pair<std::string, std::string>> drawn;
    auto edge = [&](const std::string &from, const std::string &to) {
      if (from != to && drawn.insert({from, to}).second)
        out += "  " + dotString(from) + " -> " + dotString(to) + ";\n";
    };
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (unitOf_[i].empty())
        continue;
      for (const json &input : nodes_[i].value("inputs", json::array()))
        if (auto it = producer.find(input.value("name", "")); it != producer.end())
          edge(it->second, unitOf_[i]);
    }
    for (const json &output : view_.value("outputs", json::array())) {
      std::string name = output.value("name", "");
      std::string id = "out:" + name;
      out += "  " + dotString(id) + " [id=" + dotString(id) +
             ", label=" + dotString(name + "\n" + shapeText(output)) +
             ", shape=ellipse, style=filled, fillcolor=\"#fbe3e3\"];\n";
      ++boxes_;
      if (auto it = producer.find(name); it != producer.end())
        edge(it->second, id);
    }
    return out;
  }

  const json &view_;
  const json &nodes_;
  std::vector<Group> groups_;
  std::map<std::string, size_t> byId_;
  std::set<std::string> unfolded_;
  std::vector<std::string> unitOf_;
  size_t drawn_ = 0;
  size_t boxes_ = 0;
};

} // namespace

Expected<GraphDrawing> drawGraph(const json &view, const std::set<std::string> &open) {
  if (!view.is_object() || !view.contains("nodes") || !view["nodes"].is_array())
    return invalidArgument("not a model view: it has no node list");
  try {
    Drawer drawer(view);
    FLOWC_RETURN_IF_ERROR(drawer.build());
    drawer.choose(open);
    return drawer.draw();
  } catch (const json::exception &e) {
    return invalidArgument(std::string("a damaged model view: ") + e.what());
  }
}

Expected<std::string> renderSvg(const GraphDrawing &drawing) {
  Expected<std::string> svg =
      filterThroughProgram({"dot", "-Tsvg"}, drawing.dot, kDotSeconds, kDotOutputBytes);
  if (!svg && svg.status().message().find("cannot run") != std::string::npos)
    return unavailable("Graphviz's dot is not installed (Debian package 'graphviz'; "
                       "scripts/setup.sh installs it): the graph cannot be drawn");
  return svg;
}

} // namespace flowc::daemon
