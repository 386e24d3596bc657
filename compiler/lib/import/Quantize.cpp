// Quantized models: int8 and uint8 values and the ops that make and read
// them (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
// MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv), and integer ops
// on bytes.
//
// Quantized graphs (onnxruntime's QDQ format, PyTorch's and TensorRT's
// exports) are float graphs with their tensors' rounding written out: a
// weight is int8 with a DequantizeLinear after it, an activation goes
// through a QuantizeLinear and back. flowc computes those graphs in
// float32 with the rounding kept where the graph asks for it: a
// dequantized weight is a derived weight (computed once at link), a
// quantize-dequantize pair an elementwise step that fuses with the
// elementwise ops around it (not into a library kernel's epilogue).
// Results are what the graph says, exactly where integer arithmetic is
// exact in float32.
#include "Importer.h"
#include "OpCost.h"

#include <algorithm>
#include <cmath>

namespace flowc::compiler::import {

namespace {

/// Ops that take int8 or uint8 inputs: the quantization ops, Cast, and ops
/// that only move elements (which keep the dtype: inheritSignedness).
bool takesBytes(const std::string &op) {
  // clang-format off
  static const std::set<std::string, std::less<>> ops = {
      "QuantizeLinear", "DequantizeLinear", "MatMulInteger", "ConvInteger",
      "QLinearMatMul", "QLinearConv", "Cast", "CastLike",
      "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity",
      "Concat", "Slice", "Gather", "Split", "Expand", "Tile", "Shape", "Size"};
  // clang-format on
  return ops.contains(op);
}

/// Ops that compute on int8 and uint8 through wider values, exactly:
/// selections and comparisons (a result is one of the inputs, or a bool),
/// and integer arithmetic, whose 8-bit result wraps.
bool computesOnWidenedBytes(const std::string &op) {
  // clang-format off
  static const std::set<std::string, std::less<>> ops = {
      "Add", "Sub", "Mul", "Div", "Mod", "Abs", "Neg", "Sign", "Max", "Min",
      "Clip", "Relu", "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin",
      "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Where",
      "ArgMax", "ArgMin", "Pad"};
  // clang-format on
  return ops.contains(op);
}

} // namespace

std::optional<std::vector<float>> floatValues(const TensorData &tensor) {
  int64_t count = tensor.info.elementCount();
  if (count < 0 ||
      tensor.bytes.size() != static_cast<size_t>(count) * dtypeSize(tensor.info.dtype))
    return std::nullopt;
  return floatValues(tensor.info.dtype, tensor.bytes);
}

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

bool Importer::readsBytesWidened(const Node &node) const {
  return computesOnWidenedBytes(node.opType) &&
         llvm::any_of(node.inputs, [&](const std::string &input) {
           return isByte(describeValue(input).dtype);
         });
}

Status Importer::importWidenedBytes(const Node &node,
                                    Status (Importer::*import)(const Node &)) {
  bool asIntegers = node.opType == "Div" || node.opType == "Mod";
  // The node's results are of its byte inputs' type (ONNX ties them).
  DType bytes = DType::Undefined;
  for (const std::string &input : node.inputs) {
    bytes = describeValue(input).dtype;
    if (isByte(bytes))
      break;
  }
  Status status = importWithWideInputs(
      node, import, isByte, /*widenConstants=*/!asIntegers, [&](Value x) -> Value {
        Value wide = widenBytes(x);
        if (!asIntegers)
          return wide;
        return buildTyped<mlir::tosa::CastOp>(builder_.getI32Type(), shapeOf(wide),
                                              {wide});
      });
  FLOWC_RETURN_IF_ERROR(status);
  // Float32 and int32 results are 8-bit again; through int32, whose
  // truncation to 8 bits wraps (int8 127 + 1 is -128, as in onnxruntime).
  mlir::Type i8 = builder_.getI8Type(), i32 = builder_.getI32Type();
  for (const std::string &name : node.outputs) {
    auto value = values_.find(name);
    if (name.empty() || value == values_.end())
      continue;
    Value result = value->second;
    mlir::Type element = elementTypeOf(result);
    if (!element.isF32() && !element.isInteger(32))
      continue;
    Shape shape = shapeOf(result);
    if (element.isF32())
      result = buildTyped<mlir::tosa::CastOp>(i32, shape, {result});
    value->second = markBytes(buildTyped<mlir::tosa::CastOp>(i8, shape, {result}), bytes);
  }
  return Status::ok();
}

Status Importer::checkByteInputs(const Node &node) const {
  if (takesBytes(node.opType) || computesOnWidenedBytes(node.opType))
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
  // A block as long as the axis or longer is one block: the same values,
  // and no tile of a block's (untrusted) length.
  blockSize = std::max<int64_t>(1, std::min(blockSize, shape[axis]));
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

/// A quantization op's block_size attribute, validated.
static Expected<int64_t> blockSizeOf(const Importer &importer, const Node &node) {
  int64_t blockSize = intAttr(node, "block_size", 0);
  if (blockSize < 0)
    return importer.nodeError(node, "block_size is " + std::to_string(blockSize));
  return blockSize;
}

Expected<Value> Importer::quantize(const Node &node, Value x, size_t scaleIndex,
                                   size_t zeroIndex, int64_t axis, int64_t blockSize,
                                   DType to) {
  if (!isByte(to))
    return nodeUnsupported(node, "quantizing to " + dtypeName(to) +
                                     " is not supported (int8, uint8)");
  Shape shape = shapeOf(x);
  FLOWC_ASSIGN_OR_RETURN(
      Value scale, quantizationParameter(node, scaleIndex, shape, axis, blockSize, 1.0f));
  FLOWC_ASSIGN_OR_RETURN(Value zeroPoint, quantizationParameter(node, zeroIndex, shape,
                                                                axis, blockSize, 0.0f));
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
  return markBytes(buildTyped<mlir::tosa::CastOp>(builder_.getI8Type(), shape, {q}), to);
}

Expected<Value> Importer::dequantize(const Node &node, Value x, size_t scaleIndex,
                                     size_t zeroIndex, int64_t axis, int64_t blockSize) {
  Shape shape = shapeOf(x);
  DType dtype = dtypeOf(x);
  if (!isByte(dtype) && dtype != DType::I32)
    return nodeUnsupported(node, "a quantized input is " + dtypeName(dtype) + "; " +
                                     node.opType + " reads int8, uint8 and int32");
  if (hasOperand(node, zeroIndex) && describeValue(node.inputs[zeroIndex]).dtype != dtype)
    return nodeError(node, "zero point '" + node.inputs[zeroIndex] + "' is " +
                               dtypeName(describeValue(node.inputs[zeroIndex]).dtype) +
                               ", the input it belongs to is " + dtypeName(dtype));
  FLOWC_ASSIGN_OR_RETURN(
      Value scale, quantizationParameter(node, scaleIndex, shape, axis, blockSize, 1.0f));
  FLOWC_ASSIGN_OR_RETURN(Value zeroPoint, quantizationParameter(node, zeroIndex, shape,
                                                                axis, blockSize, 0.0f));
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
  return mul(centered, scale);
}

Expected<bool> Importer::foldQuantizeLinear(const Node &node, DType to, int64_t axis,
                                            int64_t blockSize) {
  auto constant = [&](size_t index) -> const TensorData * {
    if (!hasOperand(node, index) || values_.count(node.inputs[index]))
      return nullptr;
    auto it = constants_.find(node.inputs[index]);
    return it == constants_.end() ? nullptr : it->second;
  };
  const TensorData *x = constant(0), *scale = constant(1), *zero = constant(2);
  if (!x || x->info.dtype != DType::F32 || !scale || (hasOperand(node, 2) && !zero) ||
      !isByte(to))
    return false;
  std::optional<std::vector<float>> values = floatValues(*x),
                                    scales = floatValues(*scale);
  std::optional<std::vector<float>> zeros =
      zero ? floatValues(*zero) : std::optional(std::vector<float>{0.0f});
  if (!values || !scales || !zeros)
    return false;
  // Each parameter's index for an element: its coordinate along the axis
  // (over the block length), or 0 for one value.
  const Shape &shape = x->info.shape;
  int64_t count = static_cast<int64_t>(values->size());
  int64_t along = 1, extent = 1, block = 1, blocks = 1;
  bool perAxis = scales->size() > 1;
  if (perAxis) {
    FLOWC_ASSIGN_OR_RETURN(int64_t normalized,
                           rankAxis(node, axis, static_cast<int64_t>(shape.size())));
    extent = shape[normalized];
    along = product(shape, normalized + 1, shape.size());
    block = blockSize > 0 ? std::max<int64_t>(1, std::min(blockSize, extent)) : 1;
    blocks = (extent + block - 1) / block;
    int64_t outer = product(shape, 0, normalized);
    bool fits = blockSize > 0
                    ? static_cast<int64_t>(scales->size()) == outer * blocks * along
                    : static_cast<int64_t>(scales->size()) == extent;
    if (!fits || zeros->size() != scales->size())
      return false; // quantizationParameter names what does not fit
  } else if (zeros->size() != 1) {
    return false;
  }
  FLOWC_RETURN_IF_ERROR(reserveFolded(node, shape).status());
  auto bytes = std::make_shared<std::string>(static_cast<size_t>(count), '\0');
  double low = to == DType::U8 ? 0 : -128, high = to == DType::U8 ? 255 : 127;
  for (int64_t i = 0; i < count; ++i) {
    int64_t p = 0;
    if (perAxis) {
      int64_t coordinate = i / along % extent, inner = i % along,
              outer = i / (along * extent);
      p = blockSize > 0 ? (outer * blocks + coordinate / block) * along + inner
                        : coordinate;
    }
    // As the graph's QuantizeLinear: the correctly rounded float32
    // quotient, halves to even, plus the zero point, saturated.
    float quotient = static_cast<float>(static_cast<double>((*values)[i]) /
                                        static_cast<double>((*scales)[p]));
    if (std::isnan(quotient))
      quotient = 0.0f;
    double q = std::nearbyint(std::clamp(quotient, -65536.0f, 65536.0f)) + (*zeros)[p];
    (*bytes)[i] = static_cast<char>(static_cast<int32_t>(std::clamp(q, low, high)));
  }
  addFolded(node.outputs[0], to, shape, std::move(bytes));
  return true;
}

Status Importer::importQuantizeLinear(const Node &node) {
  DType to =
      quantizedType(node, describeValue(hasOperand(node, 2) ? node.inputs[2] : ""));
  FLOWC_ASSIGN_OR_RETURN(int64_t blockSize, blockSizeOf(*this, node));
  int64_t axis = intAttr(node, "axis", 1);
  // Weights quantized in the graph (quantization-aware training's exports):
  // quantized here, once, so that their DequantizeLinear reads an 8-bit
  // weight and derives it at link.
  FLOWC_ASSIGN_OR_RETURN(bool folded, foldQuantizeLinear(node, to, axis, blockSize));
  if (folded)
    return Status::ok();
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value y, quantize(node, x, 1, 2, axis, blockSize, to));
  return define(node, y);
}

Status Importer::importDequantizeLinear(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(int64_t blockSize, blockSizeOf(*this, node));
  int64_t axis = intAttr(node, "axis", 1);
  FLOWC_ASSIGN_OR_RETURN(Value y, dequantize(node, x, 1, 2, axis, blockSize));
  recordDequantized(node, x, y, axis, blockSize);
  return define(node, y);
}

Expected<Value> Importer::importOver(const Node &node, const char *opType,
                                     llvm::ArrayRef<Value> inputs,
                                     Status (Importer::*import)(const Node &)) {
  // Names no ONNX graph of flowc's reading has: each starts with a NUL.
  Node inner = node;
  inner.opType = opType;
  inner.inputs.clear();
  std::string prefix = std::string(1, '\0') + node.name + "/" + opType + "/";
  for (size_t i = 0; i < inputs.size(); ++i) {
    inner.inputs.push_back(prefix + std::to_string(i));
    values_[inner.inputs.back()] = inputs[i];
  }
  inner.outputs = {prefix + "out"};
  Status status = (this->*import)(inner);
  for (const std::string &name : inner.inputs)
    values_.erase(name);
  FLOWC_RETURN_IF_ERROR(status);
  auto result = values_.find(inner.outputs[0]);
  if (result == values_.end())
    return internalError(node.describe() + ": " + opType + " defined no result");
  Value y = result->second;
  values_.erase(result);
  return y;
}

Status Importer::importQLinearMatMul(const Node &node) {
  // a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point:
  // a's parameters per row (or one), b's and y's per column (or one).
  FLOWC_ASSIGN_OR_RETURN(Value a, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value b, anyOperand(node, 3));
  FLOWC_ASSIGN_OR_RETURN(std::optional<Value> product, integerQLinearMatMul(node, a, b));
  if (!product) {
    int64_t rowAxis = static_cast<int64_t>(shapeOf(a).size()) - 2;
    int64_t columnAxis = static_cast<int64_t>(shapeOf(b).size()) - 1;
    FLOWC_ASSIGN_OR_RETURN(Value wideA, dequantize(node, a, 1, 2, rowAxis, 0));
    FLOWC_ASSIGN_OR_RETURN(Value wideB, dequantize(node, b, 4, 5, columnAxis, 0));
    FLOWC_ASSIGN_OR_RETURN(product, matmulValues(node, wideA, wideB));
  }
  FLOWC_ASSIGN_OR_RETURN(Value y,
                         quantize(node, *product, 6, 7,
                                  static_cast<int64_t>(shapeOf(*product).size()) - 1, 0,
                                  describeValue(node.inputs[7]).dtype));
  return define(node, y);
}

Expected<std::optional<Value>> Importer::integerQLinearMatMul(const Node &node, Value a,
                                                              Value b) {
  Shape as = shapeOf(a), bs = shapeOf(b);
  if (!isByte(dtypeOf(a)) || !isByte(dtypeOf(b)) || as.size() < 2 || bs.size() != 2)
    return std::optional<Value>();
  // A's scale one value (a scale per row would scale the sums by row);
  // B's one, or one per column.
  Shape aScale = describeValue(node.inputs[1]).shape,
        bScale = describeValue(node.inputs[4]).shape;
  int64_t bScales = product(bScale, 0, bScale.size());
  if (product(aScale, 0, aScale.size()) != 1 || (bScales != 1 && bScales != bs[1]))
    return std::optional<Value>();
  FLOWC_ASSIGN_OR_RETURN(std::optional<Value> sums, integerMatMul(node, a, b, 2, 5));
  if (!sums)
    return sums;
  Shape out = shapeOf(*sums);
  auto lastAxis = static_cast<int64_t>(out.size()) - 1;
  FLOWC_ASSIGN_OR_RETURN(Value scaleA,
                         quantizationParameter(node, 1, out, lastAxis, 0, 1.0f));
  FLOWC_ASSIGN_OR_RETURN(Value scaleB,
                         quantizationParameter(node, 4, out, lastAxis, 0, 1.0f));
  return std::optional<Value>(
      mul(mul(build<mlir::tosa::CastOp>(out, {*sums}), scaleA), scaleB));
}

/// `zeros`, a uint8 input's zero points, as the int8 input's that its sign
/// bits flipped make (128 less); as they are for int8.
static std::vector<int64_t> signedZeros(llvm::ArrayRef<int64_t> zeros, DType bytes) {
  std::vector<int64_t> shifted(zeros.begin(), zeros.end());
  if (bytes == DType::U8)
    for (int64_t &zero : shifted)
      zero -= 128;
  return shifted;
}

/// Whether integerConvolution takes a convolution of `conv`'s groups by
/// weights of these (int8) zero points: dense, or depthwise; a depthwise
/// multiplier reads each channel more than once, and its window sums would
/// need repeating: only for weights without zero points.
static bool integerKernelTakes(const Importer &importer,
                               const Importer::ConvGeometry &conv,
                               llvm::ArrayRef<int64_t> signedZerosW) {
  Shape xs = importer.shapeOf(conv.x), ws = importer.shapeOf(conv.w);
  bool depthwise = conv.groups > 1 && conv.groups == xs[1] && ws[1] == 1;
  bool centeredW = llvm::any_of(signedZerosW, [](int64_t zero) { return zero != 0; });
  bool perChannel = static_cast<int64_t>(signedZerosW.size()) == ws[0];
  return (signedZerosW.size() == 1 || perChannel) &&
         (conv.groups == 1 || (depthwise && (!centeredW || ws[0] == conv.groups)));
}

/// Whether a convolution of `x` by `w` is 1-D or 2-D (the integer kernel's).
static bool isPlanarConv(const Shape &xs, const Shape &ws) {
  return xs.size() == ws.size() && (xs.size() == 3 || xs.size() == 4);
}

Expected<std::optional<Value>> Importer::integerConvolutionOf(const Node &node,
                                                              size_t source,
                                                              size_t weight, size_t zeroX,
                                                              size_t zeroW) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, source));
  FLOWC_ASSIGN_OR_RETURN(Value w, anyOperand(node, weight));
  Shape xs = shapeOf(x), ws = shapeOf(w);
  if (!isByte(dtypeOf(x)) || !isByte(dtypeOf(w)) || !isPlanarConv(xs, ws))
    return std::optional<Value>();
  std::optional<std::vector<int64_t>> zerosX = constantZeros(node, zeroX, dtypeOf(x), 1);
  std::optional<std::vector<int64_t>> zerosW =
      constantZeros(node, zeroW, dtypeOf(w), ws[0]);
  if (!zerosX || zerosX->size() != 1 || !zerosW)
    return std::optional<Value>();
  FLOWC_ASSIGN_OR_RETURN(ConvGeometry conv,
                         convGeometry(node, source, weight, /*anyType=*/true));
  FLOWC_ASSIGN_OR_RETURN(std::optional<Value> sums,
                         integerConvolution(node, conv, zerosX->front(), *zerosW,
                                            constantInput(node, weight)));
  if (!sums)
    return sums;
  return std::optional<Value>(convResult(conv, *sums));
}

Status Importer::importConvInteger(const Node &node) {
  // x, w, x_zero_point (one), w_zero_point (one or one per output channel).
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value w, anyOperand(node, 1));
  for (Value v : {x, w})
    if (!isByte(dtypeOf(v)))
      return nodeError(node, "an input is " + dtypeName(dtypeOf(v)) +
                                 "; ConvInteger convolves int8 and uint8");
  FLOWC_ASSIGN_OR_RETURN(std::optional<Value> sums,
                         integerConvolutionOf(node, 0, 1, 2, 3));
  if (sums)
    return define(node, *sums);
  FLOWC_ASSIGN_OR_RETURN(Value xZero,
                         quantizationParameter(node, 2, shapeOf(x), 1, 0, 0.0f));
  FLOWC_ASSIGN_OR_RETURN(Value wZero,
                         quantizationParameter(node, 3, shapeOf(w), 0, 0, 0.0f));
  // Sums of byte products in float32, as MatMulInteger's.
  FLOWC_ASSIGN_OR_RETURN(
      Value y,
      importOver(node, "Conv", {sub(widenBytes(x), xZero), sub(widenBytes(w), wZero)},
                 &Importer::importConv));
  return define(node,
                buildTyped<mlir::tosa::CastOp>(builder_.getI32Type(), shapeOf(y), {y}));
}

Status Importer::importQLinearConv(const Node &node) {
  // x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
  // y_zero_point, bias (int32, of scale x_scale * w_scale, zero point 0).
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value w, anyOperand(node, 3));
  // The bias at scale x_scale * w_scale, as float32 [channels].
  auto bias = [&]() -> Expected<Value> {
    FLOWC_ASSIGN_OR_RETURN(Value bias, anyOperand(node, 8));
    Shape shape = shapeOf(bias), ws = shapeOf(w);
    if (dtypeOf(bias) != DType::I32 || shape.size() != 1)
      return nodeError(node, "bias '" + node.inputs[8] + "' is " +
                                 dtypeName(dtypeOf(bias)) + " " + shapeString(shape) +
                                 "; QLinearConv's bias is 1-D int32");
    if (!ws.empty() && shape[0] != ws[0])
      return nodeError(node, "bias '" + node.inputs[8] + "' " + shapeString(shape) +
                                 " does not match " + std::to_string(ws[0]) +
                                 " output channels");
    FLOWC_ASSIGN_OR_RETURN(Value xScale,
                           quantizationParameter(node, 1, shape, 0, 0, 1.0f));
    FLOWC_ASSIGN_OR_RETURN(Value wScale,
                           quantizationParameter(node, 4, shape, 0, 0, 1.0f));
    return mul(mul(build<mlir::tosa::CastOp>(shape, {bias}), xScale), wScale);
  };
  FLOWC_ASSIGN_OR_RETURN(std::optional<Value> sums,
                         integerConvolutionOf(node, 0, 3, 2, 5));
  Value y;
  if (sums) {
    // The int32 sums scaled by x_scale * w_scale[o], plus the bias.
    Shape out = shapeOf(*sums);
    FLOWC_ASSIGN_OR_RETURN(Value xScale, quantizationParameter(node, 1, out, 1, 0, 1.0f));
    FLOWC_ASSIGN_OR_RETURN(Value wScale, quantizationParameter(node, 4, out, 1, 0, 1.0f));
    y = mul(mul(build<mlir::tosa::CastOp>(out, {*sums}), xScale), wScale);
    if (hasOperand(node, 8)) {
      FLOWC_ASSIGN_OR_RETURN(Value b, bias());
      Shape perChannel(out.size(), 1);
      perChannel[1] = out[1];
      y = add(y, reshape(b, perChannel));
    }
  } else {
    FLOWC_ASSIGN_OR_RETURN(Value wideX, dequantize(node, x, 1, 2, 1, 0));
    FLOWC_ASSIGN_OR_RETURN(Value wideW, dequantize(node, w, 4, 5, 0, 0));
    llvm::SmallVector<Value> inputs = {wideX, wideW};
    if (hasOperand(node, 8)) {
      FLOWC_ASSIGN_OR_RETURN(Value b, bias());
      inputs.push_back(b);
    }
    FLOWC_ASSIGN_OR_RETURN(y, importOver(node, "Conv", inputs, &Importer::importConv));
  }
  FLOWC_ASSIGN_OR_RETURN(
      Value q, quantize(node, y, 6, 7, 1, 0, describeValue(node.inputs[7]).dtype));
  return define(node, q);
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
  // The quantization in x's own shape: one loop from x to its bytes, which
  // a reshape in between would split, materializing the quotients.
  Shape ones(rank, 1);
  Value rounded = buildTyped<mlir::tosa::CastOp>(
      i32, shape, {divideExactly(x, reshape(divisor, ones))});
  Value q =
      buildTyped<mlir::tosa::AddOp>(i32, shape, {rounded, reshape(zeroPoint, ones)});
  q = buildTyped<mlir::tosa::ClampOp>(i32, shape, {q},
                                      {attr("min_val", builder_.getI32IntegerAttr(0)),
                                       attr("max_val", builder_.getI32IntegerAttr(255))});
  mlir::Type i8 = builder_.getI8Type();
  Value y = buildTyped<mlir::tosa::CastOp>(i8, shape, {q});
  Value zeroByte = reshape(buildTyped<mlir::tosa::CastOp>(i8, {1, 1}, {zeroPoint}), {});
  FLOWC_RETURN_IF_ERROR(defineOutput(node, 0, markBytes(y, DType::U8)));
  FLOWC_RETURN_IF_ERROR(defineOutput(node, 1, reshape(scale, {})));
  return defineOutput(node, 2, markBytes(zeroByte, DType::U8));
}

/// A zero point that the integer kernel reads as it is: of its input's
/// type and `count` elements (or one), as [count] (or [1]). Null when
/// absent; nullopt when the product must take the float32 path instead.
std::optional<Value> Importer::kernelZeroPoint(const Node &node, size_t index,
                                               DType input, int64_t count) {
  if (!hasOperand(node, index))
    return Value();
  Expected<Value> zero = anyOperand(node, index);
  if (!zero || dtypeOf(*zero) != input)
    return std::nullopt;
  Shape shape = shapeOf(*zero);
  int64_t given = product(shape, 0, shape.size());
  if (given != 1 && !(shape.size() == 1 && given == count))
    return std::nullopt;
  return reshape(*zero, {given});
}

Expected<Value> Importer::integerProduct(Value a, Value b, Value zeroA, Value zeroB,
                                         bool transposedB) {
  Shape as = shapeOf(a);
  int64_t k = as.back(), n = shapeOf(b)[transposedB ? 0 : 1];
  int64_t rows = product(as, 0, as.size() - 1);
  DType typeA = dtypeOf(a), typeB = dtypeOf(b);
  int64_t zerosB = zeroB ? shapeOf(zeroB)[0] : 0;
  runtime::IntegerMatMulParams params{rows,
                                      n,
                                      k,
                                      transposedB,
                                      /*constantB=*/0,
                                      typeA == DType::U8,
                                      typeB == DType::U8,
                                      static_cast<bool>(zeroA),
                                      zerosB};
  llvm::SmallVector<Value> inputs = {reshape(a, {rows, k}), b};
  for (Value zero : {zeroA, zeroB})
    if (zero)
      inputs.push_back(zero);
  // The callee's body, the float32 products, is the code where the kernel
  // does not run (-O0, cuda).
  auto body = [&](mlir::ValueRange data) -> Expected<Value> {
    Value wideA = widenBytes(markBytes(data[0], typeA));
    Value wideB = widenBytes(markBytes(data[1], typeB));
    if (transposedB)
      wideB = transpose(wideB, {1, 0});
    size_t next = 2;
    if (params.hasZeroA)
      wideA = sub(wideA, reshape(widenBytes(markBytes(data[next++], typeA)), {1, 1}));
    if (zerosB)
      wideB = sub(wideB, reshape(widenBytes(markBytes(data[next], typeB)), {1, zerosB}));
    Value product = reshape(
        matmul3d(reshape(wideA, {1, rows, k}), reshape(wideB, {1, k, n})), {rows, n});
    return buildTyped<mlir::tosa::CastOp>(builder_.getI32Type(), {rows, n}, {product});
  };
  FLOWC_ASSIGN_OR_RETURN(
      Value product,
      libraryCall(runtime::KernelKind::IntegerMatMul, runtime::paramWords(params), inputs,
                  mlir::RankedTensorType::get({rows, n}, builder_.getI32Type()), body));
  Shape out(as.begin(), as.end() - 1);
  out.push_back(n);
  return reshape(product, out);
}

/// MatMulInteger of a 2-D B through the runtime's integer kernel, exact in
/// int32 (int8 dot products). nullopt for the forms it does not take: a
/// batched B, or zero points per row of A or of another type than their
/// input's.
Expected<std::optional<Value>> Importer::integerMatMul(const Node &node, Value a, Value b,
                                                       size_t zeroA, size_t zeroB) {
  Shape as = shapeOf(a), bs = shapeOf(b);
  int64_t k = as.back(), n = bs.back();
  if (bs.size() != 2 || bs[0] != k || product(as, 0, as.size()) == 0 || n == 0)
    return std::optional<Value>();
  std::optional<Value> zeroPointA = kernelZeroPoint(node, zeroA, dtypeOf(a), 1);
  std::optional<Value> zeroPointB = kernelZeroPoint(node, zeroB, dtypeOf(b), n);
  if (!zeroPointA || !zeroPointB)
    return std::optional<Value>();
  FLOWC_ASSIGN_OR_RETURN(Value y, integerProduct(a, b, *zeroPointA, *zeroPointB, false));
  return std::optional<Value>(y);
}

void Importer::recordDequantized(const Node &node, Value x, Value y, int64_t axis,
                                 int64_t blockSize) {
  if (blockSize != 0 || !isByte(dtypeOf(x)))
    return;
  Shape shape = shapeOf(x);
  Expected<Value> scale = anyOperand(node, 1);
  if (!scale || dtypeOf(*scale) != DType::F32)
    return;
  Shape scaleShape = shapeOf(*scale);
  int64_t count = product(scaleShape, 0, scaleShape.size());
  // One scale, or one per row or column of a matrix (a product's weight,
  // as it is or transposed), or one per output channel of a convolution's
  // weights.
  auto rank = static_cast<int64_t>(shape.size());
  int64_t along = axis < 0 ? axis + rank : axis;
  bool perAxis = scaleShape.size() == 1 && along >= 0 && along < rank &&
                 count == shape[along] &&
                 ((rank == 2 && along <= 1) || (rank == 4 && along == 0));
  if (count != 1 && !perAxis)
    return;
  std::optional<Value> zero = kernelZeroPoint(node, 2, dtypeOf(x), count);
  if (!zero)
    return;
  dequantized_[y] = Dequantized{x,
                                reshape(*scale, {count}),
                                *zero,
                                count == 1 ? -1 : along,
                                constantZeros(node, 2, dtypeOf(x), count),
                                constantInput(node, 0)};
}

const TensorData *Importer::constantInput(const Node &node, size_t index) const {
  if (!hasOperand(node, index) || graphInputNames_.count(node.inputs[index]))
    return nullptr;
  auto constant = constants_.find(node.inputs[index]);
  return constant == constants_.end() ? nullptr : constant->second;
}

Expected<Value> Importer::signedWeight(const Node &node, const TensorData &weight) {
  std::string name = weight.info.name + "/int8";
  while (constants_.count(name) && !signedWeights_.count(name))
    name += "_";
  if (!signedWeights_.count(name)) {
    FLOWC_RETURN_IF_ERROR(reserveFolded(node, weight.info.shape).status());
    auto bytes = std::make_shared<std::string>(weight.bytes);
    for (char &byte : *bytes)
      byte = static_cast<char>(static_cast<uint8_t>(byte) ^ 0x80);
    addFolded(name, DType::I8, weight.info.shape, std::move(bytes));
    signedWeights_.insert(name);
  }
  if (auto value = values_.find(name); value != values_.end())
    return value->second;
  return weightArgument(node, *constants_.at(name));
}

std::optional<std::vector<int64_t>>
Importer::constantZeros(const Node &node, size_t index, DType input, int64_t count) {
  if (!hasOperand(node, index))
    return std::vector<int64_t>{0};
  const TensorData *constant = constantInput(node, index);
  if (!constant || constant->info.dtype != input)
    return std::nullopt;
  const Shape &shape = constant->info.shape;
  std::optional<std::vector<float>> values = floatValues(*constant);
  if (!values || (values->size() != 1 && !(shape.size() == 1 && shape[0] == count)))
    return std::nullopt;
  return std::vector<int64_t>(values->begin(), values->end());
}

/// `bytes` (uint8) as int8 of the same order: flipping the sign bit
/// subtracts 128.
static Value flipSignBits(Importer &importer, mlir::OpBuilder &builder,
                          mlir::Location loc, Value bytes) {
  Shape shape = importer.shapeOf(bytes);
  auto type = mlir::RankedTensorType::get(Shape(shape.size(), 1), builder.getI8Type());
  Value signBit = mlir::tosa::ConstOp::create(
      builder, loc, type,
      mlir::DenseElementsAttr::get(type, llvm::ArrayRef<int8_t>(-128)));
  return importer.buildTyped<mlir::tosa::BitwiseXorOp>(builder.getI8Type(), shape,
                                                       {bytes, signBit});
}

Expected<std::optional<Value>>
Importer::integerConvolution(const Node &node, const ConvGeometry &conv, int64_t zeroX,
                             llvm::ArrayRef<int64_t> zerosW,
                             const TensorData *constantW) {
  Shape ws = shapeOf(conv.w);
  int64_t groups = conv.groups;
  std::vector<int64_t> shiftedW = signedZeros(zerosW, dtypeOf(conv.w));
  if (!integerKernelTakes(*this, conv, shiftedW))
    return std::optional<Value>();
  // TOSA's convolution reads int8: uint8 bytes and their zero points
  // become int8 ones, 128 less.
  Value x = conv.x, w = conv.w;
  if (dtypeOf(x) == DType::U8) {
    x = flipSignBits(*this, builder_, loc_, x);
    zeroX -= 128;
  }
  // A constant uint8 weight is folded to int8 once, so that the kernel
  // reads a weight it packs at link.
  if (dtypeOf(w) == DType::U8 && constantW) {
    FLOWC_ASSIGN_OR_RETURN(Value folded, signedWeight(node, *constantW));
    w = reshape(folded, ws);
  } else if (dtypeOf(w) == DType::U8) {
    w = flipSignBits(*this, builder_, loc_, w);
  }
  bool depthwise = groups > 1;
  bool centeredW = llvm::any_of(shiftedW, [](int64_t zero) { return zero != 0; });
  FLOWC_ASSIGN_OR_RETURN(Value sums,
                         convolveNchw(node, x, w, Value(), conv.padding, conv.strides,
                                      conv.dilations, groups, zeroX));
  if (!centeredW)
    return std::optional<Value>(sums);
  // The weights' zero points enter afterwards:
  //   (x - zx)(w - zw) = (x - zx) w - zw * windowsum(x - zx),
  // the window sums a convolution by ones (one per channel if depthwise).
  Shape onesShape =
      depthwise ? Shape{groups, 1, ws[2], ws[3]} : Shape{1, ws[1], ws[2], ws[3]};
  auto onesType = mlir::RankedTensorType::get(onesShape, builder_.getI8Type());
  Value ones = mlir::tosa::ConstOp::create(
      builder_, loc_, onesType, mlir::DenseElementsAttr::get(onesType, int8_t{1}));
  FLOWC_ASSIGN_OR_RETURN(Value windowSums,
                         convolveNchw(node, x, ones, Value(), conv.padding, conv.strides,
                                      conv.dilations, groups, zeroX));
  mlir::Type i32 = builder_.getI32Type();
  auto zerosType =
      mlir::RankedTensorType::get({1, static_cast<int64_t>(shiftedW.size()), 1, 1}, i32);
  std::vector<int32_t> zeros(shiftedW.begin(), shiftedW.end());
  Value zerosValue = mlir::tosa::ConstOp::create(
      builder_, loc_, zerosType,
      mlir::DenseElementsAttr::get(zerosType, llvm::ArrayRef<int32_t>(zeros)));
  Value correction =
      buildTyped<mlir::tosa::MulOp>(i32, sameRankBroadcast(windowSums, zerosValue),
                                    {windowSums, zerosValue, zeroShift()});
  return std::optional<Value>(buildTyped<mlir::tosa::SubOp>(
      i32, sameRankBroadcast(sums, correction), {sums, correction}));
}

Expected<std::optional<Value>>
Importer::convolutionOfDequantized(const Node &node, const ConvGeometry &conv,
                                   Value bias) {
  auto source = dequantized_.find(conv.x), weights = dequantized_.find(conv.w);
  if (source == dequantized_.end() || weights == dequantized_.end())
    return std::optional<Value>();
  const Dequantized &dx = source->second, &dw = weights->second;
  if (dx.axis != -1 || !dx.zeros || dx.zeros->size() != 1 || !dw.zeros ||
      (dw.axis != -1 && dw.axis != 0) ||
      (bias && shapeOf(bias) != Shape{shapeOf(conv.w)[0]}))
    return std::optional<Value>();
  ConvGeometry bytes = conv;
  bytes.x = dx.bytes;
  bytes.w = dw.bytes;
  FLOWC_ASSIGN_OR_RETURN(
      std::optional<Value> sums,
      integerConvolution(node, bytes, dx.zeros->front(), *dw.zeros, dw.constant));
  if (!sums)
    return sums;
  // sx * sw[o] * sums[o] + bias[o].
  Shape out = shapeOf(*sums);
  int64_t scales = shapeOf(dw.scale)[0];
  Value scale =
      mul(reshape(dx.scale, {1, 1, 1, 1}), reshape(dw.scale, {1, scales, 1, 1}));
  Value y = mul(build<mlir::tosa::CastOp>(out, {*sums}), scale);
  if (bias)
    y = add(y, reshape(bias, {1, out[1], 1, 1}));
  return std::optional<Value>(y);
}

/// A MatMul or Gemm of two DequantizeLinear results (the QDQ format's
/// quantized product) as the integer kernel's product of their bytes,
/// scaled once: exact sums, where the float32 product of the dequantized
/// values rounds each. nullopt for other forms: A scaled per anything, B
/// batched or scaled per entry of its inner axis.
Expected<std::optional<Value>> Importer::productOfDequantized(Value a, Value b,
                                                              bool transposedB) {
  auto left = dequantized_.find(a), right = dequantized_.find(b);
  if (left == dequantized_.end() || right == dequantized_.end())
    return std::optional<Value>();
  const Dequantized &da = left->second, &db = right->second;
  Shape as = shapeOf(da.bytes), bs = shapeOf(db.bytes);
  // B's scales are per column of the product: its stored axis 1, or 0
  // when transposed.
  int64_t columnAxis = transposedB ? 0 : 1;
  if (as.size() < 2 || bs.size() != 2 || bs[1 - columnAxis] != as.back() ||
      da.axis != -1 || (db.axis != -1 && db.axis != columnAxis) ||
      product(as, 0, as.size()) == 0 || bs[columnAxis] == 0)
    return std::optional<Value>();
  FLOWC_ASSIGN_OR_RETURN(
      Value sums, integerProduct(da.bytes, db.bytes, da.zero, db.zero, transposedB));
  Shape out = shapeOf(sums);
  Shape ones(out.size(), 1), columns = ones;
  columns.back() = shapeOf(db.scale)[0];
  Value y = build<mlir::tosa::CastOp>(out, {sums});
  return std::optional<Value>(
      mul(mul(y, reshape(da.scale, ones)), reshape(db.scale, columns)));
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
  FLOWC_ASSIGN_OR_RETURN(std::optional<Value> exact, integerMatMul(node, a, b, 2, 3));
  if (exact)
    return define(node, *exact);
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
/// QLinearConv: Conv's count, its weight being input 3 and its bias input 8.
std::optional<uint64_t> qLinearConvFlops(const NodeRecord &record, const Node *) {
  if (!present(record, 3) || !hasShape(record.inputs[3]) || record.outputs.empty())
    return std::nullopt;
  uint64_t out = outputElements(record);
  return 2 * out * trailingProduct(record.inputs[3].shape, 1) +
         (present(record, 8) ? out : 0);
}

using I = Importer;
// Inputs and outputs: x, scale, zero point -> y.
const OpInfo kQuantizeOps[] = {
    {.name = "DequantizeLinear",
     .sinceVersion = 10,
     .signature = {2, 3, 1, 1},
     .import = &I::importDequantizeLinear,
     .cost = perElement<2>},
    {.name = "ConvInteger",
     .sinceVersion = 10,
     .signature = {2, 4, 1, 1},
     .import = &I::importConvInteger,
     .cost = convFlops},
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
    {.name = "QLinearConv",
     .sinceVersion = 10,
     .signature = {8, 9, 1, 1},
     .import = &I::importQLinearConv,
     .cost = qLinearConvFlops},
    {.name = "QLinearMatMul",
     .sinceVersion = 10,
     .signature = {8, 8, 1, 1},
     .import = &I::importQLinearMatMul,
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
