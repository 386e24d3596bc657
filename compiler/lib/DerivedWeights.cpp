#include "DerivedWeights.h"
#include "transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/Dialect/Tosa/Utils/ConversionUtils.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"

#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/SetVector.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

namespace flowc::compiler {

#define GEN_PASS_DEF_DERIVEWEIGHTSPASS
#include "flowc/compiler/Passes.h.inc"

namespace {

using mlir::Operation;
using mlir::Value;

mlir::RankedTensorType staticF32Tensor(mlir::Type type) {
  auto tensor = mlir::dyn_cast<mlir::RankedTensorType>(type);
  return tensor && tensor.hasStaticShape() && tensor.getElementType().isF32() ? tensor
                                                                              : nullptr;
}

/// A float16, bfloat16 or 8-bit integer weight of a static shape: a source
/// a recipe widens (float16 and quantized models). An i8 weight is read as
/// int8; the importer widens uint8 ones with float arithmetic after.
mlir::RankedTensorType staticNarrowTensor(mlir::Type type) {
  auto tensor = mlir::dyn_cast<mlir::RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape())
    return nullptr;
  mlir::Type element = tensor.getElementType();
  return element.isF16() || element.isBF16() || element.isSignlessInteger(8) ? tensor
                                                                             : nullptr;
}

/// A narrow weight widened to float32: exact, so a recipe computes it once
/// instead of every run.
bool isWidening(Operation *op) {
  auto cast = mlir::dyn_cast<mlir::tosa::CastOp>(op);
  return cast && staticNarrowTensor(cast.getInput().getType()) &&
         staticF32Tensor(cast.getType());
}

/// Ops a recipe may hold: what evaluateDerivedWeight implements.
bool isRecipeOp(Operation *op) {
  return mlir::isa<mlir::tosa::ConstOp, mlir::tosa::ConstShapeOp, mlir::tosa::ReshapeOp,
                   mlir::tosa::TransposeOp, mlir::tosa::ReverseOp, mlir::tosa::PadOp,
                   mlir::tosa::AddOp, mlir::tosa::SubOp, mlir::tosa::MulOp,
                   mlir::tosa::RsqrtOp, mlir::tosa::ReciprocalOp, mlir::tosa::NegateOp,
                   mlir::tosa::ClampOp>(op) ||
         isWidening(op);
}

/// Ops that compute, or reorder so that no library takes the weight as it
/// is (a ConvTranspose's flipped or phase-split kernel): the rest only move
/// or name values. A widening computes too, but deriveWidenedWeights
/// derives it alone, before the moves after it: those stay in the graph,
/// where a library reads them into its own layout as it does a float32
/// weight's.
bool isArithmetic(Operation *op) {
  return mlir::isa<mlir::tosa::AddOp, mlir::tosa::SubOp, mlir::tosa::MulOp,
                   mlir::tosa::RsqrtOp, mlir::tosa::ReciprocalOp, mlir::tosa::NegateOp,
                   mlir::tosa::ClampOp, mlir::tosa::ReverseOp, mlir::tosa::PadOp>(op);
}

/// Which values of @main depend on weights and constants only.
class WeightOnly {
public:
  explicit WeightOnly(mlir::func::FuncOp main) : main_(main) {}

  bool operator()(Value value) {
    if (auto it = memo_.find(value); it != memo_.end())
      return it->second;
    bool result = classify(value);
    memo_[value] = result;
    return result;
  }

  /// A weight-only op: every result weight-only.
  bool op(Operation *op) {
    return isRecipeOp(op) &&
           llvm::all_of(op->getResults(), [&](Value result) { return (*this)(result); });
  }

  bool isWeightArgument(Value value) {
    auto arg = mlir::dyn_cast<mlir::BlockArgument>(value);
    return arg && arg.getOwner()->getParentOp() == main_ &&
           main_.getArgAttr(arg.getArgNumber(), "flowc.weight");
  }

private:
  bool classify(Value value) {
    if (mlir::isa<mlir::BlockArgument>(value))
      return isWeightArgument(value) &&
             (staticF32Tensor(value.getType()) || staticNarrowTensor(value.getType()));
    Operation *producer = value.getDefiningOp();
    if (mlir::isa<mlir::tosa::ConstOp, mlir::tosa::ConstShapeOp>(producer))
      return true;
    if (!isRecipeOp(producer) || !staticF32Tensor(value.getType()))
      return false;
    return llvm::all_of(producer->getOperands(),
                        [&](Value operand) { return (*this)(operand); });
  }

  mlir::func::FuncOp main_;
  llvm::DenseMap<Value, bool> memo_;
};

/// Whether an op that `value` is computed through is one `is` accepts.
bool computedThrough(Value value, bool (*is)(Operation *)) {
  Operation *producer = value.getDefiningOp();
  if (!producer)
    return false;
  return is(producer) || llvm::any_of(producer->getOperands(), [&](Value operand) {
           return computedThrough(operand, is);
         });
}

/// Whether computing `value` takes arithmetic (not just reshapes of one weight).
bool computes(Value value) { return computedThrough(value, isArithmetic); }

/// Whether computing `value` widens a narrow weight.
bool widens(Value value) { return computedThrough(value, isWidening); }

mlir::tosa::ConstOp zeroShift(mlir::ImplicitLocOpBuilder &builder) {
  auto type = mlir::RankedTensorType::get({1}, builder.getI8Type());
  return mlir::tosa::ConstOp::create(builder, type,
                                     mlir::DenseElementsAttr::get(type, int8_t{0}));
}

Value reshape(mlir::ImplicitLocOpBuilder &builder, Value value,
              llvm::ArrayRef<int64_t> shape) {
  auto type = mlir::RankedTensorType::get(shape, builder.getF32Type());
  return mlir::tosa::ReshapeOp::create(builder, type, value,
                                       mlir::tosa::getTosaConstShape(builder, shape));
}

Value multiply(mlir::ImplicitLocOpBuilder &builder, Value a, Value b,
               mlir::RankedTensorType type) {
  return mlir::tosa::MulOp::create(builder, type, a, b, zeroShift(builder));
}

/// `y * s + t` after a convolution -> the convolution with weights `w * s`
/// and bias `b * s + t`. `y` is the convolution's NHWC result or its NCHW
/// transpose; s and t are per output channel and computed from weights.
bool foldAffineIntoConv(mlir::tosa::AddOp add, WeightOnly &weightOnly) {
  Value scaled = add.getInput1(), shift = add.getInput2();
  if (!scaled.getDefiningOp<mlir::tosa::MulOp>())
    std::swap(scaled, shift);
  auto mul = scaled.getDefiningOp<mlir::tosa::MulOp>();
  if (!mul || !mul->hasOneUse() || !weightOnly(shift))
    return false;
  Value y = mul.getInput1(), scale = mul.getInput2();
  if (weightOnly(y))
    std::swap(y, scale);
  if (!weightOnly(scale) || weightOnly(y) || !y.hasOneUse())
    return false;
  bool nchw = false;
  if (auto transpose = y.getDefiningOp<mlir::tosa::TransposeOp>()) {
    if (transpose.getPermsAttr().asArrayRef() != llvm::ArrayRef<int32_t>{0, 3, 1, 2} ||
        !transpose.getInput1().hasOneUse())
      return false;
    nchw = true;
    y = transpose.getInput1();
  }
  Operation *conv = y.getDefiningOp();
  if (!mlir::isa_and_nonnull<mlir::tosa::Conv2DOp, mlir::tosa::DepthwiseConv2DOp>(conv))
    return false;
  Value weights = conv->getOperand(1), bias = conv->getOperand(2);
  auto output = staticF32Tensor(y.getType());
  auto weightType = staticF32Tensor(weights.getType());
  if (!output || !weightType || !staticF32Tensor(bias.getType()) ||
      !weightOnly(weights) || !weightOnly(bias))
    return false;
  int64_t channels = output.getShape()[3];
  llvm::SmallVector<int64_t> perChannel =
      nchw ? llvm::SmallVector<int64_t>{1, channels, 1, 1}
           : llvm::SmallVector<int64_t>{1, 1, 1, channels};
  auto scaleType = staticF32Tensor(scale.getType());
  auto shiftType = staticF32Tensor(shift.getType());
  if (!scaleType || !shiftType || scaleType.getShape() != llvm::ArrayRef(perChannel) ||
      shiftType.getShape() != llvm::ArrayRef(perChannel) ||
      mlir::cast<mlir::RankedTensorType>(bias.getType()).getShape() !=
          llvm::ArrayRef<int64_t>{channels})
    return false;

  // The new weights are built where s and t are both defined (before the
  // add), and the convolution moves down to them: its other operands are
  // defined earlier still, and its only user (the multiply) goes away.
  mlir::ImplicitLocOpBuilder builder(add.getLoc(), add);
  // conv2d weights are [O, KH, KW, I]; depthwise [KH, KW, C, M] with output
  // channel c * M + m.
  llvm::ArrayRef<int64_t> weightShape = weightType.getShape();
  llvm::SmallVector<int64_t> weightScaleShape =
      mlir::isa<mlir::tosa::Conv2DOp>(conv)
          ? llvm::SmallVector<int64_t>{channels, 1, 1, 1}
          : llvm::SmallVector<int64_t>{1, 1, weightShape[2], weightShape[3]};
  Value newWeights =
      multiply(builder, weights, reshape(builder, scale, weightScaleShape), weightType);
  auto biasType = mlir::cast<mlir::RankedTensorType>(bias.getType());
  Value newBias = mlir::tosa::AddOp::create(
      builder, biasType,
      multiply(builder, bias, reshape(builder, scale, {channels}), biasType),
      reshape(builder, shift, {channels}));
  conv->setOperand(1, newWeights);
  conv->setOperand(2, newBias);
  Value result = mul.getInput1() == scale ? mul.getInput2() : mul.getInput1();
  conv->moveBefore(add);
  if (result != conv->getResult(0))
    result.getDefiningOp()->moveBefore(add);
  add.getOutput().replaceAllUsesWith(result);
  add.erase();
  mul.erase();
  return true;
}

/// The recipe of `value`: a module whose @derive takes `sources` (weight
/// arguments, in first-use order) and returns it.
std::string recipeText(Value value, llvm::SetVector<Value> &sources) {
  llvm::SetVector<Operation *> ops;
  std::function<void(Value)> visit = [&](Value v) {
    Operation *producer = v.getDefiningOp();
    if (!producer) {
      sources.insert(v);
      return;
    }
    if (ops.contains(producer))
      return;
    for (Value operand : producer->getOperands())
      visit(operand);
    ops.insert(producer);
  };
  visit(value);

  mlir::MLIRContext *context = value.getContext();
  mlir::OpBuilder builder(context);
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(value.getLoc());
  builder.setInsertionPointToStart(module->getBody());
  llvm::SmallVector<mlir::Type> argTypes;
  for (Value source : sources)
    argTypes.push_back(source.getType());
  auto function =
      mlir::func::FuncOp::create(builder, value.getLoc(), "derive",
                                 builder.getFunctionType(argTypes, {value.getType()}));
  mlir::Block *body = function.addEntryBlock();
  builder.setInsertionPointToStart(body);
  mlir::IRMapping mapping;
  for (auto [source, arg] : llvm::zip(sources, body->getArguments()))
    mapping.map(source, arg);
  for (Operation *op : ops)
    builder.clone(*op, mapping);
  mlir::func::ReturnOp::create(builder, value.getLoc(), mapping.lookup(value));
  std::string text;
  llvm::raw_string_ostream os(text);
  module->print(os);
  return text;
}

struct DeriveWeightsPass : impl::DeriveWeightsPassBase<DeriveWeightsPass> {
  void runOnOperation() override {
    auto main = getOperation().lookupSymbol<mlir::func::FuncOp>("main");
    if (!main || main.isExternal())
      return;
    foldAffines(main);
    deriveDequantizedWeights(main);
    deriveWeights(main);
    eraseDeadRecipeOps(main);
    deriveWidenedWeights(main);
    dropDeadWeights(main);
  }

  void foldAffines(mlir::func::FuncOp main) {
    llvm::SmallVector<mlir::tosa::AddOp> adds;
    main.walk([&](mlir::tosa::AddOp add) { adds.push_back(add); });
    for (mlir::tosa::AddOp add : adds) {
      // A fresh classification each time: folding adds weight-only ops.
      WeightOnly weightOnly(main);
      if (foldAffineIntoConv(add, weightOnly))
        ++affinesFolded;
    }
  }

  /// A quantized model's weight: arithmetic (its dequantization) on a
  /// widened 8-bit or half weight, then layout moves. The arithmetic becomes
  /// a derived weight of its own and the moves after it stay in the graph,
  /// where a library reads them into its own layout (Winograd's included)
  /// as it does a float32 weight's.
  void deriveDequantizedWeights(mlir::func::FuncOp main) {
    WeightOnly weightOnly(main);
    llvm::SetVector<Value> roots;
    main.walk([&](Operation *op) {
      if (!mlir::isa<mlir::tosa::TransposeOp, mlir::tosa::ReshapeOp>(op))
        return;
      Value moved = op->getOperand(0);
      Operation *producer = moved.getDefiningOp();
      if (producer && isArithmetic(producer) && weightOnly(moved) && widens(moved))
        roots.insert(moved);
    });
    derive(main, roots, [](mlir::OpOperand &) { return true; });
  }

  void deriveWeights(mlir::func::FuncOp main) {
    WeightOnly weightOnly(main);
    // Weight-only values read by the rest of the graph, in graph order.
    llvm::SetVector<Value> roots;
    main.walk([&](Operation *op) {
      if (op == main || weightOnly.op(op))
        return;
      for (Value operand : op->getOperands())
        if (weightOnly(operand) && computes(operand))
          roots.insert(operand);
    });
    derive(main, roots,
           [&](mlir::OpOperand &use) { return !weightOnly.op(use.getOwner()); });
  }

  /// Each half weight widened in the graph (the arithmetic after a widening
  /// is derived already) becomes a float32 weight of its own.
  void deriveWidenedWeights(mlir::func::FuncOp main) {
    WeightOnly weightOnly(main);
    llvm::SetVector<Value> roots;
    main.walk([&](Operation *op) {
      if (isWidening(op) && weightOnly.isWeightArgument(op->getOperand(0)))
        roots.insert(op->getResult(0));
    });
    // Every reader: the moves after it too.
    derive(main, roots, [](mlir::OpOperand &) { return true; });
  }

  /// Makes each of `roots` a derived weight: a new @main argument, which
  /// the readers of the root that `reads` accepts read instead.
  void derive(mlir::func::FuncOp main, const llvm::SetVector<Value> &roots,
              llvm::function_ref<bool(mlir::OpOperand &)> reads) {
    mlir::Builder builder(main.getContext());
    for (Value root : roots) {
      llvm::SetVector<Value> sources;
      std::string recipe = recipeText(root, sources);
      llvm::SmallVector<mlir::Attribute> inputs;
      for (Value source : sources) {
        unsigned index = mlir::cast<mlir::BlockArgument>(source).getArgNumber();
        inputs.push_back(main.getArgAttr(index, "flowc.weight"));
      }
      std::string key = runtime::kDerivedWeightPrefix + std::to_string(derivedCount++);
      llvm::SmallVector<mlir::NamedAttribute> attrs = {
          builder.getNamedAttr("flowc.weight", builder.getStringAttr(key)),
          builder.getNamedAttr(kRecipeAttr, builder.getStringAttr(recipe)),
          builder.getNamedAttr(kRecipeInputsAttr, builder.getArrayAttr(inputs))};
      unsigned index = main.getNumArguments();
      if (mlir::failed(main.insertArgument(
              index, root.getType(), builder.getDictionaryAttr(attrs), root.getLoc()))) {
        main.emitOpError("cannot take derived weight ")
            << llvm::Twine(key) << " as a new argument";
        return signalPassFailure();
      }
      ++weightsDerived;
      Value argument = main.getArgument(index);
      root.replaceUsesWithIf(argument, reads);
    }
  }

  /// Weight-only ops nothing reads any more: the recipes derived.
  void eraseDeadRecipeOps(mlir::func::FuncOp main) {
    // Users come after their operands: in reverse order, a chain of dead
    // ops goes in one sweep.
    llvm::SmallVector<Operation *> ops;
    main.walk([&](Operation *op) {
      if (isRecipeOp(op))
        ops.push_back(op);
    });
    for (Operation *op : llvm::reverse(ops))
      if (op->use_empty())
        op->erase();
  }

  /// Weight-only ops and weight arguments nothing reads any more.
  void dropDeadWeights(mlir::func::FuncOp main) {
    eraseDeadRecipeOps(main);
    WeightOnly weightOnly(main);
    llvm::BitVector dead(main.getNumArguments());
    for (mlir::BlockArgument arg : main.getArguments())
      if (weightOnly.isWeightArgument(arg) && arg.use_empty())
        dead.set(arg.getArgNumber());
    if (mlir::failed(main.eraseArguments(dead))) {
      main.emitOpError("cannot drop the weight arguments nothing reads");
      return signalPassFailure();
    }
    weightsDropped += dead.count();
  }

  int derivedCount = 0;
};

/// A dense float32 array with its shape.
struct Array {
  llvm::SmallVector<int64_t> shape;
  std::vector<float> data;
};

int64_t elementCount(llvm::ArrayRef<int64_t> shape) {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

/// Row-major strides of `shape`, 0 where a dimension of 1 broadcasts to `out`.
llvm::SmallVector<int64_t> broadcastStrides(llvm::ArrayRef<int64_t> shape,
                                            llvm::ArrayRef<int64_t> out) {
  llvm::SmallVector<int64_t> strides(shape.size(), 0);
  int64_t step = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = shape[i] == out[i] ? step : 0;
    step *= shape[i];
  }
  return strides;
}

/// Calls `visit(outIndex, a, b)` over `out` with the offsets of two
/// broadcast operands.
template <typename Visit>
void forEachBroadcast(llvm::ArrayRef<int64_t> out, llvm::ArrayRef<int64_t> aStrides,
                      llvm::ArrayRef<int64_t> bStrides, Visit visit) {
  llvm::SmallVector<int64_t> index(out.size(), 0);
  int64_t a = 0, b = 0, total = elementCount(out);
  for (int64_t i = 0; i < total; ++i) {
    visit(i, a, b);
    for (size_t d = out.size(); d-- > 0;) {
      a += aStrides[d];
      b += bStrides[d];
      if (++index[d] < out[d])
        break;
      a -= aStrides[d] * out[d];
      b -= bStrides[d] * out[d];
      index[d] = 0;
    }
  }
}

Expected<Array> binary(Operation *op, const Array &a, const Array &b,
                       const std::function<float(float, float)> &f) {
  auto type = staticF32Tensor(op->getResult(0).getType());
  if (a.shape.size() != b.shape.size() ||
      static_cast<int64_t>(a.shape.size()) != type.getRank())
    return invalidArgument("derived weight recipe: rank mismatch at " +
                           op->getName().getStringRef().str());
  Array out{llvm::SmallVector<int64_t>(type.getShape()), {}};
  for (size_t d = 0; d < out.shape.size(); ++d)
    if ((a.shape[d] != out.shape[d] && a.shape[d] != 1) ||
        (b.shape[d] != out.shape[d] && b.shape[d] != 1))
      return invalidArgument("derived weight recipe: operands do not broadcast at " +
                             op->getName().getStringRef().str());
  out.data.resize(elementCount(out.shape));
  forEachBroadcast(out.shape, broadcastStrides(a.shape, out.shape),
                   broadcastStrides(b.shape, out.shape),
                   [&](int64_t i, int64_t ai, int64_t bi) {
                     out.data[i] = f(a.data[ai], b.data[bi]);
                   });
  return out;
}

Array unary(const Array &a, const std::function<float(float)> &f) {
  Array out{a.shape, std::vector<float>(a.data.size())};
  for (size_t i = 0; i < a.data.size(); ++i)
    out.data[i] = f(a.data[i]);
  return out;
}

Array transpose(const Array &a, llvm::ArrayRef<int32_t> perms) {
  Array out;
  for (int32_t p : perms)
    out.shape.push_back(a.shape[p]);
  llvm::SmallVector<int64_t> inStrides(a.shape.size(), 1), strides(perms.size());
  for (size_t d = a.shape.size(); d-- > 1;)
    inStrides[d - 1] = inStrides[d] * a.shape[d];
  for (size_t d = 0; d < perms.size(); ++d)
    strides[d] = inStrides[perms[d]];
  out.data.resize(a.data.size());
  llvm::SmallVector<int64_t> zero(perms.size(), 0);
  forEachBroadcast(out.shape, strides, zero,
                   [&](int64_t i, int64_t from, int64_t) { out.data[i] = a.data[from]; });
  return out;
}

/// `a` with `axis` in reverse order.
Array reverse(const Array &a, int64_t axis) {
  int64_t extent = a.shape[axis], inner = 1;
  for (size_t d = static_cast<size_t>(axis) + 1; d < a.shape.size(); ++d)
    inner *= a.shape[d];
  int64_t outer =
      extent * inner == 0 ? 0 : static_cast<int64_t>(a.data.size()) / (extent * inner);
  Array out{a.shape, std::vector<float>(a.data.size())};
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < extent; ++k)
      std::copy_n(a.data.begin() + ((o * extent + extent - 1 - k) * inner), inner,
                  out.data.begin() + ((o * extent + k) * inner));
  return out;
}

/// `a` padded by [before, after] per axis with `value`.
Array pad(const Array &a, llvm::ArrayRef<int64_t> padding, float value) {
  Array out;
  for (size_t d = 0; d < a.shape.size(); ++d)
    out.shape.push_back(padding[2 * d] + a.shape[d] + padding[2 * d + 1]);
  out.data.assign(elementCount(out.shape), value);
  // Each input element's offset in the output: the padding's offset plus
  // the input's index along each axis at the output's strides.
  llvm::SmallVector<int64_t> outStrides(out.shape.size(), 1);
  for (size_t d = out.shape.size(); d-- > 1;)
    outStrides[d - 1] = outStrides[d] * out.shape[d];
  int64_t base = 0;
  for (size_t d = 0; d < out.shape.size(); ++d)
    base += padding[2 * d] * outStrides[d];
  llvm::SmallVector<int64_t> zero(a.shape.size(), 0);
  forEachBroadcast(a.shape, outStrides, zero, [&](int64_t i, int64_t to, int64_t) {
    out.data[base + to] = a.data[i];
  });
  return out;
}

Expected<Array> evaluatePad(mlir::tosa::PadOp op, const Array &a,
                            llvm::DenseMap<Value, Array> &values) {
  llvm::SmallVector<int64_t> padding;
  auto fill = values.find(op.getPadConst());
  if (!mlir::tosa::getConstShapeValues(op.getPadding().getDefiningOp(), padding) ||
      padding.size() != 2 * a.shape.size() || fill == values.end() ||
      fill->second.data.size() != 1 ||
      llvm::any_of(padding, [](int64_t amount) { return amount < 0; }))
    return invalidArgument("derived weight recipe: a pad without constant, non-negative "
                           "padding and a scalar pad value");
  return pad(a, padding, fill->second.data[0]);
}

Expected<Array> evaluate(Operation *op, llvm::DenseMap<Value, Array> &values) {
  auto operand = [&](unsigned i) -> Expected<const Array *> {
    auto it = values.find(op->getOperand(i));
    if (it == values.end())
      return invalidArgument("derived weight recipe: operand " + std::to_string(i) +
                             " of " + op->getName().getStringRef().str() +
                             " is not a float32 value");
    return &it->second;
  };
  if (auto constant = mlir::dyn_cast<mlir::tosa::ConstOp>(op)) {
    auto type = staticF32Tensor(constant.getType());
    auto elements = mlir::dyn_cast<mlir::DenseElementsAttr>(constant.getValues());
    if (!elements)
      return invalidArgument("derived weight recipe: a constant is not dense data");
    Array out{llvm::SmallVector<int64_t>(type.getShape()), {}};
    for (float value : elements.getValues<float>())
      out.data.push_back(value);
    return out;
  }
  FLOWC_ASSIGN_OR_RETURN(const Array *a, operand(0));
  // A narrow source was widened as it was read.
  if (isWidening(op))
    return *a;
  if (mlir::isa<mlir::tosa::ReshapeOp>(op)) {
    auto type = staticF32Tensor(op->getResult(0).getType());
    return Array{llvm::SmallVector<int64_t>(type.getShape()), a->data};
  }
  if (auto t = mlir::dyn_cast<mlir::tosa::TransposeOp>(op))
    return transpose(*a, t.getPermsAttr().asArrayRef());
  if (auto r = mlir::dyn_cast<mlir::tosa::ReverseOp>(op)) {
    if (r.getAxis() >= a->shape.size())
      return invalidArgument("derived weight recipe: reverse axis " +
                             std::to_string(r.getAxis()) + " of a rank-" +
                             std::to_string(a->shape.size()) + " value");
    return reverse(*a, r.getAxis());
  }
  if (auto p = mlir::dyn_cast<mlir::tosa::PadOp>(op))
    return evaluatePad(p, *a, values);
  if (mlir::isa<mlir::tosa::RsqrtOp>(op))
    return unary(*a, [](float x) { return 1.0f / std::sqrt(x); });
  if (mlir::isa<mlir::tosa::ReciprocalOp>(op))
    return unary(*a, [](float x) { return 1.0f / x; });
  if (mlir::isa<mlir::tosa::NegateOp>(op))
    return unary(*a, [](float x) { return -x; });
  if (auto c = mlir::dyn_cast<mlir::tosa::ClampOp>(op)) {
    auto low = mlir::dyn_cast<mlir::FloatAttr>(c.getMinValAttr());
    auto high = mlir::dyn_cast<mlir::FloatAttr>(c.getMaxValAttr());
    if (!low || !high)
      return invalidArgument("derived weight recipe: a clamp without float bounds");
    float lo = low.getValueAsDouble(), hi = high.getValueAsDouble();
    return unary(*a, [=](float x) { return std::min(std::max(x, lo), hi); });
  }
  FLOWC_ASSIGN_OR_RETURN(const Array *b, operand(1));
  if (mlir::isa<mlir::tosa::AddOp>(op))
    return binary(op, *a, *b, [](float x, float y) { return x + y; });
  if (mlir::isa<mlir::tosa::SubOp>(op))
    return binary(op, *a, *b, [](float x, float y) { return x - y; });
  if (mlir::isa<mlir::tosa::MulOp>(op))
    return binary(op, *a, *b, [](float x, float y) { return x * y; });
  return invalidArgument("derived weight recipe: unsupported op " +
                         op->getName().getStringRef().str());
}

} // namespace

CodeWeights collectCodeWeights(mlir::ModuleOp module) {
  CodeWeights weights;
  auto main = module.lookupSymbol<mlir::func::FuncOp>("main");
  if (!main)
    return weights;
  for (unsigned i = 0; i < main.getNumArguments(); ++i) {
    auto key = main.getArgAttrOfType<mlir::StringAttr>(i, "flowc.weight");
    if (!key)
      continue;
    weights.keys.push_back(key.str());
    auto recipe = main.getArgAttrOfType<mlir::StringAttr>(i, kRecipeAttr);
    auto inputs = main.getArgAttrOfType<mlir::ArrayAttr>(i, kRecipeInputsAttr);
    if (!recipe || !inputs)
      continue;
    DerivedWeight derived;
    derived.key = key.str();
    derived.recipe = recipe.str();
    for (mlir::Attribute input : inputs)
      derived.inputs.push_back(mlir::cast<mlir::StringAttr>(input).str());
    auto type = mlir::cast<mlir::ShapedType>(main.getArgument(i).getType());
    derived.info = {key.str(), DType::F32,
                    std::vector<int64_t>(type.getShape().begin(), type.getShape().end())};
    weights.derived.push_back(std::move(derived));
  }
  return weights;
}

Expected<std::string> evaluateDerivedWeight(const DerivedWeight &weight,
                                            const std::vector<std::string_view> &inputs) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::func::FuncDialect, mlir::tosa::TosaDialect>();
  mlir::MLIRContext context(registry, mlir::MLIRContext::Threading::DISABLED);
  context.allowUnregisteredDialects(false);
  // The recipe comes from our own compiler; still, a damaged one must fail
  // with a message, not crash.
  mlir::ScopedDiagnosticHandler quiet(&context,
                                      [](mlir::Diagnostic &) { return mlir::success(); });
  auto module = mlir::parseSourceString<mlir::ModuleOp>(weight.recipe, &context);
  auto derive = module ? module->lookupSymbol<mlir::func::FuncOp>("derive") : nullptr;
  if (!derive || derive.isExternal())
    return invalidArgument("derived weight '" + weight.key +
                           "': the recipe does not parse or has no @derive");
  if (derive.getNumArguments() != inputs.size() ||
      derive.getNumArguments() != weight.inputs.size())
    return invalidArgument("derived weight '" + weight.key + "' takes " +
                           std::to_string(derive.getNumArguments()) + " weights, got " +
                           std::to_string(inputs.size()));
  llvm::DenseMap<Value, Array> values;
  for (unsigned i = 0; i < inputs.size(); ++i) {
    mlir::Type argType = derive.getArgument(i).getType();
    auto type = staticF32Tensor(argType);
    DType dtype = DType::F32;
    if (auto narrow = staticNarrowTensor(argType)) {
      type = narrow;
      mlir::Type element = narrow.getElementType();
      dtype = element.isF16() ? DType::F16 : element.isBF16() ? DType::BF16 : DType::I8;
    }
    std::string wanted = dtype == DType::I8 ? "8-bit" : dtypeName(dtype);
    if (!type ||
        inputs[i].size() != static_cast<size_t>(type.getNumElements()) * dtypeSize(dtype))
      return invalidArgument(
          "derived weight '" + weight.key + "': source weight '" + weight.inputs[i] +
          "' has " + std::to_string(inputs[i].size()) + " bytes, the recipe expects a " +
          wanted + " tensor of " + std::to_string(type ? type.getNumElements() : 0) +
          " elements");
    // A narrow source is widened as it is read.
    Array array{llvm::SmallVector<int64_t>(type.getShape()),
                std::move(*floatValues(dtype, inputs[i]))};
    values[derive.getArgument(i)] = std::move(array);
  }
  for (Operation &op : derive.getBody().front()) {
    if (auto ret = mlir::dyn_cast<mlir::func::ReturnOp>(op)) {
      auto it = values.find(ret.getOperand(0));
      if (it == values.end())
        break;
      const std::vector<float> &data = it->second.data;
      return std::string(reinterpret_cast<const char *>(data.data()),
                         data.size() * sizeof(float));
    }
    // Shape operands and the multiply's shift are not float data.
    if (mlir::isa<mlir::tosa::ConstShapeOp>(op) ||
        (mlir::isa<mlir::tosa::ConstOp>(op) &&
         !staticF32Tensor(op.getResult(0).getType())))
      continue;
    FLOWC_ASSIGN_OR_RETURN(Array result, evaluate(&op, values));
    values[op.getResult(0)] = std::move(result);
  }
  return invalidArgument("derived weight '" + weight.key +
                         "': the recipe returns no float32 value");
}

} // namespace flowc::compiler
