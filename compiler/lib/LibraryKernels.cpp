#include "LibraryKernels.h"
#include "MemoryPlan.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Pass/Pass.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/Module.h"

#include <cmath>
#include <map>
#include <limits>
#include <optional>

namespace flowc::compiler {

namespace {

using mlir::Operation;
using mlir::Value;
using runtime::Activation;
using runtime::KernelKind;

llvm::ArrayRef<int64_t> shapeOf(Value value) {
  return mlir::cast<mlir::ShapedType>(value.getType()).getShape();
}

bool isF32Tensor(Value value) {
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(value.getType());
  return type && type.hasStaticShape() && type.getElementType().isF32();
}

/// `value`'s producer if it is a transpose by exactly `perms`.
mlir::tosa::TransposeOp transposeBy(Value value, llvm::ArrayRef<int32_t> perms) {
  auto transpose = value.getDefiningOp<mlir::tosa::TransposeOp>();
  if (!transpose || transpose.getPermsAttr().asArrayRef() != perms)
    return {};
  return transpose;
}

/// A graph weight or constant, seen through layout changes: its buffer
/// never changes while a session lives, so the runtime packs it once.
bool isConstantOrigin(Value value) {
  while (Operation *op = value.getDefiningOp()) {
    if (op->hasTrait<mlir::OpTrait::ConstantLike>())
      return true;
    if (!mlir::isa<mlir::tosa::TransposeOp, mlir::tosa::ReshapeOp>(op))
      return false;
    value = op->getOperand(0);
  }
  auto arg = mlir::cast<mlir::BlockArgument>(value);
  auto function = mlir::dyn_cast<mlir::func::FuncOp>(arg.getOwner()->getParentOp());
  return function && function.getArgAttr(arg.getArgNumber(), "flowc.weight");
}

/// The only user of `value`, if it has exactly one use.
Operation *soleUser(Value value) {
  return value.hasOneUse() ? *value.getUsers().begin() : nullptr;
}

/// What a kernel computes after its main op, in order.
struct Epilogue {
  Value bias;
  Value residual;
  Activation activation = Activation::None;
  float alpha = 0, beta = 0;
};

/// A match ready to outline: the kernel's inputs (ABI order), the ops it
/// absorbs and the value it produces.
struct Candidate {
  KernelKind kind;
  llvm::SmallVector<Value> inputs;
  llvm::SmallVector<Operation *> ops;
  Value result;
  std::vector<int64_t> params;
};

/// The layout in which a kernel reads `source`, an NHWC operand of TOSA's:
/// NCHW when `source` is the importer's NCHW -> NHWC transpose, which the
/// candidate then absorbs (`source` becomes the transpose's input).
int64_t absorbSourceLayout(Candidate &candidate, Value &source) {
  auto transpose = transposeBy(source, {0, 2, 3, 1});
  if (!transpose)
    return static_cast<int64_t>(runtime::ActivationLayout::Nhwc);
  source = transpose.getInput1();
  candidate.ops.push_back(transpose);
  return static_cast<int64_t>(runtime::ActivationLayout::Nchw);
}

/// The importer crops rows and columns off the end of a convolution's NHWC
/// source that no window reaches (TOSA wants the windows to fit exactly:
/// ResNet's stride-2 1x1 convolutions read 55 of 56 rows). The kernel reads
/// the uncropped buffer instead, and the copy goes: `source` becomes the
/// slice's input when the crop only drops trailing rows / columns with no
/// padding after them, and the uncropped size gives the same output size.
void absorbSourceCrop(Candidate &candidate, Value &source, llvm::ArrayRef<int64_t> output,
                      llvm::ArrayRef<int64_t> kernel, llvm::ArrayRef<int64_t> stride,
                      llvm::ArrayRef<int64_t> dilation, llvm::ArrayRef<int64_t> pad) {
  auto slice = source.getDefiningOp<mlir::tosa::SliceOp>();
  if (!slice || !slice->hasOneUse() || !isF32Tensor(slice.getInput1()))
    return;
  auto start = slice.getStart().getDefiningOp<mlir::tosa::ConstShapeOp>();
  if (!start || !llvm::all_of(start.getValues().getValues<llvm::APInt>(),
                              [](const llvm::APInt &value) { return value.isZero(); }))
    return;
  llvm::ArrayRef<int64_t> full = shapeOf(slice.getInput1());
  llvm::ArrayRef<int64_t> cropped = shapeOf(source);
  if (full.size() != 4 || full[0] != cropped[0] || full[3] != cropped[3])
    return;
  for (int i = 0; i < 2; ++i) {
    if (full[1 + i] == cropped[1 + i])
      continue;
    // pad is TOSA's [top, bottom, left, right].
    int64_t span =
        full[1 + i] - 1 + pad[2 * i] + pad[2 * i + 1] - dilation[i] * (kernel[i] - 1);
    if (pad[2 * i + 1] != 0 || span < 0 || span / stride[i] + 1 != output[1 + i])
      return;
  }
  candidate.ops.push_back(slice);
  source = slice.getInput1();
}

/// The layout in which a kernel writes its NHWC result: NCHW when the
/// result's only user transposes it back, which the candidate then absorbs.
int64_t absorbDestinationLayout(Candidate &candidate) {
  auto back = mlir::dyn_cast_or_null<mlir::tosa::TransposeOp>(soleUser(candidate.result));
  if (!back || back.getPermsAttr().asArrayRef() != llvm::ArrayRef<int32_t>{0, 3, 1, 2})
    return static_cast<int64_t>(runtime::ActivationLayout::Nhwc);
  candidate.ops.push_back(back);
  candidate.result = back.getOutput();
  return static_cast<int64_t>(runtime::ActivationLayout::Nchw);
}

/// The other operand of a binary `add` whose one operand is `value`.
Value otherAddend(mlir::tosa::AddOp add, Value value) {
  if (add.getInput1() == value && add.getInput2() != value)
    return add.getInput2();
  if (add.getInput2() == value && add.getInput1() != value)
    return add.getInput1();
  return {};
}

/// `value`'s only other factor if `mul` multiplies it by something else.
Value otherFactor(Operation *op, Value value) {
  auto mul = mlir::dyn_cast_or_null<mlir::tosa::MulOp>(op);
  if (!mul)
    return {};
  if (mul.getInput1() == value && mul.getInput2() != value)
    return mul.getInput2();
  if (mul.getInput2() == value && mul.getInput1() != value)
    return mul.getInput1();
  return {};
}

/// The value of a splat f32 constant, if `value` is one.
std::optional<float> splatConstant(Value value) {
  mlir::DenseElementsAttr attr;
  if (!value || !mlir::matchPattern(value, mlir::m_Constant(&attr)) || !attr.isSplat() ||
      !attr.getElementType().isF32())
    return std::nullopt;
  return attr.getSplatValue<float>();
}

/// A multiplier of ~`expected`: a splat constant, or the reciprocal of one
/// (ONNX's Div by a constant imports as a product with its reciprocal).
bool isScale(Value value, float expected) {
  if (auto reciprocal =
          value ? value.getDefiningOp<mlir::tosa::ReciprocalOp>() : nullptr) {
    std::optional<float> divisor = splatConstant(reciprocal.getInput1());
    return divisor && std::abs(1.0f / *divisor - expected) <= 1e-6f * std::abs(expected);
  }
  std::optional<float> scale = splatConstant(value);
  return scale && std::abs(*scale - expected) <= 1e-6f * std::abs(expected);
}

/// GELU as exported from PyTorch: (x * (erf(x * 1/sqrt(2)) + 1)) * 0.5,
/// with `value` as x feeding exactly the scaling and the product.
bool matchGeluErf(Value value, llvm::SmallVector<Operation *> &ops) {
  llvm::SmallVector<Operation *> users(value.getUsers());
  if (users.size() != 2 || !value.hasNUses(2))
    return false;
  for (int order = 0; order < 2; ++order) {
    Operation *scale = users[order], *product = users[1 - order];
    if (!isScale(otherFactor(scale, value), static_cast<float>(M_SQRT1_2)) ||
        !scale->getResult(0).hasOneUse())
      continue;
    auto erf = mlir::dyn_cast<mlir::tosa::ErfOp>(soleUser(scale->getResult(0)));
    if (!erf || !erf.getOutput().hasOneUse())
      continue;
    auto add = mlir::dyn_cast<mlir::tosa::AddOp>(soleUser(erf.getOutput()));
    if (!add || !add.getOutput().hasOneUse() ||
        splatConstant(otherAddend(add, erf.getOutput())) != 1.0f)
      continue;
    if (soleUser(add.getOutput()) != product ||
        otherFactor(product, value) != add.getOutput() ||
        !product->getResult(0).hasOneUse())
      continue;
    Operation *half = soleUser(product->getResult(0));
    if (!isScale(otherFactor(half, product->getResult(0)), 0.5f))
      continue;
    ops = {scale, erf, add, product, half};
    // A reciprocal of a constant divisor is part of the kernel's formula.
    for (Operation *op : {scale, half})
      if (auto reciprocal = otherFactor(op, op == scale ? value : product->getResult(0))
                                .getDefiningOp<mlir::tosa::ReciprocalOp>())
        ops.insert(ops.begin(), reciprocal); // ops.back() stays the result
    return true;
  }
  return false;
}

/// GELU's tanh approximation as GPT-2 exports it, with `value` as x:
/// (x * 0.5) * (1 + tanh(0.7978846 * (x + 0.044715 * (x * x) * x))).
/// Constants must be plain splats (all of the formula moves into the kernel).
bool matchGeluTanh(Value value, llvm::SmallVector<Operation *> &ops) {
  auto isProduct = [](Operation *op, Value a, Value b) {
    auto mul = mlir::dyn_cast_or_null<mlir::tosa::MulOp>(op);
    return mul && ((mul.getInput1() == a && mul.getInput2() == b) ||
                   (mul.getInput1() == b && mul.getInput2() == a));
  };
  auto near = [](Value constant, float expected) {
    std::optional<float> actual = splatConstant(constant);
    return actual && std::abs(*actual - expected) <= 1e-6f * std::abs(expected);
  };
  llvm::SmallPtrSet<Operation *, 4> users(value.getUsers().begin(),
                                          value.getUsers().end());
  Operation *square = nullptr;
  for (Operation *user : users)
    if (isProduct(user, value, value))
      square = user;
  if (users.size() != 4 || !square || !square->getResult(0).hasOneUse())
    return false;
  Operation *cube = soleUser(square->getResult(0));
  if (!users.contains(cube) || !isProduct(cube, square->getResult(0), value) ||
      !cube->getResult(0).hasOneUse())
    return false;
  Operation *cubeScale = soleUser(cube->getResult(0));
  if (!near(otherFactor(cubeScale, cube->getResult(0)), 0.044715f) ||
      !cubeScale->getResult(0).hasOneUse())
    return false;
  auto inner = mlir::dyn_cast<mlir::tosa::AddOp>(soleUser(cubeScale->getResult(0)));
  if (!inner || !users.contains(inner) ||
      otherAddend(inner, cubeScale->getResult(0)) != value ||
      !inner.getOutput().hasOneUse())
    return false;
  Operation *innerScale = soleUser(inner.getOutput());
  if (!near(otherFactor(innerScale, inner.getOutput()), 0.7978845608f) ||
      !innerScale->getResult(0).hasOneUse())
    return false;
  auto tanh = mlir::dyn_cast<mlir::tosa::TanhOp>(soleUser(innerScale->getResult(0)));
  if (!tanh || !tanh.getOutput().hasOneUse())
    return false;
  auto plusOne = mlir::dyn_cast<mlir::tosa::AddOp>(soleUser(tanh.getOutput()));
  if (!plusOne || !near(otherAddend(plusOne, tanh.getOutput()), 1.0f) ||
      !plusOne.getOutput().hasOneUse())
    return false;
  Operation *product = soleUser(plusOne.getOutput());
  Value halfValue = otherFactor(product, plusOne.getOutput());
  Operation *half = halfValue ? halfValue.getDefiningOp() : nullptr;
  if (!half || !users.contains(half) || !near(otherFactor(half, value), 0.5f) ||
      !halfValue.hasOneUse())
    return false;
  ops = {square, cube, cubeScale, inner, innerScale, tanh, plusOne, half, product};
  return true;
}

/// x * g(x) where x (`value`) feeds exactly the gate g and the product:
/// Swish's g = sigmoid(x), HardSwish's g = clamp(x * 1/6 + 1/2, 0, 1), as
/// the importer writes them. Returns the activation and fills `ops` with
/// the gate's ops then the product; None if `value` is not gated so.
Activation matchGatedActivation(Value value, llvm::SmallVector<Operation *> &ops) {
  llvm::SmallVector<Operation *> users(value.getUsers());
  if (users.size() != 2 || !value.hasNUses(2))
    return Activation::None;
  for (int order = 0; order < 2; ++order) {
    Operation *gateStart = users[order], *product = users[1 - order];
    if (mlir::isa<mlir::tosa::SigmoidOp>(gateStart) &&
        soleUser(gateStart->getResult(0)) == product &&
        otherFactor(product, value) == gateStart->getResult(0)) {
      ops = {gateStart, product};
      return Activation::Swish;
    }
    // HardSwish: mul(x, 1/6) -> add(., 1/2) -> clamp(0, 1) -> mul(x, .).
    Value scale = otherFactor(gateStart, value);
    if (!scale || !gateStart->getResult(0).hasOneUse())
      continue;
    auto add = mlir::dyn_cast<mlir::tosa::AddOp>(soleUser(gateStart->getResult(0)));
    if (!add || !add.getOutput().hasOneUse())
      continue;
    auto clamp = mlir::dyn_cast<mlir::tosa::ClampOp>(soleUser(add.getOutput()));
    if (!clamp || soleUser(clamp.getOutput()) != product ||
        otherFactor(product, value) != clamp.getOutput())
      continue;
    auto low = mlir::dyn_cast<mlir::FloatAttr>(clamp.getMinValAttr());
    auto high = mlir::dyn_cast<mlir::FloatAttr>(clamp.getMaxValAttr());
    std::optional<float> slope = splatConstant(scale);
    std::optional<float> offset =
        splatConstant(otherAddend(add, gateStart->getResult(0)));
    if (low && high && low.getValueAsDouble() == 0.0 && high.getValueAsDouble() == 1.0 &&
        slope && std::abs(*slope - 1.0f / 6.0f) < 1e-7f && offset && *offset == 0.5f) {
      ops = {gateStart, add, clamp, product};
      return Activation::HardSwish;
    }
  }
  return Activation::None;
}

/// The activation applied to `value` (and only to it), its ops in order
/// with the result last; None if there is none. Clip bounds go to
/// `epilogue`.
Activation matchActivation(Value value, llvm::SmallVector<Operation *> &ops,
                           Epilogue &epilogue) {
  Activation activation = matchGatedActivation(value, ops);
  if (activation == Activation::None && matchGeluErf(value, ops))
    activation = Activation::GeluErf;
  if (activation == Activation::None && matchGeluTanh(value, ops))
    activation = Activation::GeluTanh;
  if (activation != Activation::None) {
    // The library writes the activation in place: a constant that
    // broadcasts the result to a larger shape is not an activation of it.
    if (shapeOf(ops.back()->getResult(0)) == shapeOf(value))
      return activation;
    ops.clear();
    return Activation::None;
  }
  Operation *next = soleUser(value);
  if (auto clamp = mlir::dyn_cast_or_null<mlir::tosa::ClampOp>(next)) {
    auto low = mlir::dyn_cast<mlir::FloatAttr>(clamp.getMinValAttr());
    auto high = mlir::dyn_cast<mlir::FloatAttr>(clamp.getMaxValAttr());
    if (!low || !high)
      return Activation::None;
    epilogue.alpha = static_cast<float>(low.getValueAsDouble());
    epilogue.beta = static_cast<float>(high.getValueAsDouble());
    ops = {clamp};
    return Activation::Clip;
  }
  if (mlir::isa_and_nonnull<mlir::tosa::SigmoidOp, mlir::tosa::TanhOp>(next)) {
    ops = {next};
    return mlir::isa<mlir::tosa::SigmoidOp>(next) ? Activation::Sigmoid
                                                  : Activation::Tanh;
  }
  return Activation::None;
}

/// Absorbs single-use successors of `candidate.result`: a bias add (when
/// `biasChannels` > 0: an addend of shape [1, ..., 1, biasChannels]), a
/// residual add of the same shape, then an activation.
Epilogue absorbEpilogue(Candidate &candidate, int64_t biasChannels) {
  Epilogue epilogue;
  auto absorb = [&](Operation *op) {
    candidate.ops.push_back(op);
    candidate.result = op->getResult(0);
  };
  auto add = mlir::dyn_cast_or_null<mlir::tosa::AddOp>(soleUser(candidate.result));
  if (add && biasChannels > 0 && shapeOf(add.getOutput()) == shapeOf(candidate.result)) {
    Value other = otherAddend(add, candidate.result);
    llvm::ArrayRef<int64_t> shape = other ? shapeOf(other) : llvm::ArrayRef<int64_t>();
    bool isBias = other && isF32Tensor(other) && !shape.empty() &&
                  shape.back() == biasChannels &&
                  llvm::all_of(shape.drop_back(), [](int64_t d) { return d == 1; });
    if (isBias) {
      epilogue.bias = other;
      absorb(add);
      add = mlir::dyn_cast_or_null<mlir::tosa::AddOp>(soleUser(candidate.result));
    }
  }
  if (add) {
    Value other = otherAddend(add, candidate.result);
    if (other && isF32Tensor(other) && shapeOf(other) == shapeOf(candidate.result) &&
        shapeOf(add.getOutput()) == shapeOf(candidate.result)) {
      epilogue.residual = other;
      absorb(add);
    }
  }
  // The activation, also through a reshape of the result (GPT-2's
  // Conv1D computes on a 2-D view): it is elementwise, so it commutes.
  llvm::SmallVector<Operation *> ops;
  Activation activation = matchActivation(candidate.result, ops, epilogue);
  auto reshape =
      mlir::dyn_cast_or_null<mlir::tosa::ReshapeOp>(soleUser(candidate.result));
  if (activation == Activation::None && reshape) {
    activation = matchActivation(reshape.getOutput(), ops, epilogue);
    ops.insert(ops.begin(), reshape);
  }
  if (activation == Activation::None)
    return epilogue;
  epilogue.activation = activation;
  for (Operation *op : ops)
    absorb(op);
  return epilogue;
}

void appendEpilogueInputs(Candidate &candidate, const Epilogue &epilogue) {
  if (epilogue.bias)
    candidate.inputs.push_back(epilogue.bias);
  if (epilogue.residual)
    candidate.inputs.push_back(epilogue.residual);
}

template <typename ConvOp> std::optional<Candidate> matchConv(ConvOp conv) {
  namespace p = runtime::conv;
  constexpr bool depthwise = std::is_same_v<ConvOp, mlir::tosa::DepthwiseConv2DOp>;
  if (!isF32Tensor(conv.getInput()) || !isF32Tensor(conv.getWeight()) ||
      !isF32Tensor(conv.getBias()) || !isF32Tensor(conv.getOutput()))
    return std::nullopt;
  Candidate candidate{KernelKind::Conv2d, {}, {}, {}, std::vector<int64_t>(p::kCount, 0)};
  std::vector<int64_t> &params = candidate.params;
  llvm::ArrayRef<int64_t> input = shapeOf(conv.getInput()); // NHWC
  llvm::ArrayRef<int64_t> output = shapeOf(conv.getOutput());
  llvm::ArrayRef<int64_t> weight = shapeOf(conv.getWeight());

  Value weights = conv.getWeight();
  if constexpr (depthwise) {
    // [KH, KW, C, M]; the importer's transpose(reshape(w)) of ONNX's
    // [C*M, 1, KH, KW] is absorbed and w read as grouped OIHW.
    params[p::kWeightLayout] = static_cast<int64_t>(runtime::ConvWeightLayout::Hwcm);
    params[p::kKernelHeight] = weight[0];
    params[p::kKernelWidth] = weight[1];
    params[p::kOutChannels] = weight[2] * weight[3];
    params[p::kGroups] = weight[2];
    if (auto transpose = transposeBy(weights, {2, 3, 0, 1})) {
      auto reshape = transpose.getInput1().getDefiningOp<mlir::tosa::ReshapeOp>();
      if (reshape && shapeOf(reshape.getInput1()).size() == 4 &&
          isF32Tensor(reshape.getInput1())) {
        weights = reshape.getInput1();
        params[p::kWeightLayout] = static_cast<int64_t>(runtime::ConvWeightLayout::Oihw);
        candidate.ops.push_back(reshape);
        candidate.ops.push_back(transpose);
      }
    }
  } else {
    params[p::kWeightLayout] = static_cast<int64_t>(runtime::ConvWeightLayout::Ohwi);
    params[p::kKernelHeight] = weight[1];
    params[p::kKernelWidth] = weight[2];
    params[p::kOutChannels] = weight[0];
    params[p::kGroups] = 1;
    if (auto transpose = transposeBy(weights, {0, 2, 3, 1})) {
      weights = transpose.getInput1();
      params[p::kWeightLayout] = static_cast<int64_t>(runtime::ConvWeightLayout::Oihw);
      candidate.ops.push_back(transpose);
    }
  }
  llvm::ArrayRef<int64_t> stride = conv.getStrideAttr().asArrayRef();
  llvm::ArrayRef<int64_t> dilation = conv.getDilationAttr().asArrayRef();
  llvm::ArrayRef<int64_t> pad = conv.getPadAttr().asArrayRef(); // t, b, l, r
  params[p::kBatch] = input[0];
  params[p::kInHeight] = input[1];
  params[p::kInWidth] = input[2];
  params[p::kInChannels] = input[3];
  params[p::kOutHeight] = output[1];
  params[p::kOutWidth] = output[2];
  params[p::kStrideH] = stride[0];
  params[p::kStrideW] = stride[1];
  params[p::kDilationH] = dilation[0];
  params[p::kDilationW] = dilation[1];
  params[p::kPadTop] = pad[0];
  params[p::kPadBottom] = pad[1];
  params[p::kPadLeft] = pad[2];
  params[p::kPadRight] = pad[3];
  params[p::kConstantWeights] = isConstantOrigin(weights);
  Value source = conv.getInput();
  absorbSourceCrop(candidate, source, output,
                   {params[p::kKernelHeight], params[p::kKernelWidth]}, stride, dilation,
                   pad);
  input = shapeOf(source);
  params[p::kInHeight] = input[1];
  params[p::kInWidth] = input[2];
  params[p::kSourceLayout] = absorbSourceLayout(candidate, source);

  candidate.ops.push_back(conv);
  candidate.result = conv.getOutput();
  params[p::kDestinationLayout] = absorbDestinationLayout(candidate);
  candidate.inputs = {source, weights, conv.getBias()};
  Epilogue epilogue = absorbEpilogue(candidate, /*biasChannels=*/0);
  appendEpilogueInputs(candidate, epilogue);
  params[p::kHasResidual] = epilogue.residual != nullptr;
  params[p::kActivation] = static_cast<int64_t>(epilogue.activation);
  params[p::kAlpha] = runtime::floatParam(epilogue.alpha);
  params[p::kBeta] = runtime::floatParam(epilogue.beta);
  return candidate;
}

/// Attention scores, (Q x K^T) * scale + mask: a product whose only user
/// multiplies it by a splat constant, optionally followed by the add of a
/// mask that varies at most along the last two dimensions (BERT's padding
/// mask [1, 1, 1, S]). Both become post-ops of the product (after its bias
/// and residual, which such a product does not have). Returns whether it
/// absorbed the scale.
bool absorbScaleAndMask(Candidate &candidate) {
  namespace p = runtime::matmul;
  Operation *user = soleUser(candidate.result);
  std::optional<float> scale = splatConstant(otherFactor(user, candidate.result));
  if (!scale || *scale == 0.0f)
    return false;
  auto mul = mlir::cast<mlir::tosa::MulOp>(user);
  candidate.ops.push_back(mul);
  candidate.result = mul.getOutput();
  candidate.params[p::kScale] = runtime::floatParam(*scale);
  auto add = mlir::dyn_cast_or_null<mlir::tosa::AddOp>(soleUser(candidate.result));
  Value mask = add ? otherAddend(add, candidate.result) : Value();
  llvm::ArrayRef<int64_t> shape = shapeOf(candidate.result);
  if (!mask || !isF32Tensor(mask) || shapeOf(mask).size() != shape.size() ||
      shape.size() < 2 || shapeOf(add.getOutput()) != shape)
    return true;
  llvm::ArrayRef<int64_t> maskShape = shapeOf(mask);
  size_t rank = shape.size();
  bool broadcastOverBatch =
      llvm::all_of(maskShape.drop_back(2), [](int64_t d) { return d == 1; });
  bool rowsFit = maskShape[rank - 2] == 1 || maskShape[rank - 2] == shape[rank - 2];
  bool columnsFit = maskShape[rank - 1] == 1 || maskShape[rank - 1] == shape[rank - 1];
  if (!broadcastOverBatch || !rowsFit || !columnsFit)
    return true;
  candidate.ops.push_back(add);
  candidate.result = add.getOutput();
  candidate.inputs.push_back(mask);
  candidate.params[p::kHasMask] = 1;
  candidate.params[p::kMaskRows] = maskShape[rank - 2] != 1;
  candidate.params[p::kMaskColumns] = maskShape[rank - 1] != 1;
  return true;
}

std::optional<Candidate> matchMatMul(mlir::tosa::MatMulOp matmul) {
  namespace p = runtime::matmul;
  if (!isF32Tensor(matmul.getA()) || !isF32Tensor(matmul.getB()) ||
      !isF32Tensor(matmul.getOutput()))
    return std::nullopt;
  Candidate candidate{KernelKind::MatMul, {}, {}, {}, std::vector<int64_t>(p::kCount, 0)};
  std::vector<int64_t> &params = candidate.params;
  llvm::ArrayRef<int64_t> a = shapeOf(matmul.getA()); // [batch, M, K]
  llvm::ArrayRef<int64_t> c = shapeOf(matmul.getOutput());
  params[p::kBatch] = a[0];
  params[p::kM] = a[1];
  params[p::kK] = a[2];
  params[p::kN] = c[2];

  // B read transposed in place: attention's K^T, Gemm's transB weights.
  Value b = matmul.getB();
  if (auto transpose = transposeBy(b, {0, 2, 1})) {
    b = transpose.getInput1();
    params[p::kTransposedB] = 1;
    candidate.ops.push_back(transpose);
  } else if (auto reshape = b.getDefiningOp<mlir::tosa::ReshapeOp>();
             reshape && a[0] == 1) {
    if (auto transpose = transposeBy(reshape.getInput1(), {1, 0})) {
      b = transpose.getInput1();
      params[p::kTransposedB] = 1;
      candidate.ops.push_back(transpose);
      candidate.ops.push_back(reshape);
    }
  }
  params[p::kConstantB] = isConstantOrigin(b);
  candidate.ops.push_back(matmul);
  candidate.result = matmul.getOutput();
  // The importer reshapes products back to the model's rank; the bias and
  // residual adds follow the reshape.
  if (auto reshape =
          mlir::dyn_cast_or_null<mlir::tosa::ReshapeOp>(soleUser(candidate.result))) {
    candidate.ops.push_back(reshape);
    candidate.result = reshape.getOutput();
  }
  candidate.inputs = {matmul.getA(), b};
  if (absorbScaleAndMask(candidate))
    return candidate;
  Epilogue epilogue = absorbEpilogue(candidate, /*biasChannels=*/c[2]);
  appendEpilogueInputs(candidate, epilogue);
  params[p::kHasBias] = epilogue.bias != nullptr;
  params[p::kHasResidual] = epilogue.residual != nullptr;
  params[p::kActivation] = static_cast<int64_t>(epilogue.activation);
  params[p::kAlpha] = runtime::floatParam(epilogue.alpha);
  params[p::kBeta] = runtime::floatParam(epilogue.beta);
  return candidate;
}

/// A max or average pooling with the NCHW<->NHWC transposes around it.
template <typename PoolOp> std::optional<Candidate> matchPool(PoolOp pool) {
  namespace p = runtime::pool;
  if (!isF32Tensor(pool.getInput()) || !isF32Tensor(pool.getOutput()))
    return std::nullopt;
  Candidate candidate{KernelKind::Pool2d, {}, {}, {}, std::vector<int64_t>(p::kCount, 0)};
  std::vector<int64_t> &params = candidate.params;
  llvm::ArrayRef<int64_t> input = shapeOf(pool.getInput()); // NHWC
  llvm::ArrayRef<int64_t> output = shapeOf(pool.getOutput());
  Value source = pool.getInput();
  params[p::kSourceLayout] = absorbSourceLayout(candidate, source);
  params[p::kBatch] = input[0];
  params[p::kInHeight] = input[1];
  params[p::kInWidth] = input[2];
  params[p::kChannels] = input[3];
  params[p::kOutHeight] = output[1];
  params[p::kOutWidth] = output[2];
  llvm::ArrayRef<int64_t> kernel = pool.getKernelAttr().asArrayRef();
  llvm::ArrayRef<int64_t> stride = pool.getStrideAttr().asArrayRef();
  llvm::ArrayRef<int64_t> pad = pool.getPadAttr().asArrayRef(); // t, b, l, r
  params[p::kKernelHeight] = kernel[0];
  params[p::kKernelWidth] = kernel[1];
  params[p::kStrideH] = stride[0];
  params[p::kStrideW] = stride[1];
  params[p::kPadTop] = pad[0];
  params[p::kPadBottom] = pad[1];
  params[p::kPadLeft] = pad[2];
  params[p::kPadRight] = pad[3];
  params[p::kAlgorithm] =
      static_cast<int64_t>(std::is_same_v<PoolOp, mlir::tosa::MaxPool2dOp>
                               ? runtime::PoolAlgorithm::Max
                               : runtime::PoolAlgorithm::AverageExcludingPadding);
  candidate.ops.push_back(pool);
  candidate.result = pool.getOutput();
  params[p::kDestinationLayout] = absorbDestinationLayout(candidate);
  candidate.inputs = {source};
  return candidate;
}

/// The importer's softmax along the last axis:
/// exp(x - max(x)) * reciprocal(sum(exp(x - max(x)))).
std::optional<Candidate> matchSoftmax(mlir::tosa::ReduceMaxOp max) {
  namespace p = runtime::softmax;
  Value x = max.getInput();
  if (!isF32Tensor(x) || max.getAxis() + 1 != shapeOf(x).size())
    return std::nullopt;
  auto sub = mlir::dyn_cast_or_null<mlir::tosa::SubOp>(soleUser(max.getOutput()));
  if (!sub || sub.getInput1() != x || sub.getInput2() != max.getOutput())
    return std::nullopt;
  auto exp = mlir::dyn_cast_or_null<mlir::tosa::ExpOp>(soleUser(sub.getOutput()));
  if (!exp)
    return std::nullopt;
  // The exponentials feed the sum and the final product, nothing else.
  mlir::tosa::ReduceSumOp sum;
  mlir::tosa::MulOp mul;
  for (Operation *user : exp.getOutput().getUsers()) {
    if (auto reduce = mlir::dyn_cast<mlir::tosa::ReduceSumOp>(user); reduce && !sum)
      sum = reduce;
    else if (auto product = mlir::dyn_cast<mlir::tosa::MulOp>(user); product && !mul)
      mul = product;
    else
      return std::nullopt;
  }
  if (!sum || !mul || sum.getAxis() != max.getAxis())
    return std::nullopt;
  auto reciprocal =
      mlir::dyn_cast_or_null<mlir::tosa::ReciprocalOp>(soleUser(sum.getOutput()));
  if (!reciprocal || soleUser(reciprocal.getOutput()) != mul.getOperation() ||
      shapeOf(mul.getOutput()) != shapeOf(x))
    return std::nullopt;
  llvm::ArrayRef<int64_t> shape = shapeOf(x);
  int64_t channels = shape.back(), rows = 1;
  for (int64_t dim : shape.drop_back())
    rows *= dim;
  Candidate candidate{
      KernelKind::Softmax, {x}, {}, mul.getOutput(), std::vector<int64_t>(p::kCount, 0)};
  candidate.ops = {max, sub, exp, sum, reciprocal, mul};
  candidate.params[p::kRows] = rows;
  candidate.params[p::kChannels] = channels;
  return candidate;
}

/// A mean along the last axis as the importer writes it, sum(x) * 1/N:
/// the product, or null.
mlir::tosa::MulOp matchMean(mlir::tosa::ReduceSumOp sum) {
  llvm::ArrayRef<int64_t> shape = shapeOf(sum.getInput());
  if (shape.empty() || sum.getAxis() + 1 != shape.size())
    return {};
  auto mul = mlir::dyn_cast_or_null<mlir::tosa::MulOp>(soleUser(sum.getOutput()));
  if (!mul || !isScale(otherFactor(mul, sum.getOutput()), 1.0f / shape.back()))
    return {};
  return mul;
}

/// Layer normalization along the last axis, as the importer writes ONNX's
/// LayerNormalization and as PyTorch exports it before opset 17:
/// d = x - mean(x); d * rsqrt(mean(d*d) + eps) (or d * 1/pow(.., 0.5)),
/// then optionally * gamma and + beta (per-channel weights). Rooted at the
/// sum of the first mean.
std::optional<Candidate> matchLayerNorm(mlir::tosa::ReduceSumOp meanSum) {
  namespace p = runtime::layernorm;
  Value x = meanSum.getInput();
  mlir::tosa::MulOp mean = matchMean(meanSum);
  if (!isF32Tensor(x) || !mean)
    return std::nullopt;
  auto centered = mlir::dyn_cast_or_null<mlir::tosa::SubOp>(soleUser(mean.getOutput()));
  if (!centered || centered.getInput1() != x || centered.getInput2() != mean.getOutput())
    return std::nullopt;
  // The centered values feed their square and the normalization only.
  Value d = centered.getOutput();
  mlir::tosa::MulOp square, normalize;
  for (Operation *user : d.getUsers()) {
    auto mul = mlir::dyn_cast<mlir::tosa::MulOp>(user);
    if (mul && mul == square) // the square uses d twice
      continue;
    if (mul && mul.getInput1() == d && mul.getInput2() == d && !square)
      square = mul;
    else if (mul && otherFactor(mul, d) && !normalize)
      normalize = mul;
    else
      return std::nullopt;
  }
  if (!square || !normalize)
    return std::nullopt;
  auto varianceSum =
      mlir::dyn_cast_or_null<mlir::tosa::ReduceSumOp>(soleUser(square.getOutput()));
  mlir::tosa::MulOp variance = varianceSum ? matchMean(varianceSum) : nullptr;
  if (!variance)
    return std::nullopt;
  auto shifted =
      mlir::dyn_cast_or_null<mlir::tosa::AddOp>(soleUser(variance.getOutput()));
  std::optional<float> epsilon =
      shifted ? splatConstant(otherAddend(shifted, variance.getOutput())) : std::nullopt;
  if (!epsilon)
    return std::nullopt;
  llvm::SmallVector<Operation *> ops = {meanSum,     mean,     centered, square,
                                        varianceSum, variance, shifted};
  Operation *next = soleUser(shifted.getOutput());
  Value inverse;
  if (auto rsqrt = mlir::dyn_cast_or_null<mlir::tosa::RsqrtOp>(next)) {
    ops.push_back(rsqrt);
    inverse = rsqrt.getOutput();
  } else if (auto pow = mlir::dyn_cast_or_null<mlir::tosa::PowOp>(next);
             pow && pow.getInput1() == shifted.getOutput() &&
             splatConstant(pow.getInput2()) == 0.5f) {
    auto reciprocal =
        mlir::dyn_cast_or_null<mlir::tosa::ReciprocalOp>(soleUser(pow.getOutput()));
    if (!reciprocal)
      return std::nullopt;
    ops.push_back(pow);
    ops.push_back(reciprocal);
    inverse = reciprocal.getOutput();
  }
  if (!inverse || otherFactor(normalize, d) != inverse || !inverse.hasOneUse() ||
      shapeOf(normalize.getOutput()) != shapeOf(x))
    return std::nullopt;
  ops.push_back(normalize);

  llvm::ArrayRef<int64_t> shape = shapeOf(x);
  int64_t channels = shape.back(), rows = 1;
  for (int64_t dim : shape.drop_back())
    rows *= dim;
  Candidate candidate{KernelKind::LayerNorm,
                      {x},
                      ops,
                      normalize.getOutput(),
                      std::vector<int64_t>(p::kCount, 0)};
  candidate.params[p::kRows] = rows;
  candidate.params[p::kChannels] = channels;
  candidate.params[p::kEpsilon] = runtime::floatParam(*epsilon);
  // The importer's own LayerNormalization restores the input's shape.
  if (auto reshape =
          mlir::dyn_cast_or_null<mlir::tosa::ReshapeOp>(soleUser(candidate.result))) {
    candidate.ops.push_back(reshape);
    candidate.result = reshape.getOutput();
  }
  // gamma and beta: graph weights holding one value per channel.
  auto perChannel = [&](Value value) {
    llvm::ArrayRef<int64_t> weight = value ? shapeOf(value) : llvm::ArrayRef<int64_t>();
    int64_t count = 1;
    for (int64_t dim : weight)
      count *= dim;
    return value && isF32Tensor(value) && !weight.empty() && weight.back() == channels &&
           count == channels && isConstantOrigin(value);
  };
  llvm::SmallVector<int64_t> resultShape(shapeOf(candidate.result));
  Operation *user = soleUser(candidate.result);
  if (Value gamma = otherFactor(user, candidate.result);
      perChannel(gamma) && shapeOf(user->getResult(0)) == llvm::ArrayRef(resultShape)) {
    candidate.inputs.push_back(gamma);
    candidate.ops.push_back(user);
    candidate.result = user->getResult(0);
    candidate.params[p::kHasScale] = 1;
  }
  if (auto add = mlir::dyn_cast_or_null<mlir::tosa::AddOp>(soleUser(candidate.result))) {
    Value beta = otherAddend(add, candidate.result);
    if (perChannel(beta) && shapeOf(add.getOutput()) == llvm::ArrayRef(resultShape)) {
      candidate.inputs.push_back(beta);
      candidate.ops.push_back(add);
      candidate.result = add.getOutput();
      candidate.params[p::kHasShift] = 1;
    }
  }
  return candidate;
}

/// Operands the kernel body needs besides its inputs must be constants it
/// can clone (zero points, shapes); anything else means the match is wrong.
bool closedOverConstants(const Candidate &candidate) {
  llvm::SmallPtrSet<Operation *, 8> absorbed(candidate.ops.begin(), candidate.ops.end());
  for (Operation *op : candidate.ops)
    for (Value operand : op->getOperands()) {
      if (llvm::is_contained(candidate.inputs, operand))
        continue;
      Operation *producer = operand.getDefiningOp();
      if (!producer || (!absorbed.contains(producer) &&
                        !producer->hasTrait<mlir::OpTrait::ConstantLike>()))
        return false;
    }
  return true;
}

/// Moves the candidate into `@name` and calls it where its result was made.
void outline(mlir::ModuleOp module, mlir::func::FuncOp main, Candidate &candidate,
             const std::string &name, llvm::DenseSet<Operation *> &erased) {
  llvm::sort(candidate.ops,
             [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
  mlir::MLIRContext *context = module.getContext();
  mlir::OpBuilder builder(context);
  llvm::SmallVector<mlir::Type> argTypes;
  for (Value input : candidate.inputs)
    argTypes.push_back(input.getType());
  builder.setInsertionPoint(main);
  auto function = mlir::func::FuncOp::create(
      builder, candidate.result.getLoc(), name,
      builder.getFunctionType(argTypes, {candidate.result.getType()}));
  function.setPrivate();
  function->setAttr(kKernelKindAttr,
                    builder.getStringAttr(runtime::kernelKindName(candidate.kind)));
  function->setAttr(kKernelParamsAttr, builder.getDenseI64ArrayAttr(candidate.params));
  // The runtime kernel writes only its output buffer: bufferization must
  // not place the result in an argument's buffer.
  for (unsigned i = 0; i < argTypes.size(); ++i)
    function.setArgAttr(i, mlir::bufferization::BufferizationDialect::kWritableAttrName,
                        builder.getBoolAttr(false));

  mlir::Block *body = function.addEntryBlock();
  builder.setInsertionPointToStart(body);
  mlir::IRMapping mapping;
  for (auto [input, arg] : llvm::zip(candidate.inputs, body->getArguments()))
    mapping.map(input, arg);
  for (Operation *op : candidate.ops) {
    // Constants are cloned at every use, even one that is also an input
    // (CSE can make a zero bias and a zero point one value): lowering needs
    // zero points to be constants.
    mlir::IRMapping operands = mapping;
    for (Value operand : op->getOperands()) {
      Operation *producer = operand.getDefiningOp();
      if (producer && producer->hasTrait<mlir::OpTrait::ConstantLike>())
        operands.map(operand, builder.clone(*producer)->getResult(0));
    }
    Operation *clone = builder.clone(*op, operands);
    mapping.map(op->getResults(), clone->getResults());
  }
  mlir::func::ReturnOp::create(builder, candidate.result.getLoc(),
                               mapping.lookup(candidate.result));

  builder.setInsertionPoint(candidate.ops.back());
  auto call = mlir::func::CallOp::create(builder, candidate.result.getLoc(), function,
                                         candidate.inputs);
  candidate.result.replaceAllUsesWith(call.getResult(0));
  for (Operation *op : llvm::reverse(candidate.ops))
    if (op->use_empty()) {
      erased.insert(op);
      op->erase();
    }
}

struct OutlineLibraryKernelsPass
    : mlir::PassWrapper<OutlineLibraryKernelsPass, mlir::OperationPass<mlir::ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(OutlineLibraryKernelsPass)

  llvm::StringRef getArgument() const override { return "flowc-outline-library-kernels"; }
  llvm::StringRef getDescription() const override {
    return "Outline convolutions, matrix products (with their epilogues), pooling, "
           "softmax and layer normalization into library kernel functions";
  }
  void getDependentDialects(mlir::DialectRegistry &registry) const override {
    registry.insert<mlir::bufferization::BufferizationDialect>();
  }

  bool bf16 = false;

  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    auto main = module.lookupSymbol<mlir::func::FuncOp>("main");
    if (!main || main.isExternal())
      return;
    llvm::SmallVector<Operation *> roots;
    main.walk([&](Operation *op) {
      if (mlir::isa<mlir::tosa::Conv2DOp, mlir::tosa::DepthwiseConv2DOp,
                    mlir::tosa::MatMulOp, mlir::tosa::MaxPool2dOp,
                    mlir::tosa::AvgPool2dOp, mlir::tosa::ReduceMaxOp,
                    mlir::tosa::ReduceSumOp>(op))
        roots.push_back(op);
    });
    int site = 0;
    // A root can be absorbed by an earlier match (a softmax's sum).
    llvm::DenseSet<Operation *> erased;
    for (Operation *root : roots) {
      if (erased.contains(root))
        continue;
      std::optional<Candidate> candidate;
      if (auto conv = mlir::dyn_cast<mlir::tosa::Conv2DOp>(root))
        candidate = matchConv(conv);
      else if (auto depthwise = mlir::dyn_cast<mlir::tosa::DepthwiseConv2DOp>(root))
        candidate = matchConv(depthwise);
      else if (auto maxPool = mlir::dyn_cast<mlir::tosa::MaxPool2dOp>(root))
        candidate = matchPool(maxPool);
      else if (auto avgPool = mlir::dyn_cast<mlir::tosa::AvgPool2dOp>(root))
        candidate = matchPool(avgPool);
      else if (auto max = mlir::dyn_cast<mlir::tosa::ReduceMaxOp>(root))
        candidate = matchSoftmax(max);
      else if (auto sum = mlir::dyn_cast<mlir::tosa::ReduceSumOp>(root))
        candidate = matchLayerNorm(sum);
      else
        candidate = matchMatMul(mlir::cast<mlir::tosa::MatMulOp>(root));
      if (!candidate || !closedOverConstants(*candidate))
        continue;
      // Pooling compares and averages in the buffers' type.
      if (candidate->kind == KernelKind::Conv2d)
        candidate->params[runtime::conv::kBf16] = bf16;
      else if (candidate->kind == KernelKind::MatMul)
        candidate->params[runtime::matmul::kBf16] = bf16;
      outline(module, main, *candidate, "flowc_kernel_" + std::to_string(site++), erased);
    }
  }
};

/// Where the runtime's kernel table and context live in the code object.
struct KernelSymbols {
  llvm::GlobalVariable *table;
  llvm::GlobalVariable *context;
};

KernelSymbols defineKernelSymbols(llvm::Module &module,
                                  const std::vector<LibraryKernel> &kernels) {
  llvm::LLVMContext &ctx = module.getContext();
  auto *ptrType = llvm::PointerType::getUnqual(ctx);
  auto *i64 = llvm::Type::getInt64Ty(ctx);
  auto *tableType = llvm::ArrayType::get(ptrType, runtime::kKernelKindCount);
  auto *table = new llvm::GlobalVariable(
      module, tableType, false, llvm::GlobalValue::ExternalLinkage,
      llvm::Constant::getNullValue(tableType), runtime::kKernelTableSymbol);
  auto *context = new llvm::GlobalVariable(
      module, ptrType, false, llvm::GlobalValue::ExternalLinkage,
      llvm::Constant::getNullValue(ptrType), runtime::kKernelContextSymbol);
  int64_t kinds = 0;
  for (const LibraryKernel &kernel : kernels)
    kinds |= int64_t{1} << static_cast<int64_t>(kernel.kind);
  new llvm::GlobalVariable(module, i64, true, llvm::GlobalValue::ExternalLinkage,
                           llvm::ConstantInt::get(i64, kinds),
                           runtime::kKernelKindsSymbol);
  new llvm::GlobalVariable(module, i64, true, llvm::GlobalValue::ExternalLinkage,
                           llvm::ConstantInt::get(i64, kernels.size()),
                           runtime::kKernelSitesSymbol);
  new llvm::GlobalVariable(module, i64, true, llvm::GlobalValue::ExternalLinkage,
                           llvm::ConstantInt::get(i64, runtime::kKernelAbiVersion),
                           runtime::kKernelAbiSymbol);
  return {table, context};
}

/// `function(buffers...)` becomes
/// `table[kind](context, site, params, {buffers...})`.
void emitThunk(llvm::Function &function, const LibraryKernel &kernel, int64_t site,
               const KernelSymbols &symbols) {
  llvm::Module &module = *function.getParent();
  llvm::LLVMContext &ctx = module.getContext();
  auto *ptrType = llvm::PointerType::getUnqual(ctx);
  auto *i64 = llvm::Type::getInt64Ty(ctx);
  auto *paramsType = llvm::ArrayType::get(i64, kernel.params.size());
  llvm::SmallVector<llvm::Constant *> values;
  for (int64_t value : kernel.params)
    values.push_back(llvm::ConstantInt::get(i64, value));
  auto *params = new llvm::GlobalVariable(
      module, paramsType, true, llvm::GlobalValue::PrivateLinkage,
      llvm::ConstantArray::get(paramsType, values), kernel.function + ".params");

  function.deleteBody();
  function.setLinkage(llvm::GlobalValue::InternalLinkage);
  llvm::IRBuilder<> builder(llvm::BasicBlock::Create(ctx, "entry", &function));
  auto *buffersType = llvm::ArrayType::get(ptrType, function.arg_size());
  llvm::Value *buffers = builder.CreateAlloca(buffersType);
  for (unsigned i = 0; i < function.arg_size(); ++i)
    builder.CreateStore(function.getArg(i),
                        builder.CreateConstInBoundsGEP2_64(buffersType, buffers, 0, i));
  llvm::Value *slot = builder.CreateConstInBoundsGEP2_64(
      symbols.table->getValueType(), symbols.table, 0, static_cast<int64_t>(kernel.kind));
  llvm::Value *callee = builder.CreateLoad(ptrType, slot);
  llvm::Value *context = builder.CreateLoad(ptrType, symbols.context);
  auto *calleeType = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx),
                                             {ptrType, i64, ptrType, ptrType}, false);
  builder.CreateCall(calleeType, callee,
                     {context, llvm::ConstantInt::get(i64, site), params, buffers});
  builder.CreateRetVoid();
}

} // namespace

std::unique_ptr<mlir::Pass> createOutlineLibraryKernelsPass(Precision precision) {
  auto pass = std::make_unique<OutlineLibraryKernelsPass>();
  pass->bf16 = precision == Precision::Bf16;
  return pass;
}

std::vector<LibraryKernel> collectLibraryKernels(mlir::ModuleOp module) {
  std::vector<LibraryKernel> kernels;
  module.walk([&](mlir::func::FuncOp function) {
    auto kind = function->getAttrOfType<mlir::StringAttr>(kKernelKindAttr);
    auto params = function->getAttrOfType<mlir::DenseI64ArrayAttr>(kKernelParamsAttr);
    if (!kind || !params)
      return;
    LibraryKernel kernel;
    kernel.function = function.getSymName().str();
    for (int64_t index = 0; index < runtime::kKernelKindCount; ++index)
      if (kind.getValue() == runtime::kernelKindName(static_cast<KernelKind>(index)))
        kernel.kind = static_cast<KernelKind>(index);
    kernel.params.assign(params.asArrayRef().begin(), params.asArrayRef().end());
    // Inputs, then one output once results became out-parameters.
    kernel.bufferCount = function.getNumArguments() + function.getNumResults();
    kernels.push_back(std::move(kernel));
  });
  return kernels;
}

std::vector<KernelWeight>
collectKernelWeights(mlir::ModuleOp module, const std::vector<LibraryKernel> &kernels) {
  std::vector<KernelWeight> weights;
  auto main = module.lookupSymbol<mlir::func::FuncOp>("main");
  if (!main || main.isExternal())
    return weights;
  std::map<std::string, mlir::func::CallOp> calls;
  main.walk([&](mlir::func::CallOp call) { calls[call.getCallee().str()] = call; });
  for (size_t site = 0; site < kernels.size(); ++site) {
    const LibraryKernel &kernel = kernels[site];
    bool constant = (kernel.kind == KernelKind::Conv2d &&
                     kernel.params[runtime::conv::kConstantWeights] != 0) ||
                    (kernel.kind == KernelKind::MatMul &&
                     kernel.params[runtime::matmul::kConstantB] != 0);
    auto call = calls.find(kernel.function);
    if (!constant || call == calls.end() || call->second.getNumOperands() < 2)
      continue;
    auto argument = mlir::dyn_cast<mlir::BlockArgument>(
        bufferBehindReshapes(call->second.getOperand(1)));
    if (!argument || argument.getOwner()->getParentOp() != main)
      continue;
    auto key =
        main.getArgAttrOfType<mlir::StringAttr>(argument.getArgNumber(), "flowc.weight");
    if (!key)
      continue;
    weights.push_back(KernelWeight{static_cast<int64_t>(site), 1, key.str(),
                                   static_cast<int64_t>(kernel.kind), kernel.params});
  }
  return weights;
}

void dropLibraryKernelBodies(mlir::ModuleOp module) {
  for (auto function : module.getOps<mlir::func::FuncOp>())
    if (function->hasAttr(kKernelKindAttr) && !function.isExternal())
      function.eraseBody();
}

Status bindLibraryKernels(llvm::Module &module,
                          const std::vector<LibraryKernel> &kernels) {
  if (kernels.empty())
    return Status::ok();
  KernelSymbols symbols = defineKernelSymbols(module, kernels);
  for (size_t site = 0; site < kernels.size(); ++site) {
    const LibraryKernel &kernel = kernels[site];
    llvm::Function *function = module.getFunction(kernel.function);
    if (!function)
      return internalError("lowered module lost kernel function @" + kernel.function);
    if (function->arg_size() != kernel.bufferCount ||
        !function->getReturnType()->isVoidTy())
      return internalError("kernel @" + kernel.function + " lowered to " +
                           std::to_string(function->arg_size()) +
                           " arguments, expected " + std::to_string(kernel.bufferCount) +
                           " buffers");
    emitThunk(*function, kernel, static_cast<int64_t>(site), symbols);
  }
  return Status::ok();
}

} // namespace flowc::compiler
