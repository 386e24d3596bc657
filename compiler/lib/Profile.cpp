// Static FLOP and activation counts per node, from the importer's shapes.
// The conventions (what one FLOP is for each op) are listed in
// docs/compiler.md, "Static profile"; keep the two in step.
#include "flowc/compiler/Profile.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>

namespace flowc::compiler {

namespace {

/// Ops that only move or reinterpret data: no arithmetic.
constexpr std::string_view kDataMovementOps[] = {
    "Cast",    "Concat",   "Constant",  "ConstantOfShape", "Dropout", "Expand", "Flatten",
    "Gather",  "Identity", "Pad",       "Reshape",         "Shape",   "Slice",  "Split",
    "Squeeze", "Tile",     "Transpose", "Unsqueeze"};

/// FLOPs per output element of elementwise ops. A transcendental function
/// (exp, erf, tanh, sqrt) counts as one, like a multiply.
struct PerElement {
  std::string_view op;
  uint64_t flops;
};
constexpr PerElement kElementwiseOps[] = {
    {"Abs", 1},
    {"Add", 1},
    {"Ceil", 1},
    {"Div", 1},
    {"Equal", 1},
    {"Erf", 1},
    {"Exp", 1},
    {"Floor", 1},
    {"Greater", 1},
    {"Less", 1},
    {"Log", 1},
    {"Mul", 1},
    {"Neg", 1},
    {"Pow", 1},
    {"Reciprocal", 1},
    {"Relu", 1},
    {"Sqrt", 1},
    {"Sub", 1},
    {"Tanh", 1},
    {"Where", 1},
    {"Clip", 2},        // min, max
    {"LeakyRelu", 2},   // compare, multiply
    {"PRelu", 2},       // compare, multiply
    {"Sigmoid", 4},     // neg, exp, add, divide
    {"HardSigmoid", 4}, // multiply, add, min, max
    {"HardSwish", 5},   // HardSigmoid, then a multiply
    {"Softmax", 5},     // max, subtract, exp, sum, divide
    // mean, subtract, square, variance, normalize, scale, shift
    {"LayerNormalization", 7},
    {"InstanceNormalization", 7},
};

/// Variadic elementwise ops: one FLOP per output element for each input
/// after the first (Mean adds the division).
constexpr std::string_view kVariadicOps[] = {"Max", "Min", "Sum", "Mean"};

uint64_t elements(const TensorInfo &info) {
  int64_t count = info.elementCount();
  return count < 0 ? 0 : static_cast<uint64_t>(count);
}

bool hasShape(const TensorInfo &info) {
  return !info.name.empty() && info.elementCount() >= 0;
}

bool present(const NodeRecord &record, size_t input) {
  return input < record.inputs.size() && !record.inputs[input].name.empty();
}

uint64_t outputElements(const NodeRecord &record) {
  return record.outputs.empty() ? 0 : elements(record.outputs[0]);
}

/// Product of the dimensions from `from` on: the per-output-channel work of
/// a convolution kernel.
uint64_t trailingProduct(const std::vector<int64_t> &shape, size_t from) {
  uint64_t product = 1;
  for (size_t i = from; i < shape.size(); ++i)
    product *= static_cast<uint64_t>(std::max<int64_t>(shape[i], 0));
  return product;
}

/// What `flops` returns: the count, or nothing when a shape it needs is
/// unknown (the caller then estimates).
using Flops = std::optional<uint64_t>;

/// Y = conv(X, W) + B with W [Cout, Cin/group, kh, kw]: every output element
/// is a dot product of length Cin/group * kh * kw.
Flops convFlops(const NodeRecord &record) {
  if (!present(record, 1) || !hasShape(record.inputs[1]) || record.outputs.empty())
    return std::nullopt;
  uint64_t out = outputElements(record);
  uint64_t flops = 2 * out * trailingProduct(record.inputs[1].shape, 1);
  return flops + (present(record, 2) ? out : 0);
}

/// ConvTranspose scatters every input element over W [Cin, Cout/group, kh, kw].
Flops convTransposeFlops(const NodeRecord &record) {
  if (!present(record, 1) || !hasShape(record.inputs[0]) || !hasShape(record.inputs[1]))
    return std::nullopt;
  uint64_t flops =
      2 * elements(record.inputs[0]) * trailingProduct(record.inputs[1].shape, 1);
  return flops + (present(record, 2) ? outputElements(record) : 0);
}

/// Y[M,N] = A·B (+ C): K is A's element count over M whether or not A is
/// transposed. alpha and beta scaling are not counted.
Flops gemmFlops(const NodeRecord &record) {
  if (record.inputs.size() < 2 || !hasShape(record.inputs[0]) || record.outputs.empty() ||
      record.outputs[0].shape.size() != 2 || record.outputs[0].shape[0] <= 0)
    return std::nullopt;
  uint64_t m = static_cast<uint64_t>(record.outputs[0].shape[0]);
  uint64_t k = elements(record.inputs[0]) / m;
  uint64_t out = outputElements(record);
  return 2 * out * k + (present(record, 2) ? out : 0);
}

/// Y[..., M, N] = A[..., M, K] · B[..., K, N], batch dimensions broadcast:
/// every output element is a dot product of length K.
Flops matMulFlops(const NodeRecord &record) {
  if (record.inputs.size() < 2 || !hasShape(record.inputs[0]) ||
      record.inputs[0].shape.empty() || record.outputs.empty())
    return std::nullopt;
  uint64_t k = static_cast<uint64_t>(record.inputs[0].shape.back());
  return 2 * outputElements(record) * k;
}

/// Every output element reads its window once (a compare or an add).
Flops poolFlops(const NodeRecord &record, const Node *source) {
  if (!source)
    return std::nullopt;
  auto it = source->attributes.find("kernel_shape");
  if (it == source->attributes.end() || it->second.ints.empty())
    return std::nullopt;
  uint64_t window = trailingProduct(it->second.ints, 0);
  return outputElements(record) * window;
}

/// Without the kernel size, the ratio of input to output elements: exact
/// for non-overlapping windows, low for overlapping ones.
uint64_t estimatedPoolFlops(const NodeRecord &record) {
  uint64_t out = outputElements(record);
  if (record.inputs.empty() || out == 0)
    return out;
  uint64_t in = elements(record.inputs[0]);
  return out * std::max<uint64_t>(1, (in + out - 1) / out);
}

/// y = (x - mean) * (scale * rsqrt(var + eps)) + bias: three per element,
/// three per channel.
Flops batchNormFlops(const NodeRecord &record) {
  if (record.outputs.empty() || record.outputs[0].shape.size() < 2)
    return std::nullopt;
  uint64_t channels =
      static_cast<uint64_t>(std::max<int64_t>(record.outputs[0].shape[1], 0));
  return 3 * outputElements(record) + 3 * channels;
}

/// A sum over the reduced elements, and a division per output for means.
Flops reduceFlops(const NodeRecord &record) {
  if (record.inputs.empty() || !hasShape(record.inputs[0]))
    return std::nullopt;
  uint64_t in = elements(record.inputs[0]);
  bool mean = record.opType == "ReduceMean" || record.opType == "GlobalAveragePool";
  return in + (mean ? outputElements(record) : 0);
}

bool isPool(const std::string &op) {
  return op == "MaxPool" || op == "AveragePool" || op == "LpPool";
}

bool isReduction(const std::string &op) {
  return op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" ||
         op == "ReduceMin" || op == "GlobalAveragePool" || op == "GlobalMaxPool";
}

/// The formula for `record`'s op, or nothing for an op without one.
std::optional<Flops> knownFlops(const NodeRecord &record, const Node *source) {
  const std::string &op = record.opType;
  if (std::find(std::begin(kDataMovementOps), std::end(kDataMovementOps), op) !=
      std::end(kDataMovementOps))
    return Flops(0);
  for (const PerElement &entry : kElementwiseOps)
    if (entry.op == op)
      return Flops(entry.flops * outputElements(record));
  if (std::find(std::begin(kVariadicOps), std::end(kVariadicOps), op) !=
      std::end(kVariadicOps)) {
    uint64_t perElement = record.inputs.size() > 1 ? record.inputs.size() - 1 : 0;
    return Flops((perElement + (op == "Mean" ? 1 : 0)) * outputElements(record));
  }
  if (op == "Conv")
    return convFlops(record);
  if (op == "ConvTranspose")
    return convTransposeFlops(record);
  if (op == "Gemm")
    return gemmFlops(record);
  if (op == "MatMul")
    return matMulFlops(record);
  if (op == "BatchNormalization")
    return batchNormFlops(record);
  if (isReduction(op))
    return reduceFlops(record);
  if (isPool(op))
    return poolFlops(record, source);
  return std::nullopt;
}

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
  std::optional<Flops> known = knownFlops(record, source);
  if (known && *known) {
    cost.flops = **known;
    return cost;
  }
  // No formula, or a shape it needs is missing: an order of magnitude.
  cost.estimated = true;
  cost.flops =
      isPool(record.opType) ? estimatedPoolFlops(record) : outputElements(record);
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
