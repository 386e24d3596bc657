// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: a training graph's
// losses, which exported evaluation graphs keep. Each target picks its
// class's score through a compare with the class positions (the scores are
// read whole anyway by SoftmaxCrossEntropyLoss's log-softmax).
#include "Importer.h"
#include "OpCost.h"

namespace flowc::compiler::import {

Status Importer::importLoss(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value target, anyOperand(node, 1));
  Shape shape = shapeOf(x), targetShape = shapeOf(target);
  if (shape.size() < 2)
    return nodeError(node, "scores " + shapeString(shape) + " are not [N, C, ...]");
  Shape expected = shape;
  expected.erase(expected.begin() + 1);
  if (targetShape != expected)
    return nodeError(node, "target " + shapeString(targetShape) +
                               " does not fit scores " + shapeString(shape) +
                               " (it should be " + shapeString(expected) + ")");
  mlir::Type indexType = elementTypeOf(target);
  if (!indexType.isInteger(64) && !indexType.isInteger(32))
    return nodeError(node, "target must be int64 or int32");
  std::string reduction = stringAttr(node, "reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    return nodeError(node, "reduction '" + reduction + "' is not none, sum or mean");
  int64_t batch = shape[0], classes = shape[1];
  int64_t rest = product(shape, 2, shape.size());
  // [N, C, D]: the classes in the middle, everything after them as one.
  Value scores = reshape(x, {batch, classes, rest});
  Shape flat = {batch, classes, rest}, picked = {batch, 1, rest};
  auto axis1 = attr("axis", builder_.getI32IntegerAttr(1));
  if (node.opType == "SoftmaxCrossEntropyLoss") {
    Value shifted = build<mlir::tosa::SubOp>(
        flat, {scores, build<mlir::tosa::ReduceMaxOp>(picked, {scores}, {axis1})});
    Value sum = build<mlir::tosa::ReduceSumOp>(
        picked, {build<mlir::tosa::ExpOp>(flat, {shifted})}, {axis1});
    scores = build<mlir::tosa::SubOp>(flat,
                                      {shifted, build<mlir::tosa::LogOp>(picked, {sum})});
    if (node.outputs.size() > 1 && !node.outputs[1].empty())
      FLOWC_RETURN_IF_ERROR(defineOutput(node, 1, reshape(scores, shape)));
  }
  mlir::Type i1 = builder_.getI1Type(), i64 = builder_.getI64Type();
  Value labels = reshape(target, picked);
  if (!indexType.isInteger(64))
    labels = buildTyped<mlir::tosa::CastOp>(i64, picked, {labels});
  // A target equal to ignore_index counts for nothing; any other outside
  // [0, C) fails the run.
  Value kept = buildTyped<mlir::tosa::EqualOp>(i1, picked, {labels, labels});
  auto ignored = node.attributes.find("ignore_index");
  if (ignored != node.attributes.end())
    kept = buildTyped<mlir::tosa::LogicalNotOp>(
        i1, picked,
        {buildTyped<mlir::tosa::EqualOp>(i1, picked,
                                         {labels, integer(i64, ignored->second.i, 3)})});
  Value outside = buildTyped<mlir::tosa::LogicalOrOp>(
      i1, picked,
      {buildTyped<mlir::tosa::GreaterOp>(i1, picked, {integer(i64, 0, 3), labels}),
       buildTyped<mlir::tosa::GreaterOp>(i1, picked,
                                         {labels, integer(i64, classes - 1, 3)})});
  failRunIf(node, buildTyped<mlir::tosa::LogicalAndOp>(i1, picked, {outside, kept}),
            "a target is outside [0, " + std::to_string(classes - 1) +
                "] and is not ignore_index");
  FLOWC_ASSIGN_OR_RETURN(Value positions, iota(node, i64, classes, 3, 1));
  Value chosen = buildTyped<mlir::tosa::LogicalAndOp>(
      i1, flat, {buildTyped<mlir::tosa::EqualOp>(i1, flat, {labels, positions}), kept});
  auto pick = [&](Value from) {
    return build<mlir::tosa::ReduceSumOp>(
        picked, {build<mlir::tosa::SelectOp>(flat, {chosen, from, scalar(0.0f, 3)})},
        {axis1});
  };
  // Each element's weight: its class's, or 1; 0 where ignored.
  Value weight =
      build<mlir::tosa::SelectOp>(picked, {kept, scalar(1.0f, 3), scalar(0.0f, 3)});
  if (hasOperand(node, 2)) {
    FLOWC_ASSIGN_OR_RETURN(Value classWeights, operand(node, 2));
    if (shapeOf(classWeights) != Shape{classes})
      return nodeError(node, "weight " + shapeString(shapeOf(classWeights)) +
                                 " is not [" + std::to_string(classes) + "]");
    weight = pick(reshape(classWeights, {1, classes, 1}));
  }
  Value loss = mul(mul(pick(scores), weight), scalar(-1.0f, 3));
  if (reduction == "none")
    return define(node, reshape(loss, targetShape));
  auto total = [&](Value v) {
    for (int32_t axis : {0, 2})
      v = build<mlir::tosa::ReduceSumOp>(
          {1, 1, axis == 0 ? rest : 1}, {v},
          {attr("axis", builder_.getI32IntegerAttr(axis))});
    return v;
  };
  Value sum = total(loss);
  if (reduction == "mean")
    sum = mul(sum, build<mlir::tosa::ReciprocalOp>({1, 1, 1}, {total(weight)}));
  return define(node, reshape(sum, {}));
}

namespace {

using I = Importer;

// The family's op table (OpRegistry.h).
constexpr OpInfo kOps[] = {
    {.name = "NegativeLogLikelihoodLoss",
     .sinceVersion = 12,
     .signature = {2, 3, 1, 1},
     .import = &I::importLoss},
    {.name = "SoftmaxCrossEntropyLoss",
     .sinceVersion = 12,
     .signature = {2, 3, 1, 2},
     .import = &I::importLoss},
};

} // namespace

std::span<const OpInfo> lossOps() { return kOps; }

} // namespace flowc::compiler::import
