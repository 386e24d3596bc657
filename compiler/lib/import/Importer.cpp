// The importer's driver: values, weights, validation, the op table and
// `run`, which turns an ONNX graph into one func.func @main of TOSA ops.
// ONNX's NCHW layout is kept at the graph level; convolution and pooling,
// which TOSA defines on NHWC, are wrapped in transposes that
// canonicalization cancels between neighbouring layers. The ops themselves
// live in their families: Nn.cpp, Math.cpp, Tensor.cpp.
#include "Importer.h"

#include "../SourceNodes.h"

#include "flowc/compiler/GraphIr.h"
#include "flowc/compiler/dialect/FlowcDialect.h"
#include "flowc/support/Half.h"
#include "flowc/support/PhysicalMemory.h"

#include "mlir/Bytecode/BytecodeWriter.h"
#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>
#include <vector>

namespace flowc::compiler {

namespace import {

int64_t product(const Shape &shape, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < shape.size(); ++i)
    p *= shape[i];
  return p;
}

Value Importer::scalar(float value, size_t rank) {
  Shape shape(rank, 1);
  auto type = f32(shape);
  auto dense = mlir::DenseElementsAttr::get(type, llvm::ArrayRef<float>(value));
  return mlir::tosa::ConstOp::create(builder_, loc_, type, dense);
}

Value Importer::zeros(mlir::Type element, const Shape &shape) {
  auto type = mlir::RankedTensorType::get(shape, element);
  return mlir::tosa::ConstOp::create(
      builder_, loc_, type,
      mlir::cast<mlir::DenseElementsAttr>(builder_.getZeroAttr(type)));
}

Value Importer::integer(mlir::Type element, int64_t value, size_t rank) {
  auto type = mlir::RankedTensorType::get(Shape(rank, 1), element);
  llvm::APInt bits(element.getIntOrFloatBitWidth(), static_cast<uint64_t>(value),
                   /*isSigned=*/true);
  return mlir::tosa::ConstOp::create(builder_, loc_, type,
                                     mlir::DenseElementsAttr::get(type, bits));
}

Value Importer::zeroPoint() { return scalar(0.0f, 1); }

Value Importer::zeroShift() {
  auto type = mlir::RankedTensorType::get({1}, builder_.getI8Type());
  return mlir::tosa::ConstOp::create(
      builder_, loc_, type,
      mlir::DenseElementsAttr::get(type, llvm::ArrayRef<int8_t>(0)));
}

Value Importer::transpose(Value v, llvm::ArrayRef<int32_t> perms) {
  Shape in = shapeOf(v), out;
  for (int32_t p : perms)
    out.push_back(in[p]);
  return buildTyped<mlir::tosa::TransposeOp>(
      elementTypeOf(v), out, {v}, {attr("perms", builder_.getDenseI32ArrayAttr(perms))});
}

Value Importer::constShape(const Shape &shape) {
  auto shapeType = mlir::tosa::shapeType::get(&ctx_, static_cast<int>(shape.size()));
  auto indexType = mlir::RankedTensorType::get({static_cast<int64_t>(shape.size())},
                                               builder_.getIndexType());
  llvm::SmallVector<llvm::APInt> dims;
  for (int64_t d : shape)
    dims.push_back(llvm::APInt(64, d, true));
  auto values = mlir::DenseIntElementsAttr::get(indexType, dims);
  return mlir::tosa::ConstShapeOp::create(builder_, loc_, shapeType, values);
}

Value Importer::reshape(Value v, const Shape &shape) {
  if (shapeOf(v) == shape)
    return v;
  // The same bytes: uint8 stays uint8 (a 1-D convolution's 2-D view of its
  // uint8 source reads it so).
  return markBytes(
      buildTyped<mlir::tosa::ReshapeOp>(elementTypeOf(v), shape, {v, constShape(shape)}),
      dtypeOf(v));
}

Value Importer::slice(Value v, const Shape &start, const Shape &size) {
  if (shapeOf(v) == size)
    return v;
  return buildTyped<mlir::tosa::SliceOp>(elementTypeOf(v), size,
                                         {v, constShape(start), constShape(size)});
}

Value Importer::sliceAlong(Value v, int64_t axis, int64_t from, int64_t size) {
  Shape start(shapeOf(v).size(), 0), sizes = shapeOf(v);
  start[axis] = from;
  sizes[axis] = size;
  return slice(v, start, sizes);
}

Value Importer::reverseAlong(Value v, int64_t axis) {
  return buildTyped<mlir::tosa::ReverseOp>(
      elementTypeOf(v), shapeOf(v), {v},
      {attr("axis", builder_.getI32IntegerAttr(static_cast<int32_t>(axis)))});
}

Value Importer::concatAlong(llvm::ArrayRef<Value> parts, int64_t axis) {
  if (parts.size() == 1)
    return parts[0];
  Shape out = shapeOf(parts[0]);
  out[axis] = 0;
  for (Value part : parts)
    out[axis] += shapeOf(part)[axis];
  return buildTyped<mlir::tosa::ConcatOp>(
      elementTypeOf(parts[0]), out, parts,
      {attr("axis", builder_.getI32IntegerAttr(static_cast<int32_t>(axis)))});
}

Status Importer::sameElementType(const Node &node, Value a, Value b) const {
  if (elementTypeOf(a) == elementTypeOf(b))
    return Status::ok();
  return nodeError(node, "inputs differ in type (" + dtypeName(dtypeOf(a)) + " and " +
                             dtypeName(dtypeOf(b)) + ")");
}

Value Importer::fitWindows(Value nhwc, std::array<int64_t, 4> &pads, const Shape &kernel,
                           const Shape &strides, const Shape &dilations) {
  Shape in = shapeOf(nhwc), size = in;
  for (int i = 0; i < 2; ++i) {
    int64_t span = in[1 + i] - 1 + pads[i] + pads[i + 2] - dilations[i] * (kernel[i] - 1);
    int64_t unused = span % strides[i];
    int64_t fromPad = std::min(unused, pads[i + 2]);
    pads[i + 2] -= fromPad;
    size[1 + i] -= unused - fromPad;
  }
  return slice(nhwc, Shape(in.size(), 0), size);
}

Expected<Value> Importer::weightArgument(const Node &node, const TensorData &tensor) {
  mlir::Type element = elementType(tensor.info.dtype);
  if (!element)
    return nodeUnsupported(node, "tensor '" + tensor.info.name + "' has dtype " +
                                     dtypeName(tensor.info.dtype) +
                                     "; supported: " + kCarriedDtypes);
  // Small-constant folding: a float scalar (GELU's sqrt(2), LayerNorm's
  // epsilon, a 0.5) is part of the graph's arithmetic, not a weight a
  // fine-tune changes; as an IR constant it folds and lets passes see the
  // formula it belongs to.
  // A widened half constant is small too, and as float32 it is no weight
  // of the model's.
  bool widened = widenedCopies_.count(&tensor) > 0;
  if (tensor.info.dtype == DType::F32 && (tensor.info.elementCount() == 1 || widened) &&
      tensor.bytes.size() == sizeof(float) * tensor.info.elementCount()) {
    std::vector<float> values(tensor.bytes.size() / sizeof(float));
    std::memcpy(values.data(), tensor.bytes.data(), tensor.bytes.size());
    auto type = mlir::RankedTensorType::get(tensor.info.shape, element);
    Value constant = mlir::tosa::ConstOp::create(
        builder_, loc_, type, mlir::DenseElementsAttr::get(type, llvm::ArrayRef(values)));
    values_[tensor.info.name] = constant;
    return constant;
  }
  Value arg = markBytes(
      entry_->addArgument(mlir::RankedTensorType::get(tensor.info.shape, element), loc_),
      tensor.info.dtype);
  weights_.push_back(
      WeightRef{tensor.info.name, tensor.info, tensor.bytes, tensor.owned});
  values_[tensor.info.name] = arg;
  return arg;
}

Expected<Value> Importer::operand(const Node &node, size_t index) {
  FLOWC_ASSIGN_OR_RETURN(Value v, anyOperand(node, index));
  if (!elementTypeOf(v).isF32())
    return nodeUnsupported(node, "input '" + node.inputs[index] + "' is " +
                                     dtypeName(dtypeOf(v)) + "; " + node.opType +
                                     " is supported on float32 only");
  return v;
}

Expected<Value> Importer::anyOperand(const Node &node, size_t index) {
  if (!hasOperand(node, index))
    return nodeError(node, "missing input #" + std::to_string(index));
  const std::string &name = node.inputs[index];
  if (auto it = values_.find(name); it != values_.end())
    return it->second;
  if (auto it = constants_.find(name); it != constants_.end())
    return weightArgument(node, *it->second);
  return nodeError(node, "input '" + name +
                             "' is not produced by any node, input or initializer");
}

Expected<const TensorData *> Importer::constantOperand(const Node &node, size_t index) {
  if (!hasOperand(node, index))
    return nodeError(node, "missing input #" + std::to_string(index));
  auto it = constants_.find(node.inputs[index]);
  if (it == constants_.end())
    return nodeUnsupported(node,
                           "input '" + node.inputs[index] +
                               "' must be a constant (initializer or Constant node)");
  return it->second;
}

Status Importer::define(const Node &node, Value value) {
  if (node.outputs.empty())
    return nodeError(node, "node has no output");
  FLOWC_RETURN_IF_ERROR(checkRuntimeShape(node, shapeOf(value)));
  values_[node.outputs[0]] = value;
  return Status::ok();
}

Status Importer::defineOutput(const Node &node, size_t index, Value value) {
  if (index >= node.outputs.size())
    return nodeError(node, "node has no output #" + std::to_string(index));
  FLOWC_RETURN_IF_ERROR(checkRuntimeShape(node, shapeOf(value)));
  if (!node.outputs[index].empty())
    values_[node.outputs[index]] = value;
  return Status::ok();
}

Expected<Shape> Importer::broadcastShape(const Node &node, const Shape &a,
                                         const Shape &b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      return nodeError(node, "shapes " + shapeString(a) + " and " + shapeString(b) +
                                 " cannot be broadcast");
    out[i] = std::max(da, db);
  }
  return out;
}

Expected<Value> Importer::broadcastTo(const Node &node, Value v, size_t rank) {
  Shape shape = shapeOf(v);
  if (shape.size() == rank)
    return v;
  Shape padded(rank - shape.size(), 1);
  padded.insert(padded.end(), shape.begin(), shape.end());
  return reshape(v, padded);
}

/// Explicit pads [top, left, bottom, right] of a 2-D window op, from `pads`
/// (`given`, validated) or `auto_pad`. Window values are validated.
Expected<std::array<int64_t, 4>> windowPads(const Node &node, const Shape &given,
                                            const Shape &inHW, const Shape &kernel,
                                            const Shape &strides,
                                            const Shape &dilations) {
  std::array<int64_t, 4> pads{0, 0, 0, 0};
  std::string mode = stringAttr(node, "auto_pad", "NOTSET");
  if (mode == "NOTSET") {
    std::copy(given.begin(), given.end(), pads.begin());
    return pads;
  }
  if (mode == "VALID")
    return pads;
  if (mode != "SAME_UPPER" && mode != "SAME_LOWER")
    return invalidArgument(node.describe() + ": unknown auto_pad '" + mode + "'");
  for (int i = 0; i < 2; ++i) {
    int64_t out = (inHW[i] + strides[i] - 1) / strides[i];
    int64_t total = std::max<int64_t>(
        0, (out - 1) * strides[i] + dilations[i] * (kernel[i] - 1) + 1 - inHW[i]);
    int64_t small = total / 2, large = total - small;
    pads[i] = mode == "SAME_UPPER" ? small : large;
    pads[i + 2] = mode == "SAME_UPPER" ? large : small;
  }
  return pads;
}

Shape intsAttr(const Node &node, const char *name, Shape fallback) {
  auto it = node.attributes.find(name);
  return it == node.attributes.end() ? fallback : Shape(it->second.ints);
}

int64_t intAttr(const Node &node, const char *name, int64_t fallback) {
  auto it = node.attributes.find(name);
  return it == node.attributes.end() ? fallback : it->second.i;
}

std::string stringAttr(const Node &node, const char *name, std::string fallback) {
  auto it = node.attributes.find(name);
  return it == node.attributes.end() ? fallback : it->second.s;
}

float floatAttr(const Node &node, const char *name, float fallback) {
  auto it = node.attributes.find(name);
  return it == node.attributes.end() ? fallback : it->second.f;
}

/// The kind each attribute the importer reads must have, by name (ONNX
/// gives a name one meaning across the ops flowc imports).
std::optional<Attribute::Kind> expectedKind(const std::string &name) {
  using Kind = Attribute::Kind;
  static const std::map<std::string, Kind> kinds = {{"strides", Kind::Ints},
                                                    {"dilations", Kind::Ints},
                                                    {"kernel_shape", Kind::Ints},
                                                    {"pads", Kind::Ints},
                                                    {"perm", Kind::Ints},
                                                    {"axes", Kind::Ints},
                                                    {"split", Kind::Ints},
                                                    {"starts", Kind::Ints},
                                                    {"ends", Kind::Ints},
                                                    {"value_ints", Kind::Ints},
                                                    {"axis", Kind::Int},
                                                    {"group", Kind::Int},
                                                    {"keepdims", Kind::Int},
                                                    {"transA", Kind::Int},
                                                    {"transB", Kind::Int},
                                                    {"allowzero", Kind::Int},
                                                    {"ceil_mode", Kind::Int},
                                                    {"count_include_pad", Kind::Int},
                                                    {"noop_with_empty_axes", Kind::Int},
                                                    {"select_last_index", Kind::Int},
                                                    {"to", Kind::Int},
                                                    {"start", Kind::Int},
                                                    {"end", Kind::Int},
                                                    {"training_mode", Kind::Int},
                                                    {"num_outputs", Kind::Int},
                                                    {"value_int", Kind::Int},
                                                    {"block_size", Kind::Int},
                                                    {"output_dtype", Kind::Int},
                                                    {"saturate", Kind::Int},
                                                    {"alpha", Kind::Float},
                                                    {"beta", Kind::Float},
                                                    {"gamma", Kind::Float},
                                                    {"epsilon", Kind::Float},
                                                    {"min", Kind::Float},
                                                    {"max", Kind::Float},
                                                    {"value_float", Kind::Float},
                                                    {"value_floats", Kind::Floats},
                                                    {"auto_pad", Kind::String},
                                                    {"mode", Kind::String},
                                                    {"approximate", Kind::String},
                                                    {"value", Kind::Tensor},
                                                    {"then_branch", Kind::Graph},
                                                    {"else_branch", Kind::Graph}};
  auto it = kinds.find(name);
  return it == kinds.end() ? std::nullopt : std::optional(it->second);
}

const char *kindName(Attribute::Kind kind) {
  switch (kind) {
  case Attribute::Kind::Int:
    return "an int";
  case Attribute::Kind::Float:
    return "a float";
  case Attribute::Kind::String:
    return "a string";
  case Attribute::Kind::Tensor:
    return "a tensor";
  case Attribute::Kind::Graph:
    return "a graph";
  case Attribute::Kind::Ints:
    return "ints";
  case Attribute::Kind::Floats:
    return "floats";
  case Attribute::Kind::Strings:
    return "strings";
  case Attribute::Kind::Other:
    break;
  }
  return "of another kind";
}

Status Importer::checkSignature(const Node &node, const OpSignature *signature) const {
  for (const auto &[name, attribute] : node.attributes) {
    std::optional<Attribute::Kind> kind = expectedKind(name);
    if (kind && attribute.kind != *kind)
      return nodeError(node, "attribute '" + name + "' must be " + kindName(*kind) +
                                 ", got " + kindName(attribute.kind));
  }
  if (!signature)
    return Status::ok(); // refused by name later
  size_t inputs = node.inputs.size(), outputs = node.outputs.size();
  auto range = [](size_t low, size_t high) {
    return high == low         ? std::to_string(low)
           : high == kAnyCount ? std::to_string(low) + " or more"
                               : std::to_string(low) + " to " + std::to_string(high);
  };
  // Trailing optional inputs may be listed as "".
  while (!signature->variadic && inputs > signature->minInputs &&
         node.inputs[inputs - 1].empty())
    --inputs;
  if (inputs < signature->minInputs || inputs > signature->maxInputs)
    return nodeError(node, "has " + std::to_string(inputs) + " inputs, " + node.opType +
                               " takes " +
                               range(signature->minInputs, signature->maxInputs));
  if (outputs < signature->minOutputs || outputs > signature->maxOutputs)
    return nodeError(node, "has " + std::to_string(outputs) + " outputs, " + node.opType +
                               " gives " +
                               range(signature->minOutputs, signature->maxOutputs));
  size_t required = signature->variadic ? inputs : signature->minInputs;
  for (size_t i = 0; i < required; ++i)
    if (node.inputs[i].empty())
      return nodeError(node, "required input #" + std::to_string(i) + " is empty");
  // The recurrent ops' outputs are all optional; other ops' first is not.
  if (signature->minOutputs > 0 && node.outputs[0].empty())
    return nodeError(node, "output #0 has no name");
  return Status::ok();
}

Expected<Shape> Importer::windowInts(const Node &node, const char *name, size_t count,
                                     Shape fallback, int64_t min) const {
  auto it = node.attributes.find(name);
  if (it == node.attributes.end())
    return fallback;
  const Shape &values = it->second.ints;
  if (values.size() != count)
    return nodeError(node, std::string(name) + " " + shapeString(values) + " has " +
                               std::to_string(values.size()) + " values, expected " +
                               std::to_string(count));
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] < min || values[i] > kMaxWindowValue)
      return nodeError(node, std::string(name) + "[" + std::to_string(i) +
                                 "] = " + std::to_string(values[i]) +
                                 " is out of range [" + std::to_string(min) + ", " +
                                 std::to_string(kMaxWindowValue) + "]");
  return values;
}

Status Importer::checkRuntimeShape(const Node &node, const Shape &shape) const {
  if (shape.size() > kMaxRank)
    return nodeError(node, "computes a tensor of rank " + std::to_string(shape.size()) +
                               "; flowc takes ranks up to " + std::to_string(kMaxRank));
  std::optional<int64_t> count = checkedElementCount(shape);
  if (!count || *count > kMaxTensorBytes / 8)
    return nodeError(node, "computes a tensor of shape " + shapeString(shape) +
                               ", larger than any address space");
  // TOSA's tensors have elements (a Slice starting past its axis's end
  // would fail the IR's verifier).
  if (*count == 0)
    return nodeUnsupported(node,
                           "computes a tensor of shape " + shapeString(shape) +
                               ", with no elements; flowc compiles tensors that have "
                               "elements");
  return Status::ok();
}

Expected<int64_t> Importer::reserveFolded(const Node &node, const Shape &shape) {
  for (int64_t dim : shape)
    if (dim < 0)
      return nodeError(node, "shape " + shapeString(shape) + " has a negative dimension");
  std::optional<int64_t> count = checkedElementCount(shape);
  if (!count || shape.size() > kMaxRank)
    return nodeError(node, "shape " + shapeString(shape) +
                               " has more elements than int64 can count");
  // count <= INT64_MAX, so 8 bytes an element fits in 128 bits.
  unsigned __int128 bytes = static_cast<unsigned __int128>(*count) * 8;
  if (bytes > foldLimit_ - std::min(foldLimit_, foldedBytes_))
    return resourceExhausted(
        model_.path + ": " + node.describe() + ": folding its " + shapeString(shape) +
        " constant at import needs " + std::to_string(*count) + " elements of 8 bytes (" +
        std::to_string(foldedBytes_) + " already folded), over the limit of " +
        std::to_string(foldLimit_) + " bytes (min(RAM / 4, max(1 GiB, 4 x weights)))");
  foldedBytes_ += static_cast<uint64_t>(bytes);
  return *count;
}

Expected<int64_t> Importer::rankAxis(const Node &node, int64_t axis, int64_t rank) const {
  int64_t normalized = axis < 0 ? axis + rank : axis;
  if (normalized < 0 || normalized >= rank)
    return nodeError(node, "axis " + std::to_string(axis) + " is out of range for rank " +
                               std::to_string(rank));
  return normalized;
}

Expected<int64_t> Importer::axisOf(const Node &node, int64_t fallback,
                                   const Shape &shape) {
  int64_t given = intAttr(node, "axis", fallback);
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = given < 0 ? given + rank : given;
  if (axis < 0 || axis >= rank)
    return nodeError(node, "axis " + std::to_string(given) +
                               " is out of range for input " + shapeString(shape));
  return axis;
}

Value Importer::clamp(Value x, float low, float high) {
  return build<mlir::tosa::ClampOp>(shapeOf(x), {x},
                                    {attr("min_val", builder_.getF32FloatAttr(low)),
                                     attr("max_val", builder_.getF32FloatAttr(high))});
}

Shape Importer::sameRankBroadcast(Value a, Value b) {
  Shape as = shapeOf(a), bs = shapeOf(b), out(as.size());
  for (size_t i = 0; i < as.size(); ++i)
    out[i] = std::max(as[i], bs[i]);
  return out;
}

/// Elementwise product of same-rank operands (the caller broadcast them);
/// the only builder of tosa.mul.
Value Importer::mul(Value a, Value b) {
  return build<mlir::tosa::MulOp>(sameRankBroadcast(a, b), {a, b, zeroShift()});
}

Value Importer::add(Value a, Value b) {
  return build<mlir::tosa::AddOp>(sameRankBroadcast(a, b), {a, b});
}

Value Importer::sub(Value a, Value b) {
  return build<mlir::tosa::SubOp>(sameRankBroadcast(a, b), {a, b});
}

Expected<float> Importer::scalarConstant(const Node &node, size_t index) {
  FLOWC_ASSIGN_OR_RETURN(const TensorData *tensor, constantOperand(node, index));
  if (tensor->info.dtype != DType::F32 || tensor->info.elementCount() != 1)
    return nodeUnsupported(node, "input '" + node.inputs[index] +
                                     "' must be a float32 scalar constant");
  float value;
  std::memcpy(&value, tensor->bytes.data(), 4);
  return value;
}

/// Axes from the `axes` attribute (older opsets) or a constant int64 input
/// (newer ones), normalized to [0, rank) and sorted.
Expected<Shape> Importer::axesOf(const Node &node, size_t inputIndex, int64_t rank) {
  Shape axes = intsAttr(node, "axes", {});
  if (hasOperand(node, inputIndex)) {
    FLOWC_ASSIGN_OR_RETURN(const TensorData *tensor, constantOperand(node, inputIndex));
    if (tensor->info.dtype != DType::I64)
      return nodeError(node, "axes must be int64");
    axes.resize(static_cast<size_t>(tensor->info.elementCount()));
    std::memcpy(axes.data(), tensor->bytes.data(), axes.size() * 8);
  }
  for (int64_t &axis : axes) {
    FLOWC_ASSIGN_OR_RETURN(axis, rankAxis(node, axis, rank));
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    return nodeError(node, "axes " + shapeString(axes) + " repeat an axis");
  return axes;
}

Expected<std::pair<Value, Value>> Importer::broadcastPair(const Node &node, Value a,
                                                          Value b, Shape &out) {
  FLOWC_ASSIGN_OR_RETURN(out, broadcastShape(node, shapeOf(a), shapeOf(b)));
  FLOWC_ASSIGN_OR_RETURN(a, broadcastTo(node, a, out.size()));
  FLOWC_ASSIGN_OR_RETURN(b, broadcastTo(node, b, out.size()));
  return std::make_pair(a, b);
}

Status Importer::importNode(const Node &node) {
  if (!node.domain.empty() && node.domain != "ai.onnx")
    return nodeUnsupported(node, "unsupported op domain '" + node.domain +
                                     "' (flowc imports the default ai.onnx domain only)");
  if (model_.opsetVersion <= 0)
    return nodeError(node, "the model imports no version of the default ONNX domain");
  const std::string &op = node.opType;
  const OpInfo *info = findOp(op, model_.opsetVersion);
  if (!info)
    if (const OpInfo *other = findOp(op))
      return nodeUnsupported(node, "op '" + op + "' at opset " +
                                       std::to_string(model_.opsetVersion) +
                                       " is not supported (flowc imports it at opsets " +
                                       std::to_string(other->sinceVersion) + " to " +
                                       std::to_string(other->untilVersion) + ")");
  FLOWC_RETURN_IF_ERROR(checkSignature(node, info ? &info->signature : nullptr));
  if (!info)
    return nodeUnsupported(node, "unsupported op '" + op + "' (domain '" +
                                     (node.domain.empty() ? "ai.onnx" : node.domain) +
                                     "', opset " + std::to_string(model_.opsetVersion) +
                                     ")");
  ++opCounts_[op];
  FLOWC_RETURN_IF_ERROR(checkByteInputs(node));
  FLOWC_ASSIGN_OR_RETURN(bool folded, tryFold(node));
  if (folded)
    return Status::ok();
  if (info->import) {
    mlir::Type half = halfInputType(node);
    if (half && op != "Cast" && op != "CastLike")
      return importWidened(node, info->import, half);
    if (readsBytesWidened(node))
      return importWidenedBytes(node, info->import);
    FLOWC_RETURN_IF_ERROR((this->*info->import)(node));
    inheritSignedness(node);
    return Status::ok();
  }
  --opCounts_[op];
  return nodeUnsupported(node, "unsupported op '" + op + "' (domain '" +
                                   (node.domain.empty() ? "ai.onnx" : node.domain) +
                                   "', opset " + std::to_string(model_.opsetVersion) +
                                   ")");
}

mlir::Type Importer::halfInputType(const Node &node) const {
  for (const std::string &input : node.inputs)
    if (DType dtype = describeValue(input).dtype; isHalf(dtype))
      return dtype == DType::F16 ? mlir::Type(mlir::Float16Type::get(&ctx_))
                                 : mlir::Type(mlir::BFloat16Type::get(&ctx_));
  return {};
}

const TensorData &Importer::widenedConstant(const TensorData &tensor) {
  if (auto it = widened_.find(&tensor); it != widened_.end())
    return *it->second;
  std::optional<std::vector<float>> values = floatValues(tensor);
  if (!values)
    return tensor;
  std::string bytes(values->size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values->data(), bytes.size());
  TensorData &copy = folded_.emplace_back();
  copy.info = {tensor.info.name, DType::F32, tensor.info.shape};
  copy.owned = std::make_shared<std::string>(std::move(bytes));
  copy.bytes = *copy.owned;
  widened_[&tensor] = &copy;
  widenedCopies_.insert(&copy);
  return copy;
}

void Importer::narrowConstant(const TensorData &tensor, DType half) {
  size_t count = tensor.bytes.size() / sizeof(float);
  auto bytes = std::make_shared<std::string>(count * 2, '\0');
  for (size_t i = 0; i < count; ++i) {
    float value;
    std::memcpy(&value, tensor.bytes.data() + sizeof(float) * i, sizeof(float));
    uint16_t bits = half == DType::F16 ? floatToHalf(value) : floatToBfloat16(value);
    std::memcpy(bytes->data() + 2 * i, &bits, 2);
  }
  addFolded(tensor.info.name, half, tensor.info.shape, std::move(bytes));
}

Status Importer::importWithWideInputs(const Node &node,
                                      Status (Importer::*import)(const Node &),
                                      llvm::function_ref<bool(DType)> isNarrow,
                                      bool widenConstants,
                                      llvm::function_ref<Value(Value)> widen) {
  // Wide values are bound for this node only: later nodes (Cast) still see
  // the narrow ones. Constants of a few elements (a scale, a clip bound)
  // widen at import, so that ops that take constants find float32 data;
  // larger ones stay narrow weights, widened in the graph, which the
  // derived weights pass then computes once.
  constexpr int64_t kWidenedConstantElements = 64;
  struct Saved {
    std::string name;
    std::optional<Value> value;
    const TensorData *constant = nullptr;
  };
  std::vector<Saved> saved;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const std::string &name = node.inputs[i];
    if (name.empty() || !isNarrow(describeValue(name).dtype) ||
        llvm::any_of(saved, [&](const Saved &s) { return s.name == name; }))
      continue;
    Saved &entry = saved.emplace_back();
    entry.name = name;
    auto value = values_.find(name);
    if (value != values_.end())
      entry.value = value->second;
    auto constant = constants_.find(name);
    if (constant != constants_.end()) {
      entry.constant = constant->second;
      if (widenConstants &&
          constant->second->info.elementCount() <= kWidenedConstantElements) {
        constant->second = &widenedConstant(*entry.constant);
        if (!entry.value)
          continue;
      }
    }
    FLOWC_ASSIGN_OR_RETURN(Value x, entry.value ? *entry.value : anyOperand(node, i));
    if (!entry.value)
      entry.value = x;
    values_[name] = widen(x);
  }
  Status status = (this->*import)(node);
  for (const Saved &entry : saved) {
    if (entry.value)
      values_[entry.name] = *entry.value;
    else
      values_.erase(entry.name);
    if (entry.constant)
      constants_[entry.name] = entry.constant;
  }
  return status;
}

Status Importer::importWidened(const Node &node, Status (Importer::*import)(const Node &),
                               mlir::Type half) {
  // A value another widened node rounded is read unrounded: from one node
  // to the next the graph stays float32, so that nothing stands between a
  // convolution and its epilogue.
  Status status = importWithWideInputs(
      node, import, isHalf, /*widenConstants=*/true, [&](Value x) -> Value {
        auto unrounded = unrounded_.find(x);
        if (unrounded != unrounded_.end())
          return unrounded->second;
        return buildTyped<mlir::tosa::CastOp>(builder_.getF32Type(), shapeOf(x), {x});
      });
  FLOWC_RETURN_IF_ERROR(status);
  DType halfDtype = half.isF16() ? DType::F16 : DType::BF16;
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const std::string &name = node.outputs[i];
    // LayerNormalization's mean and inverse deviation are of its stash
    // type, float32 unless it says otherwise.
    if (name.empty() || (node.opType == "LayerNormalization" && i > 0))
      continue;
    if (auto value = values_.find(name); value != values_.end()) {
      Value result = value->second;
      if (!elementTypeOf(result).isF32())
        continue;
      value->second = buildTyped<mlir::tosa::CastOp>(half, shapeOf(result), {result});
      unrounded_[value->second] = result;
      continue;
    }
    if (auto constant = constants_.find(name);
        constant != constants_.end() && constant->second->info.dtype == DType::F32)
      narrowConstant(*constant->second, halfDtype);
  }
  return Status::ok();
}

TensorInfo Importer::describeValue(const std::string &name) const {
  TensorInfo info{name, DType::Undefined, {}};
  if (name.empty())
    return info;
  if (auto it = values_.find(name); it != values_.end()) {
    info.shape = shapeOf(it->second);
    info.dtype = dtypeOf(it->second);
    return info;
  }
  if (auto it = constants_.find(name); it != constants_.end())
    info = it->second->info;
  info.name = name;
  return info;
}

NodeRecord Importer::recordOf(const Node &node) {
  NodeRecord record{node.name, node.opType, {}, {}, 0, true};
  for (const std::string &input : node.inputs) {
    record.inputs.push_back(describeValue(input));
    if (initializerNames_.count(input) && countedParameters_.insert(input).second)
      record.parameterCount += static_cast<uint64_t>(record.inputs.back().elementCount());
  }
  for (const std::string &output : node.outputs) {
    record.outputs.push_back(describeValue(output));
    if (!output.empty() && values_.count(output))
      record.folded = false;
  }
  return record;
}

Expected<ImportedGraph> Importer::run() {
  // Owned: every early error return below frees the partial IR.
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc_);
  builder_.setInsertionPointToEnd(module->getBody());
  auto func = mlir::func::FuncOp::create(builder_, loc_, "main",
                                         builder_.getFunctionType({}, {}));
  entry_ = func.addEntryBlock();
  builder_.setInsertionPointToStart(entry_);

  ImportedGraph graph;
  for (const TensorInfo &input : model_.inputs) {
    mlir::Type element = elementType(input.dtype);
    if (!element || input.dtype == DType::BF16)
      return unimplemented(model_.path + ": input '" + input.name + "' has dtype " +
                           dtypeName(input.dtype) + "; supported: " + kIoDtypes);
    bool symbolic = std::any_of(input.shape.begin(), input.shape.end(),
                                [](int64_t dim) { return dim < 0; });
    if (!symbolic && (input.shape.size() > kMaxRank || input.elementCount() < 0 ||
                      input.elementCount() > kMaxTensorBytes / 8))
      return invalidArgument(model_.path + ": input '" + input.name + "' has shape " +
                             shapeString(input.shape) +
                             ", larger than any address space");
    if (symbolic)
      return unimplemented(model_.path + ": input '" + input.name +
                           "' has a symbolic shape " + shapeString(input.shape) +
                           " (-1 = symbolic); flowc compiles static shapes: give one "
                           "with --input-shape " +
                           input.name + "=DIMS");
    // TOSA's tensors have elements; an empty input would fail the IR's
    // verifier instead of this message.
    if (input.elementCount() == 0)
      return unimplemented(
          model_.path + ": input '" + input.name + "' has shape " +
          shapeString(input.shape) +
          ", with no elements; flowc compiles inputs that have elements");
    values_[input.name] = markBytes(
        entry_->addArgument(mlir::RankedTensorType::get(input.shape, element), loc_),
        input.dtype);
    graphInputNames_.insert(input.name);
    graph.inputs.push_back(input);
  }
  for (const TensorData &tensor : model_.initializers) {
    constants_[tensor.info.name] = &tensor;
    initializerNames_.insert(tensor.info.name);
  }
  for (const Node &node : model_.nodes) {
    // Every op this node becomes names it (SourceNodes.h).
    loc_ = nodeLocation(&ctx_, records_.size());
    FLOWC_RETURN_IF_ERROR(importNode(node));
    records_.push_back(recordOf(node));
  }
  loc_ = mlir::UnknownLoc::get(&ctx_);

  llvm::SmallVector<Value> results;
  for (const TensorInfo &output : model_.outputs) {
    auto it = values_.find(output.name);
    if (it == values_.end()) {
      // Computed at import time (a folded Shape, a Constant): returned from
      // its weight argument like any other constant.
      if (auto constant = constants_.find(output.name); constant != constants_.end()) {
        Node producer;
        producer.name = "output '" + output.name + "'";
        FLOWC_RETURN_IF_ERROR(weightArgument(producer, *constant->second).status());
        it = values_.find(output.name);
      }
    }
    if (it == values_.end())
      return invalidArgument(model_.path + ": graph output '" + output.name +
                             "' is not computed by any node");
    TensorInfo info = output;
    info.dtype = dtypeOf(it->second);
    if (info.dtype == DType::BF16)
      return unimplemented(model_.path + ": graph output '" + output.name +
                           "' is bfloat16; supported: " + kIoDtypes);
    info.shape = shapeOf(it->second);
    if (!output.shape.empty() && output.shape.size() == info.shape.size())
      for (size_t i = 0; i < info.shape.size(); ++i)
        if (output.shape[i] >= 0 && output.shape[i] != info.shape[i])
          return invalidArgument(model_.path + ": graph output '" + output.name +
                                 "' is declared " + shapeString(output.shape) +
                                 " but computes " + shapeString(info.shape));
    results.push_back(it->second);
    graph.outputs.push_back(info);
  }
  if (results.empty())
    return invalidArgument(model_.path + ": the graph has no outputs");
  llvm::SmallVector<mlir::Attribute> checkMessages;
  for (const auto &[flag, message] : checks_) {
    results.push_back(flag);
    checkMessages.push_back(builder_.getStringAttr(message));
  }
  if (!checkMessages.empty())
    func->setAttr(kChecksAttr, builder_.getArrayAttr(checkMessages));
  mlir::func::ReturnOp::create(builder_, loc_, results);
  func.setFunctionType(builder_.getFunctionType(entry_->getArgumentTypes(),
                                                mlir::ValueRange(results).getTypes()));
  size_t firstWeight = graph.inputs.size();
  for (size_t i = 0; i < weights_.size(); ++i)
    func.setArgAttr(firstWeight + i, "flowc.weight",
                    builder_.getStringAttr(weights_[i].key));
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (unsignedBytes_.contains(func.getArgument(i)))
      func.setArgAttr(i, FlowcDialect::UnsignedAttrHelper::getNameStr(),
                      builder_.getUnitAttr());
  for (size_t i = 0; i < graph.outputs.size(); ++i)
    if (graph.outputs[i].dtype == DType::U8)
      func.setResultAttr(i, FlowcDialect::UnsignedAttrHelper::getNameStr(),
                         builder_.getUnitAttr());

  if (mlir::failed(mlir::verify(*module)))
    return internalError(model_.path + ": imported IR does not verify");
  llvm::raw_string_ostream os(graph.irBytecode);
  if (mlir::failed(mlir::writeBytecodeToFile(*module, os)))
    return internalError(model_.path + ": cannot write IR bytecode");
  graph.weights = std::move(weights_);
  graph.opCounts = std::move(opCounts_);
  graph.nodes = std::move(records_);
  return graph;
}

} // namespace import

uint64_t foldedConstantLimit(const OnnxModel &model) {

  uint64_t weightBytes = 0;
  for (const TensorData &tensor : model.initializers)
    weightBytes += tensor.bytes.size();
  uint64_t ram = physicalMemory().value_or(uint64_t{4} << 30);
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  uint64_t fromModel = weightBytes > kGiB / 4 ? weightBytes * 4 : kGiB;
  return std::min(ram / 4, fromModel);
}

namespace {

/// The families' entries in one vector, by name then opset.
const std::vector<OpInfo> &opTable() {
  static const std::vector<OpInfo> table = [] {
    std::vector<OpInfo> all;
    for (std::span<const OpInfo> family :
         {import::nnOps(), import::mathOps(), import::tensorOps(), import::recurrentOps(),
          import::einsumOps(), import::selectionOps(), import::attentionOps(),
          import::lossOps(), import::quantizeOps()})
      all.insert(all.end(), family.begin(), family.end());
    std::sort(all.begin(), all.end(), [](const OpInfo &a, const OpInfo &b) {
      return std::tie(a.name, a.sinceVersion) < std::tie(b.name, b.sinceVersion);
    });
    return all;
  }();
  return table;
}

} // namespace

const OpInfo *findOp(std::string_view name, int64_t opset) {
  for (const OpInfo &info : opTable())
    if (info.name == name && info.sinceVersion <= opset && opset <= info.untilVersion)
      return &info;
  return nullptr;
}

const OpInfo *findOp(std::string_view name) {
  const OpInfo *newest = nullptr;
  for (const OpInfo &info : opTable())
    if (info.name == name)
      newest = &info;
  return newest;
}

std::span<const OpInfo> registeredOps() { return opTable(); }

Expected<ImportedGraph> importOnnx(const OnnxModel &model, const ImportLimits &limits) {
  // The loader validated a parsed model; one built in memory is checked too.
  FLOWC_RETURN_IF_ERROR(validateGraph(model));
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  // Flowc's library calls (TopK's and the scatters' kernels) and
  // bufferization's argument attribute on their callees.
  context.loadDialect<mlir::func::FuncDialect, mlir::tosa::TosaDialect, FlowcDialect,
                      mlir::bufferization::BufferizationDialect>();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    diagnostics += diag.str() + "\n";
    return mlir::success();
  });
  import::Importer importer(context, model, limits);
  // Every size the model states is checked before memory is taken for it;
  // should the machine still run out, that is this model's failure.
  auto guarded = [&]() -> Expected<ImportedGraph> {
    try {
      return importer.run();
    } catch (const std::bad_alloc &) {
    } catch (const std::length_error &) {
    }
    return resourceExhausted(model.path + ": out of memory while importing the model");
  };
  auto graph = guarded();
  if (!graph && !diagnostics.empty())
    return Status(graph.status().code(), graph.status().message() + ": " + diagnostics);
  return graph;
}

} // namespace flowc::compiler
