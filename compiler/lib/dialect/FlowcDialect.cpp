#include "flowc/compiler/dialect/FlowcDialect.h"
#include "flowc/runtime/KernelAbi.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/Operation.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>

namespace flowc::compiler {

namespace {

/// One field of a kernel's params struct, as the IR spells it: the
/// struct's field name, its word, and whether the word holds floatParam
/// bits (printed as the float).
struct ParamField {
  const char *name;
  size_t offset;
  bool isFloat;
};

#define FLOWC_INT_FIELD(Params, field)                                                   \
  ParamField { #field, offsetof(runtime::Params, field), false }
#define FLOWC_FLOAT_FIELD(Params, field)                                                 \
  ParamField { #field, offsetof(runtime::Params, field), true }

constexpr std::array kConv2dFields = {
    FLOWC_INT_FIELD(Conv2dParams, batch),
    FLOWC_INT_FIELD(Conv2dParams, inChannels),
    FLOWC_INT_FIELD(Conv2dParams, inHeight),
    FLOWC_INT_FIELD(Conv2dParams, inWidth),
    FLOWC_INT_FIELD(Conv2dParams, outChannels),
    FLOWC_INT_FIELD(Conv2dParams, kernelHeight),
    FLOWC_INT_FIELD(Conv2dParams, kernelWidth),
    FLOWC_INT_FIELD(Conv2dParams, outHeight),
    FLOWC_INT_FIELD(Conv2dParams, outWidth),
    FLOWC_INT_FIELD(Conv2dParams, strideH),
    FLOWC_INT_FIELD(Conv2dParams, strideW),
    FLOWC_INT_FIELD(Conv2dParams, dilationH),
    FLOWC_INT_FIELD(Conv2dParams, dilationW),
    FLOWC_INT_FIELD(Conv2dParams, padTop),
    FLOWC_INT_FIELD(Conv2dParams, padLeft),
    FLOWC_INT_FIELD(Conv2dParams, padBottom),
    FLOWC_INT_FIELD(Conv2dParams, padRight),
    FLOWC_INT_FIELD(Conv2dParams, groups),
    FLOWC_INT_FIELD(Conv2dParams, sourceLayout),
    FLOWC_INT_FIELD(Conv2dParams, weightLayout),
    FLOWC_INT_FIELD(Conv2dParams, destinationLayout),
    FLOWC_INT_FIELD(Conv2dParams, constantWeights),
    FLOWC_INT_FIELD(Conv2dParams, hasResidual),
    FLOWC_INT_FIELD(Conv2dParams, activation),
    FLOWC_FLOAT_FIELD(Conv2dParams, alpha),
    FLOWC_FLOAT_FIELD(Conv2dParams, beta),
    FLOWC_INT_FIELD(Conv2dParams, precision),
    FLOWC_INT_FIELD(Conv2dParams, sixteenBitSource),
    FLOWC_INT_FIELD(Conv2dParams, sixteenBitResidual),
    FLOWC_INT_FIELD(Conv2dParams, sixteenBitDestination),
};
constexpr std::array kMatMulFields = {
    FLOWC_INT_FIELD(MatMulParams, batch),
    FLOWC_INT_FIELD(MatMulParams, m),
    FLOWC_INT_FIELD(MatMulParams, n),
    FLOWC_INT_FIELD(MatMulParams, k),
    FLOWC_INT_FIELD(MatMulParams, transposedB),
    FLOWC_INT_FIELD(MatMulParams, constantB),
    FLOWC_INT_FIELD(MatMulParams, hasBias),
    FLOWC_INT_FIELD(MatMulParams, hasResidual),
    FLOWC_INT_FIELD(MatMulParams, activation),
    FLOWC_FLOAT_FIELD(MatMulParams, alpha),
    FLOWC_FLOAT_FIELD(MatMulParams, beta),
    FLOWC_INT_FIELD(MatMulParams, precision),
    FLOWC_FLOAT_FIELD(MatMulParams, scale),
    FLOWC_INT_FIELD(MatMulParams, hasMask),
    FLOWC_INT_FIELD(MatMulParams, maskRows),
    FLOWC_INT_FIELD(MatMulParams, maskColumns),
};
constexpr std::array kPool2dFields = {
    FLOWC_INT_FIELD(Pool2dParams, batch),
    FLOWC_INT_FIELD(Pool2dParams, channels),
    FLOWC_INT_FIELD(Pool2dParams, inHeight),
    FLOWC_INT_FIELD(Pool2dParams, inWidth),
    FLOWC_INT_FIELD(Pool2dParams, outHeight),
    FLOWC_INT_FIELD(Pool2dParams, outWidth),
    FLOWC_INT_FIELD(Pool2dParams, kernelHeight),
    FLOWC_INT_FIELD(Pool2dParams, kernelWidth),
    FLOWC_INT_FIELD(Pool2dParams, strideH),
    FLOWC_INT_FIELD(Pool2dParams, strideW),
    FLOWC_INT_FIELD(Pool2dParams, padTop),
    FLOWC_INT_FIELD(Pool2dParams, padLeft),
    FLOWC_INT_FIELD(Pool2dParams, padBottom),
    FLOWC_INT_FIELD(Pool2dParams, padRight),
    FLOWC_INT_FIELD(Pool2dParams, algorithm),
    FLOWC_INT_FIELD(Pool2dParams, sourceLayout),
    FLOWC_INT_FIELD(Pool2dParams, destinationLayout),
};
constexpr std::array kSoftmaxFields = {
    FLOWC_INT_FIELD(SoftmaxParams, rows),
    FLOWC_INT_FIELD(SoftmaxParams, channels),
};
constexpr std::array kLayerNormFields = {
    FLOWC_INT_FIELD(LayerNormParams, rows),
    FLOWC_INT_FIELD(LayerNormParams, channels),
    FLOWC_FLOAT_FIELD(LayerNormParams, epsilon),
    FLOWC_INT_FIELD(LayerNormParams, hasScale),
    FLOWC_INT_FIELD(LayerNormParams, hasShift),
};
constexpr std::array kTopKFields = {
    FLOWC_INT_FIELD(TopKParams, rows),    FLOWC_INT_FIELD(TopKParams, n),
    FLOWC_INT_FIELD(TopKParams, k),       FLOWC_INT_FIELD(TopKParams, largest),
    FLOWC_INT_FIELD(TopKParams, keyType),
};
constexpr std::array kScatterRowsFields = {
    FLOWC_INT_FIELD(ScatterRowsParams, rows),
    FLOWC_INT_FIELD(ScatterRowsParams, width),
    FLOWC_INT_FIELD(ScatterRowsParams, count),
    FLOWC_INT_FIELD(ScatterRowsParams, reduction),
    FLOWC_INT_FIELD(ScatterRowsParams, type),
};
constexpr std::array kIntegerMatMulFields = {
    FLOWC_INT_FIELD(IntegerMatMulParams, m),
    FLOWC_INT_FIELD(IntegerMatMulParams, n),
    FLOWC_INT_FIELD(IntegerMatMulParams, k),
    FLOWC_INT_FIELD(IntegerMatMulParams, transposedB),
    FLOWC_INT_FIELD(IntegerMatMulParams, constantB),
    FLOWC_INT_FIELD(IntegerMatMulParams, unsignedA),
    FLOWC_INT_FIELD(IntegerMatMulParams, unsignedB),
    FLOWC_INT_FIELD(IntegerMatMulParams, hasZeroA),
    FLOWC_INT_FIELD(IntegerMatMulParams, zerosB),
};
constexpr std::array kIntegerConv2dFields = {
    FLOWC_INT_FIELD(IntegerConv2dParams, batch),
    FLOWC_INT_FIELD(IntegerConv2dParams, inChannels),
    FLOWC_INT_FIELD(IntegerConv2dParams, inHeight),
    FLOWC_INT_FIELD(IntegerConv2dParams, inWidth),
    FLOWC_INT_FIELD(IntegerConv2dParams, outChannels),
    FLOWC_INT_FIELD(IntegerConv2dParams, kernelHeight),
    FLOWC_INT_FIELD(IntegerConv2dParams, kernelWidth),
    FLOWC_INT_FIELD(IntegerConv2dParams, outHeight),
    FLOWC_INT_FIELD(IntegerConv2dParams, outWidth),
    FLOWC_INT_FIELD(IntegerConv2dParams, strideH),
    FLOWC_INT_FIELD(IntegerConv2dParams, strideW),
    FLOWC_INT_FIELD(IntegerConv2dParams, dilationH),
    FLOWC_INT_FIELD(IntegerConv2dParams, dilationW),
    FLOWC_INT_FIELD(IntegerConv2dParams, padTop),
    FLOWC_INT_FIELD(IntegerConv2dParams, padLeft),
    FLOWC_INT_FIELD(IntegerConv2dParams, padBottom),
    FLOWC_INT_FIELD(IntegerConv2dParams, padRight),
    FLOWC_INT_FIELD(IntegerConv2dParams, groups),
    FLOWC_INT_FIELD(IntegerConv2dParams, sourceLayout),
    FLOWC_INT_FIELD(IntegerConv2dParams, weightLayout),
    FLOWC_INT_FIELD(IntegerConv2dParams, destinationLayout),
    FLOWC_INT_FIELD(IntegerConv2dParams, constantWeights),
    FLOWC_INT_FIELD(IntegerConv2dParams, zeroSource),
};

#undef FLOWC_INT_FIELD
#undef FLOWC_FLOAT_FIELD

/// Every word of `Params`, once and in order: the IR's names are the
/// struct's, so adding a field without naming it here does not compile.
template <typename Params, size_t N>
constexpr bool namesEveryWord(const std::array<ParamField, N> &fields) {
  if (N * sizeof(int64_t) != sizeof(Params))
    return false;
  for (size_t i = 0; i < N; ++i)
    if (fields[i].offset != i * sizeof(int64_t))
      return false;
  return true;
}
static_assert(namesEveryWord<runtime::Conv2dParams>(kConv2dFields));
static_assert(namesEveryWord<runtime::MatMulParams>(kMatMulFields));
static_assert(namesEveryWord<runtime::Pool2dParams>(kPool2dFields));
static_assert(namesEveryWord<runtime::SoftmaxParams>(kSoftmaxFields));
static_assert(namesEveryWord<runtime::LayerNormParams>(kLayerNormFields));
static_assert(namesEveryWord<runtime::TopKParams>(kTopKFields));
static_assert(namesEveryWord<runtime::ScatterRowsParams>(kScatterRowsFields));
static_assert(namesEveryWord<runtime::IntegerMatMulParams>(kIntegerMatMulFields));
static_assert(namesEveryWord<runtime::IntegerConv2dParams>(kIntegerConv2dFields));

/// The fields of `kind`'s params struct, in word order.
llvm::ArrayRef<ParamField> paramFields(runtime::KernelKind kind) {
  switch (kind) {
  case runtime::KernelKind::Conv2d:
    return kConv2dFields;
  case runtime::KernelKind::MatMul:
    return kMatMulFields;
  case runtime::KernelKind::Pool2d:
    return kPool2dFields;
  case runtime::KernelKind::Softmax:
    return kSoftmaxFields;
  case runtime::KernelKind::LayerNorm:
    return kLayerNormFields;
  case runtime::KernelKind::TopK:
    return kTopKFields;
  case runtime::KernelKind::ScatterRows:
    return kScatterRowsFields;
  case runtime::KernelKind::IntegerMatMul:
    return kIntegerMatMulFields;
  case runtime::KernelKind::IntegerConv2d:
    return kIntegerConv2dFields;
  }
  return {};
}

/// How many int64 words the params struct of `kind` has.
size_t paramWordCount(runtime::KernelKind kind) { return paramFields(kind).size(); }

} // namespace

/// `<batch = 1, inChannels = 8, ..., alpha = 0.0, ...>`: every field of
/// the kind's struct, by name and in order.
static mlir::ParseResult parseKernelParams(mlir::OpAsmParser &parser,
                                           LibraryKernelKindAttr kind,
                                           mlir::DenseI64ArrayAttr &params) {
  llvm::ArrayRef<ParamField> fields =
      paramFields(static_cast<runtime::KernelKind>(kind.getValue()));
  llvm::SmallVector<int64_t> words;
  auto parseField = [&]() -> mlir::ParseResult {
    llvm::SMLoc at = parser.getCurrentLocation();
    llvm::StringRef name;
    if (parser.parseKeyword(&name) || parser.parseEqual())
      return mlir::failure();
    if (words.size() >= fields.size())
      return parser.emitError(at)
             << "a " << stringifyLibraryKernelKind(kind.getValue()) << " kernel has "
             << fields.size() << " params; '" << name << "' is one too many";
    const ParamField &field = fields[words.size()];
    if (name != field.name)
      return parser.emitError(at) << "expected param '" << field.name << "' of a "
                                  << stringifyLibraryKernelKind(kind.getValue())
                                  << " kernel, got '" << name << "'";
    if (field.isFloat) {
      llvm::APFloat value(0.0f);
      if (parser.parseFloat(llvm::APFloat::IEEEsingle(), value))
        return mlir::failure();
      words.push_back(runtime::floatParam(value.convertToFloat()));
      return mlir::success();
    }
    int64_t value = 0;
    if (parser.parseInteger(value))
      return mlir::failure();
    words.push_back(value);
    return mlir::success();
  };
  if (parser.parseCommaSeparatedList(mlir::AsmParser::Delimiter::LessGreater, parseField))
    return mlir::failure();
  if (words.size() != fields.size())
    return parser.emitError(parser.getCurrentLocation())
           << "a " << stringifyLibraryKernelKind(kind.getValue()) << " kernel has "
           << fields.size() << " params, got " << words.size();
  params = mlir::DenseI64ArrayAttr::get(parser.getContext(), words);
  return mlir::success();
}

static void printKernelParams(mlir::OpAsmPrinter &printer, LibraryCallOp,
                              LibraryKernelKindAttr kind,
                              mlir::DenseI64ArrayAttr params) {
  llvm::ArrayRef<ParamField> fields =
      paramFields(static_cast<runtime::KernelKind>(kind.getValue()));
  llvm::ArrayRef<int64_t> words = params.asArrayRef();
  // The verifier refuses a call whose words are not the struct; print
  // such IR (in diagnostics) as plain words.
  if (words.size() != fields.size()) {
    printer << "<words " << words << ">";
    return;
  }
  printer << "<";
  for (size_t i = 0; i < fields.size(); ++i) {
    printer << (i ? ", " : "") << fields[i].name << " = ";
    if (fields[i].isFloat)
      printer.printFloat(llvm::APFloat(runtime::paramFloat(words[i])));
    else
      printer << words[i];
  }
  printer << ">";
}

} // namespace flowc::compiler

#include "flowc/compiler/dialect/FlowcDialect.cpp.inc"
#include "flowc/compiler/dialect/FlowcEnums.cpp.inc"

#define GET_OP_CLASSES
#include "flowc/compiler/dialect/FlowcOps.cpp.inc"

namespace flowc::compiler {

namespace {

std::string kernelKindNames() {
  std::string names;
  for (int64_t index = 0; index < runtime::kKernelKindCount; ++index)
    names +=
        (index ? ", " : "") +
        std::string(runtime::kernelKindName(static_cast<runtime::KernelKind>(index)));
  return names;
}

/// `flowc.kernel_params` of `op` against its `flowc.kernel`, which the
/// caller checked names a kind.
mlir::LogicalResult verifyKernelParams(mlir::Operation *op,
                                       mlir::DenseI64ArrayAttr params,
                                       runtime::KernelKind kind) {
  size_t expected = paramWordCount(kind);
  if (static_cast<size_t>(params.size()) == expected)
    return mlir::success();
  return op->emitOpError() << "attribute 'flowc.kernel_params' has " << params.size()
                           << " words, but a " << runtime::kernelKindName(kind)
                           << " kernel's parameters are " << expected;
}

} // namespace

// The op's kinds are the runtime's.
static_assert(static_cast<int64_t>(LibraryKernelKind::Conv2d) ==
                  static_cast<int64_t>(runtime::KernelKind::Conv2d) &&
              static_cast<int64_t>(LibraryKernelKind::MatMul) ==
                  static_cast<int64_t>(runtime::KernelKind::MatMul) &&
              static_cast<int64_t>(LibraryKernelKind::Pool2d) ==
                  static_cast<int64_t>(runtime::KernelKind::Pool2d) &&
              static_cast<int64_t>(LibraryKernelKind::Softmax) ==
                  static_cast<int64_t>(runtime::KernelKind::Softmax) &&
              static_cast<int64_t>(LibraryKernelKind::LayerNorm) ==
                  static_cast<int64_t>(runtime::KernelKind::LayerNorm) &&
              static_cast<int64_t>(LibraryKernelKind::TopK) ==
                  static_cast<int64_t>(runtime::KernelKind::TopK) &&
              static_cast<int64_t>(LibraryKernelKind::ScatterRows) ==
                  static_cast<int64_t>(runtime::KernelKind::ScatterRows) &&
              static_cast<int64_t>(LibraryKernelKind::IntegerMatMul) ==
                  static_cast<int64_t>(runtime::KernelKind::IntegerMatMul) &&
              static_cast<int64_t>(LibraryKernelKind::IntegerConv2d) ==
                  static_cast<int64_t>(runtime::KernelKind::IntegerConv2d) &&
              runtime::kKernelKindCount == 9);

void FlowcDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "flowc/compiler/dialect/FlowcOps.cpp.inc"
      >();
}

namespace {

/// The inputs a kernel of these params reads (KernelAbi.h's buffer orders,
/// less the destination), or a diagnostic if the words are no such params.
std::optional<size_t> expectedInputs(LibraryCallOp call) {
  llvm::ArrayRef<int64_t> words = call.getParams();
  switch (call.getKind()) {
  case LibraryKernelKind::Conv2d:
    if (auto p = runtime::paramsFromWords<runtime::Conv2dParams>(words))
      return 3 + (p->hasResidual != 0);
    break;
  case LibraryKernelKind::MatMul:
    if (auto p = runtime::paramsFromWords<runtime::MatMulParams>(words))
      return 2 + (p->hasBias != 0) + (p->hasResidual != 0) + (p->hasMask != 0);
    break;
  case LibraryKernelKind::Pool2d:
    if (runtime::paramsFromWords<runtime::Pool2dParams>(words))
      return 1;
    break;
  case LibraryKernelKind::Softmax:
    if (runtime::paramsFromWords<runtime::SoftmaxParams>(words))
      return 1;
    break;
  case LibraryKernelKind::LayerNorm:
    if (auto p = runtime::paramsFromWords<runtime::LayerNormParams>(words))
      return 1 + (p->hasScale != 0) + (p->hasShift != 0);
    break;
  case LibraryKernelKind::TopK:
    if (runtime::paramsFromWords<runtime::TopKParams>(words))
      return 1;
    break;
  case LibraryKernelKind::ScatterRows:
    if (runtime::paramsFromWords<runtime::ScatterRowsParams>(words))
      return 3;
    break;
  case LibraryKernelKind::IntegerMatMul:
    if (auto p = runtime::paramsFromWords<runtime::IntegerMatMulParams>(words))
      return 2 + (p->hasZeroA != 0) + (p->zerosB != 0);
    break;
  case LibraryKernelKind::IntegerConv2d:
    if (runtime::paramsFromWords<runtime::IntegerConv2dParams>(words))
      return 2;
    break;
  }
  return std::nullopt;
}

/// The rank the kind's first input (the source, or A) and result have; 0
/// for any.
int64_t sourceRank(LibraryKernelKind kind) {
  switch (kind) {
  case LibraryKernelKind::Conv2d:
  case LibraryKernelKind::Pool2d:
  case LibraryKernelKind::IntegerConv2d:
    return 4;
  case LibraryKernelKind::MatMul:
    return 3;
  case LibraryKernelKind::TopK:
  case LibraryKernelKind::ScatterRows:
  case LibraryKernelKind::IntegerMatMul:
    return 2;
  case LibraryKernelKind::Softmax:
  case LibraryKernelKind::LayerNorm:
    return 0;
  }
  return 0;
}

/// TopK's key and index tensors against its params: the kernel reads and
/// writes exactly those extents.
mlir::LogicalResult verifyTopK(LibraryCallOp call) {
  auto p = *runtime::paramsFromWords<runtime::TopKParams>(call.getParams());
  auto keys = mlir::cast<mlir::RankedTensorType>(call.getInputs()[0].getType());
  auto indices = mlir::cast<mlir::RankedTensorType>(call.getResult().getType());
  if (scalarTypeOf(keys.getElementType()) != p.keyType)
    return call.emitOpError() << "keys " << keys << " do not have the params' key type "
                              << static_cast<int64_t>(p.keyType);
  if (keys.getShape() != llvm::ArrayRef<int64_t>{p.rows, p.n} ||
      indices.getShape() != llvm::ArrayRef<int64_t>{p.rows, p.k} ||
      !indices.getElementType().isInteger(32) || p.k < 1 || p.k > p.n)
    return call.emitOpError() << "a topk of k = " << p.k << " over [" << p.rows << ", "
                              << p.n << "] maps keys of that shape to i32 indices ["
                              << p.rows << ", k], 1 <= k <= n; got " << keys << " -> "
                              << indices;
  return mlir::success();
}

/// A row scatter's data, updates, targets and result against its params.
mlir::LogicalResult verifyScatterRows(LibraryCallOp call) {
  auto p = *runtime::paramsFromWords<runtime::ScatterRowsParams>(call.getParams());
  auto typeOf = [&](mlir::Value value) {
    return mlir::cast<mlir::RankedTensorType>(value.getType());
  };
  mlir::RankedTensorType data = typeOf(call.getInputs()[0]),
                         updates = typeOf(call.getInputs()[1]),
                         targets = typeOf(call.getInputs()[2]);
  bool fits = scalarTypeOf(data.getElementType()) == p.type &&
              updates.getElementType() == data.getElementType() &&
              data.getShape() == llvm::ArrayRef<int64_t>{p.rows, p.width} &&
              updates.getShape() == llvm::ArrayRef<int64_t>{p.count, p.width} &&
              targets.getShape() == llvm::ArrayRef<int64_t>{1, p.count} &&
              targets.getElementType().isInteger(32) &&
              call.getResult().getType() == data &&
              static_cast<uint64_t>(p.reduction) <= 4;
  if (fits)
    return mlir::success();
  return call.emitOpError()
         << "a scatter of " << p.count << " rows of " << p.width << " into " << p.rows
         << " (type " << static_cast<int64_t>(p.type) << ", reduction "
         << static_cast<int64_t>(p.reduction)
         << ") takes data [rows, width], updates [count, width] of the "
            "same type and i32 targets [1, count], and gives the data's "
            "type; got "
         << data << ", " << updates << ", " << targets << " -> "
         << call.getResult().getType();
}

/// An integer product's byte matrices, zero points and int32 result
/// against its params.
mlir::LogicalResult verifyIntegerMatMul(LibraryCallOp call) {
  auto p = *runtime::paramsFromWords<runtime::IntegerMatMulParams>(call.getParams());
  auto typeOf = [&](mlir::Value value) {
    return mlir::cast<mlir::RankedTensorType>(value.getType());
  };
  auto isBytes = [&](mlir::Value value, llvm::ArrayRef<int64_t> shape) {
    mlir::RankedTensorType type = typeOf(value);
    return type.getElementType().isInteger(8) && type.getShape() == shape;
  };
  mlir::ValueRange inputs = call.getInputs();
  mlir::RankedTensorType result = typeOf(call.getResult());
  bool fits = p.m > 0 && p.n > 0 && p.k > 0 &&
              (p.zerosB == 0 || p.zerosB == 1 || p.zerosB == p.n) &&
              isBytes(inputs[0], {p.m, p.k}) &&
              isBytes(inputs[1], p.transposedB ? llvm::ArrayRef<int64_t>{p.n, p.k}
                                               : llvm::ArrayRef<int64_t>{p.k, p.n}) &&
              (!p.hasZeroA || isBytes(inputs[2], {1})) &&
              (!p.zerosB || isBytes(inputs.back(), {p.zerosB})) &&
              result.getElementType().isInteger(32) &&
              result.getShape() == llvm::ArrayRef<int64_t>{p.m, p.n};
  if (fits)
    return mlir::success();
  return call.emitOpError()
         << "an integer matmul of [" << p.m << ", " << p.k << "] x [" << p.k << ", "
         << p.n
         << "] takes i8 matrices of those shapes (B [n, k] when "
            "transposed), i8 zero points [1] and [1] or [n], and gives "
            "i32 [m, n]; got "
         << call.getInputs().getTypes() << " -> " << result;
}

/// `dims` ([N, C, H, W]) in `layout`'s order.
llvm::SmallVector<int64_t> inLayout(std::array<int64_t, 4> dims,
                                    runtime::ActivationLayout layout) {
  if (layout == runtime::ActivationLayout::Nhwc)
    return {dims[0], dims[2], dims[3], dims[1]};
  return {dims[0], dims[1], dims[2], dims[3]};
}

/// An integer convolution's weights' shape in the params' layout.
llvm::SmallVector<int64_t> integerConvWeightShape(const runtime::IntegerConv2dParams &p) {
  int64_t in = p.inChannels / std::max<int64_t>(p.groups, 1);
  switch (p.weightLayout) {
  case runtime::ConvWeightLayout::Ohwi:
    return {p.outChannels, p.kernelHeight, p.kernelWidth, in};
  case runtime::ConvWeightLayout::Hwcm:
    return {p.kernelHeight, p.kernelWidth, p.groups,
            p.outChannels / std::max<int64_t>(p.groups, 1)};
  case runtime::ConvWeightLayout::Oihw:
    break;
  }
  return {p.outChannels, in, p.kernelHeight, p.kernelWidth};
}

/// An integer convolution's i8 source and weights and i32 result against
/// its params: groups 1 or depthwise, each buffer of the params' extents in
/// its layout, the zero point a byte.
mlir::LogicalResult verifyIntegerConv2d(LibraryCallOp call) {
  auto p = *runtime::paramsFromWords<runtime::IntegerConv2dParams>(call.getParams());
  auto hasType = [&](mlir::Value value, llvm::ArrayRef<int64_t> shape, unsigned bits) {
    auto type = mlir::cast<mlir::RankedTensorType>(value.getType());
    return type.getElementType().isInteger(bits) && type.getShape() == shape;
  };
  bool depthwise =
      p.groups == p.inChannels && p.groups > 1 && p.outChannels % p.groups == 0;
  bool layouts = static_cast<uint64_t>(p.sourceLayout) <= 1 &&
                 static_cast<uint64_t>(p.destinationLayout) <= 1 &&
                 static_cast<uint64_t>(p.weightLayout) <= 2 &&
                 (p.weightLayout != runtime::ConvWeightLayout::Hwcm || depthwise) &&
                 (p.weightLayout != runtime::ConvWeightLayout::Ohwi || p.groups == 1);
  bool positive = p.batch > 0 && p.inChannels > 0 && p.inHeight > 0 && p.inWidth > 0 &&
                  p.outChannels > 0 && p.kernelHeight > 0 && p.kernelWidth > 0 &&
                  p.outHeight > 0 && p.outWidth > 0 && p.strideH > 0 && p.strideW > 0 &&
                  p.dilationH > 0 && p.dilationW > 0 && p.padTop >= 0 && p.padLeft >= 0 &&
                  p.padBottom >= 0 && p.padRight >= 0;
  bool fits =
      positive && layouts && (p.groups == 1 || depthwise) && p.zeroSource >= -128 &&
      p.zeroSource <= 127 &&
      hasType(call.getInputs()[0],
              inLayout({p.batch, p.inChannels, p.inHeight, p.inWidth}, p.sourceLayout),
              8) &&
      hasType(call.getInputs()[1], integerConvWeightShape(p), 8) &&
      hasType(call.getResult(),
              inLayout({p.batch, p.outChannels, p.outHeight, p.outWidth},
                       p.destinationLayout),
              32);
  if (fits)
    return mlir::success();
  return call.emitOpError()
         << "an integer conv2d of " << p.inChannels << " to " << p.outChannels
         << " channels (groups " << p.groups << ", zero point " << p.zeroSource
         << ") takes an i8 source and i8 weights of the params' extents in their "
            "layouts, groups 1 or one per channel, and gives i32; got "
         << call.getInputs().getTypes() << " -> " << call.getResult().getType();
}

} // namespace

std::optional<runtime::ScalarType> scalarTypeOf(mlir::Type element) {
  if (element.isF32())
    return runtime::ScalarType::F32;
  if (element.isInteger(32))
    return runtime::ScalarType::I32;
  if (element.isInteger(64))
    return runtime::ScalarType::I64;
  return std::nullopt;
}

mlir::LogicalResult LibraryCallOp::verify() {
  auto kind = static_cast<runtime::KernelKind>(getKind());
  if (static_cast<size_t>(getParams().size()) != paramWordCount(kind))
    return emitOpError() << "params have " << getParams().size() << " words, but a "
                         << stringifyLibraryKernelKind(getKind())
                         << " kernel's parameters are " << paramWordCount(kind);
  std::optional<size_t> inputs = expectedInputs(*this);
  if (inputs && getInputs().size() != *inputs)
    return emitOpError() << "has " << getInputs().size() << " inputs, but its "
                         << stringifyLibraryKernelKind(getKind()) << " params ask for "
                         << *inputs;
  if (int64_t rank = sourceRank(getKind());
      rank && !getInputs().empty() &&
      mlir::cast<mlir::RankedTensorType>(getInputs()[0].getType()).getRank() != rank)
    return emitOpError() << "input 0 of a " << stringifyLibraryKernelKind(getKind())
                         << " kernel must have rank " << rank << ", got "
                         << getInputs()[0].getType();
  if (getKind() == LibraryKernelKind::TopK)
    return verifyTopK(*this);
  if (getKind() == LibraryKernelKind::ScatterRows)
    return verifyScatterRows(*this);
  if (getKind() == LibraryKernelKind::IntegerMatMul)
    return verifyIntegerMatMul(*this);
  if (getKind() == LibraryKernelKind::IntegerConv2d)
    return verifyIntegerConv2d(*this);
  return mlir::success();
}

mlir::LogicalResult
LibraryCallOp::verifySymbolUses(mlir::SymbolTableCollection &symbolTable) {
  auto callee =
      symbolTable.lookupNearestSymbolFrom<mlir::func::FuncOp>(*this, getCalleeAttr());
  if (!callee)
    return emitOpError() << "calls " << getCalleeAttr() << ", which is no function";
  mlir::FunctionType type = callee.getFunctionType();
  if (type.getInputs() != getInputs().getTypes() ||
      type.getResults() != mlir::TypeRange(getResult().getType()))
    return emitOpError() << "has type "
                         << mlir::FunctionType::get(getContext(), getInputs().getTypes(),
                                                    getResult().getType())
                         << ", but " << getCalleeAttr() << " has type " << type;
  return mlir::success();
}

mlir::LogicalResult
FlowcDialect::verifyOperationAttribute(mlir::Operation *op,
                                       mlir::NamedAttribute attribute) {
  llvm::StringRef name = attribute.getName().getValue();
  mlir::Attribute value = attribute.getValue();
  auto wrongType = [&](llvm::StringRef expected) {
    return op->emitOpError() << "attribute '" << name << "' must be " << expected
                             << ", got " << value;
  };
  if (name == KernelAttrHelper::getNameStr()) {
    auto kind = mlir::dyn_cast<mlir::StringAttr>(value);
    if (!kind)
      return wrongType("a string");
    std::optional<LibraryKernelKind> known = symbolizeLibraryKernelKind(kind.getValue());
    if (!known)
      return op->emitOpError() << "attribute '" << name
                               << "' names no library kernel: " << value
                               << " (kinds: " << kernelKindNames() << ")";
    auto params = op->getAttr(KernelParamsAttrHelper::getNameStr());
    if (!params)
      return op->emitOpError() << "has attribute '" << name << "' but no '"
                               << KernelParamsAttrHelper::getNameStr() << "'";
    auto words = mlir::dyn_cast<mlir::DenseI64ArrayAttr>(params);
    // A wrong type is reported when the params attribute is visited.
    return words ? verifyKernelParams(op, words, static_cast<runtime::KernelKind>(*known))
                 : mlir::success();
  }
  if (name == KernelParamsAttrHelper::getNameStr()) {
    if (!mlir::isa<mlir::DenseI64ArrayAttr>(value))
      return wrongType("an array<i64>");
    if (!op->hasAttr(KernelAttrHelper::getNameStr()))
      return op->emitOpError() << "has attribute '" << name << "' but no '"
                               << KernelAttrHelper::getNameStr() << "'";
    return mlir::success();
  }
  if (name == LoopKernelAttrHelper::getNameStr() ||
      name == ParallelAttrHelper::getNameStr())
    return mlir::isa<mlir::UnitAttr>(value) ? mlir::success()
                                            : wrongType("a unit attribute");
  if (name == ArenaBytesAttrHelper::getNameStr()) {
    auto bytes = mlir::dyn_cast<mlir::IntegerAttr>(value);
    if (!bytes)
      return wrongType("an integer");
    if (bytes.getValue().isNegative())
      return op->emitOpError() << "attribute '" << name << "' is negative: " << value;
    return mlir::success();
  }
  if (name == ChecksAttrHelper::getNameStr()) {
    auto messages = mlir::dyn_cast<mlir::ArrayAttr>(value);
    if (!messages || !llvm::all_of(messages, llvm::IsaPred<mlir::StringAttr>))
      return wrongType("an array of strings");
    return mlir::success();
  }
  if (name == WeightAttrHelper::getNameStr() || name == RecipeAttrHelper::getNameStr() ||
      name == RecipeInputsAttrHelper::getNameStr() ||
      name == UnsignedAttrHelper::getNameStr())
    return op->emitOpError() << "attribute '" << name
                             << "' belongs on a function argument, not on an op";
  return op->emitOpError() << "has unknown flowc attribute '" << name << "'";
}

/// `flowc.unsigned` is a unit attribute. The type it marks is i8 until
/// lowering makes buffers pointers; readGraphSignature checks it.
static mlir::LogicalResult verifyUnsigned(mlir::Operation *op, llvm::StringRef what,
                                          unsigned index,
                                          mlir::NamedAttribute attribute) {
  if (mlir::isa<mlir::UnitAttr>(attribute.getValue()))
    return mlir::success();
  return op->emitOpError() << what << " " << index << ": attribute '"
                           << attribute.getName().getValue()
                           << "' must be a unit attribute";
}

mlir::LogicalResult
FlowcDialect::verifyRegionArgAttribute(mlir::Operation *op, unsigned region,
                                       unsigned argument,
                                       mlir::NamedAttribute attribute) {
  llvm::StringRef name = attribute.getName().getValue();
  mlir::Attribute value = attribute.getValue();
  auto fail = [&](llvm::StringRef problem) {
    return op->emitOpError() << "argument " << argument << " of region " << region
                             << ": attribute '" << name << "' " << problem << ", got "
                             << value;
  };
  if (name == WeightAttrHelper::getNameStr() || name == RecipeAttrHelper::getNameStr()) {
    auto text = mlir::dyn_cast<mlir::StringAttr>(value);
    if (!text || text.getValue().empty())
      return fail("must be a non-empty string");
    return mlir::success();
  }
  if (name == RecipeInputsAttrHelper::getNameStr()) {
    auto keys = mlir::dyn_cast<mlir::ArrayAttr>(value);
    if (!keys || !llvm::all_of(keys, [](mlir::Attribute key) {
          return mlir::isa<mlir::StringAttr>(key);
        }))
      return fail("must be an array of weight keys (strings)");
    return mlir::success();
  }
  if (name == UnsignedAttrHelper::getNameStr())
    return verifyUnsigned(op, "argument", argument, attribute);
  return op->emitOpError() << "argument " << argument << " of region " << region
                           << " has attribute '" << name
                           << "', which is not a flowc argument attribute";
}

mlir::LogicalResult
FlowcDialect::verifyRegionResultAttribute(mlir::Operation *op, unsigned, unsigned result,
                                          mlir::NamedAttribute attribute) {
  if (attribute.getName().getValue() == UnsignedAttrHelper::getNameStr())
    return verifyUnsigned(op, "result", result, attribute);
  return op->emitOpError() << "result " << result << " has attribute '"
                           << attribute.getName().getValue()
                           << "', which is not a flowc result attribute";
}

} // namespace flowc::compiler
