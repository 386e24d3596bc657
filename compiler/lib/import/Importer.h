// The ONNX importer's state and helpers, shared by the op families
// (Nn.cpp, Math.cpp, Tensor.cpp), the shape folder (ShapeFolding.cpp) and
// the driver (Importer.cpp). Private to compiler/lib/import.
#pragma once

#include "flowc/compiler/Compiler.h"
#include "flowc/compiler/OpRegistry.h"
#include "flowc/runtime/KernelAbi.h"

#include "flowc/support/Format.h"

#include "llvm/ADT/DenseSet.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"

#include <array>
#include <deque>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

namespace flowc::compiler::import {

using mlir::Value;
using Shape = std::vector<int64_t>;

/// The largest kernel extent, stride, dilation or pad accepted: far beyond
/// any real model, and small enough that window arithmetic on dimensions
/// (which checkRuntimeShape bounds) cannot overflow int64.
inline constexpr int64_t kMaxWindowValue = std::numeric_limits<int32_t>::max();
/// The most taps a window op may have along an axis it takes tap by tap
/// (a 3-D one's depth, a dilated pooling's axes): each is a slice of the
/// input in the IR (video models' depth kernels have 1 to 7).
inline constexpr int64_t kMaxWindowTaps = 256;
/// Bytes a runtime tensor may span: the x86-64 user address space.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 47;
/// Ranks beyond this are refused: no real model comes close, and shape
/// code is quadratic in the rank in places.
inline constexpr size_t kMaxRank = 64;

/// What the importer carries, for messages: element types of values and
/// weights, and of graph inputs and outputs (numpy, which feeds them, has no
/// bfloat16).
inline constexpr const char *kCarriedDtypes =
    "float32, float16, bfloat16, int64, int32, int8, uint8, bool";
inline constexpr const char *kIoDtypes =
    "float32, float16, int64, int32, int8, uint8, bool "
    "(bfloat16 inside the graph only)";

/// The product of shape[begin, end).
int64_t product(const Shape &shape, size_t begin, size_t end);

/// An integer (or bool) tensor known at import time: shape arithmetic.
struct IntTensor {
  Shape shape;
  std::vector<int64_t> values;
  DType dtype = DType::I64;
};

/// The values of a float32, float16, bfloat16, int8, uint8 or int32 tensor
/// as float32 (exact but for int32 beyond 2^24); nothing for other dtypes
/// or a size that does not match the shape.
std::optional<std::vector<float>> floatValues(const TensorData &tensor);

/// The values of an integer or bool tensor, widened to int64; nothing for
/// other dtypes.
std::optional<IntTensor> toInts(const TensorData &tensor);

/// Explicit pads [top, left, bottom, right] of a 2-D window op, from `pads`
/// (`given`, validated) or `auto_pad`. Window values are validated.
Expected<std::array<int64_t, 4>> windowPads(const Node &node, const Shape &given,
                                            const Shape &inHW, const Shape &kernel,
                                            const Shape &strides, const Shape &dilations);
/// An attribute's value, or `fallback` when the node does not give it.
Shape intsAttr(const Node &node, const char *name, Shape fallback);
int64_t intAttr(const Node &node, const char *name, int64_t fallback);
std::string stringAttr(const Node &node, const char *name, std::string fallback);
float floatAttr(const Node &node, const char *name, float fallback);

/// Each family's entries of the op table (OpRegistry.h).
std::span<const OpInfo> nnOps();
std::span<const OpInfo> mathOps();
std::span<const OpInfo> tensorOps();
std::span<const OpInfo> recurrentOps();
std::span<const OpInfo> einsumOps();
std::span<const OpInfo> selectionOps();
std::span<const OpInfo> attentionOps();
std::span<const OpInfo> lossOps();
std::span<const OpInfo> quantizeOps();

/// How a scatter combines an update with what is there (ScatterND's and
/// ScatterElements' `reduction`).
enum class Reduction { None, Add, Mul, Max, Min };

/// Turns one ONNX graph into a func.func @main of TOSA ops. One per import;
/// the op families are its member functions, named in the op table.
class Importer {
public:
  Importer(mlir::MLIRContext &ctx, const OnnxModel &model, const ImportLimits &limits)
      : ctx_(ctx), builder_(&ctx), loc_(mlir::UnknownLoc::get(&ctx)), model_(model),
        foldLimit_(limits.foldedBytes ? limits.foldedBytes : foldedConstantLimit(model)) {
  }

  Expected<ImportedGraph> run();

  // Errors -------------------------------------------------------------
  Status nodeError(const Node &node, const std::string &message) const {
    return invalidArgument(model_.path + ": " + node.describe() + ": " + message);
  }
  Status nodeUnsupported(const Node &node, const std::string &message) const {
    return unimplemented(model_.path + ": " + node.describe() + ": " + message);
  }

  // Validation ---------------------------------------------------------
  /// InvalidArgument naming both types where `a` and `b` differ in element
  /// type (ONNX ties them to one type variable).
  Status sameElementType(const Node &node, Value a, Value b) const;
  /// The node's input and output counts and attribute kinds, against what
  /// ONNX defines for its op (`signature`; null for an op flowc lacks,
  /// whose attribute kinds are still checked); InvalidArgument naming what
  /// is off.
  Status checkSignature(const Node &node, const OpSignature *signature) const;
  /// The `name` attribute as `count` integers, each in [min, kMaxWindowValue]
  /// (`fallback` when absent): strides, dilations, kernels, pads.
  Expected<Shape> windowInts(const Node &node, const char *name, size_t count,
                             Shape fallback, int64_t min) const;
  /// A value of `shape` the node computes at run time: every dimension
  /// known and >= 0, and its bytes addressable (InvalidArgument otherwise),
  /// and some elements (Unimplemented otherwise).
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
  DType dtypeOf(Value v) const {
    mlir::Type element = elementTypeOf(v);
    return element.isF32()         ? DType::F32
           : element.isF16()       ? DType::F16
           : element.isBF16()      ? DType::BF16
           : element.isInteger(64) ? DType::I64
           : element.isInteger(32) ? DType::I32
           : element.isInteger(8)  ? (unsignedBytes_.contains(v) ? DType::U8 : DType::I8)
           : element.isInteger(1)  ? DType::Bool
                                   : DType::Undefined;
  }
  static mlir::Type elementTypeOf(Value v) {
    return mlir::cast<mlir::RankedTensorType>(v.getType()).getElementType();
  }
  /// The MLIR element type of a runtime tensor of `dtype`; null for dtypes
  /// the importer cannot carry (it carries float32, float16, bfloat16,
  /// int64, int32 and bool).
  mlir::Type elementType(DType dtype) {
    switch (dtype) {
    case DType::F32:
      return builder_.getF32Type();
    case DType::F16:
      return builder_.getF16Type();
    case DType::BF16:
      return builder_.getBF16Type();
    case DType::I64:
      return builder_.getI64Type();
    case DType::I32:
      return builder_.getI32Type();
    // Both are bytes; unsignedBytes_ tells them apart.
    case DType::I8:
    case DType::U8:
      return builder_.getI8Type();
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
  /// Zeros of `element` type and `shape` (a constant).
  Value zeros(mlir::Type element, const Shape &shape);
  /// An integer `value` of type `element` (i32, i64), shaped [1] * rank.
  Value integer(mlir::Type element, int64_t value, size_t rank);
  Value zeroPoint();
  /// tosa.mul's shift operand; zero for floating point.
  Value zeroShift();
  Value transpose(Value v, llvm::ArrayRef<int32_t> perms);
  Value constShape(const Shape &shape);
  Value slice(Value v, const Shape &start, const Shape &size);
  /// `size` elements of `v` along `axis` from `from`, all of the other axes.
  Value sliceAlong(Value v, int64_t axis, int64_t from, int64_t size);
  /// `v` with `axis` in reverse order.
  Value reverseAlong(Value v, int64_t axis);
  /// `parts` (one element type, equal off `axis`) joined along `axis`.
  Value concatAlong(llvm::ArrayRef<Value> parts, int64_t axis);
  Value reshape(Value v, const Shape &shape);
  /// TOSA 1.0 wants (in - 1 + pads - dilated kernel extent) divisible by the
  /// stride where ONNX floors: trims trailing padding, then trailing input
  /// rows/columns that no window reads. `pads` is [top, left, bottom, right].
  Value fitWindows(Value nhwc, std::array<int64_t, 4> &pads, const Shape &kernel,
                   const Shape &strides, const Shape &dilations);
  Expected<Value> broadcastTo(const Node &node, Value v, size_t rank);
  /// `v` (the node's `what`: scale, bias) at the rank of an input of
  /// `shape`, which it must broadcast to without widening it.
  Expected<Value> broadcastToInput(const Node &node, Value v, const Shape &shape,
                                   const char *what);
  Expected<Shape> broadcastShape(const Node &node, const Shape &a, const Shape &b);
  /// Add, Sub, Mul, Div of two broadcast float32 tensors.
  Expected<Value> elementwise(const Node &node);

  // Half precision -----------------------------------------------------
  // float16 and bfloat16 are storage types: a node that reads them computes
  // in float32 (importWidened), and the graph rounds to half where it
  // stores half values: at its outputs and where a Cast or CastLike asks.
  static bool isHalf(DType dtype) { return dtype == DType::F16 || dtype == DType::BF16; }
  /// The half element type among the node's inputs; null when it has none.
  mlir::Type halfInputType(const Node &node) const;
  /// Runs `import` on `node` with each input whose dtype `isNarrow` says
  /// is narrow bound to `widen` of it, for this node only; small narrow
  /// constants become float32 data where `widenConstants` says so.
  Status importWithWideInputs(const Node &node, Status (Importer::*import)(const Node &),
                              llvm::function_ref<bool(DType)> isNarrow,
                              bool widenConstants,
                              llvm::function_ref<Value(Value)> widen);
  /// Imports `node` (through `import`) with its half inputs widened to
  /// float32, and rounds its float32 results to `half`.
  Status importWidened(const Node &node, Status (Importer::*import)(const Node &),
                       mlir::Type half);
  /// `tensor` (small, half or 8-bit) as float32 data, made once per tensor;
  /// `tensor` itself when its data is malformed.
  const TensorData &widenedConstant(const TensorData &tensor);
  /// Replaces the constant `tensor` (float32) by its values rounded to
  /// `half`.
  void narrowConstant(const TensorData &tensor, DType half);

  // 8-bit integers (Quantize.cpp) ---------------------------------------
  // int8 and uint8 are i8 in the IR; unsignedBytes_ holds the uint8 ones.
  // The quantization ops and Cast compute on them, integer ops through
  // widened values (importWidenedBytes), ops that move elements take them
  // as they are, and the rest refuse them (checkByteInputs).
  static bool isByte(DType dtype) { return dtype == DType::I8 || dtype == DType::U8; }
  /// Marks `v` (i8) as uint8 where `dtype` says so; returns it.
  Value markBytes(Value v, DType dtype);
  /// Bytes `x` (int8 or uint8, as dtypeOf says) as float32: exact.
  Value widenBytes(Value x);
  /// Integral float32 `x` saturated to the range of `to` (int8 or uint8),
  /// as bytes.
  Value narrowToBytes(Value x, DType to);
  /// x / y (float32, broadcast), correctly rounded: the quotient
  /// quantization rounds to an integer.
  Value divideExactly(Value x, Value y);
  /// A refusal naming the first int8 or uint8 input of a node whose op
  /// takes no bytes; ok for the ops that take them.
  Status checkByteInputs(const Node &node) const;
  /// Whether the node computes on 8-bit inputs through wider values
  /// (importWidenedBytes).
  bool readsBytesWidened(const Node &node) const;
  /// Imports `node` (through `import`) with its 8-bit inputs widened
  /// exactly (to float32; to int32 for Div and Mod, which divide as
  /// integers), and its wide results narrowed back: wrapped to 8 bits as
  /// numpy and onnxruntime wrap integer arithmetic.
  Status importWidenedBytes(const Node &node, Status (Importer::*import)(const Node &));
  /// Marks the byte outputs of a node that moves bytes as uint8 where its
  /// byte inputs are.
  void inheritSignedness(const Node &node);
  /// QuantizeLinear's or DequantizeLinear's scale or zero point (input
  /// `index`) for `x` of `shape`: a scalar, one value per `axis` entry, or
  /// (blockSize > 0) one per block of `axis`; as float32, broadcast against
  /// `x` at its rank. `zero` when the input is absent.
  Expected<Value> quantizationParameter(const Node &node, size_t index,
                                        const Shape &shape, int64_t axis,
                                        int64_t blockSize, float zero);
  /// x (float32) quantized by the node's inputs scaleIndex and zeroIndex
  /// to `to` (int8 or uint8).
  Expected<Value> quantize(const Node &node, Value x, size_t scaleIndex, size_t zeroIndex,
                           int64_t axis, int64_t blockSize, DType to);
  /// x (int8, uint8 or int32) dequantized to float32 by the node's inputs
  /// scaleIndex and zeroIndex.
  Expected<Value> dequantize(const Node &node, Value x, size_t scaleIndex,
                             size_t zeroIndex, int64_t axis, int64_t blockSize);
  /// The first result of `import` run on `node` as an `opType` node reading
  /// `inputs` (QLinearConv's convolution of dequantized values).
  Expected<Value> importOver(const Node &node, const char *opType,
                             llvm::ArrayRef<Value> inputs,
                             Status (Importer::*import)(const Node &));
  Status importQLinearMatMul(const Node &node);
  Status importConvInteger(const Node &node);
  Status importQLinearConv(const Node &node);
  /// A QuantizeLinear of a float32 constant by constant parameters,
  /// computed here as a folded constant; false (nothing done) otherwise.
  Expected<bool> foldQuantizeLinear(const Node &node, DType to, int64_t axis,
                                    int64_t blockSize);
  Status importQuantizeLinear(const Node &node);
  Status importDequantizeLinear(const Node &node);
  Status importDynamicQuantizeLinear(const Node &node);
  Status importMatMulInteger(const Node &node);
  /// A product of bytes through the integer kernel, its zero points inputs
  /// `zeroA` and `zeroB` (MatMulInteger's 2 and 3, QLinearMatMul's 2 and 5).
  Expected<std::optional<Value>> integerMatMul(const Node &node, Value a, Value b,
                                               size_t zeroA, size_t zeroB);
  std::optional<Value> kernelZeroPoint(const Node &node, size_t index, DType input,
                                       int64_t count);
  /// (a - zeroA) x (b - zeroB) through the runtime's integer kernel, as
  /// int32: a [..., k] and b [k, n] ([n, k] when `transposedB`) bytes, zero
  /// points null, [1] or (B's) [n] of their inputs' types.
  Expected<Value> integerProduct(Value a, Value b, Value zeroA, Value zeroB,
                                 bool transposedB);
  /// Remembers a DequantizeLinear of bytes `x` (result `y`) with one scale,
  /// or one per row or column of a matrix or per output channel of a
  /// convolution's weights, for productOfDequantized and
  /// convolutionOfDequantized.
  void recordDequantized(const Node &node, Value x, Value y, int64_t axis,
                         int64_t blockSize);
  Expected<std::optional<Value>> productOfDequantized(Value a, Value b, bool transposedB);

  // Ops ----------------------------------------------------------------
  Status importNode(const Node &node);
  Status importConv(const Node &node);
  Status importConvTranspose(const Node &node);
  /// A window op's kernel, strides, dilations and pads ([top, left,
  /// bottom, right]), for two spatial axes.
  struct Window {
    Shape kernel, strides, dilations, pads;
  };
  /// The node's window attributes for `dims` (1 or 2) spatial axes, each
  /// validated; a 1-D window becomes the 2-D one over a height of 1.
  /// `kernel` stands in for an absent kernel_shape.
  Expected<Window> windowAttributes(const Node &node, size_t dims, Shape kernel);
  /// Conv's and ConvTranspose's data and weight (a 1-D pair as 2-D over a
  /// height of 1) and window attributes, validated and lifted alike.
  struct ConvOperands : Window {
    Value x, w;
    bool line = false;
  };
  /// Inputs `source` and `weight` (float32; of any type with `anyType`) as
  /// 2-D operands, with the node's window.
  Expected<ConvOperands> convOperands(const Node &node, const std::string &what,
                                      size_t source = 0, size_t weight = 1,
                                      bool anyType = false);
  /// A Conv-like node's operands, groups and pads (ONNX's auto_pad
  /// resolved; [top, left, bottom, right]).
  struct ConvGeometry : ConvOperands {
    int64_t groups = 1;
    std::array<int64_t, 4> padding{};
  };
  Expected<ConvGeometry> convGeometry(const Node &node, size_t source = 0,
                                      size_t weight = 1, bool anyType = false);
  /// A convolution of NCHW `x` by OIHW `w` (bias null: none), as TOSA's
  /// conv2d, depthwise conv2d or one conv2d per group; NCHW result. With
  /// `sourceZero`, x and w are int8 and the result int32: TOSA's quantized
  /// convolution of x less that zero point (groups 1 or depthwise only).
  Expected<Value> convolveNchw(const Node &node, Value x, Value w, Value bias,
                               std::array<int64_t, 4> pads, const Shape &strides,
                               const Shape &dilations, int64_t groups,
                               std::optional<int64_t> sourceZero = std::nullopt);
  /// The int32 sums of convolving bytes: `x` less its zero point by `w`
  /// less its zero points (one, or one per output channel), NCHW, as TOSA's
  /// quantized convolution, which the outline pass gives to the integer
  /// kernel. `constantW`, when given, is `w`'s initializer (a uint8 one is
  /// folded to int8). nullopt for grouped convolutions other than depthwise.
  Expected<std::optional<Value>>
  integerConvolution(const Node &node, const ConvGeometry &conv, int64_t zeroX,
                     llvm::ArrayRef<int64_t> zerosW,
                     const TensorData *constantW = nullptr);
  /// QLinearMatMul of a 2-D B through the integer product, its sums scaled
  /// (before quantizing); nullopt for the forms of the float32 path: a
  /// batched B, A scaled per row, zero points of another type.
  Expected<std::optional<Value>> integerQLinearMatMul(const Node &node, Value a, Value b);
  /// ConvInteger's and QLinearConv's sums through integerConvolution, from
  /// their inputs `source`, `weight` and the zero points `zeroX`, `zeroW`
  /// (constants); nullopt for the forms that take the float32 path.
  Expected<std::optional<Value>> integerConvolutionOf(const Node &node, size_t source,
                                                      size_t weight, size_t zeroX,
                                                      size_t zeroW);
  /// `y`, a 2-D convolution's NCHW result, as `conv`'s ([N, C, W] when 1-D).
  Value convResult(const ConvGeometry &conv, Value y);
  /// A Conv of two DequantizeLinear results (the QDQ format's quantized
  /// convolution) as the integer convolution of their bytes, scaled once,
  /// plus the bias. nullopt for the forms that take the float32 path.
  Expected<std::optional<Value>>
  convolutionOfDequantized(const Node &node, const ConvGeometry &conv, Value bias);
  /// Input `index` when it is an initializer or constant (not a graph
  /// input that overrides one).
  const TensorData *constantInput(const Node &node, size_t index) const;
  /// Uint8 weight `weight` as int8 (128 less), folded once at import, so
  /// that a kernel reads an int8 weight it packs at link.
  Expected<Value> signedWeight(const Node &node, const TensorData &weight);
  /// The values of input `index`, a zero point of `input`'s type that is a
  /// constant of one value or `count` (0 when absent); nullopt otherwise.
  std::optional<std::vector<int64_t>> constantZeros(const Node &node, size_t index,
                                                    DType input, int64_t count);
  /// A transposed convolution with stride <= kernel and no dilation, as
  /// one convolution per output phase packed into one; NCHW result of
  /// extent `out`.
  Expected<Value> subPixelTranspose(const Node &node, const ConvOperands &conv,
                                    Value bias, const Shape &out, int64_t groups);
  /// Any other transposed convolution, as a convolution over the input with
  /// zeros inserted between its elements.
  Expected<Value> spreadTranspose(const Node &node, const ConvOperands &conv, Value bias,
                                  const Shape &extra, int64_t groups);
  /// A transposed convolution's [C_in, C_out/g, ..] weight as a
  /// convolution's [C_out, C_in/g, ..].
  Value swapTransposedChannels(Value w, int64_t groups);
  Status importPool(const Node &node);
  /// 1-D or 2-D pooling of `x` as the node's attributes say.
  Expected<Value> poolNchw(const Node &node, Value x);
  /// One axis of a window op: kernel, stride, dilation, pads, and the
  /// output's extent.
  struct WindowAxis {
    int64_t kernel = 1, stride = 1, dilation = 1, begin = 0, end = 0, out = 0;
  };
  /// A 3-D (volumetric) window node: the 2-D node over its height and
  /// width, and its depth axis apart.
  struct Volume {
    Node flat;
    WindowAxis depth;
  };
  /// `kernel` (3 values) stands in for an absent kernel_shape.
  Expected<Volume> splitDepth(const Node &node, int64_t depth, Shape kernel);
  /// The views of `x` (padded along `axis` with `fill`) that each tap of
  /// `window` reads, `window.out` long along `axis` each.
  llvm::SmallVector<Value> tapsAlong(Value x, int64_t axis, const WindowAxis &window,
                                     float fill);
  /// Max or average pooling (the node's op and attributes) of `x` along
  /// one axis, through the window's taps; `window.out` is computed.
  Expected<Value> poolAlong(const Node &node, Value x, int64_t axis, WindowAxis window);
  Status importVolumeConv(const Node &node, Value x, Value w);
  Status importVolumePool(const Node &node, Value x);
  Status importGlobalAveragePool(const Node &node);
  Status importGemm(const Node &node);
  Status importMatMul(const Node &node);
  /// MatMul of float32 `a` and `b` (the node's, for messages).
  Expected<Value> matmulValues(const Node &node, Value a, Value b);
  Status importReshape(const Node &node);
  Status importFlatten(const Node &node);
  Status importTranspose(const Node &node);
  Status importBatchNormalization(const Node &node);
  Status importClip(const Node &node);
  Status importConcat(const Node &node);
  Status importReduce(const Node &node);
  Status importUnary(const Node &node);
  /// Tan, Atan, Asin, Acos, Sinh, Cosh, Asinh, Acosh, Atanh,
  /// ThresholdedRelu, Shrink, Celu, IsNaN, IsInf.
  Status importElementary(const Node &node);
  /// atan2(y, x) for y >= 0 (float32, same rank, broadcast): the angle in [0, pi],
  /// from a Taylor series after range reduction.
  Value atan2NonNegative(Value y, Value x);
  Status importVariadic(const Node &node);
  Status importCompare(const Node &node);
  Status importLogical(const Node &node);
  /// Both operands broadcast to one rank; `out` gets the result shape.
  Expected<std::pair<Value, Value>> broadcastPair(const Node &node, Value a, Value b,
                                                  Shape &out);
  Status importSqueezeLike(const Node &node, bool unsqueeze);
  Status importSqueeze(const Node &node) { return importSqueezeLike(node, false); }
  Status importUnsqueeze(const Node &node) { return importSqueezeLike(node, true); }
  Status importBinary(const Node &node);
  Status importPRelu(const Node &node);
  Status importActivation(const Node &node);
  Status importSlice(const Node &node);
  Status importGather(const Node &node);
  Status importGatherElements(const Node &node);
  Status importExpand(const Node &node);
  Status importPow(const Node &node);
  Status importCast(const Node &node);
  Status importCastTo(const Node &node, DType to);
  Status importCastLike(const Node &node);
  Status importArgExtreme(const Node &node);
  Status importPad(const Node &node);
  /// `x` padded along `axis` in Pad's reflect, edge or wrap `mode`.
  Expected<Value> padAlong(const Node &node, Value x, int64_t axis, int64_t before,
                           int64_t after, const std::string &mode);
  Expected<bool> foldRange(const Node &node);
  Status importIdentity(const Node &node);
  Status importIf(const Node &node);
  Status importConstant(const Node &node);
  /// RNN, GRU and LSTM, unrolled over their time steps (Recurrent.cpp).
  Status importRecurrent(const Node &node);
  /// Einsum as summations and batched matrix products (Einsum.cpp).
  Status importEinsum(const Node &node);
  Status importWhere(const Node &node);
  Status importLayerNormalization(const Node &node);
  // Attention.cpp: opset 23's Attention, RMSNormalization and
  // RotaryEmbedding.
  Status importAttention(const Node &node);
  Status importRmsNormalization(const Node &node);
  Status importRotaryEmbedding(const Node &node);
  /// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (Loss.cpp).
  Status importLoss(const Node &node);
  /// A 3-D [batch, sequence, heads x size] input as [batch, heads,
  /// sequence, size]; `what` names it in errors.
  Expected<Value> splitHeads(const Node &node, Value x, int64_t heads, const char *what);
  /// [batch, heads, n, m] times [batch, heads / group, m, p] (each of the
  /// second's heads serving `group` consecutive heads of the first), one
  /// tosa.matmul.
  Value headsMatmul(Value x, Value y);
  Status importChannelNormalization(const Node &node);
  Status importLrn(const Node &node);
  /// Each row's mean and 1 / sqrt(variance + epsilon), [rows, 1].
  struct RowStatistics {
    Value mean, inverse;
  };
  /// Each row of `flat` ([rows, n]) minus its mean, over its standard
  /// deviation (variance + epsilon under the root); the statistics too
  /// when asked.
  Value normalizeRows(Value flat, float epsilon, RowStatistics *statistics = nullptr);
  Status importSplit(const Node &node);
  Status importGelu(const Node &node);
  Status importResize(const Node &node);
  Status importCumSum(const Node &node);
  Status importTile(const Node &node);
  Status importDepthSpace(const Node &node);
  Status importTrilu(const Node &node);
  // Selection.cpp: TopK, Hardmax, OneHot, GatherND and the scatters.
  Status importTopK(const Node &node);
  /// TopK's picks from each row of `key` ([rows, n]; no NaN) as [rows, k]
  /// int32 indices, best first, ties to the lower index: k selection steps,
  /// or every element's rank (rows x n x n compares).
  Expected<Value> topKStepwise(const Node &node, Value key, int64_t k, bool largest);
  Expected<Value> topKRanked(const Node &node, Value key, int64_t k, bool largest);
  /// A call of the runtime's library kernel `kind` with `params` on
  /// `inputs` (the importer's own kernels: TopK's order, a run-time
  /// scatter). Its callee's body, which `body` builds from the callee's
  /// arguments, is the same result in TOSA: it fixes the kernel's buffers,
  /// and -O0 inlines it instead. The body may add no run-time check.
  Expected<Value>
  libraryCall(runtime::KernelKind kind, std::vector<int64_t> params,
              llvm::ArrayRef<Value> inputs, mlir::Type result,
              const std::function<Expected<Value>(mlir::ValueRange)> &body);
  /// scatterRuntime through the runtime's row scatter, for float32, int32
  /// and int64 data.
  Expected<Value> scatterRows(const Node &node, Value data, Value updates, Value targets,
                              Reduction reduction);
  Value hardmaxLastAxis(Value x);
  Status importHardmax(const Node &node) {
    return importSoftmaxLike(node, &Importer::hardmaxLastAxis);
  }
  Status importOneHot(const Node &node);
  Status importGatherND(const Node &node);
  Status importScatterND(const Node &node);
  Status importScatterElements(const Node &node);
  /// The row of [product of shape[firstAxis, firstAxis + q)] each tuple of
  /// `tuples` ([count, q] integers, checked at run time, negative ones from
  /// the end) names: [1, count] int32.
  Expected<Value> tupleRows(const Node &node, Value tuples, const Shape &shape,
                            int64_t firstAxis);
  /// Rows of `data` ([rows, width]) replaced by, or combined with, rows
  /// of `updates` ([count, width]): update j to row targets[j], known at
  /// import and in range.
  Expected<Value> scatterKnown(const Node &node, Value data, Value updates,
                               const std::vector<int64_t> &targets, Reduction reduction);
  /// The same with `targets` ([1, count] int32, in range) known at run time.
  Expected<Value> scatterRuntime(const Node &node, Value data, Value updates,
                                 Value targets, Reduction reduction);
  /// `data` ([rows, width]) with row r replaced by updates[source[r]]
  /// where source ([rows, 1] int32) is not negative: a gather from the
  /// updates and a select (the data is not copied into a joined source).
  Expected<Value> mergeRows(const Node &node, Value data, Value updates, Value source);
  /// scatterRuntime's reductions other than float32 add: the updates
  /// `match` ([rows, count]) sends each row, reduced, then combined with it.
  Expected<Value> reduceMatches(const Node &node, Value data, Value updates, Value match,
                                Reduction reduction);
  /// GatherElements' and ScatterElements' element offsets into the
  /// flattened data: indices' coordinates with the `axis` one replaced by
  /// the index (`indices` is the node's input 1). Whole offsets for
  /// constant indices (checked here), else
  /// [1, count] int32 computed at run time (checked then).
  /// The indices' type, rank and extents against the data's (`axis` may
  /// be any length).
  Status checkElementIndices(const Node &node, Value indices, const Shape &shape,
                             int64_t axis);
  /// ScatterElements at run-time indices (checked as the graph runs),
  /// through the runtime's row scatter.
  Expected<Value> scatterElementsAt(const Node &node, Value data, Value indices,
                                    Value updates, int64_t axis, Reduction reduction);
  /// ScatterElements in TOSA at `index` (int32, in range, from the axis's
  /// start; the indices' shape).
  Expected<Value> scatterElementsRuntime(const Node &node, Value data, Value index,
                                         Value updates, int64_t axis,
                                         Reduction reduction);
  struct ElementOffsets {
    std::optional<std::vector<int64_t>> known;
    Value runtime;
  };
  Expected<ElementOffsets> elementOffsets(const Node &node, Value indices,
                                          const Shape &shape, int64_t axis);
  /// The value a reduction leaves unchanged (0, 1, or the type's lowest or
  /// highest), of `element`, shaped [1] * rank.
  Value identityOf(mlir::Type element, Reduction reduction, size_t rank);
  /// a and b (same rank, broadcast) combined as `reduction` does (not None).
  Value combine(Reduction reduction, Value a, Value b);
  /// `x` reduced along `axis` (kept, as 1) as `reduction` combines (not None).
  Value reduceAlong(Reduction reduction, Value x, int32_t axis);
  /// The permutation that moves `axis` last, and its inverse.
  static std::pair<llvm::SmallVector<int32_t>, llvm::SmallVector<int32_t>>
  axisLast(int64_t axis, int64_t rank);
  /// 0, 1, ..., n - 1 of `element` (integer) along `axis` of a rank-`rank`
  /// constant, 1 elsewhere; counted as a folded constant.
  Expected<Value> iota(const Node &node, mlir::Type element, int64_t n, size_t rank,
                       int64_t axis);
  /// The highest (or lowest) value of `element`, shaped [1] * rank: float32's
  /// infinities, an integer type's limits.
  Value extreme(mlir::Type element, bool highest, size_t rank);
  /// `x` moved `by` places along `axis`, zeros filling in.
  Value shiftAlong(Value x, int64_t axis, int64_t by);
  /// tosa.gather of `indices` (any integer type, negative ones counted from
  /// the end) along `axis` of `data`; with `checkIndices`, through
  /// checkedIndices.
  Expected<Value> gatherRuntime(const Node &node, Value data, Value indices, int64_t axis,
                                bool checkIndices);
  /// `flat` (integer indices) with each one outside [-k, k) replaced by 0,
  /// so that no read leaves the data, and a run-time check (checks_) that
  /// fails the run when there was one; `what` names the indexed range.
  Value checkedIndices(const Node &node, Value flat, int64_t k, const std::string &what);
  /// int32 indices into an axis of `k` elements, the negative ones counted
  /// from its end (ONNX's rule).
  Value fromEnd(Value flat, int64_t k);
  /// Fails the run with `problem` (after the node's description) where any
  /// of the bool `flags` is set: a run-time check.
  void failRunIf(const Node &node, Value flags, const std::string &problem);
  /// Integer a / b truncated towards zero, and a - (a / b) * b, as
  /// onnxruntime computes them; operands of one type and rank.
  std::pair<Value, Value> integerDivision(const Node &node, Value a, Value b,
                                          const Shape &out);
  Status importMod(const Node &node);
  /// tosa.gather of `indices` (in range) along `axis` of `x`.
  Expected<Value> gatherConstant(const Node &node, Value x, int64_t axis,
                                 const std::vector<int32_t> &indices);
  /// `x` with `axis` resized to `out` elements as Resize's attributes say;
  /// `scale` is out / in, or the scale the node gives.
  Expected<Value> resizeAxis(const Node &node, Value x, int64_t axis, int64_t out,
                             float scale);
  Expected<Shape> reshapeTarget(const Node &node, const Shape &in);
  Expected<Shape> squeezedShape(const Node &node, const Shape &in, bool unsqueeze);
  /// What Slice takes along each axis of `in`: elements begin,
  /// begin + step, ..., `count` of them (all of an axis it does not name).
  struct SliceAxis {
    int64_t begin = 0, count = 0, step = 1;
  };
  Expected<std::vector<SliceAxis>> sliceRanges(const Node &node, const Shape &in);
  /// `x` with `axis` cut to the elements `range` names (step not 1).
  Value stepAlong(Value x, int64_t axis, SliceAxis range);
  // Shape folding.
  Expected<bool> tryFold(const Node &node);
  std::optional<IntTensor> intConstant(const std::string &name) const;
  Status defineConstant(const Node &node, const IntTensor &tensor);
  Status defineFloatConstant(const Node &node, const Shape &shape,
                             const std::vector<float> &values);
  /// Registers a computed constant as the value `name`, like an initializer.
  void addFolded(const std::string &name, DType dtype, const Shape &shape,
                 std::shared_ptr<std::string> bytes);
  /// `a` rearranged into `out`: `source` gives, for each output
  /// coordinate, the input coordinate it reads (a slice, a transpose).
  Expected<IntTensor>
  foldRearranged(const Node &node, const IntTensor &a, const Shape &out,
                 llvm::function_ref<void(const Shape &, Shape &)> source);
  Expected<IntTensor> foldBinary(const Node &node, const IntTensor &a, const IntTensor &b,
                                 int64_t (*fn)(int64_t, int64_t));
  Expected<Shape> axesOf(const Node &node, size_t inputIndex, int64_t rank);
  Expected<float> scalarConstant(const Node &node, size_t index);
  Value clamp(Value x, float low, float high);
  /// The shape of an elementwise result of same-rank operands that
  /// broadcast (each dimension the larger).
  static Shape sameRankBroadcast(Value a, Value b);
  Value mul(Value a, Value b);
  /// Float32 a + b and a - b of same-rank operands, as `mul`.
  Value add(Value a, Value b);
  Value sub(Value a, Value b);
  Value softmaxLastAxis(Value x);
  Value logSoftmaxLastAxis(Value x);
  /// Softmax and LogSoftmax: `lastAxis` applied along the node's axis, with
  /// the opset rules (before 13 the input is flattened at `axis`).
  Status importSoftmaxLike(const Node &node, Value (Importer::*lastAxis)(Value));
  Status importSoftmax(const Node &node) {
    return importSoftmaxLike(node, &Importer::softmaxLastAxis);
  }
  Status importLogSoftmax(const Node &node) {
    return importSoftmaxLike(node, &Importer::logSoftmaxLastAxis);
  }
  /// The node's `axis` attribute (default `fallback`) normalized into
  /// [0, rank of `shape`); InvalidArgument naming it otherwise.
  Expected<int64_t> axisOf(const Node &node, int64_t fallback, const Shape &shape);
  /// `axis` in [-rank, rank) normalized into [0, rank); InvalidArgument
  /// naming it otherwise.
  Expected<int64_t> rankAxis(const Node &node, int64_t axis, int64_t rank) const;
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
  /// Small half constants as float32 (in folded_), by their source tensor:
  /// IR constants wherever a widened node reads them.
  std::map<const TensorData *, const TensorData *> widened_;
  std::set<const TensorData *> widenedCopies_;
  /// Each widened node's rounded (half) result -> its float32 value.
  llvm::DenseMap<Value, Value> unrounded_;
  /// The i8 values that hold uint8.
  llvm::DenseSet<Value> unsignedBytes_;
  /// A DequantizeLinear's result -> its bytes, scale ([1], or [n] per
  /// column) and zero point (null, or as the scale, of the bytes' type).
  struct Dequantized {
    Value bytes, scale, zero;
    /// The axis the scale runs along (a matrix's 0 or 1, a convolution
    /// weight's 0); -1: one scale.
    int64_t axis = -1;
    /// The zero points' values when they are constants (0 when absent).
    std::optional<std::vector<int64_t>> zeros;
    /// The bytes' initializer, when they are one.
    const TensorData *constant = nullptr;
  };
  llvm::DenseMap<Value, Dequantized> dequantized_;
  std::map<std::string, int> opCounts_;
  std::vector<NodeRecord> records_;
  /// Run-time checks (KernelAbi.h, kChecksSymbol): a bool [1] value that is
  /// true when the check failed, and what the run's error then says.
  /// Returned after the graph's outputs.
  std::vector<std::pair<Value, std::string>> checks_;
  std::set<std::string> initializerNames_;
  /// The graph's inputs: a run-time value, even where an initializer of the
  /// same name gives a default.
  std::set<std::string> graphInputNames_;
  /// Uint8 weights folded as int8 (signedWeight), by name.
  std::set<std::string> signedWeights_;
  /// Library-kernel functions the importer made, for their names.
  int libraryFunctions_ = 0;
  /// Initializers already counted as some node's parameters.
  std::set<std::string> countedParameters_;
  /// Bytes that constants computed at import may take, and have taken.
  uint64_t foldLimit_ = 0;
  uint64_t foldedBytes_ = 0;

  NodeRecord recordOf(const Node &node);
  TensorInfo describeValue(const std::string &name) const;
};

} // namespace flowc::compiler::import
