// Static FLOP and activation counts per node, from the importer's shapes
// and the op table's cost formulas (OpRegistry.h; the formulas sit with
// each op in compiler/lib/import/{Nn,Math,Tensor}.cpp).
#include "flowc/compiler/Profile.h"

#include "flowc/compiler/OpRegistry.h"

#include "import/OpCost.h"

#include <algorithm>
#include <map>
#include <optional>

namespace flowc::compiler {

namespace {

using import::elements;
using import::hasShape;
using import::outputElements;

uint64_t activationBytes(const NodeRecord &record) {
  uint64_t bytes = 0;
  for (const TensorInfo &output : record.outputs)
    if (hasShape(output))
      bytes += elements(output) * dtypeSize(output.dtype);
  return bytes;
}

void accumulate(OpProfile &into, const OpProfile &row) {
  into.count += row.count;
  into.folded += row.folded;
  into.parameters += row.parameters;
  into.flops += row.flops;
  into.activationBytes += row.activationBytes;
  into.estimated = into.estimated || row.estimated;
}

} // namespace

NodeCost nodeCost(const NodeRecord &record, const Node *source) {
  NodeCost cost;
  // Computed at import: nothing runs and nothing is written at run time.
  if (record.folded)
    return cost;
  cost.activationBytes = activationBytes(record);
  const OpInfo *op = findOp(record.opType);
  if (op && op->cost)
    if (std::optional<uint64_t> flops = op->cost(record, source)) {
      cost.flops = *flops;
      return cost;
    }
  // No formula, or a shape it needs is missing: an order of magnitude.
  cost.estimated = true;
  cost.flops = op && op->estimate ? op->estimate(record) : outputElements(record);
  return cost;
}

GraphProfile profileGraph(const ImportedGraph &graph, const OnnxModel *model) {
  // The importer records one entry per ONNX node, in order; anything else
  // means the records came from elsewhere and attributes cannot be paired.
  bool paired = model && model->nodes.size() == graph.nodes.size();
  std::map<std::string, OpProfile> byOp;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const NodeRecord &record = graph.nodes[i];
    NodeCost cost = nodeCost(record, paired ? &model->nodes[i] : nullptr);
    OpProfile &row = byOp[record.opType];
    row.opType = record.opType;
    row.count += 1;
    row.folded += record.folded ? 1 : 0;
    row.parameters += record.parameterCount;
    row.flops += cost.flops;
    row.activationBytes += cost.activationBytes;
    row.estimated = row.estimated || cost.estimated;
  }
  GraphProfile profile;
  profile.total.opType = "total";
  for (auto &[op, row] : byOp) {
    accumulate(profile.total, row);
    profile.ops.push_back(std::move(row));
  }
  std::stable_sort(
      profile.ops.begin(), profile.ops.end(),
      [](const OpProfile &a, const OpProfile &b) { return a.flops > b.flops; });
  return profile;
}

} // namespace flowc::compiler
