// ONNX graph -> MLIR (func + TOSA). ONNX's NCHW layout is kept at the graph
// level; convolution and pooling, which TOSA defines on NHWC, are wrapped in
// transposes that canonicalization cancels between neighbouring layers.
#include "flowc/compiler/Compiler.h"

#include "flowc/support/Format.h"

#include "mlir/Bytecode/BytecodeWriter.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <deque>
#include <optional>
#include <set>
#include <new>
#include <stdexcept>
#include <tuple>

#include <unistd.h>

namespace flowc::compiler {

namespace {

using mlir::Value;
using Shape = std::vector<int64_t>;

int64_t product(const Shape &shape, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end && i < shape.size(); ++i)
    p *= shape[i];
  return p;
}

/// An integer (or bool) tensor known at import time: shape arithmetic.
struct IntTensor {
  Shape shape;
  std::vector<int64_t> values;
  DType dtype = DType::I64;
};

static std::optional<IntTensor> toInts(const TensorData &tensor);

class Importer {
public:
  Importer(mlir::MLIRContext &ctx, const OnnxModel &model, const ImportLimits &limits)
      : ctx_(ctx), builder_(&ctx), loc_(mlir::UnknownLoc::get(&ctx)), model_(model),
        foldLimit_(limits.foldedBytes ? limits.foldedBytes : foldedConstantLimit(model)) {
  }

  Expected<ImportedGraph> run();

private:
  // Errors -------------------------------------------------------------
  Status nodeError(const Node &node, const std::string &message) const {
    return invalidArgument(model_.path + ": " + node.describe() + ": " + message);
  }
  Status nodeUnsupported(const Node &node, const std::string &message) const {
    return unimplemented(model_.path + ": " + node.describe() + ": " + message);
  }

  // Validation ---------------------------------------------------------
  /// The node's input and output counts and attribute kinds, against what
  /// ONNX defines for its op; InvalidArgument naming what is off.
  Status checkSignature(const Node &node) const;
  /// The `name` attribute as `count` integers, each in [min, kMaxWindowValue]
  /// (`fallback` when absent): strides, dilations, kernels, pads.
  Expected<Shape> windowInts(const Node &node, const char *name, size_t count,
                             Shape fallback, int64_t min) const;
  /// A value of `shape` the node computes at run time: every dimension
  /// known and >= 0, and its bytes addressable (InvalidArgument otherwise).
  Status checkRuntimeShape(const Node &node, const Shape &shape) const;
  /// Accounts for a constant of `shape` computed at import time, before its
  /// memory is taken: InvalidArgument when the shape is malformed or its
  /// element count overflows int64, ResourceExhausted past foldLimit_ (for
  /// all the model's folded constants together). Counts 8 bytes an element,
  /// the widest the folder stores. Returns the element count.
  Expected<int64_t> reserveFolded(const Node &node, const Shape &shape);

  // Values -------------------------------------------------------------
  /// A float32 tensor input: what almost every op computes on.
  Expected<Value> operand(const Node &node, size_t index);
  /// An input of any carried element type (data movement, indices, masks).
  Expected<Value> anyOperand(const Node &node, size_t index);
  bool hasOperand(const Node &node, size_t index) const {
    return index < node.inputs.size() && !node.inputs[index].empty();
  }
  Expected<const TensorData *> constantOperand(const Node &node, size_t index);
  Expected<Value> weightArgument(const Node &node, const TensorData &tensor);
  Status define(const Node &node, Value value);
  Status defineOutput(const Node &node, size_t index, Value value);

  // Builders -----------------------------------------------------------
  static Shape shapeOf(Value v) {
    auto type = mlir::cast<mlir::RankedTensorType>(v.getType());
    return Shape(type.getShape().begin(), type.getShape().end());
  }
  mlir::RankedTensorType f32(const Shape &shape) {
    return mlir::RankedTensorType::get(shape, builder_.getF32Type());
  }
  static DType dtypeOf(Value v) {
    mlir::Type element = elementTypeOf(v);
    return element.isF32()         ? DType::F32
           : element.isInteger(64) ? DType::I64
           : element.isInteger(32) ? DType::I32
           : element.isInteger(1)  ? DType::Bool
                                   : DType::Undefined;
  }
  static mlir::Type elementTypeOf(Value v) {
    return mlir::cast<mlir::RankedTensorType>(v.getType()).getElementType();
  }
  /// The MLIR element type of a runtime tensor of `dtype`; null for dtypes
  /// the importer cannot carry (float32, int64, int32 and bool).
  mlir::Type elementType(DType dtype) {
    switch (dtype) {
    case DType::F32:
      return builder_.getF32Type();
    case DType::I64:
      return builder_.getI64Type();
    case DType::I32:
      return builder_.getI32Type();
    case DType::Bool:
      return builder_.getI1Type();
    default:
      return {};
    }
  }
  template <typename Op>
  Value build(const Shape &shape, mlir::ValueRange operands,
              llvm::ArrayRef<mlir::NamedAttribute> attrs = {}) {
    return buildTyped<Op>(builder_.getF32Type(), shape, operands, attrs);
  }
  template <typename Op>
  Value buildTyped(mlir::Type element, const Shape &shape, mlir::ValueRange operands,
                   llvm::ArrayRef<mlir::NamedAttribute> attrs = {}) {
    auto type = mlir::RankedTensorType::get(shape, element);
    return Op::create(builder_, loc_, mlir::TypeRange{type}, operands, attrs)
        ->getResult(0);
  }
  mlir::NamedAttribute attr(llvm::StringRef name, mlir::Attribute value) {
    return builder_.getNamedAttr(name, value);
  }
  Value scalar(float value, size_t rank);
  Value zeroPoint();
  /// tosa.mul's shift operand; zero for floating point.
  Value zeroShift();
  Value transpose(Value v, llvm::ArrayRef<int32_t> perms);
  Value constShape(const Shape &shape);
  Value slice(Value v, const Shape &start, const Shape &size);
  Value reshape(Value v, const Shape &shape);
  /// TOSA 1.0 wants (in - 1 + pads - dilated kernel extent) divisible by the
  /// stride where ONNX floors: trims trailing padding, then trailing input
  /// rows/columns that no window reads. `pads` is [top, left, bottom, right].
  Value fitWindows(Value nhwc, std::array<int64_t, 4> &pads, const Shape &kernel,
                   const Shape &strides, const Shape &dilations);
  Expected<Value> broadcastTo(const Node &node, Value v, size_t rank);
  Expected<Shape> broadcastShape(const Node &node, const Shape &a, const Shape &b);
  Expected<Value> elementwise(const Node &node);

  // Ops ----------------------------------------------------------------
  Status importNode(const Node &node);
  Status importConv(const Node &node);
  Status importPool(const Node &node);
  Status importGlobalAveragePool(const Node &node);
  Status importGemm(const Node &node);
  Status importMatMul(const Node &node);
  Status importReshape(const Node &node);
  Status importFlatten(const Node &node);
  Status importTranspose(const Node &node);
  Status importBatchNormalization(const Node &node);
  Status importClip(const Node &node);
  Status importConcat(const Node &node);
  Status importReduce(const Node &node);
  Status importUnary(const Node &node);
  Status importVariadic(const Node &node);
  Status importCompare(const Node &node);
  Status importLogical(const Node &node);
  /// Both operands broadcast to one rank; `out` gets the result shape.
  Expected<std::pair<Value, Value>> broadcastPair(const Node &node, Value a, Value b,
                                                  Shape &out);
  Status importSqueeze(const Node &node, bool unsqueeze);
  Status importActivation(const Node &node);
  Status importSlice(const Node &node);
  Status importGather(const Node &node);
  Status importExpand(const Node &node);
  Status importPow(const Node &node);
  Status importCast(const Node &node);
  Status importCastTo(const Node &node, DType to);
  Status importArgExtreme(const Node &node);
  Status importPad(const Node &node);
  Expected<bool> foldRange(const Node &node);
  Status importIdentity(const Node &node);
  Status importConstant(const Node &node);
  Status importWhere(const Node &node);
  Status importLayerNormalization(const Node &node);
  Status importSplit(const Node &node);
  Status importGelu(const Node &node);
  /// tosa.gather of `indices` (any integer type, negative ones counted from
  /// the end) along `axis` of `data`.
  Expected<Value> gatherRuntime(const Node &node, Value data, Value indices,
                                int64_t axis);
  Expected<Shape> reshapeTarget(const Node &node, const Shape &in);
  Expected<Shape> squeezedShape(const Node &node, const Shape &in, bool unsqueeze);
  Expected<std::vector<std::pair<int64_t, int64_t>>> sliceRanges(const Node &node,
                                                                 const Shape &in);
  // Shape folding.
  Expected<bool> tryFold(const Node &node);
  std::optional<IntTensor> intConstant(const std::string &name) const;
  Status defineConstant(const Node &node, const IntTensor &tensor);
  Status defineFloatConstant(const Node &node, const Shape &shape,
                             const std::vector<float> &values);
  /// Registers a computed constant as the value `name`, like an initializer.
  void addFolded(const std::string &name, DType dtype, const Shape &shape,
                 std::shared_ptr<std::string> bytes);
  Expected<IntTensor> foldBinary(const Node &node, const IntTensor &a, const IntTensor &b,
                                 int64_t (*fn)(int64_t, int64_t));
  Expected<Shape> axesOf(const Node &node, size_t inputIndex, int64_t rank);
  Expected<float> scalarConstant(const Node &node, size_t index);
  Value clamp(Value x, float low, float high);
  Value mul(Value a, Value b);
  Value softmaxLastAxis(Value x);
  Value logSoftmaxLastAxis(Value x);
  /// Softmax and LogSoftmax: `lastAxis` applied along the node's axis, with
  /// the opset rules (before 13 the input is flattened at `axis`).
  Status importSoftmaxLike(const Node &node, Value (Importer::*lastAxis)(Value));
  /// The node's `axis` attribute (default `fallback`) normalized into
  /// [0, rank of `shape`); InvalidArgument naming it otherwise.
  Expected<int64_t> axisOf(const Node &node, int64_t fallback, const Shape &shape);
  Value matmul3d(Value a, Value b);

  mlir::MLIRContext &ctx_;
  mlir::OpBuilder builder_;
  mlir::Location loc_;
  const OnnxModel &model_;
  mlir::Block *entry_ = nullptr;
  std::map<std::string, Value> values_;
  std::map<std::string, const TensorData *> constants_;
  std::vector<WeightRef> weights_;
  /// Constants computed at import time; a deque so pointers stay valid.
  std::deque<TensorData> folded_;
  std::map<std::string, int> opCounts_;
  std::vector<NodeRecord> records_;
  std::set<std::string> initializerNames_;
  /// Initializers already counted as some node's parameters.
  std::set<std::string> countedParameters_;
  /// Bytes that constants computed at import may take, and have taken.
  uint64_t foldLimit_ = 0;
  uint64_t foldedBytes_ = 0;

  NodeRecord recordOf(const Node &node);
  TensorInfo describeValue(const std::string &name) const;
};

Value Importer::scalar(float value, size_t rank) {
  Shape shape(rank, 1);
  auto type = f32(shape);
  auto dense = mlir::DenseElementsAttr::get(type, llvm::ArrayRef<float>(value));
  return mlir::tosa::ConstOp::create(builder_, loc_, type, dense);
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
  return buildTyped<mlir::tosa::ReshapeOp>(elementTypeOf(v), shape,
                                           {v, constShape(shape)});
}

Value Importer::slice(Value v, const Shape &start, const Shape &size) {
  if (shapeOf(v) == size)
    return v;
  return buildTyped<mlir::tosa::SliceOp>(elementTypeOf(v), size,
                                         {v, constShape(start), constShape(size)});
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
                                     "; supported: float32, int64, int32, bool");
  // Small-constant folding: a float scalar (GELU's sqrt(2), LayerNorm's
  // epsilon, a 0.5) is part of the graph's arithmetic, not a weight a
  // fine-tune changes; as an IR constant it folds and lets passes see the
  // formula it belongs to.
  if (tensor.info.dtype == DType::F32 && tensor.info.elementCount() == 1 &&
      tensor.bytes.size() == sizeof(float)) {
    float value;
    std::memcpy(&value, tensor.bytes.data(), sizeof value);
    auto type = mlir::RankedTensorType::get(tensor.info.shape, element);
    Value constant = mlir::tosa::ConstOp::create(
        builder_, loc_, type, mlir::DenseElementsAttr::get(type, value));
    values_[tensor.info.name] = constant;
    return constant;
  }
  Value arg =
      entry_->addArgument(mlir::RankedTensorType::get(tensor.info.shape, element), loc_);
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

Expected<Value> Importer::elementwise(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value a, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value b, operand(node, 1));
  FLOWC_ASSIGN_OR_RETURN(Shape out, broadcastShape(node, shapeOf(a), shapeOf(b)));
  FLOWC_ASSIGN_OR_RETURN(a, broadcastTo(node, a, out.size()));
  FLOWC_ASSIGN_OR_RETURN(b, broadcastTo(node, b, out.size()));
  const std::string &op = node.opType;
  if (op == "Add")
    return build<mlir::tosa::AddOp>(out, {a, b});
  if (op == "Sub")
    return build<mlir::tosa::SubOp>(out, {a, b});
  if (op == "Mul" || op == "Div") {
    if (op == "Div")
      b = build<mlir::tosa::ReciprocalOp>(shapeOf(b), {b});
    return mul(a, b);
  }
  return nodeUnsupported(node, "not an elementwise binary op");
}

/// Explicit pads [top, left, bottom, right] of a 2-D window op, from `pads`
/// (`given`, validated) or `auto_pad`. Window values are validated.
Expected<std::array<int64_t, 4>> windowPads(const Node &node, const Shape &given,
                                            const Shape &inHW, const Shape &kernel,
                                            const Shape &strides,
                                            const Shape &dilations) {
  std::array<int64_t, 4> pads{0, 0, 0, 0};
  auto autoPad = node.attributes.find("auto_pad");
  std::string mode = autoPad == node.attributes.end() ? "NOTSET" : autoPad->second.s;
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

float floatAttr(const Node &node, const char *name, float fallback) {
  auto it = node.attributes.find(name);
  return it == node.attributes.end() ? fallback : it->second.f;
}

// Validation -------------------------------------------------------------

/// The largest kernel extent, stride, dilation or pad accepted: far beyond
/// any real model, and small enough that window arithmetic on dimensions
/// (which checkRuntimeShape bounds) cannot overflow int64.
constexpr int64_t kMaxWindowValue = std::numeric_limits<int32_t>::max();
/// Bytes a runtime tensor may span: the x86-64 user address space.
constexpr int64_t kMaxTensorBytes = int64_t{1} << 47;
/// Ranks beyond this are refused: no real model comes close, and shape
/// code is quadratic in the rank in places.
constexpr size_t kMaxRank = 64;

/// Input and output counts ONNX defines for an op (over the opsets flowc
/// reads: the lowest minimum, the highest maximum). `variadic` ops take any
/// number of inputs from `minInputs`, all of them required.
struct OpSignature {
  size_t minInputs, maxInputs, minOutputs, maxOutputs;
  bool variadic = false;
};

constexpr size_t kMany = std::numeric_limits<size_t>::max();

const OpSignature *signatureOf(const std::string &op) {
  static const std::map<std::string, OpSignature> signatures = [] {
    std::map<std::string, OpSignature> table;
    auto add = [&](std::initializer_list<const char *> ops, OpSignature signature) {
      for (const char *op : ops)
        table.emplace(op, signature);
    };
    add({"Relu",
         "Sigmoid",
         "Tanh",
         "Exp",
         "Erf",
         "Sqrt",
         "LeakyRelu",
         "HardSigmoid",
         "HardSwish",
         "Neg",
         "Abs",
         "Log",
         "Reciprocal",
         "Floor",
         "Ceil",
         "Sin",
         "Cos",
         "Softplus",
         "Softsign",
         "Elu",
         "Selu",
         "Gelu",
         "Not",
         "Softmax",
         "LogSoftmax",
         "Flatten",
         "Transpose",
         "Cast",
         "ArgMax",
         "ArgMin",
         "Identity",
         "Shape",
         "Size",
         "ConstantOfShape",
         "GlobalAveragePool",
         "AveragePool"},
        {1, 1, 1, 1});
    add({"Add", "Sub", "Mul", "Div", "Pow", "MatMul", "Equal", "Greater", "Less",
         "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor", "Gather", "Expand",
         "CastLike"},
        {2, 2, 1, 1});
    add({"Concat", "Max", "Min", "Sum", "Mean"}, {1, kMany, 1, 1, true});
    add({"Conv", "Gemm"}, {2, 3, 1, 1});
    add({"Where", "Range"}, {3, 3, 1, 1});
    add({"MaxPool"}, {1, 1, 1, 2});
    // Inputs that older opsets took as attributes.
    add({"Reshape", "Squeeze", "Unsqueeze", "ReduceMean", "ReduceSum", "ReduceMax",
         "ReduceMin", "ReduceProd"},
        {1, 2, 1, 1});
    add({"Clip"}, {1, 3, 1, 1});
    add({"Slice"}, {1, 5, 1, 1});
    add({"Pad"}, {1, 4, 1, 1});
    add({"Split"}, {1, 2, 1, kMany});
    add({"Dropout"}, {1, 3, 1, 2});
    add({"BatchNormalization"}, {5, 5, 1, 5});
    add({"LayerNormalization"}, {2, 3, 1, 3});
    add({"Constant"}, {0, 0, 1, 1});
    return table;
  }();
  auto it = signatures.find(op);
  return it == signatures.end() ? nullptr : &it->second;
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
                                                    {"value", Kind::Tensor}};
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

} // namespace

uint64_t foldedConstantLimit(const OnnxModel &model) {
  uint64_t weightBytes = 0;
  for (const TensorData &tensor : model.initializers)
    weightBytes += tensor.bytes.size();
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
  uint64_t ram = pages > 0 && pageSize > 0
                     ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(pageSize)
                     : uint64_t{4} << 30;
  constexpr uint64_t kGiB = uint64_t{1} << 30;
  uint64_t fromModel = weightBytes > kGiB / 4 ? weightBytes * 4 : kGiB;
  return std::min(ram / 4, fromModel);
}

namespace {

Status Importer::checkSignature(const Node &node) const {
  for (const auto &[name, attribute] : node.attributes) {
    std::optional<Attribute::Kind> kind = expectedKind(name);
    if (kind && attribute.kind != *kind)
      return nodeError(node, "attribute '" + name + "' must be " + kindName(*kind) +
                                 ", got " + kindName(attribute.kind));
  }
  const OpSignature *signature = signatureOf(node.opType);
  if (!signature)
    return Status::ok(); // refused by name later
  size_t inputs = node.inputs.size(), outputs = node.outputs.size();
  auto range = [](size_t low, size_t high) {
    return high == low     ? std::to_string(low)
           : high == kMany ? std::to_string(low) + " or more"
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
  if (node.outputs[0].empty())
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

Status Importer::importConv(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value w, operand(node, 1));
  Shape xs = shapeOf(x), ws = shapeOf(w);
  if (xs.size() != 4 || ws.size() != 4)
    return nodeUnsupported(node, "only 2-D convolution (4-D input " + shapeString(xs) +
                                     ", weight " + shapeString(ws) + ") is supported");
  int64_t groups = intAttr(node, "group", 1);
  if (groups < 1 || ws[0] % groups != 0)
    return nodeError(node, "group=" + std::to_string(groups) + " does not divide the " +
                               std::to_string(ws[0]) + " output channels");
  if (ws[1] * groups != xs[1])
    return nodeError(node, "weight " + shapeString(ws) +
                               " with group=" + std::to_string(groups) + " expects " +
                               std::to_string(ws[1] * groups) +
                               " input channels, input " + shapeString(xs) + " has " +
                               std::to_string(xs[1]));
  if (ws[2] < 1 || ws[3] < 1)
    return nodeError(node, "weight " + shapeString(ws) + " has an empty kernel");
  FLOWC_ASSIGN_OR_RETURN(Shape kernel,
                         windowInts(node, "kernel_shape", 2, {ws[2], ws[3]}, 1));
  FLOWC_ASSIGN_OR_RETURN(Shape strides, windowInts(node, "strides", 2, {1, 1}, 1));
  FLOWC_ASSIGN_OR_RETURN(Shape dilations, windowInts(node, "dilations", 2, {1, 1}, 1));
  FLOWC_ASSIGN_OR_RETURN(Shape given, windowInts(node, "pads", 4, {0, 0, 0, 0}, 0));
  if (kernel != Shape{ws[2], ws[3]})
    return nodeError(node, "kernel_shape " + shapeString(kernel) +
                               " does not match weight " + shapeString(ws));
  FLOWC_ASSIGN_OR_RETURN(
      auto pads, windowPads(node, given, {xs[2], xs[3]}, kernel, strides, dilations));
  Value bias;
  if (hasOperand(node, 2)) {
    FLOWC_ASSIGN_OR_RETURN(bias, operand(node, 2));
    if (shapeOf(bias) != Shape{ws[0]})
      return nodeError(node, "bias " + shapeString(shapeOf(bias)) + " does not match " +
                                 std::to_string(ws[0]) + " output channels");
  } else {
    auto type = f32({ws[0]});
    bias = mlir::tosa::ConstOp::create(builder_, loc_, type,
                                       mlir::DenseElementsAttr::get(type, 0.0f));
  }
  Shape out = {xs[0], 0, 0, ws[0]};
  for (int i = 0; i < 2; ++i) {
    int64_t span = xs[2 + i] + pads[i] + pads[i + 2] - dilations[i] * (kernel[i] - 1) - 1;
    if (span < 0)
      return nodeError(node, "kernel larger than padded input " + shapeString(xs));
    out[1 + i] = span / strides[i] + 1;
  }
  Value xNhwc = fitWindows(transpose(x, {0, 2, 3, 1}), pads, kernel, strides, dilations);
  llvm::SmallVector<mlir::NamedAttribute> attrs = {
      attr("pad", builder_.getDenseI64ArrayAttr({pads[0], pads[2], pads[1], pads[3]})),
      attr("stride", builder_.getDenseI64ArrayAttr(strides)),
      attr("dilation", builder_.getDenseI64ArrayAttr(dilations)),
      attr("acc_type", mlir::TypeAttr::get(builder_.getF32Type()))};
  Value zp = zeroPoint();
  Value y;
  if (groups == 1) {
    y = build<mlir::tosa::Conv2DOp>(
        out, {xNhwc, transpose(w, {0, 2, 3, 1}), bias, zp, zp}, attrs);
  } else if (groups == xs[1] && ws[1] == 1) {
    // Depthwise: ONNX [C*M, 1, KH, KW] is TOSA's [KH, KW, C, M] after a
    // reshape; output channel c*M + m is the same in both.
    int64_t multiplier = ws[0] / groups;
    Value hwcm = transpose(reshape(w, {groups, multiplier, ws[2], ws[3]}), {2, 3, 0, 1});
    y = build<mlir::tosa::DepthwiseConv2DOp>(out, {xNhwc, hwcm, bias, zp, zp}, attrs);
  } else {
    // Grouped: one convolution per group on its slice of channels.
    Shape xn = shapeOf(xNhwc);
    int64_t inPerGroup = ws[1], outPerGroup = ws[0] / groups;
    Value wOhwi = transpose(w, {0, 2, 3, 1});
    llvm::SmallVector<Value> parts;
    for (int64_t g = 0; g < groups; ++g) {
      Value xg =
          slice(xNhwc, {0, 0, 0, g * inPerGroup}, {xn[0], xn[1], xn[2], inPerGroup});
      Value wg =
          slice(wOhwi, {g * outPerGroup, 0, 0, 0}, {outPerGroup, ws[2], ws[3], ws[1]});
      Value bg = slice(bias, {g * outPerGroup}, {outPerGroup});
      parts.push_back(build<mlir::tosa::Conv2DOp>({out[0], out[1], out[2], outPerGroup},
                                                  {xg, wg, bg, zp, zp}, attrs));
    }
    y = build<mlir::tosa::ConcatOp>(out, parts,
                                    {attr("axis", builder_.getI32IntegerAttr(3))});
  }
  return define(node, transpose(y, {0, 3, 1, 2}));
}

Status Importer::importPool(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape xs = shapeOf(x);
  if (xs.size() != 4)
    return nodeUnsupported(node, "only 2-D pooling (4-D input) is supported, got " +
                                     shapeString(xs));
  if (node.outputs.size() > 1)
    return nodeUnsupported(node, "the Indices output of MaxPool is not supported");
  if (!node.attributes.count("kernel_shape"))
    return nodeError(node, "kernel_shape is required");
  FLOWC_ASSIGN_OR_RETURN(Shape kernel, windowInts(node, "kernel_shape", 2, {}, 1));
  FLOWC_ASSIGN_OR_RETURN(Shape strides, windowInts(node, "strides", 2, {1, 1}, 1));
  FLOWC_ASSIGN_OR_RETURN(Shape dilations, windowInts(node, "dilations", 2, {1, 1}, 1));
  FLOWC_ASSIGN_OR_RETURN(Shape given, windowInts(node, "pads", 4, {0, 0, 0, 0}, 0));
  // ONNX's shape inference demands it, and TOSA's pooling too: a window
  // entirely in padding has no value.
  for (int i = 0; i < 4; ++i)
    if (given[i] >= kernel[i % 2])
      return nodeError(node, "pads[" + std::to_string(i) +
                                 "] = " + std::to_string(given[i]) +
                                 " is not smaller than the kernel extent " +
                                 std::to_string(kernel[i % 2]));
  if (dilations != Shape{1, 1})
    return nodeUnsupported(node, "dilated pooling is not supported yet");
  FLOWC_ASSIGN_OR_RETURN(
      auto pads, windowPads(node, given, {xs[2], xs[3]}, kernel, strides, dilations));
  bool isMax = node.opType == "MaxPool";
  if (!isMax && intAttr(node, "count_include_pad", 0) != 0 &&
      (pads[0] || pads[1] || pads[2] || pads[3]))
    return nodeUnsupported(node, "count_include_pad=1 with padding is not supported yet");
  bool ceilMode = intAttr(node, "ceil_mode", 0) != 0;
  Shape out = {xs[0], 0, 0, xs[1]};
  for (int i = 0; i < 2; ++i) {
    int64_t span = xs[2 + i] + pads[i] + pads[i + 2] - kernel[i];
    if (span < 0)
      return nodeError(node, "kernel larger than padded input " + shapeString(xs));
    out[1 + i] = span / strides[i] + 1;
    if (!ceilMode || span % strides[i] == 0)
      continue;
    // ceil_mode adds a last, partial window unless it would start in the
    // trailing padding; extra trailing padding makes TOSA produce it (max
    // pooling pads with the lowest value, average pooling does not count
    // padding).
    if (out[1 + i] * strides[i] < xs[2 + i] + pads[i]) {
      pads[i + 2] += strides[i] - span % strides[i];
      out[1 + i] += 1;
    }
  }
  Value xNhwc = fitWindows(transpose(x, {0, 2, 3, 1}), pads, kernel, strides, dilations);
  llvm::SmallVector<mlir::NamedAttribute> attrs = {
      attr("kernel", builder_.getDenseI64ArrayAttr(kernel)),
      attr("stride", builder_.getDenseI64ArrayAttr(strides)),
      attr("pad", builder_.getDenseI64ArrayAttr({pads[0], pads[2], pads[1], pads[3]}))};
  Value y;
  if (isMax) {
    y = build<mlir::tosa::MaxPool2dOp>(out, {xNhwc}, attrs);
  } else {
    attrs.push_back(attr("acc_type", mlir::TypeAttr::get(builder_.getF32Type())));
    Value zp = zeroPoint();
    y = build<mlir::tosa::AvgPool2dOp>(out, {xNhwc, zp, zp}, attrs);
  }
  return define(node, transpose(y, {0, 3, 1, 2}));
}

Status Importer::importGlobalAveragePool(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape shape = shapeOf(x);
  if (shape.size() < 3)
    return nodeError(node, "input " + shapeString(shape) + " has no spatial dimensions");
  int64_t count = 1;
  for (size_t axis = 2; axis < shape.size(); ++axis) {
    count *= shape[axis];
    shape[axis] = 1;
    x = build<mlir::tosa::ReduceSumOp>(shape, {x},
                                       {attr("axis", builder_.getI32IntegerAttr(axis))});
  }
  Value scale = scalar(1.0f / static_cast<float>(count), shape.size());
  return define(node, mul(x, scale));
}

Value Importer::matmul3d(Value a, Value b) {
  Shape as = shapeOf(a), bs = shapeOf(b);
  Value zp = zeroPoint();
  return build<mlir::tosa::MatMulOp>({as[0], as[1], bs[2]}, {a, b, zp, zp});
}

Status Importer::importGemm(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value a, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value b, operand(node, 1));
  if (shapeOf(a).size() != 2 || shapeOf(b).size() != 2)
    return nodeError(node, "Gemm needs 2-D inputs, got " + shapeString(shapeOf(a)) +
                               " and " + shapeString(shapeOf(b)));
  if (intAttr(node, "transA", 0))
    a = transpose(a, {1, 0});
  if (intAttr(node, "transB", 0))
    b = transpose(b, {1, 0});
  Shape as = shapeOf(a), bs = shapeOf(b);
  if (as[1] != bs[0])
    return nodeError(node, "inner dimensions differ: A is " + shapeString(as) +
                               ", B is " + shapeString(bs) + " (after transA/transB)");
  Shape out = {as[0], bs[1]};
  Value y = reshape(
      matmul3d(reshape(a, {1, as[0], as[1]}), reshape(b, {1, bs[0], bs[1]})), out);
  float alpha = floatAttr(node, "alpha", 1.0f), beta = floatAttr(node, "beta", 1.0f);
  if (alpha != 1.0f)
    y = mul(y, scalar(alpha, 2));
  if (!hasOperand(node, 2) || beta == 0.0f)
    return define(node, y);
  FLOWC_ASSIGN_OR_RETURN(Value c, operand(node, 2));
  FLOWC_ASSIGN_OR_RETURN(Shape broadcast, broadcastShape(node, out, shapeOf(c)));
  if (broadcast != out)
    return nodeError(node, "C " + shapeString(shapeOf(c)) + " does not broadcast to " +
                               shapeString(out));
  FLOWC_ASSIGN_OR_RETURN(c, broadcastTo(node, c, 2));
  if (beta != 1.0f)
    c = mul(c, scalar(beta, 2));
  return define(node, build<mlir::tosa::AddOp>(out, {y, c}));
}

Status Importer::importMatMul(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value a, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value b, operand(node, 1));
  Shape as = shapeOf(a), bs = shapeOf(b);
  if (as.size() < 2 || bs.size() < 2)
    return nodeUnsupported(node, "1-D MatMul operands are not supported yet");
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  if (bs[bs.size() - 2] != k)
    return nodeError(node, "inner dimensions differ: " + shapeString(as) + " x " +
                               shapeString(bs));
  Shape out(as.begin(), as.end() - 2);
  if (bs.size() == 2) {
    // Fold all batch dimensions of A into M: one [1, batch*M, K] x [1, K, N].
    int64_t rows = product(as, 0, as.size() - 1);
    out.push_back(m);
    out.push_back(n);
    Value y = matmul3d(reshape(a, {1, rows, k}), reshape(b, {1, k, n}));
    return define(node, reshape(y, out));
  }
  Shape aBatch(as.begin(), as.end() - 2), bBatch(bs.begin(), bs.end() - 2);
  if (aBatch != bBatch)
    return nodeUnsupported(node, "broadcasting batch dimensions " + shapeString(as) +
                                     " x " + shapeString(bs) + " is not supported yet");
  int64_t batch = product(aBatch, 0, aBatch.size());
  out.push_back(m);
  out.push_back(n);
  Value y = matmul3d(reshape(a, {batch, m, k}), reshape(b, {batch, k, n}));
  return define(node, reshape(y, out));
}

Status Importer::importReshape(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Shape target, reshapeTarget(node, shapeOf(x)));
  return define(node, reshape(x, target));
}

Status Importer::importFlatten(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  Shape in = shapeOf(x);
  int64_t axis = intAttr(node, "axis", 1);
  if (axis < 0)
    axis += static_cast<int64_t>(in.size());
  if (axis < 0 || axis > static_cast<int64_t>(in.size()))
    return nodeError(node, "axis " + std::to_string(intAttr(node, "axis", 1)) +
                               " is out of range for input " + shapeString(in));
  return define(node, reshape(x, {product(in, 0, axis), product(in, axis, in.size())}));
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

Value Importer::softmaxLastAxis(Value x) {
  Shape shape = shapeOf(x), reduced = shape;
  int32_t axis = static_cast<int32_t>(shape.size() - 1);
  reduced[axis] = 1;
  auto axisAttr = attr("axis", builder_.getI32IntegerAttr(axis));
  Value max = build<mlir::tosa::ReduceMaxOp>(reduced, {x}, {axisAttr});
  Value shifted = build<mlir::tosa::SubOp>(shape, {x, max});
  Value exp = build<mlir::tosa::ExpOp>(shape, {shifted});
  Value sum = build<mlir::tosa::ReduceSumOp>(reduced, {exp}, {axisAttr});
  Value inverse = build<mlir::tosa::ReciprocalOp>(reduced, {sum});
  return mul(exp, inverse);
}

/// x - max - log(sum(exp(x - max))) over the last axis.
Value Importer::logSoftmaxLastAxis(Value x) {
  Shape shape = shapeOf(x), reduced = shape;
  int32_t axis = static_cast<int32_t>(shape.size() - 1);
  reduced[axis] = 1;
  auto axisAttr = attr("axis", builder_.getI32IntegerAttr(axis));
  Value shifted = build<mlir::tosa::SubOp>(
      shape, {x, build<mlir::tosa::ReduceMaxOp>(reduced, {x}, {axisAttr})});
  Value sum = build<mlir::tosa::ReduceSumOp>(
      reduced, {build<mlir::tosa::ExpOp>(shape, {shifted})}, {axisAttr});
  return build<mlir::tosa::SubOp>(shape,
                                  {shifted, build<mlir::tosa::LogOp>(reduced, {sum})});
}

Status Importer::importSoftmaxLike(const Node &node, Value (Importer::*lastAxis)(Value)) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape in = shapeOf(x);
  int64_t rank = static_cast<int64_t>(in.size());
  bool legacy = model_.opsetVersion < 13; // before 13 they flattened at `axis`
  FLOWC_ASSIGN_OR_RETURN(int64_t axis, axisOf(node, legacy ? 1 : -1, in));
  if (legacy) {
    Value flat = reshape(x, {product(in, 0, axis), product(in, axis, in.size())});
    return define(node, reshape((this->*lastAxis)(flat), in));
  }
  if (axis == rank - 1)
    return define(node, (this->*lastAxis)(x));
  // Move `axis` last, normalize, move it back.
  llvm::SmallVector<int32_t> perms, inverse(rank);
  for (int64_t i = 0; i < rank; ++i)
    if (i != axis)
      perms.push_back(static_cast<int32_t>(i));
  perms.push_back(static_cast<int32_t>(axis));
  for (int64_t i = 0; i < rank; ++i)
    inverse[perms[i]] = static_cast<int32_t>(i);
  return define(node, transpose((this->*lastAxis)(transpose(x, perms)), inverse));
}

Status Importer::importTranspose(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  size_t rank = shapeOf(x).size();
  Shape perm = intsAttr(node, "perm", {});
  if (perm.empty())
    for (size_t i = 0; i < rank; ++i)
      perm.push_back(static_cast<int64_t>(rank - 1 - i));
  Shape sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted.size() != rank || sorted[i] != static_cast<int64_t>(i))
      return nodeError(node, "perm " + shapeString(perm) +
                                 " is not a permutation of rank " + std::to_string(rank));
  llvm::SmallVector<int32_t> perms(perm.begin(), perm.end());
  return define(node, transpose(x, perms));
}

Value Importer::clamp(Value x, float low, float high) {
  return build<mlir::tosa::ClampOp>(shapeOf(x), {x},
                                    {attr("min_val", builder_.getF32FloatAttr(low)),
                                     attr("max_val", builder_.getF32FloatAttr(high))});
}

/// Elementwise product of same-rank operands (the caller broadcast them);
/// the only builder of tosa.mul.
Value Importer::mul(Value a, Value b) {
  Shape as = shapeOf(a), bs = shapeOf(b), out(as.size());
  for (size_t i = 0; i < as.size(); ++i)
    out[i] = std::max(as[i], bs[i]);
  return build<mlir::tosa::MulOp>(out, {a, b, zeroShift()});
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
    int64_t original = axis;
    if (axis < 0)
      axis += rank;
    if (axis < 0 || axis >= rank)
      return nodeError(node, "axis " + std::to_string(original) +
                                 " is out of range for rank " + std::to_string(rank));
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    return nodeError(node, "axes " + shapeString(axes) + " repeat an axis");
  return axes;
}

Status Importer::importBatchNormalization(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape xs = shapeOf(x);
  if (xs.size() < 2)
    return nodeError(node, "input " + shapeString(xs) + " has no channel dimension");
  if (node.outputs.size() > 1 || intAttr(node, "training_mode", 0) != 0)
    return nodeUnsupported(node,
                           "training mode (running statistics outputs) is not supported");
  // Per-channel vectors broadcast as [1, C, 1, ...].
  Shape channel(xs.size(), 1);
  channel[1] = xs[1];
  Value params[4];
  for (size_t i = 0; i < 4; ++i) {
    FLOWC_ASSIGN_OR_RETURN(params[i], operand(node, i + 1));
    if (shapeOf(params[i]) != Shape{xs[1]})
      return nodeError(node, "input #" + std::to_string(i + 1) + " has shape " +
                                 shapeString(shapeOf(params[i])) + ", expected [" +
                                 std::to_string(xs[1]) + "]");
    params[i] = reshape(params[i], channel);
  }
  auto [scale, bias, mean, variance] =
      std::tuple(params[0], params[1], params[2], params[3]);
  float epsilon = floatAttr(node, "epsilon", 1e-5f);
  Value inverse = build<mlir::tosa::RsqrtOp>(
      channel,
      {build<mlir::tosa::AddOp>(channel, {variance, scalar(epsilon, xs.size())})});
  // x * s + t, s = scale / sqrt(variance + epsilon), t = bias - mean * s:
  // s and t depend on weights only (derived weights; a convolution before
  // absorbs both, see compiler/lib/DerivedWeights.cpp).
  Value factor = mul(scale, inverse);
  Value shift = build<mlir::tosa::SubOp>(channel, {bias, mul(mean, factor)});
  return define(node, build<mlir::tosa::AddOp>(xs, {mul(x, factor), shift}));
}

Status Importer::importClip(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  float low = -std::numeric_limits<float>::infinity();
  float high = std::numeric_limits<float>::infinity();
  if (model_.opsetVersion < 11) {
    low = floatAttr(node, "min", low);
    high = floatAttr(node, "max", high);
  } else {
    // Runtime bounds: min(max(x, low), high), like ONNX (high wins).
    if ((hasOperand(node, 1) && !constants_.count(node.inputs[1])) ||
        (hasOperand(node, 2) && !constants_.count(node.inputs[2]))) {
      Shape shape = shapeOf(x);
      for (size_t index : {size_t{1}, size_t{2}}) {
        if (!hasOperand(node, index))
          continue;
        FLOWC_ASSIGN_OR_RETURN(Value bound, operand(node, index));
        FLOWC_ASSIGN_OR_RETURN(bound, broadcastTo(node, bound, shape.size()));
        x = index == 2 ? build<mlir::tosa::MinimumOp>(shape, {x, bound})
                       : build<mlir::tosa::MaximumOp>(shape, {x, bound});
      }
      return define(node, x);
    }
    if (hasOperand(node, 1)) {
      FLOWC_ASSIGN_OR_RETURN(low, scalarConstant(node, 1));
    }
    if (hasOperand(node, 2)) {
      FLOWC_ASSIGN_OR_RETURN(high, scalarConstant(node, 2));
    }
  }
  // min(max(x, low), high) is `high` everywhere when low > high.
  return define(node, clamp(x, std::min(low, high), high));
}

Status Importer::importConcat(const Node &node) {
  llvm::SmallVector<Value> inputs;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    FLOWC_ASSIGN_OR_RETURN(Value v, anyOperand(node, i));
    if (!inputs.empty() && elementTypeOf(v) != elementTypeOf(inputs[0]))
      return nodeError(node, "inputs have different element types");
    inputs.push_back(v);
  }
  if (inputs.empty())
    return nodeError(node, "Concat needs at least one input");
  Shape out = shapeOf(inputs[0]);
  int64_t rank = static_cast<int64_t>(out.size());
  int64_t axis = intAttr(node, "axis", 0);
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank)
    return nodeError(node, "axis " + std::to_string(intAttr(node, "axis", 0)) +
                               " is out of range for rank " + std::to_string(rank));
  Shape reference = out;
  reference[axis] = 0;
  out[axis] = 0;
  for (Value v : inputs) {
    Shape shape = shapeOf(v), other = shape;
    if (shape.size() == out.size())
      other[axis] = 0;
    if (other != reference)
      return nodeError(node, "input " + shapeString(shape) +
                                 " does not match the others outside axis " +
                                 std::to_string(axis));
    out[axis] += shape[axis];
  }
  if (inputs.size() == 1)
    return define(node, inputs[0]);
  return define(node, buildTyped<mlir::tosa::ConcatOp>(
                          elementTypeOf(inputs[0]), out, inputs,
                          {attr("axis", builder_.getI32IntegerAttr(axis))}));
}

/// ReduceMean/Sum/Max/Min/Prod: one TOSA reduction per axis (keeping it),
/// then the mean's scale and the optional squeeze.
Status Importer::importReduce(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  const std::string &op = node.opType;
  Shape shape = shapeOf(x);
  int64_t rank = static_cast<int64_t>(shape.size());
  // Opset 18 (13 for ReduceSum) moved `axes` from an attribute to input 1.
  FLOWC_ASSIGN_OR_RETURN(Shape axes, axesOf(node, 1, rank));
  if (axes.empty()) {
    if (intAttr(node, "noop_with_empty_axes", 0))
      return define(node, x);
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  }
  int64_t count = 1;
  for (int64_t axis : axes) {
    count *= shape[axis];
    shape[axis] = 1;
    auto axisAttr = attr("axis", builder_.getI32IntegerAttr(axis));
    if (op == "ReduceMax")
      x = build<mlir::tosa::ReduceMaxOp>(shape, {x}, {axisAttr});
    else if (op == "ReduceMin")
      x = build<mlir::tosa::ReduceMinOp>(shape, {x}, {axisAttr});
    else if (op == "ReduceProd")
      x = build<mlir::tosa::ReduceProductOp>(shape, {x}, {axisAttr});
    else
      x = build<mlir::tosa::ReduceSumOp>(shape, {x}, {axisAttr});
  }
  Value y = op == "ReduceMean"
                ? mul(x, scalar(1.0f / static_cast<float>(count), shape.size()))
                : x;
  if (intAttr(node, "keepdims", 1))
    return define(node, y);
  Shape kept;
  for (int64_t i = 0; i < rank; ++i)
    if (!std::binary_search(axes.begin(), axes.end(), i))
      kept.push_back(shape[i]);
  return define(node, reshape(y, kept));
}

Status Importer::importSqueeze(const Node &node, bool unsqueeze) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Shape out, squeezedShape(node, shapeOf(x), unsqueeze));
  return define(node, reshape(x, out));
}

Status Importer::importActivation(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape shape = shapeOf(x);
  size_t rank = shape.size();
  const std::string &op = node.opType;
  if (op == "Relu")
    return define(node, clamp(x, 0.0f, std::numeric_limits<float>::infinity()));
  if (op == "Sigmoid")
    return define(node, build<mlir::tosa::SigmoidOp>(shape, {x}));
  if (op == "Tanh")
    return define(node, build<mlir::tosa::TanhOp>(shape, {x}));
  if (op == "Exp")
    return define(node, build<mlir::tosa::ExpOp>(shape, {x}));
  if (op == "Erf")
    return define(node, build<mlir::tosa::ErfOp>(shape, {x}));
  if (op == "Sqrt")
    return define(node, build<mlir::tosa::PowOp>(shape, {x, scalar(0.5f, rank)}));
  if (op == "LeakyRelu") {
    // max(x, alpha * x) equals LeakyRelu for 0 <= alpha <= 1.
    float alpha = floatAttr(node, "alpha", 0.01f);
    if (alpha < 0 || alpha > 1)
      return nodeUnsupported(node, "alpha=" + std::to_string(alpha) + " outside [0, 1]");
    return define(node,
                  build<mlir::tosa::MaximumOp>(shape, {x, mul(x, scalar(alpha, rank))}));
  }
  if (op == "HardSigmoid" || op == "HardSwish") {
    bool swish = op == "HardSwish";
    float alpha = swish ? 1.0f / 6.0f : floatAttr(node, "alpha", 0.2f);
    float beta = swish ? 0.5f : floatAttr(node, "beta", 0.5f);
    Value linear = build<mlir::tosa::AddOp>(
        shape, {mul(x, scalar(alpha, rank)), scalar(beta, rank)});
    Value gate = clamp(linear, 0.0f, 1.0f);
    return define(node, swish ? mul(x, gate) : gate);
  }
  return nodeUnsupported(node, "not an activation");
}

Expected<Shape> Importer::reshapeTarget(const Node &node, const Shape &in) {
  FLOWC_ASSIGN_OR_RETURN(const TensorData *shapeTensor, constantOperand(node, 1));
  auto values = toInts(*shapeTensor);
  if (!values || values->shape.size() != 1)
    return nodeError(node, "shape input must be a 1-D int64 tensor");
  Shape target = values->values;
  bool allowZero = intAttr(node, "allowzero", 0) != 0;
  int inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == 0 && !allowZero) {
      if (i >= in.size())
        return nodeError(node, "shape " + shapeString(target) + " copies dimension " +
                                   std::to_string(i) + " that input " + shapeString(in) +
                                   " does not have");
      target[i] = in[i];
    }
    if (target[i] == -1) {
      if (inferred >= 0)
        return nodeError(node, "shape " + shapeString(target) + " has more than one -1");
      inferred = static_cast<int>(i);
      continue;
    }
    if (target[i] < 0)
      return nodeError(node,
                       "shape " + shapeString(target) + " has a negative dimension");
    // A dimension of 0 (allowzero) makes any product fit; checked below.
    if (target[i] != 0 && __builtin_mul_overflow(known, target[i], &known))
      return nodeError(node, "cannot reshape " + shapeString(in) + " to " +
                                 shapeString(target) + ": the sizes do not match");
  }
  int64_t total = product(in, 0, in.size());
  bool hasZero = std::find(target.begin(), target.end(), 0) != target.end();
  if (allowZero && inferred >= 0 && hasZero)
    return nodeError(node, "shape " + shapeString(target) +
                               " has both a -1 and a 0 (allowzero): the -1 is ambiguous");
  if (inferred >= 0)
    target[inferred] = known ? total / known : 0;
  if (checkedElementCount(target) != std::optional<int64_t>(total))
    return nodeError(node,
                     "cannot reshape " + shapeString(in) + " to " + shapeString(target));
  return target;
}

Expected<Shape> Importer::squeezedShape(const Node &node, const Shape &in,
                                        bool unsqueeze) {
  int64_t rank = static_cast<int64_t>(in.size());
  // Unsqueeze axes refer to the output, whose rank grows by their count.
  int64_t axesRank = rank;
  if (unsqueeze) {
    size_t count = intsAttr(node, "axes", {}).size();
    if (hasOperand(node, 1)) {
      FLOWC_ASSIGN_OR_RETURN(const TensorData *tensor, constantOperand(node, 1));
      count = static_cast<size_t>(tensor->info.elementCount());
    }
    if (count > kMaxRank)
      return nodeError(node, "inserts " + std::to_string(count) +
                                 " axes; flowc takes ranks up to " +
                                 std::to_string(kMaxRank));
    axesRank = rank + static_cast<int64_t>(count);
  }
  FLOWC_ASSIGN_OR_RETURN(Shape axes, axesOf(node, 1, axesRank));
  Shape out;
  if (unsqueeze) {
    out = in;
    for (int64_t axis : axes)
      out.insert(out.begin() + axis, 1);
    return out;
  }
  for (int64_t i = 0; i < rank; ++i) {
    bool listed = std::binary_search(axes.begin(), axes.end(), i);
    if (listed && in[i] != 1)
      return nodeError(node, "cannot squeeze axis " + std::to_string(i) + " of size " +
                                 std::to_string(in[i]));
    if (!listed && !(axes.empty() && in[i] == 1))
      out.push_back(in[i]);
  }
  return out;
}

Expected<std::vector<std::pair<int64_t, int64_t>>>
Importer::sliceRanges(const Node &node, const Shape &in) {
  int64_t rank = static_cast<int64_t>(in.size());
  Shape starts, ends, axes, steps;
  if (model_.opsetVersion < 10) {
    starts = intsAttr(node, "starts", {});
    ends = intsAttr(node, "ends", {});
    axes = intsAttr(node, "axes", {});
  } else {
    auto ints = [&](size_t index, Shape &out) -> Status {
      if (!hasOperand(node, index))
        return Status::ok();
      FLOWC_ASSIGN_OR_RETURN(const TensorData *tensor, constantOperand(node, index));
      auto values = toInts(*tensor);
      if (!values)
        return nodeError(node, "input #" + std::to_string(index) + " must be integer");
      out = values->values;
      return Status::ok();
    };
    FLOWC_RETURN_IF_ERROR(ints(1, starts));
    FLOWC_RETURN_IF_ERROR(ints(2, ends));
    FLOWC_RETURN_IF_ERROR(ints(3, axes));
    FLOWC_RETURN_IF_ERROR(ints(4, steps));
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(static_cast<int64_t>(i));
  if (starts.size() != ends.size() || axes.size() != starts.size() ||
      (!steps.empty() && steps.size() != starts.size()))
    return nodeError(node, "starts " + shapeString(starts) + ", ends " +
                               shapeString(ends) + ", axes " + shapeString(axes) +
                               " and steps " + shapeString(steps) + " differ in length");
  for (size_t i = 0; i < steps.size(); ++i)
    if (steps[i] == 0)
      return nodeError(node, "steps[" + std::to_string(i) + "] is 0");
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t d = 0; d < rank; ++d)
    ranges.emplace_back(0, in[d]);
  std::set<int64_t> seen;
  for (size_t i = 0; i < axes.size(); ++i) {
    if (!steps.empty() && steps[i] != 1)
      return nodeUnsupported(node, "slice steps other than 1 are not supported yet");
    int64_t axis = axes[i] < 0 ? axes[i] + rank : axes[i];
    if (axis < 0 || axis >= rank)
      return nodeError(node, "axis " + std::to_string(axes[i]) +
                                 " is out of range for rank " + std::to_string(rank));
    if (!seen.insert(axis).second)
      return nodeError(node, "axes " + shapeString(axes) + " repeat axis " +
                                 std::to_string(axis));
    int64_t dim = in[axis];
    auto clampIndex = [dim](int64_t v) {
      return std::clamp(v < 0 ? v + dim : v, int64_t{0}, dim);
    };
    int64_t begin = clampIndex(starts[i]), end = clampIndex(ends[i]);
    ranges[axis] = {begin, std::max(begin, end)};
  }
  return ranges;
}

Status Importer::importSlice(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(auto ranges, sliceRanges(node, shapeOf(x)));
  Shape start, size;
  for (const auto &[begin, end] : ranges) {
    start.push_back(begin);
    size.push_back(end - begin);
  }
  return define(node, slice(x, start, size));
}

Expected<Value> Importer::gatherRuntime(const Node &node, Value data, Value indices,
                                        int64_t axis) {
  mlir::Type indexType = elementTypeOf(indices);
  if (!indexType.isInteger(64) && !indexType.isInteger(32))
    return nodeError(node, "indices must be int64 or int32");
  Shape shape = shapeOf(data), indexShape = shapeOf(indices);
  int64_t rank = static_cast<int64_t>(shape.size());
  // Move `axis` first so the gather is over [1, K, C] values.
  llvm::SmallVector<int32_t> perms{static_cast<int32_t>(axis)};
  for (int64_t i = 0; i < rank; ++i)
    if (i != axis)
      perms.push_back(static_cast<int32_t>(i));
  Value front = transpose(data, perms);
  int64_t k = shape[axis],
          rest = product(shape, 0, shape.size()) / std::max<int64_t>(k, 1);
  int64_t count = product(indexShape, 0, indexShape.size());
  Value values = reshape(front, {1, k, rest});
  auto i32 = builder_.getI32Type();
  Value flat = reshape(indices, {1, count});
  if (!indexType.isInteger(32))
    flat = buildTyped<mlir::tosa::CastOp>(i32, {1, count}, {flat});
  // ONNX counts negative indices from the end.
  auto i32Const = [&](int32_t value) -> Value {
    auto type = mlir::RankedTensorType::get({1, 1}, i32);
    return mlir::tosa::ConstOp::create(
        builder_, loc_, type, mlir::DenseElementsAttr::get(type, llvm::ArrayRef(value)));
  };
  Value negative = buildTyped<mlir::tosa::GreaterOp>(builder_.getI1Type(), {1, count},
                                                     {i32Const(0), flat});
  Value wrapped = buildTyped<mlir::tosa::AddOp>(
      i32, {1, count}, {flat, i32Const(static_cast<int32_t>(k))});
  flat = buildTyped<mlir::tosa::SelectOp>(i32, {1, count}, {negative, wrapped, flat});
  Value gathered = buildTyped<mlir::tosa::GatherOp>(elementTypeOf(data), {1, count, rest},
                                                    {values, flat});
  // [indices..., other dims...] then the gathered dims back in place.
  Shape unfolded = indexShape;
  for (size_t i = 1; i < perms.size(); ++i)
    unfolded.push_back(shape[perms[i]]);
  Value y = reshape(gathered, unfolded);
  int64_t indexRank = static_cast<int64_t>(indexShape.size());
  if (axis == 0)
    return y;
  llvm::SmallVector<int32_t> back;
  for (int64_t i = 0; i < axis; ++i)
    back.push_back(static_cast<int32_t>(indexRank + i));
  for (int64_t i = 0; i < indexRank; ++i)
    back.push_back(static_cast<int32_t>(i));
  for (int64_t i = axis + 1; i < rank; ++i)
    back.push_back(static_cast<int32_t>(indexRank + i - 1));
  return transpose(y, back);
}

Status Importer::importGather(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value data, anyOperand(node, 0));
  Shape shape = shapeOf(data);
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t axis = intAttr(node, "axis", 0);
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank)
    return nodeError(node, "axis " + std::to_string(intAttr(node, "axis", 0)) +
                               " is out of range for rank " + std::to_string(rank));
  // A few constant indices become slices (checked here, free at run time);
  // runtime or many indices (embedding lookups) a gather.
  constexpr size_t kMaxSlicedIndices = 16;
  auto indices = hasOperand(node, 1) ? intConstant(node.inputs[1]) : std::nullopt;
  // Constant indices are checked here, however many: the runtime's gather
  // reads where they point.
  for (int64_t index : indices ? indices->values : std::vector<int64_t>{})
    if (index < -shape[axis] || index >= shape[axis])
      return nodeError(node, "index " + std::to_string(index) +
                                 " is out of range for axis " + std::to_string(axis) +
                                 " of " + shapeString(shape));
  if (!indices || indices->values.size() > kMaxSlicedIndices) {
    FLOWC_ASSIGN_OR_RETURN(Value runtimeIndices, anyOperand(node, 1));
    FLOWC_ASSIGN_OR_RETURN(Value y, gatherRuntime(node, data, runtimeIndices, axis));
    return define(node, y);
  }
  llvm::SmallVector<Value> rows;
  for (int64_t index : indices->values) {
    int64_t k = index < 0 ? index + shape[axis] : index;
    Shape start(shape.size(), 0), size = shape;
    start[axis] = k;
    size[axis] = 1;
    rows.push_back(slice(data, start, size));
  }
  Shape joined = shape;
  joined[axis] = static_cast<int64_t>(rows.size());
  Value y = rows.size() == 1 ? rows[0]
                             : buildTyped<mlir::tosa::ConcatOp>(
                                   elementTypeOf(data), joined, rows,
                                   {attr("axis", builder_.getI32IntegerAttr(axis))});
  // The indices' shape replaces the gathered axis.
  Shape out(shape.begin(), shape.begin() + axis);
  out.insert(out.end(), indices->shape.begin(), indices->shape.end());
  out.insert(out.end(), shape.begin() + axis + 1, shape.end());
  return define(node, reshape(y, out));
}

Status Importer::importExpand(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  auto target = hasOperand(node, 1) ? intConstant(node.inputs[1]) : std::nullopt;
  if (!target)
    return nodeUnsupported(node, "shape must be a constant integer tensor");
  if (target->shape.size() != 1)
    return nodeError(node,
                     "shape must be a 1-D tensor, got " + shapeString(target->shape));
  for (int64_t dim : target->values)
    if (dim < 0)
      return nodeError(node, "shape " + shapeString(target->values) +
                                 " has a negative dimension");
  FLOWC_ASSIGN_OR_RETURN(Shape out, broadcastShape(node, shapeOf(x), target->values));
  FLOWC_RETURN_IF_ERROR(checkRuntimeShape(node, out));
  if (out == shapeOf(x))
    return define(node, x);
  // x + 0 broadcasts x to `out` (TOSA has no broadcast_to).
  FLOWC_ASSIGN_OR_RETURN(x, broadcastTo(node, x, out.size()));
  auto type = f32(out);
  Value zeros = mlir::tosa::ConstOp::create(builder_, loc_, type,
                                            mlir::DenseElementsAttr::get(type, 0.0f));
  return define(node, build<mlir::tosa::AddOp>(out, {x, zeros}));
}

Status Importer::importPow(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  auto exponentConstant =
      hasOperand(node, 1) ? constants_.find(node.inputs[1]) : constants_.end();
  if (exponentConstant == constants_.end() ||
      exponentConstant->second->info.elementCount() != 1) {
    FLOWC_ASSIGN_OR_RETURN(Value e, operand(node, 1));
    Shape out;
    FLOWC_ASSIGN_OR_RETURN(auto pair, broadcastPair(node, x, e, out));
    return define(node, build<mlir::tosa::PowOp>(out, {pair.first, pair.second}));
  }
  FLOWC_ASSIGN_OR_RETURN(float exponent, scalarConstant(node, 1));
  Shape shape = shapeOf(x);
  if (exponent == 1.0f)
    return define(node, x);
  // Small integer powers as products: a powf call per element is ~30x
  // slower and does not vectorize (GPT-2's GELU cubes every activation).
  if (exponent == 2.0f)
    return define(node, mul(x, x));
  if (exponent == 3.0f)
    return define(node, mul(mul(x, x), x));
  return define(node,
                build<mlir::tosa::PowOp>(shape, {x, scalar(exponent, shape.size())}));
}

/// Inference: Dropout passes its input through and keeps every element
/// (an all-true mask).
Status Importer::importIdentity(const Node &node) {
  if (node.opType == "Dropout" && hasOperand(node, 2)) {
    auto training = intConstant(node.inputs[2]);
    if (!training || training->values.size() != 1)
      return nodeUnsupported(node, "training_mode must be a constant");
    if (training->values[0] != 0)
      return nodeUnsupported(node, "training mode (random dropout) is not supported");
  }
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  FLOWC_RETURN_IF_ERROR(define(node, x));
  if (node.outputs.size() < 2 || node.outputs[1].empty())
    return Status::ok();
  Shape shape = shapeOf(x);
  FLOWC_ASSIGN_OR_RETURN(int64_t count, reserveFolded(node, shape));
  addFolded(node.outputs[1], DType::Bool, shape,
            std::make_shared<std::string>(static_cast<size_t>(count), '\1'));
  return Status::ok();
}

Status Importer::importCast(const Node &node) {
  return importCastTo(node, static_cast<DType>(intAttr(node, "to", 0)));
}

Status Importer::importCastTo(const Node &node, DType to) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  mlir::Type target = elementType(to);
  if (!target)
    return nodeUnsupported(node, "casting to " + dtypeName(to) + " is not supported");
  if (target == elementTypeOf(x))
    return define(node, x);
  if (!target.isF32())
    return nodeUnsupported(node, "casting a runtime " + dtypeName(dtypeOf(x)) +
                                     " tensor to " + dtypeName(to) +
                                     " is not supported (to float32 only)");
  return define(node, build<mlir::tosa::CastOp>(shapeOf(x), {x}));
}

Status Importer::importWhere(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value condition, anyOperand(node, 0));
  if (!elementTypeOf(condition).isInteger(1))
    return nodeError(node, "condition must be bool");
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 1));
  FLOWC_ASSIGN_OR_RETURN(Value y, operand(node, 2));
  FLOWC_ASSIGN_OR_RETURN(Shape xy, broadcastShape(node, shapeOf(x), shapeOf(y)));
  FLOWC_ASSIGN_OR_RETURN(Shape out, broadcastShape(node, shapeOf(condition), xy));
  FLOWC_ASSIGN_OR_RETURN(condition, broadcastTo(node, condition, out.size()));
  FLOWC_ASSIGN_OR_RETURN(x, broadcastTo(node, x, out.size()));
  FLOWC_ASSIGN_OR_RETURN(y, broadcastTo(node, y, out.size()));
  return define(node, build<mlir::tosa::SelectOp>(out, {condition, x, y}));
}

/// (x - mean) / sqrt(var + epsilon) * scale + bias over the axes from `axis`
/// on, computed on an [outer, inner] view.
Status Importer::importLayerNormalization(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value scale, operand(node, 1));
  Shape shape = shapeOf(x);
  FLOWC_ASSIGN_OR_RETURN(int64_t axis, axisOf(node, -1, shape));
  if (node.outputs.size() > 1 &&
      std::any_of(node.outputs.begin() + 1, node.outputs.end(),
                  [](const std::string &name) { return !name.empty(); }))
    return nodeUnsupported(node, "the Mean and InvStdDev outputs are not supported");
  int64_t outer = product(shape, 0, axis), inner = product(shape, axis, shape.size());
  auto axisAttr = attr("axis", builder_.getI32IntegerAttr(1));
  Value flat = reshape(x, {outer, inner});
  Value meanScale = scalar(1.0f / static_cast<float>(inner), 2);
  Value mean =
      mul(build<mlir::tosa::ReduceSumOp>({outer, 1}, {flat}, {axisAttr}), meanScale);
  Value centered = build<mlir::tosa::SubOp>({outer, inner}, {flat, mean});
  Value variance = mul(
      build<mlir::tosa::ReduceSumOp>({outer, 1}, {mul(centered, centered)}, {axisAttr}),
      meanScale);
  Value shifted = build<mlir::tosa::AddOp>(
      {outer, 1}, {variance, scalar(floatAttr(node, "epsilon", 1e-5f), 2)});
  Value inverse = build<mlir::tosa::RsqrtOp>({outer, 1}, {shifted});
  Value y = reshape(mul(centered, inverse), shape);
  FLOWC_ASSIGN_OR_RETURN(Shape scaled, broadcastShape(node, shape, shapeOf(scale)));
  if (scaled != shape)
    return nodeError(node, "scale " + shapeString(shapeOf(scale)) +
                               " does not broadcast to the input " + shapeString(shape));
  FLOWC_ASSIGN_OR_RETURN(scale, broadcastTo(node, scale, shape.size()));
  y = mul(y, scale);
  if (hasOperand(node, 2)) {
    FLOWC_ASSIGN_OR_RETURN(Value bias, operand(node, 2));
    FLOWC_ASSIGN_OR_RETURN(Shape biased, broadcastShape(node, shape, shapeOf(bias)));
    if (biased != shape)
      return nodeError(node, "bias " + shapeString(shapeOf(bias)) +
                                 " does not broadcast to the input " +
                                 shapeString(shape));
    FLOWC_ASSIGN_OR_RETURN(bias, broadcastTo(node, bias, shape.size()));
    y = build<mlir::tosa::AddOp>(shape, {y, bias});
  }
  return define(node, y);
}

/// Sizes from the `split` input (opset 13+) or attribute (before), else
/// `num_outputs` (opset 18+) or the output count, ONNX's uneven last part.
Status Importer::importSplit(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  Shape shape = shapeOf(x);
  FLOWC_ASSIGN_OR_RETURN(int64_t axis, axisOf(node, 0, shape));
  Shape sizes = intsAttr(node, "split", {});
  if (hasOperand(node, 1)) {
    auto split = intConstant(node.inputs[1]);
    if (!split)
      return nodeUnsupported(node, "split sizes must be a constant integer tensor");
    sizes = split->values;
  }
  int64_t parts = intAttr(node, "num_outputs", static_cast<int64_t>(node.outputs.size()));
  if (parts != static_cast<int64_t>(node.outputs.size()))
    return nodeError(node, "num_outputs=" + std::to_string(parts) + " but the node has " +
                               std::to_string(node.outputs.size()) + " outputs");
  for (int64_t size : sizes)
    if (size < 0)
      return nodeError(node,
                       "split sizes " + shapeString(sizes) + " have a negative size");
  if (sizes.empty()) {
    if (parts <= 0)
      return nodeError(node, "no outputs to split into");
    int64_t each = (shape[axis] + parts - 1) / parts;
    for (int64_t left = shape[axis]; left > 0; left -= each)
      sizes.push_back(std::min(each, left));
  }
  if (sizes.size() != node.outputs.size())
    return nodeError(node, "split into " + std::to_string(sizes.size()) +
                               " parts but the node has " +
                               std::to_string(node.outputs.size()) + " outputs");
  int64_t total = 0;
  bool overflow = false;
  for (int64_t size : sizes)
    overflow = overflow || __builtin_add_overflow(total, size, &total);
  if (overflow || total != shape[axis])
    return nodeError(node, "split sizes " + shapeString(sizes) + " do not add up to " +
                               std::to_string(shape[axis]) + " (axis " +
                               std::to_string(axis) + " of " + shapeString(shape) + ")");
  Shape start(shape.size(), 0);
  for (size_t i = 0; i < sizes.size(); ++i) {
    Shape size = shape;
    size[axis] = sizes[i];
    FLOWC_RETURN_IF_ERROR(defineOutput(node, i, slice(x, start, size)));
    start[axis] += sizes[i];
  }
  return Status::ok();
}

/// Opset 20's Gelu: x * Phi(x) exactly, or its tanh approximation.
Status Importer::importGelu(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape shape = shapeOf(x);
  size_t rank = shape.size();
  std::string approximate = "none";
  if (auto it = node.attributes.find("approximate"); it != node.attributes.end())
    approximate = it->second.s;
  Value half = mul(x, scalar(0.5f, rank));
  Value inner;
  if (approximate == "none") {
    inner = build<mlir::tosa::ErfOp>(shape, {mul(x, scalar(float(M_SQRT1_2), rank))});
  } else if (approximate == "tanh") {
    Value cube = mul(mul(x, x), x);
    Value poly = build<mlir::tosa::AddOp>(shape, {x, mul(cube, scalar(0.044715f, rank))});
    inner = build<mlir::tosa::TanhOp>(
        shape, {mul(poly, scalar(static_cast<float>(std::sqrt(2.0 / M_PI)), rank))});
  } else {
    return nodeError(node, "approximate='" + approximate + "' is not 'none' or 'tanh'");
  }
  Value onePlus = build<mlir::tosa::AddOp>(shape, {inner, scalar(1.0f, rank)});
  return define(node, mul(half, onePlus));
}

Expected<std::pair<Value, Value>> Importer::broadcastPair(const Node &node, Value a,
                                                          Value b, Shape &out) {
  FLOWC_ASSIGN_OR_RETURN(out, broadcastShape(node, shapeOf(a), shapeOf(b)));
  FLOWC_ASSIGN_OR_RETURN(a, broadcastTo(node, a, out.size()));
  FLOWC_ASSIGN_OR_RETURN(b, broadcastTo(node, b, out.size()));
  return std::make_pair(a, b);
}

Status Importer::importUnary(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape shape = shapeOf(x);
  size_t rank = shape.size();
  const std::string &op = node.opType;
  if (op == "Neg")
    return define(node, mul(x, scalar(-1.0f, rank)));
  if (op == "Abs")
    return define(node, build<mlir::tosa::AbsOp>(shape, {x}));
  if (op == "Log")
    return define(node, build<mlir::tosa::LogOp>(shape, {x}));
  if (op == "Reciprocal")
    return define(node, build<mlir::tosa::ReciprocalOp>(shape, {x}));
  if (op == "Floor")
    return define(node, build<mlir::tosa::FloorOp>(shape, {x}));
  if (op == "Ceil")
    return define(node, build<mlir::tosa::CeilOp>(shape, {x}));
  if (op == "Sin")
    return define(node, build<mlir::tosa::SinOp>(shape, {x}));
  if (op == "Cos")
    return define(node, build<mlir::tosa::CosOp>(shape, {x}));
  if (op == "Softplus") {
    // log(1 + exp(x)), as max(x, 0) + log(1 + exp(-|x|)) so large x cannot overflow.
    Value negAbs = mul(build<mlir::tosa::AbsOp>(shape, {x}), scalar(-1.0f, rank));
    Value tail = build<mlir::tosa::LogOp>(
        shape,
        {build<mlir::tosa::AddOp>(
            shape, {build<mlir::tosa::ExpOp>(shape, {negAbs}), scalar(1.0f, rank)})});
    return define(
        node, build<mlir::tosa::AddOp>(
                  shape, {clamp(x, 0.0f, std::numeric_limits<float>::infinity()), tail}));
  }
  if (op == "Softsign") {
    Value denominator = build<mlir::tosa::AddOp>(
        shape, {build<mlir::tosa::AbsOp>(shape, {x}), scalar(1.0f, rank)});
    return define(node, mul(x, build<mlir::tosa::ReciprocalOp>(shape, {denominator})));
  }
  // Elu / Selu: x > 0 ? gamma * x : gamma * alpha * (exp(x) - 1).
  bool selu = op == "Selu";
  float alpha = floatAttr(node, "alpha", selu ? 1.67326319217681884765625f : 1.0f);
  float gamma = selu ? floatAttr(node, "gamma", 1.05070102214813232421875f) : 1.0f;
  Value expm1 = build<mlir::tosa::SubOp>(
      shape, {build<mlir::tosa::ExpOp>(shape, {x}), scalar(1.0f, rank)});
  Value negative = mul(expm1, scalar(alpha * gamma, rank));
  Value positive = mul(x, scalar(gamma, rank));
  Value isPositive = buildTyped<mlir::tosa::GreaterOp>(builder_.getI1Type(), shape,
                                                       {x, scalar(0.0f, rank)});
  return define(node,
                build<mlir::tosa::SelectOp>(shape, {isPositive, positive, negative}));
}

/// Max, Min, Sum and Mean of any number of broadcast inputs.
Status Importer::importVariadic(const Node &node) {
  const std::string &op = node.opType;
  if (node.inputs.empty())
    return nodeError(node, op + " needs at least one input");
  FLOWC_ASSIGN_OR_RETURN(Value y, operand(node, 0));
  for (size_t i = 1; i < node.inputs.size(); ++i) {
    FLOWC_ASSIGN_OR_RETURN(Value next, operand(node, i));
    Shape out;
    FLOWC_ASSIGN_OR_RETURN(auto pair, broadcastPair(node, y, next, out));
    y = op == "Max"   ? build<mlir::tosa::MaximumOp>(out, {pair.first, pair.second})
        : op == "Min" ? build<mlir::tosa::MinimumOp>(out, {pair.first, pair.second})
                      : build<mlir::tosa::AddOp>(out, {pair.first, pair.second});
  }
  if (op == "Mean" && node.inputs.size() > 1)
    y = mul(y, scalar(1.0f / static_cast<float>(node.inputs.size()), shapeOf(y).size()));
  return define(node, y);
}

/// Comparisons of two same-typed tensors into a bool tensor; Less and
/// LessOrEqual swap operands of Greater and GreaterOrEqual.
Status Importer::importCompare(const Node &node) {
  const std::string &op = node.opType;
  FLOWC_ASSIGN_OR_RETURN(Value a, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value b, anyOperand(node, 1));
  if (elementTypeOf(a) != elementTypeOf(b))
    return nodeError(node, "inputs have different element types");
  if (elementTypeOf(a).isInteger(1) && op != "Equal")
    return nodeUnsupported(node, op + " of bool tensors is not supported");
  if (op == "Less" || op == "LessOrEqual")
    std::swap(a, b);
  Shape out;
  FLOWC_ASSIGN_OR_RETURN(auto pair, broadcastPair(node, a, b, out));
  mlir::Type i1 = builder_.getI1Type();
  Value y =
      op == "Equal" ? buildTyped<mlir::tosa::EqualOp>(i1, out, {pair.first, pair.second})
      : op == "Greater" || op == "Less"
          ? buildTyped<mlir::tosa::GreaterOp>(i1, out, {pair.first, pair.second})
          : buildTyped<mlir::tosa::GreaterEqualOp>(i1, out, {pair.first, pair.second});
  return define(node, y);
}

Status Importer::importLogical(const Node &node) {
  const std::string &op = node.opType;
  mlir::Type i1 = builder_.getI1Type();
  FLOWC_ASSIGN_OR_RETURN(Value a, anyOperand(node, 0));
  if (!elementTypeOf(a).isInteger(1))
    return nodeError(node, "input '" + node.inputs[0] + "' must be bool");
  if (op == "Not")
    return define(node, buildTyped<mlir::tosa::LogicalNotOp>(i1, shapeOf(a), {a}));
  FLOWC_ASSIGN_OR_RETURN(Value b, anyOperand(node, 1));
  if (!elementTypeOf(b).isInteger(1))
    return nodeError(node, "input '" + node.inputs[1] + "' must be bool");
  Shape out;
  FLOWC_ASSIGN_OR_RETURN(auto pair, broadcastPair(node, a, b, out));
  if (op == "And")
    return define(
        node, buildTyped<mlir::tosa::LogicalAndOp>(i1, out, {pair.first, pair.second}));
  if (op == "Or")
    return define(
        node, buildTyped<mlir::tosa::LogicalOrOp>(i1, out, {pair.first, pair.second}));
  return define(node,
                buildTyped<mlir::tosa::LogicalXorOp>(i1, out, {pair.first, pair.second}));
}

/// ArgMax / ArgMin (as ArgMax of -x) into int64 indices, first match.
Status Importer::importArgExtreme(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  if (intAttr(node, "select_last_index", 0))
    return nodeUnsupported(node, "select_last_index=1 is not supported");
  Shape shape = shapeOf(x);
  FLOWC_ASSIGN_OR_RETURN(int64_t axis, axisOf(node, 0, shape));
  if (node.opType == "ArgMin")
    x = mul(x, scalar(-1.0f, shape.size()));
  Shape reduced = shape, kept = shape;
  reduced.erase(reduced.begin() + axis);
  kept[axis] = 1;
  Value index =
      buildTyped<mlir::tosa::ArgMaxOp>(builder_.getI32Type(), reduced, {x},
                                       {attr("axis", builder_.getI32IntegerAttr(axis))});
  Value wide = buildTyped<mlir::tosa::CastOp>(builder_.getI64Type(), reduced, {index});
  return define(node, intAttr(node, "keepdims", 1) ? reshape(wide, kept) : wide);
}

/// Pad in constant mode with constant, non-negative pads.
Status Importer::importPad(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape shape = shapeOf(x);
  size_t rank = shape.size();
  std::string mode = "constant";
  if (auto it = node.attributes.find("mode"); it != node.attributes.end())
    mode = it->second.s;
  if (mode != "constant")
    return nodeUnsupported(node, "mode '" + mode + "' is not supported (constant only)");
  Shape pads = intsAttr(node, "pads", {});
  if (hasOperand(node, 1)) {
    auto values = intConstant(node.inputs[1]);
    if (!values)
      return nodeUnsupported(node, "pads must be a constant integer tensor");
    pads = values->values;
  }
  Shape axes;
  if (hasOperand(node, 3)) {
    FLOWC_ASSIGN_OR_RETURN(axes, axesOf(node, 3, static_cast<int64_t>(rank)));
    auto given = intConstant(node.inputs[3]);
    if (given && given->values.size() != axes.size())
      return nodeError(node, "axes repeat an axis");
    if (given) // axesOf sorts; pads follow the order given
      for (int64_t &axis : given->values)
        axis = axis < 0 ? axis + static_cast<int64_t>(rank) : axis;
    axes = given ? given->values : axes;
  } else {
    for (size_t i = 0; i < rank; ++i)
      axes.push_back(static_cast<int64_t>(i));
  }
  if (pads.size() != 2 * axes.size())
    return nodeError(node, "pads has " + std::to_string(pads.size()) +
                               " values, expected " + std::to_string(2 * axes.size()));
  Shape padding(2 * rank, 0), out = shape;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t before = pads[i], after = pads[i + axes.size()];
    if (before < 0 || after < 0)
      return nodeUnsupported(node, "negative pads (cropping) are not supported");
    padding[2 * axes[i]] = before;
    padding[2 * axes[i] + 1] = after;
    out[axes[i]] += before + after;
  }
  float value = 0.0f;
  if (hasOperand(node, 2)) {
    FLOWC_ASSIGN_OR_RETURN(value, scalarConstant(node, 2));
  }
  return define(
      node, build<mlir::tosa::PadOp>(out, {x, constShape(padding), scalar(value, 1)}));
}

/// Range of constant scalars: integer or float32 values, computed here.
Expected<bool> Importer::foldRange(const Node &node) {
  std::vector<const TensorData *> args;
  for (const std::string &name : node.inputs) {
    auto it = constants_.find(name);
    if (it == constants_.end() || it->second->info.elementCount() != 1)
      return false;
    args.push_back(it->second);
  }
  DType dtype = args[0]->info.dtype;
  for (const TensorData *arg : args)
    if (arg->info.dtype != dtype)
      return nodeError(node, "start, limit and delta differ in type (" +
                                 dtypeName(args[0]->info.dtype) + ", " +
                                 dtypeName(args[1]->info.dtype) + ", " +
                                 dtypeName(args[2]->info.dtype) + ")");
  if (dtype == DType::F32) {
    float v[3];
    for (int i = 0; i < 3; ++i)
      std::memcpy(&v[i], args[i]->bytes.data(), 4);
    if (v[2] == 0)
      return nodeError(node, "delta is 0");
    double steps = std::ceil((static_cast<double>(v[1]) - v[0]) / v[2]);
    if (!std::isfinite(steps))
      return nodeError(node, "start " + std::to_string(v[0]) + ", limit " +
                                 std::to_string(v[1]) + " and delta " +
                                 std::to_string(v[2]) + " give no finite count");
    // Past int64 the count is refused by its size like any other.
    int64_t count = steps <= 0        ? 0
                    : steps >= 0x1p62 ? std::numeric_limits<int64_t>::max()
                                      : static_cast<int64_t>(steps);
    FLOWC_RETURN_IF_ERROR(reserveFolded(node, {count}).status());
    std::vector<float> values;
    values.reserve(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      values.push_back(v[0] + static_cast<float>(i) * v[2]);
    FLOWC_RETURN_IF_ERROR(defineFloatConstant(node, {count}, values));
    return true;
  }
  std::vector<int64_t> v;
  for (const std::string &name : node.inputs) {
    auto ints = intConstant(name);
    if (!ints)
      return false;
    v.push_back(ints->values[0]);
  }
  if (v[2] == 0)
    return nodeError(node, "delta is 0");
  // ceil((limit - start) / delta) in 128 bits: the difference of two int64
  // does not fit in one.
  __int128 span = static_cast<__int128>(v[1]) - v[0], delta = v[2];
  __int128 steps = span / delta + (span % delta != 0 && (span < 0) == (delta < 0));
  int64_t count = steps <= 0 ? 0
                  : steps > std::numeric_limits<int64_t>::max()
                      ? std::numeric_limits<int64_t>::max()
                      : static_cast<int64_t>(steps);
  FLOWC_RETURN_IF_ERROR(reserveFolded(node, {count}).status());
  IntTensor result{{count}, {}, dtype == DType::I32 ? DType::I32 : DType::I64};
  result.values.reserve(static_cast<size_t>(count));
  // Every value lies between start and limit; wrapping arithmetic reaches
  // it even where i * delta alone would overflow.
  for (int64_t i = 0; i < count; ++i)
    result.values.push_back(
        static_cast<int64_t>(static_cast<uint64_t>(v[0]) +
                             static_cast<uint64_t>(i) * static_cast<uint64_t>(v[2])));
  FLOWC_RETURN_IF_ERROR(defineConstant(node, result));
  return true;
}

// Shape folding ----------------------------------------------------------
//
// With static shapes, the Shape/Gather/Concat/... subgraphs that exporters
// emit for reshapes and expands compute constants. They are evaluated here
// on integer tensors and become constants like initializers, so the
// compiled graph never contains them.

/// The values of an integer or bool tensor, widened to int64.
static std::optional<IntTensor> toInts(const TensorData &tensor) {
  DType dtype = tensor.info.dtype;
  if (dtype != DType::I64 && dtype != DType::I32 && dtype != DType::Bool)
    return std::nullopt;
  IntTensor out{tensor.info.shape, {}, dtype};
  size_t count = static_cast<size_t>(tensor.info.elementCount());
  for (size_t i = 0; i < count; ++i) {
    if (dtype == DType::I64) {
      int64_t v;
      std::memcpy(&v, tensor.bytes.data() + 8 * i, 8);
      out.values.push_back(v);
    } else if (dtype == DType::I32) {
      int32_t v;
      std::memcpy(&v, tensor.bytes.data() + 4 * i, 4);
      out.values.push_back(v);
    } else {
      out.values.push_back(tensor.bytes[i] != 0);
    }
  }
  return out;
}

std::optional<IntTensor> Importer::intConstant(const std::string &name) const {
  auto it = constants_.find(name);
  return it == constants_.end() ? std::nullopt : toInts(*it->second);
}

Status Importer::defineConstant(const Node &node, const IntTensor &tensor) {
  if (node.outputs.empty())
    return nodeError(node, "node has no output");
  auto bytes = std::make_shared<std::string>();
  for (int64_t value : tensor.values) {
    if (tensor.dtype == DType::Bool) {
      bytes->push_back(static_cast<char>(value != 0));
    } else if (tensor.dtype == DType::I32) {
      auto narrow = static_cast<int32_t>(value);
      bytes->append(reinterpret_cast<const char *>(&narrow), 4);
    } else {
      bytes->append(reinterpret_cast<const char *>(&value), 8);
    }
  }
  DType stored = tensor.dtype == DType::Bool || tensor.dtype == DType::I32 ? tensor.dtype
                                                                           : DType::I64;
  addFolded(node.outputs[0], stored, tensor.shape, std::move(bytes));
  return Status::ok();
}

/// A float tensor computed at import time; used like an initializer.
Status Importer::defineFloatConstant(const Node &node, const Shape &shape,
                                     const std::vector<float> &values) {
  if (node.outputs.empty())
    return nodeError(node, "node has no output");
  auto bytes = std::make_shared<std::string>(
      reinterpret_cast<const char *>(values.data()), values.size() * 4);
  addFolded(node.outputs[0], DType::F32, shape, std::move(bytes));
  return Status::ok();
}

void Importer::addFolded(const std::string &name, DType dtype, const Shape &shape,
                         std::shared_ptr<std::string> bytes) {
  TensorData &data = folded_.emplace_back();
  data.info = {name, dtype, shape};
  data.owned = std::move(bytes);
  data.bytes = *data.owned;
  constants_[name] = &data;
}

/// Broadcasts two integer tensors through `fn`, NumPy style.
Expected<IntTensor> Importer::foldBinary(const Node &node, const IntTensor &a,
                                         const IntTensor &b,
                                         int64_t (*fn)(int64_t, int64_t)) {
  FLOWC_ASSIGN_OR_RETURN(Shape out, broadcastShape(node, a.shape, b.shape));
  IntTensor result{out, {}, DType::I64};
  FLOWC_ASSIGN_OR_RETURN(int64_t count, reserveFolded(node, out));
  result.values.reserve(static_cast<size_t>(count));
  auto index = [&](const IntTensor &t, int64_t linear) {
    // Map an output position onto a (broadcast) operand.
    int64_t offset = 0, stride = 1;
    for (size_t d = out.size(); d-- > 0;) {
      int64_t coordinate = linear % out[d];
      linear /= out[d];
      size_t k = d + t.shape.size() - out.size();
      if (d + t.shape.size() < out.size())
        continue;
      if (t.shape[k] != 1)
        offset += coordinate * stride;
      stride *= t.shape[k];
    }
    return t.values[static_cast<size_t>(offset)];
  };
  for (int64_t i = 0; i < count; ++i)
    result.values.push_back(fn(index(a, i), index(b, i)));
  return result;
}

Expected<bool> Importer::tryFold(const Node &node) {
  const std::string &op = node.opType;
  if (op == "Shape") {
    FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
    Shape shape = shapeOf(x);
    int64_t rank = static_cast<int64_t>(shape.size());
    int64_t start = intAttr(node, "start", 0), end = intAttr(node, "end", rank);
    start = std::clamp(start < 0 ? start + rank : start, int64_t{0}, rank);
    end = std::clamp(end < 0 ? end + rank : end, int64_t{0}, rank);
    IntTensor dims{{std::max<int64_t>(0, end - start)}, {}, DType::I64};
    for (int64_t i = start; i < end; ++i)
      dims.values.push_back(shape[i]);
    FLOWC_RETURN_IF_ERROR(defineConstant(node, dims));
    return true;
  }
  if (op == "Size") {
    TensorInfo info = describeValue(node.inputs.empty() ? "" : node.inputs[0]);
    if (info.dtype == DType::Undefined || info.elementCount() < 0)
      return false;
    FLOWC_RETURN_IF_ERROR(
        defineConstant(node, IntTensor{{}, {info.elementCount()}, DType::I64}));
    return true;
  }
  if (op == "Range")
    return foldRange(node);
  static const std::set<std::string> foldable = {
      "ConstantOfShape", "Gather", "Unsqueeze", "Squeeze", "Reshape",
      "Concat",          "Add",    "Sub",       "Mul",     "Div",
      "Equal",           "Where",  "Slice",     "Cast",    "Expand"};
  if (!foldable.count(op))
    return false;
  std::vector<std::optional<IntTensor>> inputs;
  for (const std::string &name : node.inputs) {
    inputs.push_back(name.empty() ? std::nullopt : intConstant(name));
    if (!name.empty() && !inputs.back())
      return false; // a runtime tensor: not shape arithmetic
  }
  if (inputs.empty() || !inputs[0])
    return false;
  const IntTensor &a = *inputs[0];
  IntTensor result = a;
  if (op == "ConstantOfShape") {
    auto it = node.attributes.find("value");
    const TensorData *value =
        it == node.attributes.end() ? nullptr : it->second.tensor.get();
    if (value && value->info.elementCount() != 1)
      return nodeError(node, "value must hold one element, it has shape " +
                                 shapeString(value->info.shape));
    if (value && value->info.dtype != DType::F32 && !toInts(*value))
      return nodeUnsupported(node, "a " + dtypeName(value->info.dtype) +
                                       " value is not supported (float32, int64, int32, "
                                       "bool)");
    if (a.shape.size() != 1)
      return nodeError(node, "shape input must be 1-D, got " + shapeString(a.shape));
    Shape shape(a.values.begin(), a.values.end());
    FLOWC_ASSIGN_OR_RETURN(int64_t count, reserveFolded(node, shape));
    if (value && value->info.dtype == DType::F32) {
      float fill;
      std::memcpy(&fill, value->bytes.data(), 4);
      FLOWC_RETURN_IF_ERROR(defineFloatConstant(
          node, shape, std::vector<float>(static_cast<size_t>(count), fill)));
      return true;
    }
    int64_t fill = 0;
    if (auto values = value ? toInts(*value) : std::nullopt;
        values && !values->values.empty())
      fill = values->values[0];
    result = {shape, std::vector<int64_t>(static_cast<size_t>(count), fill), DType::I64};
  } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Equal") {
    if (inputs.size() != 2)
      return nodeError(node, op + " needs two inputs");
    using Fn = int64_t (*)(int64_t, int64_t);
    // Two's complement wrapping, like the integer ops at run time; a
    // division by zero folds to 0 and INT64_MIN / -1 wraps instead of
    // trapping.
    Fn fn = op == "Add"   ? Fn([](int64_t x, int64_t y) {
      return static_cast<int64_t>(static_cast<uint64_t>(x) + static_cast<uint64_t>(y));
    })
            : op == "Sub" ? Fn([](int64_t x, int64_t y) {
                return static_cast<int64_t>(static_cast<uint64_t>(x) -
                                            static_cast<uint64_t>(y));
              })
            : op == "Mul" ? Fn([](int64_t x, int64_t y) {
                return static_cast<int64_t>(static_cast<uint64_t>(x) *
                                            static_cast<uint64_t>(y));
              })
            : op == "Div" ? Fn([](int64_t x, int64_t y) {
                return y == 0    ? 0
                       : y == -1 ? static_cast<int64_t>(0 - static_cast<uint64_t>(x))
                                 : x / y;
              })
                          : Fn([](int64_t x, int64_t y) { return int64_t{x == y}; });
    FLOWC_ASSIGN_OR_RETURN(result, foldBinary(node, a, *inputs[1], fn));
    if (op == "Equal")
      result.dtype = DType::Bool;
  } else if (op == "Expand") {
    if (inputs.size() != 2 || inputs[1]->shape.size() != 1)
      return nodeError(node, "Expand needs a data and a 1-D shape input");
    Shape target = inputs[1]->values;
    FLOWC_ASSIGN_OR_RETURN(int64_t count, reserveFolded(node, target));
    IntTensor zeros{target, std::vector<int64_t>(static_cast<size_t>(count), 0),
                    DType::I64};
    FLOWC_ASSIGN_OR_RETURN(
        result, foldBinary(node, a, zeros, [](int64_t x, int64_t) { return x; }));
    result.dtype = a.dtype;
  } else if (op == "Where") {
    if (inputs.size() != 3)
      return nodeError(node, "Where needs three inputs");
    // where(c, x, y) = c * x + (1 - c) * y on integers.
    FLOWC_ASSIGN_OR_RETURN(IntTensor picked,
                           foldBinary(node, a, *inputs[1], [](int64_t c, int64_t x) {
                             return c ? x : int64_t{0};
                           }));
    FLOWC_ASSIGN_OR_RETURN(IntTensor other,
                           foldBinary(node, a, *inputs[2], [](int64_t c, int64_t y) {
                             return c ? int64_t{0} : y;
                           }));
    FLOWC_ASSIGN_OR_RETURN(
        result,
        foldBinary(node, picked, other, [](int64_t x, int64_t y) { return x + y; }));
  } else if (op == "Cast") {
    auto to = static_cast<DType>(intAttr(node, "to", 0));
    if (to == DType::F32) {
      std::vector<float> values(a.values.begin(), a.values.end());
      FLOWC_RETURN_IF_ERROR(defineFloatConstant(node, a.shape, values));
      return true;
    }
    if (to != DType::I64 && to != DType::I32 && to != DType::Bool)
      return false;
    result.dtype = to == DType::Bool ? DType::Bool : DType::I64;
  } else if (op == "Reshape" || op == "Unsqueeze" || op == "Squeeze") {
    FLOWC_ASSIGN_OR_RETURN(
        result.shape, op == "Reshape" ? reshapeTarget(node, a.shape)
                                      : squeezedShape(node, a.shape, op == "Unsqueeze"));
  } else if (op == "Concat") {
    for (const std::optional<IntTensor> &input : inputs)
      if (input->shape.size() != 1)
        return false;
    for (size_t i = 1; i < inputs.size(); ++i)
      result.values.insert(result.values.end(), inputs[i]->values.begin(),
                           inputs[i]->values.end());
    result.shape = {static_cast<int64_t>(result.values.size())};
  } else if (op == "Gather" || op == "Slice") {
    if (a.shape.size() != 1)
      return false;
    std::vector<int64_t> picked;
    int64_t n = static_cast<int64_t>(a.values.size());
    if (op == "Gather") {
      for (int64_t index : inputs[1]->values) {
        int64_t k = index < 0 ? index + n : index;
        if (k < 0 || k >= n)
          return nodeError(node, "index " + std::to_string(index) +
                                     " is out of range for " + std::to_string(n) +
                                     " elements");
        picked.push_back(a.values[k]);
      }
      result = {inputs[1]->shape, picked, DType::I64};
    } else {
      FLOWC_ASSIGN_OR_RETURN(auto ranges, sliceRanges(node, {n}));
      for (int64_t i = ranges[0].first; i < ranges[0].second; ++i)
        picked.push_back(a.values[i]);
      result = {{static_cast<int64_t>(picked.size())}, picked, DType::I64};
    }
  }
  FLOWC_RETURN_IF_ERROR(defineConstant(node, result));
  return true;
}

/// A Constant's `value` tensor, or its scalar and list forms.
Status Importer::importConstant(const Node &node) {
  if (node.outputs.empty())
    return nodeError(node, "node has no output");
  if (auto it = node.attributes.find("value");
      it != node.attributes.end() && it->second.tensor) {
    it->second.tensor->info.name = node.outputs[0];
    constants_[node.outputs[0]] = it->second.tensor.get();
    return Status::ok();
  }
  auto find = [&](const char *name) -> const Attribute * {
    auto it = node.attributes.find(name);
    return it == node.attributes.end() ? nullptr : &it->second;
  };
  if (const Attribute *value = find("value_float"))
    return defineFloatConstant(node, {}, {value->f});
  if (const Attribute *value = find("value_floats"))
    return defineFloatConstant(node, {static_cast<int64_t>(value->floats.size())},
                               value->floats);
  if (const Attribute *value = find("value_int"))
    return defineConstant(node, IntTensor{{}, {value->i}, DType::I64});
  if (const Attribute *value = find("value_ints"))
    return defineConstant(
        node,
        IntTensor{{static_cast<int64_t>(value->ints.size())}, value->ints, DType::I64});
  return nodeUnsupported(node, "a Constant needs a value, value_float(s) or value_int(s) "
                               "attribute (string and sparse values are not supported)");
}

Status Importer::importNode(const Node &node) {
  if (!node.domain.empty() && node.domain != "ai.onnx")
    return nodeUnsupported(node, "unsupported op domain '" + node.domain +
                                     "' (flowc imports the default ai.onnx domain only)");
  if (model_.opsetVersion <= 0)
    return nodeError(node, "the model imports no version of the default ONNX domain");
  FLOWC_RETURN_IF_ERROR(checkSignature(node));
  const std::string &op = node.opType;
  ++opCounts_[op];
  if (op == "Constant")
    return importConstant(node);
  FLOWC_ASSIGN_OR_RETURN(bool folded, tryFold(node));
  if (folded)
    return Status::ok();
  if (op == "Conv")
    return importConv(node);
  if (op == "Slice")
    return importSlice(node);
  if (op == "Gather")
    return importGather(node);
  if (op == "Expand")
    return importExpand(node);
  if (op == "Pow")
    return importPow(node);
  if (op == "Cast")
    return importCast(node);
  if (op == "CastLike") {
    if (!hasOperand(node, 1))
      return nodeError(node, "CastLike needs a target_type input");
    return importCastTo(node, describeValue(node.inputs[1]).dtype);
  }
  if (op == "ArgMax" || op == "ArgMin")
    return importArgExtreme(node);
  if (op == "Pad")
    return importPad(node);
  if (op == "Where")
    return importWhere(node);
  if (op == "LayerNormalization")
    return importLayerNormalization(node);
  if (op == "Split")
    return importSplit(node);
  if (op == "Gelu")
    return importGelu(node);
  if (op == "Identity" || op == "Dropout")
    return importIdentity(node);
  if (op == "MaxPool" || op == "AveragePool")
    return importPool(node);
  if (op == "GlobalAveragePool")
    return importGlobalAveragePool(node);
  if (op == "Gemm")
    return importGemm(node);
  if (op == "MatMul")
    return importMatMul(node);
  if (op == "Reshape")
    return importReshape(node);
  if (op == "Flatten")
    return importFlatten(node);
  if (op == "Softmax")
    return importSoftmaxLike(node, &Importer::softmaxLastAxis);
  if (op == "Transpose")
    return importTranspose(node);
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    FLOWC_ASSIGN_OR_RETURN(Value y, elementwise(node));
    return define(node, y);
  }
  static const std::set<std::string> activations = {
      "Relu", "Sigmoid",   "Tanh",        "Exp",      "Erf",
      "Sqrt", "LeakyRelu", "HardSigmoid", "HardSwish"};
  if (activations.count(op))
    return importActivation(node);
  if (op == "BatchNormalization")
    return importBatchNormalization(node);
  if (op == "Clip")
    return importClip(node);
  if (op == "Concat")
    return importConcat(node);
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" || op == "ReduceMin" ||
      op == "ReduceProd")
    return importReduce(node);
  static const std::set<std::string> unary = {"Neg",      "Abs",      "Log", "Reciprocal",
                                              "Floor",    "Ceil",     "Sin", "Cos",
                                              "Softplus", "Softsign", "Elu", "Selu"};
  if (unary.count(op))
    return importUnary(node);
  if (op == "Max" || op == "Min" || op == "Sum" || op == "Mean")
    return importVariadic(node);
  if (op == "Greater" || op == "Less" || op == "Equal" || op == "GreaterOrEqual" ||
      op == "LessOrEqual")
    return importCompare(node);
  if (op == "And" || op == "Or" || op == "Xor" || op == "Not")
    return importLogical(node);
  if (op == "LogSoftmax")
    return importSoftmaxLike(node, &Importer::logSoftmaxLastAxis);
  if (op == "Squeeze" || op == "Unsqueeze")
    return importSqueeze(node, op == "Unsqueeze");
  --opCounts_[op];
  return nodeUnsupported(node, "unsupported op '" + op + "' (domain '" +
                                   (node.domain.empty() ? "ai.onnx" : node.domain) +
                                   "', opset " + std::to_string(model_.opsetVersion) +
                                   ")");
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
    if (!element)
      return unimplemented(model_.path + ": input '" + input.name + "' has dtype " +
                           dtypeName(input.dtype) +
                           "; supported: float32, int64, int32, bool");
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
    values_[input.name] =
        entry_->addArgument(mlir::RankedTensorType::get(input.shape, element), loc_);
    graph.inputs.push_back(input);
  }
  for (const TensorData &tensor : model_.initializers) {
    constants_[tensor.info.name] = &tensor;
    initializerNames_.insert(tensor.info.name);
  }
  for (const Node &node : model_.nodes) {
    FLOWC_RETURN_IF_ERROR(importNode(node));
    records_.push_back(recordOf(node));
  }

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
  mlir::func::ReturnOp::create(builder_, loc_, results);
  func.setFunctionType(builder_.getFunctionType(entry_->getArgumentTypes(),
                                                mlir::ValueRange(results).getTypes()));
  size_t firstWeight = graph.inputs.size();
  for (size_t i = 0; i < weights_.size(); ++i)
    func.setArgAttr(firstWeight + i, "flowc.weight",
                    builder_.getStringAttr(weights_[i].key));

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

} // namespace

Expected<ImportedGraph> importOnnx(const OnnxModel &model, const ImportLimits &limits) {
  // The loader validated a parsed model; one built in memory is checked too.
  FLOWC_RETURN_IF_ERROR(validateGraph(model));
  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  context.loadDialect<mlir::func::FuncDialect, mlir::tosa::TosaDialect>();
  std::string diagnostics;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    diagnostics += diag.str() + "\n";
    return mlir::success();
  });
  Importer importer(context, model, limits);
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
