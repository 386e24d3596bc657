// The model page's drawing of a model view's graph (flowc.model-view.v1):
// nodes grouped by the scopes of their names ("/layer1/layer1.0/conv1/Conv"
// is in layer1 > layer1.0 > conv1), groups collapsed into one box until the
// drawing is small enough to read, and runs of identical sibling groups (a
// transformer's layers) drawn as one box. Laid out by Graphviz's `dot` into
// SVG on the server: one well-tested layout for graphs of any size, no
// JavaScript library to vendor, and a page that only has to pan and zoom.
#pragma once

#include "flowc/support/Status.h"

#include <nlohmann/json.hpp>

#include <set>
#include <string>

namespace flowc::daemon {

struct GraphDrawing {
  /// The graph in Graphviz's language. Each box has an SVG id: "n<index>"
  /// for a node, "g:<scope>" for a collapsed group, "r:<scope>" for a run
  /// of groups like <scope>.
  std::string dot;
  /// Boxes drawn, and the graph's nodes in all.
  size_t boxes = 0;
  size_t nodes = 0;
};

/// Boxes a drawing aims at when it chooses which groups to open.
inline constexpr size_t kGraphBoxBudget = 60;
/// More boxes than this are refused (ResourceExhausted): no layout of them
/// is readable, and dot would take minutes.
inline constexpr size_t kGraphBoxLimit = 2500;

/// The drawing of `view` with the groups (and runs) whose ids are in `open`
/// opened, and further groups opened, largest first, while the drawing
/// stays within kGraphBoxBudget. InvalidArgument for a view that is not one.
Expected<GraphDrawing> drawGraph(const nlohmann::json &view,
                                 const std::set<std::string> &open);

/// `dot -Tsvg` of `drawing`: Unavailable naming the `graphviz` package when
/// dot is not installed, or when it takes longer than 30 s.
Expected<std::string> renderSvg(const GraphDrawing &drawing);

} // namespace flowc::daemon
