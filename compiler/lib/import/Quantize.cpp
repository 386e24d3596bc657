// Quantized models: int8 and uint8 values, and the ops that make and read
// them (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
// MatMulInteger).
//
// Quantized graphs (onnxruntime's QDQ format, PyTorch's and TensorRT's
// exports) are float graphs with their tensors' rounding written out: a
// weight is int8 with a DequantizeLinear after it, an activation goes
// through a QuantizeLinear and back. flowc computes those graphs in
// float32 with the rounding kept where the graph asks for it: a
// dequantized weight is a derived weight (computed once at link), a
// quantize-dequantize pair is an elementwise step that fuses with its
// neighbours. Results are what the graph says, exactly where integer
// arithmetic is exact in float32.
#include "Importer.h"
#include "OpCost.h"

#include "flowc/support/Half.h"

#include <cmath>
#include <cstring>

namespace flowc::compiler::import {

namespace {

/// Ops that take int8 or uint8 inputs: the quantization ops, Cast, and ops
/// that only move elements (which keep the dtype: inheritSignedness).
bool takesBytes(const std::string &op) {
  static const std::set<std::string, std::less<>> ops = {"QuantizeLinear",
                                                         "DequantizeLinear",
                                                         "MatMulInteger",
                                                         "Cast",
                                                         "CastLike",
                                                         "Reshape",
                                                         "Transpose",
                                                         "Squeeze",
                                                         "Unsqueeze",
                                                         "Flatten",
                                                         "Identity",
                                                         "Concat",
                                                         "Slice",
                                                         "Gather",
                                                         "Split",
                                                         "Expand",
                                                         "Tile",
                                                         "Shape",
                                                         "Size"};
  return ops.contains(op);
}

/// A constant's values as floats, for the dtypes quantization parameters
/// come in; nothing for others.
std::optional<std::vector<float>> floatValues(const TensorData &tensor) {
  size_t count = static_cast<size_t>(tensor.info.elementCount());
  size_t size = dtypeSize(tensor.info.dtype);
  if (size == 0 || tensor.bytes.size() != count * size)
    return std::nullopt;
  std::vector<float> values(count);
  const char *at = tensor.bytes.data();
  for (size_t i = 0; i < count; ++i, at += size) {
    switch (tensor.info.dtype) {
    case DType::F32:
      std::memcpy(&values[i], at, 4);
      break;
    case DType::F16:
    case DType::BF16: {
      uint16_t bits;
      std::memcpy(&bits, at, 2);
      values[i] =
          tensor.info.dtype == DType::F16 ? halfToFloat(bits) : bfloat16ToFloat(bits);
      break;
    }
    case DType::I8:
      values[i] = static_cast<float>(static_cast<int8_t>(*at));
      break;
    case DType::U8:
      values[i] = static_cast<float>(static_cast<uint8_t>(*at));
      break;
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, at, 4);
      values[i] = static_cast<float>(v);
      break;
    }
    default:
      return std::nullopt;
    }
  }
  return values;
}

} // namespace

Value Importer::markBytes(Value v, DType dtype) {
  if (dtype == DType::U8)
    unsignedBytes_.insert(v);
  return v;
}

Value Importer::widenBytes(Value x) {
  Shape shape = shapeOf(x);
  Value wide = build<mlir::tosa::CastOp>(shape, {x});
  if (dtypeOf(x) != DType::U8)
    return wide;
  // A uint8 byte read as int8 is 256 less from 128 up. Adding 256 to the
  // negatives takes float ops only, which a derived weight's recipe also
  // evaluates: s - 256 * clamp(s, -1, 0).
  Value wrapped = mul(clamp(wide, -1.0f, 0.0f), scalar(256.0f, shape.size()));
  return sub(wide, wrapped);
}

Value Importer::narrowToBytes(Value x, DType to) {
  Shape shape = shapeOf(x);
  mlir::Type i8 = builder_.getI8Type();
  if (to == DType::I8)
    return buildTyped<mlir::tosa::CastOp>(i8, shape, {x}); // saturates
  // uint8's 128..255 are int8's -128..-1 as bytes: through int32, whose
  // truncation to 8 bits keeps the low byte.
  Value v = buildTyped<mlir::tosa::CastOp>(builder_.getI32Type(), shape,
                                           {clamp(x, 0.0f, 255.0f)});
  return markBytes(buildTyped<mlir::tosa::CastOp>(i8, shape, {v}), DType::U8);
}

Value Importer::divideExactly(Value x, Value y) {
  // x * (1 / y) rounds twice in float32: a quotient near a rounding
  // boundary then lands in the wrong quantization step. In float64 the
  // product is within 2^-52 of x / y, nearer than any float32 quotient comes
  // to a float32 rounding boundary (2^-49), so rounding it to float32 gives
  // the correctly rounded quotient, as onnxruntime's division does.
  mlir::Type f64 = builder_.getF64Type();
  Value wideX = buildTyped<mlir::tosa::CastOp>(f64, shapeOf(x), {x});
  Value wideY = buildTyped<mlir::tosa::CastOp>(f64, shapeOf(y), {y});
  Value inverse = buildTyped<mlir::tosa::ReciprocalOp>(f64, shapeOf(y), {wideY});
  Shape out = sameRankBroadcast(x, y);
  Value product = buildTyped<mlir::tosa::MulOp>(f64, out, {wideX, inverse, zeroShift()});
  return build<mlir::tosa::CastOp>(out, {product});
}

Status Importer::checkByteInputs(const Node &node) const {
  if (takesBytes(node.opType))
    return Status::ok();
  for (const std::string &input : node.inputs)
    if (DType dtype = describeValue(input).dtype; isByte(dtype))
      return nodeUnsupported(
          node, "input '" + input + "' is " + dtypeName(dtype) + "; " + node.opType +
                    " does not take 8-bit integers (they are quantized values: "
                    "DequantizeLinear makes them float)");
  return Status::ok();
}

void Importer::inheritSignedness(const Node &node) {
  if (!takesBytes(node.opType) || node.opType == "Cast" || node.opType == "CastLike" ||
      node.opType == "QuantizeLinear")
    return;
  bool fromUnsigned = llvm::any_of(node.inputs, [&](const std::string &input) {
    return describeValue(input).dtype == DType::U8;
  });
  if (!fromUnsigned)
    return;
  for (const std::string &output : node.outputs)
    if (auto it = values_.find(output);
        it != values_.end() && elementTypeOf(it->second).isInteger(8))
      unsignedBytes_.insert(it->second);
}

Expected<Value> Importer::quantizationParameter(const Node &node, size_t index,
                                                const Shape &shape, int64_t axis,
                                                int64_t blockSize, float zero) {
  size_t rank = shape.size();
  if (!hasOperand(node, index))
    return scalar(zero, rank);
  const std::string &name = node.inputs[index];
  Value value;
  if (auto constant = constants_.find(name); constant != constants_.end()) {
    auto values = floatValues(*constant->second);
    if (!values)
      return nodeUnsupported(node, "input '" + name + "' has dtype " +
                                       dtypeName(constant->second->info.dtype) +
                                       "; supported: float32, float16, bfloat16, "
                                       "int8, uint8, int32");
    auto type = f32(constant->second->info.shape);
    value = mlir::tosa::ConstOp::create(
        builder_, loc_, type,
        mlir::DenseElementsAttr::get(type, llvm::ArrayRef<float>(*values)));
  } else {
    FLOWC_ASSIGN_OR_RETURN(value, anyOperand(node, index));
    DType dtype = dtypeOf(value);
    if (isByte(dtype))
      value = widenBytes(value);
    else if (dtype != DType::F32)
      value = build<mlir::tosa::CastOp>(shapeOf(value), {value});
  }
  Shape given = shapeOf(value);
  int64_t count = product(given, 0, given.size());
  if (count == 1)
    return reshape(value, Shape(rank, 1));
  // The axis matters only here: a per-tensor parameter ignores it.
  FLOWC_ASSIGN_OR_RETURN(axis, rankAxis(node, axis, static_cast<int64_t>(rank)));
  auto misfit = [&] {
    return nodeError(
        node,
        "input '" + name + "' of shape " + shapeString(given) +
            " fits neither one value, one per axis " + std::to_string(axis) + " entry" +
            (blockSize > 0
                 ? ", nor one per block of " + std::to_string(blockSize) + " along it"
                 : "") +
            ", for an input of shape " + shapeString(shape));
  };
  if (blockSize == 0) {
    if (given.size() != 1 || given[0] != shape[axis])
      return misfit();
    Shape perAxis(rank, 1);
    perAxis[axis] = shape[axis];
    return reshape(value, perAxis);
  }
  int64_t blocks = (shape[axis] + blockSize - 1) / blockSize;
  Shape expected = shape;
  expected[axis] = blocks;
  if (given != expected)
    return misfit();
  // Each block's value repeated over the block, the last one cut to fit.
  Shape split = given;
  split.insert(split.begin() + axis + 1, 1);
  Shape multiples(split.size(), 1);
  multiples[axis + 1] = blockSize;
  Shape tiled = split;
  tiled[axis + 1] = blockSize;
  Value repeated =
      build<mlir::tosa::TileOp>(tiled, {reshape(value, split), constShape(multiples)});
  Shape joined = given;
  joined[axis] = blocks * blockSize;
  return sliceAlong(reshape(repeated, joined), axis, 0, shape[axis]);
}

/// The output type of a QuantizeLinear: its zero point's, else output_dtype,
/// else uint8.
static DType quantizedType(const Node &node, const TensorInfo &zeroPoint) {
  if (zeroPoint.dtype != DType::Undefined)
    return zeroPoint.dtype;
  int64_t attribute = intAttr(node, "output_dtype", 0);
  return attribute != 0 ? static_cast<DType>(attribute) : DType::U8;
}

Status Importer::importQuantizeLinear(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape shape = shapeOf(x);
  DType to =
      quantizedType(node, describeValue(hasOperand(node, 2) ? node.inputs[2] : ""));
  if (!isByte(to))
    return nodeUnsupported(node, "quantizing to " + dtypeName(to) +
                                     " is not supported (int8, uint8)");
  int64_t axis = intAttr(node, "axis", 1), blockSize = intAttr(node, "block_size", 0);
  if (blockSize < 0)
    return nodeError(node, "block_size is " + std::to_string(blockSize));
  FLOWC_ASSIGN_OR_RETURN(Value scale,
                         quantizationParameter(node, 1, shape, axis, blockSize, 1.0f));
  FLOWC_ASSIGN_OR_RETURN(Value zeroPoint,
                         quantizationParameter(node, 2, shape, axis, blockSize, 0.0f));
  // round(x / scale), halves to even (tosa.cast's rounding), plus the zero
  // point in int32, where the sum is exact; then saturated to the type.
  // The quotient is clamped first, far beyond any 8-bit range, so that the
  // int32 sum cannot overflow.
  mlir::Type i32 = builder_.getI32Type();
  Value quotient = clamp(divideExactly(x, scale), -65536.0f, 65536.0f);
  Value rounded = buildTyped<mlir::tosa::CastOp>(i32, shape, {quotient});
  Value offset = buildTyped<mlir::tosa::CastOp>(i32, shapeOf(zeroPoint), {zeroPoint});
  Value q = buildTyped<mlir::tosa::AddOp>(i32, shape, {rounded, offset});
  bool isUnsigned = to == DType::U8;
  q = buildTyped<mlir::tosa::ClampOp>(
      i32, shape, {q},
      {attr("min_val", builder_.getI32IntegerAttr(isUnsigned ? 0 : -128)),
       attr("max_val", builder_.getI32IntegerAttr(isUnsigned ? 255 : 127))});
  return define(
      node,
      markBytes(buildTyped<mlir::tosa::CastOp>(builder_.getI8Type(), shape, {q}), to));
}

Status Importer::importDequantizeLinear(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  Shape shape = shapeOf(x);
  DType dtype = dtypeOf(x);
  if (!isByte(dtype) && dtype != DType::I32)
    return nodeUnsupported(node, "input '" + node.inputs[0] + "' is " + dtypeName(dtype) +
                                     "; DequantizeLinear reads int8, uint8 and int32");
  int64_t axis = intAttr(node, "axis", 1), blockSize = intAttr(node, "block_size", 0);
  if (blockSize < 0)
    return nodeError(node, "block_size is " + std::to_string(blockSize));
  if (hasOperand(node, 2) && describeValue(node.inputs[2]).dtype != dtype)
    return nodeError(node, "zero point '" + node.inputs[2] + "' is " +
                               dtypeName(describeValue(node.inputs[2]).dtype) +
                               ", the input is " + dtypeName(dtype));
  FLOWC_ASSIGN_OR_RETURN(Value scale,
                         quantizationParameter(node, 1, shape, axis, blockSize, 1.0f));
  FLOWC_ASSIGN_OR_RETURN(Value zeroPoint,
                         quantizationParameter(node, 2, shape, axis, blockSize, 0.0f));
  Value centered;
  if (dtype == DType::I32) {
    // In int32, as ONNX subtracts: a float32 difference of two large int32
    // values would round.
    mlir::Type i32 = builder_.getI32Type();
    Value offset = buildTyped<mlir::tosa::CastOp>(i32, shapeOf(zeroPoint), {zeroPoint});
    centered = build<mlir::tosa::CastOp>(
        shape, {buildTyped<mlir::tosa::SubOp>(i32, shape, {x, offset})});
  } else {
    centered = sub(widenBytes(x), zeroPoint);
  }
  return define(node, mul(centered, scale));
}

Status Importer::importDynamicQuantizeLinear(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape shape = shapeOf(x);
  size_t rank = shape.size();
  int64_t count = product(shape, 0, rank);
  // The range [min(x, 0), max(x, 0)] maps onto [0, 255].
  Value flat = reshape(x, {1, count});
  auto axisAttr = attr("axis", builder_.getI32IntegerAttr(1));
  Value high = build<mlir::tosa::MaximumOp>(
      {1, 1}, {build<mlir::tosa::ReduceMaxOp>({1, 1}, {flat}, {axisAttr}), scalar(0, 2)});
  Value low = build<mlir::tosa::MinimumOp>(
      {1, 1}, {build<mlir::tosa::ReduceMinOp>({1, 1}, {flat}, {axisAttr}), scalar(0, 2)});
  Value scale = divideExactly(sub(high, low), scalar(255.0f, 2));
  // An all-zero input has scale 0: it quantizes to the zero point, 0.
  mlir::Type i1 = builder_.getI1Type(), i32 = builder_.getI32Type();
  Value degenerate = buildTyped<mlir::tosa::EqualOp>(i1, {1, 1}, {scale, scalar(0, 2)});
  Value divisor = build<mlir::tosa::SelectOp>({1, 1}, {degenerate, scalar(1, 2), scale});
  // zero point = saturate(round(0 - low / scale)).
  Value zeroPoint = buildTyped<mlir::tosa::CastOp>(
      i32, {1, 1}, {clamp(sub(scalar(0, 2), divideExactly(low, divisor)), 0.0f, 255.0f)});
  Value rounded =
      buildTyped<mlir::tosa::CastOp>(i32, {1, count}, {divideExactly(flat, divisor)});
  Value q = buildTyped<mlir::tosa::AddOp>(i32, {1, count}, {rounded, zeroPoint});
  q = buildTyped<mlir::tosa::ClampOp>(i32, {1, count}, {q},
                                      {attr("min_val", builder_.getI32IntegerAttr(0)),
                                       attr("max_val", builder_.getI32IntegerAttr(255))});
  mlir::Type i8 = builder_.getI8Type();
  Value y = buildTyped<mlir::tosa::CastOp>(i8, shape, {reshape(q, shape)});
  Value zeroByte = reshape(buildTyped<mlir::tosa::CastOp>(i8, {1, 1}, {zeroPoint}), {});
  FLOWC_RETURN_IF_ERROR(defineOutput(node, 0, markBytes(y, DType::U8)));
  FLOWC_RETURN_IF_ERROR(defineOutput(node, 1, reshape(scale, {})));
  return defineOutput(node, 2, markBytes(zeroByte, DType::U8));
}

Status Importer::importMatMulInteger(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value a, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value b, anyOperand(node, 1));
  for (size_t i = 0; i < 2; ++i) {
    DType dtype = describeValue(node.inputs[i]).dtype;
    if (!isByte(dtype))
      return nodeError(node, "input '" + node.inputs[i] + "' is " + dtypeName(dtype) +
                                 "; MatMulInteger multiplies int8 and uint8");
  }
  Shape as = shapeOf(a), bs = shapeOf(b);
  if (as.size() < 2 || bs.size() < 2)
    return nodeUnsupported(node, "1-D MatMulInteger operands are not supported");
  // A's zero point is one per row of A (or one), B's one per column of B.
  auto centered = [&](Value v, size_t zeroIndex, int64_t axis) -> Expected<Value> {
    Shape shape = shapeOf(v);
    FLOWC_ASSIGN_OR_RETURN(Value zeroPoint,
                           quantizationParameter(node, zeroIndex, shape, axis, 0, 0.0f));
    return sub(widenBytes(v), zeroPoint);
  };
  FLOWC_ASSIGN_OR_RETURN(Value wideA,
                         centered(a, 2, static_cast<int64_t>(as.size()) - 2));
  FLOWC_ASSIGN_OR_RETURN(Value wideB,
                         centered(b, 3, static_cast<int64_t>(bs.size()) - 1));
  // Products of bytes summed in float32: exact up to 2^24, which sums of
  // up to 258 products of full-range bytes stay under; beyond, within
  // float32's rounding of the sum.
  FLOWC_ASSIGN_OR_RETURN(Value product, matmulValues(node, wideA, wideB));
  return define(node, buildTyped<mlir::tosa::CastOp>(builder_.getI32Type(),
                                                     shapeOf(product), {product}));
}

namespace {
using I = Importer;
// Inputs and outputs: x, scale, zero point -> y.
const OpInfo kQuantizeOps[] = {
    {.name = "DequantizeLinear",
     .sinceVersion = 10,
     .signature = {2, 3, 1, 1},
     .import = &I::importDequantizeLinear,
     .cost = perElement<2>},
    {.name = "DynamicQuantizeLinear",
     .sinceVersion = 11,
     .signature = {1, 1, 3, 3},
     .import = &I::importDynamicQuantizeLinear,
     .cost = perElement<4>},
    {.name = "MatMulInteger",
     .sinceVersion = 10,
     .signature = {2, 4, 1, 1},
     .import = &I::importMatMulInteger,
     .cost = matMulFlops},
    {.name = "QuantizeLinear",
     .sinceVersion = 10,
     .signature = {2, 3, 1, 1},
     .import = &I::importQuantizeLinear,
     .cost = perElement<3>},
};
} // namespace

std::span<const OpInfo> quantizeOps() { return kQuantizeOps; }

} // namespace flowc::compiler::import
