// The epilogue matcher and the helpers every kernel pattern shares: what
// follows a kernel's main op (bias, residual, activation) and the layout
// changes around it that the kernel reads or writes in place.
#include "Matchers.h"

#include "flowc/compiler/dialect/FlowcDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"

#include "llvm/ADT/SmallPtrSet.h"

#include <cmath>

namespace flowc::compiler::library {

using mlir::Operation;
using mlir::Value;
using runtime::Activation;

llvm::ArrayRef<int64_t> shapeOf(Value value) {
  return mlir::cast<mlir::ShapedType>(value.getType()).getShape();
}

bool isF32Tensor(Value value) {
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(value.getType());
  return type && type.hasStaticShape() && type.getElementType().isF32();
}

bool isIntegerTensor(Value value, unsigned bits) {
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(value.getType());
  return type && type.hasStaticShape() && type.getElementType().isInteger(bits);
}

mlir::tosa::TransposeOp transposeBy(Value value, llvm::ArrayRef<int32_t> perms) {
  auto transpose = value.getDefiningOp<mlir::tosa::TransposeOp>();
  if (!transpose || transpose.getPermsAttr().asArrayRef() != perms)
    return {};
  return transpose;
}

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
  return function && function.getArgAttr(arg.getArgNumber(),
                                         FlowcDialect::WeightAttrHelper::getNameStr());
}

Operation *soleUser(Value value) {
  return value.hasOneUse() ? *value.getUsers().begin() : nullptr;
}

runtime::ActivationLayout absorbSourceLayout(Candidate &candidate, Value &source) {
  auto transpose = transposeBy(source, {0, 2, 3, 1});
  if (!transpose)
    return runtime::ActivationLayout::Nhwc;
  source = transpose.getInput1();
  candidate.ops.push_back(transpose);
  return runtime::ActivationLayout::Nchw;
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
  if (!slice || !slice->hasOneUse())
    return;
  // Of any element type: the crop drops whole rows of f32 or integer data.
  auto fullType = mlir::dyn_cast<mlir::RankedTensorType>(slice.getInput1().getType());
  if (!fullType || !fullType.hasStaticShape())
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

runtime::ActivationLayout absorbDestinationLayout(Candidate &candidate) {
  auto back = mlir::dyn_cast_or_null<mlir::tosa::TransposeOp>(soleUser(candidate.result));
  if (!back || back.getPermsAttr().asArrayRef() != llvm::ArrayRef<int32_t>{0, 3, 1, 2})
    return runtime::ActivationLayout::Nhwc;
  candidate.ops.push_back(back);
  candidate.result = back.getOutput();
  return runtime::ActivationLayout::Nchw;
}

Value otherAddend(mlir::tosa::AddOp add, Value value) {
  if (add.getInput1() == value && add.getInput2() != value)
    return add.getInput2();
  if (add.getInput2() == value && add.getInput1() != value)
    return add.getInput1();
  return {};
}

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

std::optional<float> splatConstant(Value value) {
  mlir::DenseElementsAttr attr;
  if (!value || !mlir::matchPattern(value, mlir::m_Constant(&attr)) || !attr.isSplat() ||
      !attr.getElementType().isF32())
    return std::nullopt;
  return attr.getSplatValue<float>();
}

bool isScale(Value value, float expected) {
  if (auto reciprocal =
          value ? value.getDefiningOp<mlir::tosa::ReciprocalOp>() : nullptr) {
    std::optional<float> divisor = splatConstant(reciprocal.getInput1());
    return divisor && std::abs(1.0f / *divisor - expected) <= 1e-6f * std::abs(expected);
  }
  std::optional<float> scale = splatConstant(value);
  return scale && std::abs(*scale - expected) <= 1e-6f * std::abs(expected);
}

namespace {

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

} // namespace

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

} // namespace flowc::compiler::library
