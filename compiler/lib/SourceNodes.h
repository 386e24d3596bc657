// Which graph nodes an op came from. The importer gives every op it creates
// for ONNX node N the location `#N` (N: the node's index in graph order, as
// ImportedGraph::nodes). Lowering keeps or fuses locations, so after the
// partition the ops a kernel was made of still name their nodes: that is
// how the model page says which kernel and library call a node became.
// Indices, not names: two exports that differ only in node names keep the
// same IR, and an empty or repeated name stays unambiguous.
#pragma once

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/STLExtras.h"

#include <charconv>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

namespace flowc::compiler {

inline mlir::Location nodeLocation(mlir::MLIRContext *context, size_t index) {
  return mlir::NameLoc::get(mlir::StringAttr::get(context, "#" + std::to_string(index)));
}

/// Adds the node indices named anywhere in `location` (fused, call-site and
/// nested locations included).
inline void addSourceNodes(mlir::Location location, std::set<int32_t> &nodes) {
  location->walk([&](mlir::Location inner) {
    auto name = mlir::dyn_cast<mlir::NameLoc>(inner);
    if (!name)
      return mlir::WalkResult::advance();
    llvm::StringRef text = name.getName().getValue();
    int32_t index = 0;
    if (text.consume_front("#") &&
        std::from_chars(text.begin(), text.end(), index).ptr == text.end() && index >= 0)
      nodes.insert(index);
    return mlir::WalkResult::advance();
  });
}

/// The node indices of `op` and of every op nested in it, ascending.
inline void addSourceNodes(mlir::Operation *op, std::set<int32_t> &nodes) {
  op->walk([&](mlir::Operation *inner) { addSourceNodes(inner->getLoc(), nodes); });
}

} // namespace flowc::compiler
