// Elementwise math: arithmetic, activations, comparisons and logic,
// reductions, with their static costs.
#include "Importer.h"
#include "OpCost.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace flowc::compiler::import {

Status Importer::importBinary(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value y, elementwise(node));
  return define(node, y);
}

Expected<Value> Importer::elementwise(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value a, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value b, anyOperand(node, 1));
  mlir::Type element = elementTypeOf(a);
  const std::string &op = node.opType;
  // Integer Add, Sub and Mul wrap in two's complement, as onnxruntime's do
  // (position ids: cumulative sums of a mask, plus an offset); integer Div
  // truncates.
  bool integral = element.isInteger(32) || element.isInteger(64);
  if (!element.isF32() && !integral)
    return nodeUnsupported(node, "input '" + node.inputs[0] + "' is " +
                                     dtypeName(dtypeOf(a)) + "; " + op +
                                     " is supported on float32, int32 and int64 only");
  FLOWC_RETURN_IF_ERROR(sameElementType(node, a, b));
  FLOWC_ASSIGN_OR_RETURN(Shape out, broadcastShape(node, shapeOf(a), shapeOf(b)));
  FLOWC_ASSIGN_OR_RETURN(a, broadcastTo(node, a, out.size()));
  FLOWC_ASSIGN_OR_RETURN(b, broadcastTo(node, b, out.size()));
  if (op == "Add")
    return buildTyped<mlir::tosa::AddOp>(element, out, {a, b});
  if (op == "Sub")
    return buildTyped<mlir::tosa::SubOp>(element, out, {a, b});
  if (op == "Mul" && integral)
    return buildTyped<mlir::tosa::MulOp>(element, out, {a, b, zeroShift()});
  if (op == "Div" && integral)
    return integerDivision(node, a, b, out).first;
  if (op == "Mul" || op == "Div") {
    if (op == "Div")
      b = build<mlir::tosa::ReciprocalOp>(shapeOf(b), {b});
    return mul(a, b);
  }
  return nodeUnsupported(node, "not an elementwise binary op");
}

std::pair<Value, Value> Importer::integerDivision(const Node &node, Value a, Value b,
                                                  const Shape &out) {
  mlir::Type element = elementTypeOf(a), i1 = builder_.getI1Type();
  size_t rank = out.size();
  int64_t lowest = element.isInteger(32) ? std::numeric_limits<int32_t>::min()
                                         : std::numeric_limits<int64_t>::min();
  auto equals = [&](Value v, int64_t value) {
    Shape shape = shapeOf(v);
    return buildTyped<mlir::tosa::EqualOp>(i1, shape, {v, integer(element, value, rank)});
  };
  // A zero divisor would trap the process (SIGFPE), and so would the one
  // quotient past the type, lowest / -1. Both divide by 1 instead: the
  // first fails the run, the second wraps to `lowest` as two's complement
  // does.
  Value zero = equals(b, 0);
  failRunIf(node, zero, "a divisor is zero");
  Value overflow =
      buildTyped<mlir::tosa::LogicalAndOp>(i1, out, {equals(a, lowest), equals(b, -1)});
  Value unsafe = buildTyped<mlir::tosa::LogicalOrOp>(i1, out, {zero, overflow});
  Value divisor = buildTyped<mlir::tosa::SelectOp>(
      element, out, {unsafe, integer(element, 1, rank), b});
  Value quotient = buildTyped<mlir::tosa::IntDivOp>(element, out, {a, divisor});
  Value product =
      buildTyped<mlir::tosa::MulOp>(element, out, {quotient, divisor, zeroShift()});
  return {quotient, buildTyped<mlir::tosa::SubOp>(element, out, {a, product})};
}

/// Mod of integers at run time (constant ones fold at import): fmod=1
/// keeps the dividend's sign (C's %), fmod=0 the divisor's (Python's %).
Status Importer::importMod(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value a, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value b, anyOperand(node, 1));
  mlir::Type element = elementTypeOf(a), i1 = builder_.getI1Type();
  if (!element.isInteger(32) && !element.isInteger(64))
    return nodeUnsupported(node, "input '" + node.inputs[0] + "' is " +
                                     dtypeName(dtypeOf(a)) +
                                     "; Mod at run time is supported on int32 and "
                                     "int64 only");
  FLOWC_RETURN_IF_ERROR(sameElementType(node, a, b));
  FLOWC_ASSIGN_OR_RETURN(Shape out, broadcastShape(node, shapeOf(a), shapeOf(b)));
  FLOWC_ASSIGN_OR_RETURN(a, broadcastTo(node, a, out.size()));
  FLOWC_ASSIGN_OR_RETURN(b, broadcastTo(node, b, out.size()));
  Value rest = integerDivision(node, a, b, out).second;
  if (intAttr(node, "fmod", 0) != 0)
    return define(node, rest);
  // A nonzero remainder whose sign differs from the divisor's moves by
  // one divisor.
  size_t rank = out.size();
  Value zero = integer(element, 0, rank);
  auto negative = [&](Value v) {
    return buildTyped<mlir::tosa::GreaterOp>(i1, shapeOf(v), {zero, v});
  };
  Value nonzero = buildTyped<mlir::tosa::LogicalNotOp>(
      i1, out, {buildTyped<mlir::tosa::EqualOp>(i1, out, {rest, zero})});
  Value differ =
      buildTyped<mlir::tosa::LogicalXorOp>(i1, out, {negative(rest), negative(b)});
  Value moves = buildTyped<mlir::tosa::LogicalAndOp>(i1, out, {nonzero, differ});
  Value moved = buildTyped<mlir::tosa::AddOp>(element, out, {rest, b});
  return define(node,
                buildTyped<mlir::tosa::SelectOp>(element, out, {moves, moved, rest}));
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
  Shape full = shape;
  // L1, L2, SumSquare, LogSum and LogSumExp are sums of a transformed x,
  // LogSumExp after the maximum is taken out so that exp cannot overflow.
  Value peak;
  if (op == "ReduceL1")
    x = build<mlir::tosa::AbsOp>(full, {x});
  if (op == "ReduceL2" || op == "ReduceSumSquare")
    x = mul(x, x);
  if (op == "ReduceLogSumExp") {
    peak = x;
    Shape peakShape = full;
    for (int64_t axis : axes) {
      peakShape[axis] = 1;
      peak = build<mlir::tosa::ReduceMaxOp>(
          peakShape, {peak}, {attr("axis", builder_.getI32IntegerAttr(axis))});
    }
    // An all -inf (or +inf) slice keeps its maximum as the answer.
    Value finite = buildTyped<mlir::tosa::EqualOp>(
        builder_.getI1Type(), peakShape,
        {build<mlir::tosa::SubOp>(peakShape, {peak, peak}), scalar(0.0f, full.size())});
    peak =
        build<mlir::tosa::SelectOp>(peakShape, {finite, peak, scalar(0.0f, full.size())});
    x = build<mlir::tosa::ExpOp>(full, {build<mlir::tosa::SubOp>(full, {x, peak})});
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
  Value y = x;
  if (op == "ReduceMean")
    y = mul(x, scalar(1.0f / static_cast<float>(count), shape.size()));
  if (op == "ReduceL2")
    y = build<mlir::tosa::PowOp>(shape, {x, scalar(0.5f, shape.size())});
  if (op == "ReduceLogSum" || op == "ReduceLogSumExp")
    y = build<mlir::tosa::LogOp>(shape, {x});
  if (op == "ReduceLogSumExp")
    y = build<mlir::tosa::AddOp>(shape, {y, peak});
  if (intAttr(node, "keepdims", 1))
    return define(node, y);
  Shape kept;
  for (int64_t i = 0; i < rank; ++i)
    if (!std::binary_search(axes.begin(), axes.end(), i))
      kept.push_back(shape[i]);
  return define(node, reshape(y, kept));
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

Status Importer::importWhere(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value condition, anyOperand(node, 0));
  if (!elementTypeOf(condition).isInteger(1))
    return nodeError(node, "condition must be bool");
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 1));
  FLOWC_ASSIGN_OR_RETURN(Value y, anyOperand(node, 2));
  FLOWC_RETURN_IF_ERROR(sameElementType(node, x, y));
  FLOWC_ASSIGN_OR_RETURN(Shape xy, broadcastShape(node, shapeOf(x), shapeOf(y)));
  FLOWC_ASSIGN_OR_RETURN(Shape out, broadcastShape(node, shapeOf(condition), xy));
  FLOWC_ASSIGN_OR_RETURN(condition, broadcastTo(node, condition, out.size()));
  FLOWC_ASSIGN_OR_RETURN(x, broadcastTo(node, x, out.size()));
  FLOWC_ASSIGN_OR_RETURN(y, broadcastTo(node, y, out.size()));
  return define(
      node, buildTyped<mlir::tosa::SelectOp>(elementTypeOf(x), out, {condition, x, y}));
}

Status Importer::importUnary(const Node &node) {
  const std::string &op = node.opType;
  FLOWC_ASSIGN_OR_RETURN(Value any, anyOperand(node, 0));
  mlir::Type element = elementTypeOf(any);
  // Neg and Abs of integers (relative positions): 0 - x, wrapping as
  // onnxruntime's do (the most negative value stays itself).
  if ((op == "Neg" || op == "Abs") && (element.isInteger(32) || element.isInteger(64))) {
    Shape shape = shapeOf(any);
    Value zero = zeros(element, Shape(shape.size(), 1));
    Value negated = buildTyped<mlir::tosa::SubOp>(element, shape, {zero, any});
    if (op == "Neg")
      return define(node, negated);
    Value negative =
        buildTyped<mlir::tosa::GreaterOp>(builder_.getI1Type(), shape, {zero, any});
    return define(
        node, buildTyped<mlir::tosa::SelectOp>(element, shape, {negative, negated, any}));
  }
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape shape = shapeOf(x);
  size_t rank = shape.size();
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
  auto i1 = builder_.getI1Type();
  if (op == "Sign") {
    // -1, 0 or 1; NaN stays NaN (it is neither above nor below 0).
    Value zero = scalar(0.0f, rank);
    Value above = buildTyped<mlir::tosa::GreaterOp>(i1, shape, {x, zero});
    Value below = buildTyped<mlir::tosa::GreaterOp>(i1, shape, {zero, x});
    Value y = build<mlir::tosa::SelectOp>(shape, {above, scalar(1.0f, rank), x});
    y = build<mlir::tosa::SelectOp>(shape, {below, scalar(-1.0f, rank), y});
    Value isZero = buildTyped<mlir::tosa::EqualOp>(i1, shape, {x, zero});
    return define(node, build<mlir::tosa::SelectOp>(shape, {isZero, zero, y}));
  }
  if (op == "Round") {
    // Halves to even, as ONNX (and C's nearbyint) round: floor(x), plus 1
    // above a half, plus floor's parity at exactly a half.
    Value low = build<mlir::tosa::FloorOp>(shape, {x});
    Value fraction = build<mlir::tosa::SubOp>(shape, {x, low});
    Value half = scalar(0.5f, rank);
    Value halfOfLow = mul(low, half);
    Value odd = build<mlir::tosa::SubOp>(
        shape,
        {low, mul(build<mlir::tosa::FloorOp>(shape, {halfOfLow}), scalar(2.0f, rank))});
    Value up = build<mlir::tosa::SelectOp>(
        shape, {buildTyped<mlir::tosa::GreaterOp>(i1, shape, {fraction, half}),
                scalar(1.0f, rank), scalar(0.0f, rank)});
    Value tie = buildTyped<mlir::tosa::EqualOp>(i1, shape, {fraction, half});
    up = build<mlir::tosa::SelectOp>(shape, {tie, odd, up});
    return define(node, build<mlir::tosa::AddOp>(shape, {low, up}));
  }
  if (op == "Cos")
    return define(node, build<mlir::tosa::CosOp>(shape, {x}));
  // log(1 + exp(x)), as max(x, 0) + log(1 + exp(-|x|)) so large x cannot overflow.
  auto softplus = [&] {
    Value negAbs = mul(build<mlir::tosa::AbsOp>(shape, {x}), scalar(-1.0f, rank));
    Value tail = build<mlir::tosa::LogOp>(
        shape,
        {build<mlir::tosa::AddOp>(
            shape, {build<mlir::tosa::ExpOp>(shape, {negAbs}), scalar(1.0f, rank)})});
    return build<mlir::tosa::AddOp>(
        shape, {clamp(x, 0.0f, std::numeric_limits<float>::infinity()), tail});
  };
  if (op == "Softplus")
    return define(node, softplus());
  // x * tanh(softplus(x)) (YOLOv4's activation).
  if (op == "Mish")
    return define(node, mul(x, build<mlir::tosa::TanhOp>(shape, {softplus()})));
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

Value Importer::atan2NonNegative(Value y, Value x) {
  Shape shape = sameRankBroadcast(y, x);
  size_t rank = shape.size();
  mlir::Type i1 = builder_.getI1Type();
  auto constant = [&](double value) { return scalar(static_cast<float>(value), rank); };
  auto select = [&](Value condition, Value a, Value b) {
    return build<mlir::tosa::SelectOp>(shape, {condition, a, b});
  };
  auto greater = [&](Value a, Value b) {
    return buildTyped<mlir::tosa::GreaterOp>(i1, sameRankBroadcast(a, b), {a, b});
  };
  auto divide = [&](Value a, Value b) {
    return mul(a, build<mlir::tosa::ReciprocalOp>(shape, {b}));
  };
  const double pi = 3.14159265358979323846;
  Value across = build<mlir::tosa::AbsOp>(shapeOf(x), {x});
  // The angle's tangent or cotangent, whichever is in [0, 1]; 0 / 0 (at
  // the origin) is 0, and NaN stays NaN.
  Value steep = greater(y, across);
  Value low = select(steep, across, y), high = select(steep, y, across);
  Value origin =
      buildTyped<mlir::tosa::EqualOp>(i1, shapeOf(high), {high, constant(0.0)});
  Value t = select(origin, constant(0.0), divide(low, high));
  // Past tan(pi/12), atan(t) = pi/6 + atan((t·√3 - 1) / (t + √3)), whose
  // argument is within ±tan(pi/12) = ±0.268: there the odd Taylor series
  // to u¹¹ leaves its next term, u¹³/13, below float32's resolution.
  const double root3 = 1.73205080756887729353;
  Value far = greater(t, constant(0.26794919243112270647));
  Value u = select(
      far, divide(sub(mul(t, constant(root3)), constant(1.0)), add(t, constant(root3))),
      t);
  Value u2 = mul(u, u);
  Value series = constant(-1.0 / 11);
  for (double term : {1.0 / 9, -1.0 / 7, 1.0 / 5, -1.0 / 3, 1.0})
    series = add(mul(series, u2), constant(term));
  Value angle = mul(u, series);
  angle = select(far, add(angle, constant(pi / 6)), angle);
  angle = select(steep, sub(constant(pi / 2), angle), angle);
  return select(greater(constant(0.0), x), sub(constant(pi), angle), angle);
}

/// Hyperbolic and inverse hyperbolic functions, tan, the shrinking
/// activations and the float classes, from exp, log, sin, cos and compares
/// (TOSA has none of them).
Status Importer::importElementary(const Node &node) {
  const std::string &op = node.opType;
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape shape = shapeOf(x);
  size_t rank = shape.size();
  mlir::Type i1 = builder_.getI1Type();
  auto times = [&](Value a, float by) { return mul(a, scalar(by, rank)); };
  auto exp = [&](Value a) { return build<mlir::tosa::ExpOp>(shape, {a}); };
  auto log = [&](Value a) { return build<mlir::tosa::LogOp>(shape, {a}); };
  auto sqrt = [&](Value a) {
    return build<mlir::tosa::PowOp>(shape, {a, scalar(0.5f, rank)});
  };
  auto select = [&](Value condition, Value a, Value b) {
    return build<mlir::tosa::SelectOp>(shape, {condition, a, b});
  };
  auto greater = [&](Value a, Value b) {
    return buildTyped<mlir::tosa::GreaterOp>(i1, shape, {a, b});
  };
  Value one = scalar(1.0f, rank), zero = scalar(0.0f, rank);
  if (op == "Atan" || op == "Asin" || op == "Acos") {
    auto atan2 = [&](Value y, Value x) { return atan2NonNegative(y, x); };
    // sqrt(1 - x²) as sqrt((1 - x)(1 + x)): exact near |x| = 1.
    auto cosine = [&] { return sqrt(mul(sub(one, x), add(one, x))); };
    if (op == "Acos")
      return define(node, atan2(cosine(), x));
    Value magnitude = build<mlir::tosa::AbsOp>(shape, {x});
    Value y = op == "Atan" ? atan2(magnitude, one) : atan2(magnitude, cosine());
    return define(node, select(greater(zero, x), times(y, -1.0f), y));
  }
  if (op == "Tan")
    return define(node, mul(build<mlir::tosa::SinOp>(shape, {x}),
                            build<mlir::tosa::ReciprocalOp>(
                                shape, {build<mlir::tosa::CosOp>(shape, {x})})));
  if (op == "Sinh" || op == "Cosh") {
    Value up = exp(x), down = exp(times(x, -1.0f));
    return define(node, times(op == "Sinh" ? sub(up, down) : add(up, down), 0.5f));
  }
  if (op == "Asinh") {
    // sign(x) · log(|x| + sqrt(x² + 1)): no cancellation for negative x.
    Value magnitude = build<mlir::tosa::AbsOp>(shape, {x});
    Value y = log(add(magnitude, sqrt(add(mul(x, x), one))));
    return define(node, select(greater(zero, x), times(y, -1.0f), y));
  }
  if (op == "Acosh")
    return define(node, log(add(x, sqrt(sub(mul(x, x), one)))));
  if (op == "Atanh")
    return define(node, times(log(mul(add(one, x), build<mlir::tosa::ReciprocalOp>(
                                                       shape, {sub(one, x)}))),
                              0.5f));
  if (op == "ThresholdedRelu")
    return define(
        node, select(greater(x, scalar(floatAttr(node, "alpha", 1.0f), rank)), x, zero));
  if (op == "Shrink") {
    float bias = floatAttr(node, "bias", 0.0f), lambd = floatAttr(node, "lambd", 0.5f);
    Value y = select(greater(x, scalar(lambd, rank)), sub(x, scalar(bias, rank)), zero);
    return define(
        node, select(greater(scalar(-lambd, rank), x), add(x, scalar(bias, rank)), y));
  }
  if (op == "Celu") {
    // max(0, x) + min(0, alpha · (exp(x / alpha) - 1))
    float alpha = floatAttr(node, "alpha", 1.0f);
    if (alpha == 0.0f)
      return nodeError(node, "alpha is 0 (Celu divides by it)");
    Value negative = times(sub(exp(times(x, 1.0f / alpha)), one), alpha);
    float infinity = std::numeric_limits<float>::infinity();
    return define(node, add(clamp(x, 0.0f, infinity), clamp(negative, -infinity, 0.0f)));
  }
  if (op == "IsNaN")
    return define(node,
                  buildTyped<mlir::tosa::LogicalNotOp>(
                      i1, shape, {buildTyped<mlir::tosa::EqualOp>(i1, shape, {x, x})}));
  // IsInf
  float infinity = std::numeric_limits<float>::infinity();
  Value positive =
      buildTyped<mlir::tosa::EqualOp>(i1, shape, {x, scalar(infinity, rank)});
  Value negative =
      buildTyped<mlir::tosa::EqualOp>(i1, shape, {x, scalar(-infinity, rank)});
  bool wantPositive = intAttr(node, "detect_positive", 1) != 0;
  bool wantNegative = intAttr(node, "detect_negative", 1) != 0;
  if (wantPositive && wantNegative)
    return define(node,
                  buildTyped<mlir::tosa::LogicalOrOp>(i1, shape, {positive, negative}));
  if (wantPositive)
    return define(node, positive);
  if (wantNegative)
    return define(node, negative);
  return define(node, buildTyped<mlir::tosa::EqualOp>(i1, shape, {zero, one}));
}

/// Max, Min, Sum and Mean of any number of broadcast inputs.
Status Importer::importVariadic(const Node &node) {
  const std::string &op = node.opType;
  if (node.inputs.empty())
    return nodeError(node, op + " needs at least one input");
  // Max and Min of int32 or int64 too (clamped position buckets); Sum and
  // Mean are float ops in ONNX.
  bool integers = op == "Max" || op == "Min";
  FLOWC_ASSIGN_OR_RETURN(Value y, integers ? anyOperand(node, 0) : operand(node, 0));
  mlir::Type element = elementTypeOf(y);
  if (!element.isF32() && !element.isInteger(32) && !element.isInteger(64))
    return nodeUnsupported(node, "input '" + node.inputs[0] + "' is " +
                                     dtypeName(dtypeOf(y)) + "; " + op +
                                     " is supported on float32, int32 and int64 only");
  for (size_t i = 1; i < node.inputs.size(); ++i) {
    FLOWC_ASSIGN_OR_RETURN(Value next, anyOperand(node, i));
    FLOWC_RETURN_IF_ERROR(sameElementType(node, y, next));
    Shape out;
    FLOWC_ASSIGN_OR_RETURN(auto pair, broadcastPair(node, y, next, out));
    y = op == "Max"
            ? buildTyped<mlir::tosa::MaximumOp>(element, out, {pair.first, pair.second})
        : op == "Min"
            ? buildTyped<mlir::tosa::MinimumOp>(element, out, {pair.first, pair.second})
            : buildTyped<mlir::tosa::AddOp>(element, out, {pair.first, pair.second});
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
  FLOWC_RETURN_IF_ERROR(sameElementType(node, a, b));
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
  Shape shape = shapeOf(x);
  FLOWC_ASSIGN_OR_RETURN(int64_t axis, axisOf(node, 0, shape));
  if (node.opType == "ArgMin")
    x = mul(x, scalar(-1.0f, shape.size()));
  // The last of equal extremes is the first one along the reversed axis.
  bool last = intAttr(node, "select_last_index", 0) != 0;
  if (last)
    x = reverseAlong(x, axis);
  Shape reduced = shape, kept = shape;
  reduced.erase(reduced.begin() + axis);
  kept[axis] = 1;
  mlir::Type i32 = builder_.getI32Type();
  Value index = buildTyped<mlir::tosa::ArgMaxOp>(
      i32, reduced, {x}, {attr("axis", builder_.getI32IntegerAttr(axis))});
  if (last)
    index = buildTyped<mlir::tosa::SubOp>(
        i32, reduced, {integer(i32, shape[axis] - 1, reduced.size()), index});
  Value wide = buildTyped<mlir::tosa::CastOp>(builder_.getI64Type(), reduced, {index});
  return define(node, intAttr(node, "keepdims", 1) ? reshape(wide, kept) : wide);
}

/// x where x >= 0, slope * x where x < 0; the slope broadcasts to x
/// (unidirectionally: the result has x's shape), so a per-channel slope
/// is [C, 1, 1].
Status Importer::importPRelu(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value slope, operand(node, 1));
  Shape shape = shapeOf(x), out;
  FLOWC_ASSIGN_OR_RETURN(auto pair, broadcastPair(node, x, slope, out));
  if (out != shape)
    return nodeError(node, "slope " + shapeString(shapeOf(slope)) +
                               " does not broadcast to input " + shapeString(shape));
  Value isNegative = buildTyped<mlir::tosa::GreaterOp>(builder_.getI1Type(), shape,
                                                       {scalar(0.0f, shape.size()), x});
  return define(node, build<mlir::tosa::SelectOp>(
                          shape, {isNegative, mul(pair.first, pair.second), x}));
}

namespace {

/// Max, Min, Sum, Mean: one FLOP per output element for each input after
/// the first (Mean adds the division).
std::optional<uint64_t> variadicFlops(const NodeRecord &record, const Node *) {
  uint64_t combines = record.inputs.size() > 1 ? record.inputs.size() - 1 : 0;
  return (combines + (record.opType == "Mean" ? 1 : 0)) * outputElements(record);
}

using I = Importer;
constexpr OpSignature kBinary{2, 2, 1, 1};
constexpr OpSignature kVariadic{1, kAnyCount, 1, 1, true};
/// Reductions took their axes as an attribute before opset 18.
constexpr OpSignature kReduce{1, 2, 1, 1};

// The family's op table (OpRegistry.h): one entry per op and opset range.
constexpr OpInfo kOps[] = {
    {.name = "Abs", .import = &I::importUnary, .cost = perElement<1>},
    {.name = "Acos",
     .sinceVersion = 7,
     .import = &I::importElementary,
     .cost = perElement<12>},
    {.name = "Acosh",
     .sinceVersion = 9,
     .import = &I::importElementary,
     .cost = perElement<5>},
    {.name = "Add",
     .signature = kBinary,
     .import = &I::importBinary,
     .cost = perElement<1>},
    {.name = "And", .signature = kBinary, .import = &I::importLogical},
    {.name = "ArgMax", .import = &I::importArgExtreme},
    {.name = "ArgMin", .import = &I::importArgExtreme},
    {.name = "Asin",
     .sinceVersion = 7,
     .import = &I::importElementary,
     .cost = perElement<12>},
    {.name = "Asinh",
     .sinceVersion = 9,
     .import = &I::importElementary,
     .cost = perElement<6>},
    {.name = "Atan",
     .sinceVersion = 7,
     .import = &I::importElementary,
     .cost = perElement<10>},
    {.name = "Atanh",
     .sinceVersion = 9,
     .import = &I::importElementary,
     .cost = perElement<5>},
    {.name = "Ceil", .import = &I::importUnary, .cost = perElement<1>},
    {.name = "Celu",
     .sinceVersion = 12,
     .import = &I::importElementary,
     .cost = perElement<5>},
    // min, max
    {.name = "Clip",
     .signature = {1, 3, 1, 1},
     .import = &I::importClip,
     .cost = perElement<2>},
    {.name = "Cos", .sinceVersion = 7, .import = &I::importUnary},
    {.name = "Cosh",
     .sinceVersion = 9,
     .import = &I::importElementary,
     .cost = perElement<4>},
    {.name = "Div",
     .signature = kBinary,
     .import = &I::importBinary,
     .cost = perElement<1>,
     .positiveInputs = 1u << 1}, // the divisor
    {.name = "Elu", .import = &I::importUnary},
    {.name = "Equal",
     .signature = kBinary,
     .import = &I::importCompare,
     .cost = perElement<1>},
    {.name = "Erf",
     .sinceVersion = 9,
     .import = &I::importActivation,
     .cost = perElement<1>},
    {.name = "Exp", .import = &I::importActivation, .cost = perElement<1>},
    {.name = "Floor", .import = &I::importUnary, .cost = perElement<1>},
    {.name = "Greater",
     .signature = kBinary,
     .import = &I::importCompare,
     .cost = perElement<1>},
    {.name = "GreaterOrEqual",
     .sinceVersion = 12,
     .signature = kBinary,
     .import = &I::importCompare},
    // multiply, add, min, max
    {.name = "HardSigmoid", .import = &I::importActivation, .cost = perElement<4>},
    // HardSigmoid, then a multiply
    {.name = "HardSwish",
     .sinceVersion = 14,
     .import = &I::importActivation,
     .cost = perElement<5>},
    {.name = "IsInf",
     .sinceVersion = 10,
     .import = &I::importElementary,
     .cost = perElement<3>},
    {.name = "IsNaN",
     .sinceVersion = 9,
     .import = &I::importElementary,
     .cost = perElement<2>},
    // compare, multiply
    {.name = "LeakyRelu", .import = &I::importActivation, .cost = perElement<2>},
    {.name = "Less",
     .signature = kBinary,
     .import = &I::importCompare,
     .cost = perElement<1>},
    {.name = "LessOrEqual",
     .sinceVersion = 12,
     .signature = kBinary,
     .import = &I::importCompare},
    {.name = "Log",
     .import = &I::importUnary,
     .cost = perElement<1>,
     .positiveInputs = 1u << 0},
    {.name = "Max",
     .signature = kVariadic,
     .import = &I::importVariadic,
     .cost = variadicFlops},
    {.name = "Mean",
     .signature = kVariadic,
     .import = &I::importVariadic,
     .cost = variadicFlops},
    {.name = "Min",
     .signature = kVariadic,
     .import = &I::importVariadic,
     .cost = variadicFlops},
    // abs, neg, exp, add, log, max, add, tanh, mul
    {.name = "Mish",
     .sinceVersion = 18,
     .import = &I::importUnary,
     .cost = perElement<9>},
    {.name = "Mod",
     .sinceVersion = 10,
     .signature = kBinary,
     .import = &I::importMod,
     .cost = perElement<6>,
     .positiveInputs = 1u << 1}, // the divisor
    {.name = "Mul",
     .signature = kBinary,
     .import = &I::importBinary,
     .cost = perElement<1>},
    {.name = "Neg", .import = &I::importUnary, .cost = perElement<1>},
    {.name = "Not", .import = &I::importLogical},
    {.name = "Or", .signature = kBinary, .import = &I::importLogical},
    {.name = "Pow",
     .signature = kBinary,
     .import = &I::importPow,
     .cost = perElement<1>,
     .positiveInputs = 1u << 0}, // the base
    // From opset 7, where the slope broadcasts to the input; compare, multiply.
    {.name = "PRelu",
     .sinceVersion = 7,
     .signature = kBinary,
     .import = &I::importPRelu,
     .cost = perElement<2>},
    {.name = "Reciprocal",
     .import = &I::importUnary,
     .cost = perElement<1>,
     .positiveInputs = 1u << 0},
    {.name = "ReduceL1",
     .signature = kReduce,
     .import = &I::importReduce,
     .cost = reduceFlops},
    {.name = "ReduceL2",
     .signature = kReduce,
     .import = &I::importReduce,
     .cost = reduceFlops},
    {.name = "ReduceLogSum",
     .signature = kReduce,
     .import = &I::importReduce,
     .cost = reduceFlops},
    {.name = "ReduceLogSumExp",
     .signature = kReduce,
     .import = &I::importReduce,
     .cost = reduceFlops},
    {.name = "ReduceMax",
     .signature = kReduce,
     .import = &I::importReduce,
     .cost = reduceFlops},
    {.name = "ReduceMean",
     .signature = kReduce,
     .import = &I::importReduce,
     .cost = reduceFlops},
    {.name = "ReduceMin",
     .signature = kReduce,
     .import = &I::importReduce,
     .cost = reduceFlops},
    {.name = "ReduceProd", .signature = kReduce, .import = &I::importReduce},
    {.name = "ReduceSum",
     .signature = kReduce,
     .import = &I::importReduce,
     .cost = reduceFlops},
    {.name = "ReduceSumSquare",
     .signature = kReduce,
     .import = &I::importReduce,
     .cost = reduceFlops},
    {.name = "Relu", .import = &I::importActivation, .cost = perElement<1>},
    {.name = "Round", .sinceVersion = 11, .import = &I::importUnary},
    {.name = "Selu", .import = &I::importUnary},
    {.name = "Shrink",
     .sinceVersion = 9,
     .import = &I::importElementary,
     .cost = perElement<4>},
    // neg, exp, add, divide
    {.name = "Sigmoid", .import = &I::importActivation, .cost = perElement<4>},
    {.name = "Sign", .sinceVersion = 9, .import = &I::importUnary},
    {.name = "Sin", .sinceVersion = 7, .import = &I::importUnary},
    {.name = "Sinh",
     .sinceVersion = 9,
     .import = &I::importElementary,
     .cost = perElement<4>},
    {.name = "Softplus", .import = &I::importUnary},
    {.name = "Softsign", .import = &I::importUnary},
    {.name = "Sqrt",
     .import = &I::importActivation,
     .cost = perElement<1>,
     .positiveInputs = 1u << 0},
    {.name = "Sub",
     .signature = kBinary,
     .import = &I::importBinary,
     .cost = perElement<1>},
    {.name = "Sum",
     .signature = kVariadic,
     .import = &I::importVariadic,
     .cost = variadicFlops},
    {.name = "Tan",
     .sinceVersion = 7,
     .import = &I::importElementary,
     .cost = perElement<3>},
    {.name = "Tanh", .import = &I::importActivation, .cost = perElement<1>},
    {.name = "ThresholdedRelu",
     .sinceVersion = 10,
     .import = &I::importElementary,
     .cost = perElement<2>},
    {.name = "Where",
     .sinceVersion = 9,
     .signature = {3, 3, 1, 1},
     .import = &I::importWhere,
     .cost = perElement<1>},
    {.name = "Xor", .signature = kBinary, .import = &I::importLogical},
};

} // namespace

std::span<const OpInfo> mathOps() { return kOps; }

} // namespace flowc::compiler::import
