// A static profile of an imported graph: per op type, how many nodes, how
// many parameters they bring, how many floating-point operations they cost
// and how many bytes of runtime tensors they write. Computed from the shapes
// the importer inferred, without compiling or running anything (the static
// view a profiler would show, for `flowc inspect`).
#pragma once

#include "flowc/compiler/Compiler.h"

#include <cstdint>
#include <string>
#include <vector>

namespace flowc::compiler {

/// Totals over the nodes of one op type (or over the whole graph).
struct OpProfile {
  std::string opType;
  uint64_t count = 0;
  /// Of `count`, nodes computed at import time: they cost no FLOPs and
  /// write no runtime tensors.
  uint64_t folded = 0;
  uint64_t parameters = 0;
  /// Multiply-add counts as 2.
  uint64_t flops = 0;
  /// Bytes of the runtime tensors these nodes write.
  uint64_t activationBytes = 0;
  /// Some node has no cost formula here (or lacked what the formula needs),
  /// so its FLOPs are its output element count, an order of magnitude only.
  bool estimated = false;
};

struct GraphProfile {
  /// One row per op type, by FLOPs (descending), then by name.
  std::vector<OpProfile> ops;
  /// Sums over every row; `opType` is "total".
  OpProfile total;
};

/// The static cost of one node.
struct NodeCost {
  uint64_t flops = 0;
  uint64_t activationBytes = 0;
  bool estimated = false;
};

/// Costs `record` from its recorded shapes. `source` is the ONNX node it
/// was imported from, for the one attribute shapes do not imply (a pooling
/// window); without it a pool's window is estimated from its shapes.
NodeCost nodeCost(const NodeRecord &record, const Node *source);

/// Profiles every node of `graph`. `model` is the ONNX model it was
/// imported from (nodes in the same order); pass nullptr when there is none.
/// Pure function of its arguments; never fails.
GraphProfile profileGraph(const ImportedGraph &graph, const OnnxModel *model);

} // namespace flowc::compiler
