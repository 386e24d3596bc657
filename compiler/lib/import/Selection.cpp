// Selection and scatter ops: TopK, Hardmax, OneHot, GatherND,
// ScatterElements and ScatterND. TOSA has a gather, but no sort and no
// scatter that flowc lowers, so each is built from compares, reductions
// and gathers: a scatter gathers each destination's source instead.
#include "Importer.h"
#include "OpCost.h"

#include "flowc/compiler/dialect/FlowcDialect.h"

#include "mlir/Dialect/Bufferization/IR/Bufferization.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <numeric>

namespace flowc::compiler::import {

namespace {

/// Elements an all-pairs compare may take (TopK's ranks, a run-time
/// scatter's matches): 2^24, 64 MiB as int32.
constexpr int64_t kMaxPairs = int64_t{1} << 24;
/// TopK up to this k selects one element per step (k passes over a row);
/// above it, it ranks every element when the pairs fit kMaxPairs.
constexpr int64_t kMaxStepwiseK = 16;
/// The most steps a stepwise TopK takes (each is a few ops in the IR).
constexpr int64_t kMaxTopKSteps = 256;
/// The most updates a scatter with a reduction may send to one
/// destination: one gather per rank of arrival.
constexpr int64_t kMaxScatterRounds = 256;

Expected<Reduction> reductionOf(const Importer &im, const Node &node) {
  std::string name = stringAttr(node, "reduction", "none");
  if (name == "none")
    return Reduction::None;
  if (name == "add")
    return Reduction::Add;
  if (name == "mul")
    return Reduction::Mul;
  if (name == "max")
    return Reduction::Max;
  if (name == "min")
    return Reduction::Min;
  return im.nodeError(node, "reduction '" + name + "' is not none, add, mul, max or min");
}

} // namespace

std::pair<llvm::SmallVector<int32_t>, llvm::SmallVector<int32_t>>
Importer::axisLast(int64_t axis, int64_t rank) {
  llvm::SmallVector<int32_t> perms, inverse(rank);
  for (int64_t i = 0; i < rank; ++i)
    if (i != axis)
      perms.push_back(static_cast<int32_t>(i));
  perms.push_back(static_cast<int32_t>(axis));
  for (int64_t i = 0; i < rank; ++i)
    inverse[perms[i]] = static_cast<int32_t>(i);
  return {perms, inverse};
}

Expected<Value> Importer::iota(const Node &node, mlir::Type element, int64_t n,
                               size_t rank, int64_t axis) {
  Shape shape(rank, 1);
  shape[axis] = n;
  FLOWC_RETURN_IF_ERROR(reserveFolded(node, shape).status());
  auto type = mlir::RankedTensorType::get(shape, element);
  unsigned bits = element.getIntOrFloatBitWidth();
  llvm::SmallVector<llvm::APInt> values;
  values.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    values.emplace_back(bits, static_cast<uint64_t>(i), /*isSigned=*/true);
  return Value(mlir::tosa::ConstOp::create(builder_, loc_, type,
                                           mlir::DenseElementsAttr::get(type, values)));
}

Value Importer::extreme(mlir::Type element, bool highest, size_t rank) {
  if (element.isF32())
    return scalar(highest ? std::numeric_limits<float>::infinity()
                          : -std::numeric_limits<float>::infinity(),
                  rank);
  unsigned bits = element.getIntOrFloatBitWidth();
  llvm::APInt value = highest ? llvm::APInt::getSignedMaxValue(bits)
                              : llvm::APInt::getSignedMinValue(bits);
  auto type = mlir::RankedTensorType::get(Shape(rank, 1), element);
  return mlir::tosa::ConstOp::create(builder_, loc_, type,
                                     mlir::DenseElementsAttr::get(type, value));
}

Value Importer::identityOf(mlir::Type element, Reduction reduction, size_t rank) {
  if (reduction == Reduction::Max || reduction == Reduction::Min)
    return extreme(element, reduction == Reduction::Min, rank);
  if (element.isF32())
    return scalar(reduction == Reduction::Mul ? 1.0f : 0.0f, rank);
  return integer(element, reduction == Reduction::Mul ? 1 : 0, rank);
}

Value Importer::combine(Reduction reduction, Value a, Value b) {
  mlir::Type element = elementTypeOf(a);
  Shape shape = sameRankBroadcast(a, b);
  switch (reduction) {
  case Reduction::Add:
    return buildTyped<mlir::tosa::AddOp>(element, shape, {a, b});
  case Reduction::Mul:
    return buildTyped<mlir::tosa::MulOp>(element, shape, {a, b, zeroShift()});
  case Reduction::Max:
    return buildTyped<mlir::tosa::MaximumOp>(element, shape, {a, b});
  default:
    return buildTyped<mlir::tosa::MinimumOp>(element, shape, {a, b});
  }
}

Value Importer::reduceAlong(Reduction reduction, Value x, int32_t axis) {
  mlir::Type element = elementTypeOf(x);
  Shape reduced = shapeOf(x);
  reduced[axis] = 1;
  auto along = attr("axis", builder_.getI32IntegerAttr(axis));
  switch (reduction) {
  case Reduction::Add:
    return buildTyped<mlir::tosa::ReduceSumOp>(element, reduced, {x}, {along});
  case Reduction::Mul:
    return buildTyped<mlir::tosa::ReduceProductOp>(element, reduced, {x}, {along});
  case Reduction::Max:
    return buildTyped<mlir::tosa::ReduceMaxOp>(element, reduced, {x}, {along});
  default:
    return buildTyped<mlir::tosa::ReduceMinOp>(element, reduced, {x}, {along});
  }
}

Expected<Value>
Importer::libraryCall(runtime::KernelKind kind, std::vector<int64_t> params,
                      llvm::ArrayRef<Value> inputs, mlir::Type result,
                      const std::function<Expected<Value>(mlir::ValueRange)> &body) {
  llvm::SmallVector<mlir::Type> argTypes;
  for (Value input : inputs)
    argTypes.push_back(input.getType());
  auto main = mlir::cast<mlir::func::FuncOp>(entry_->getParentOp());
  size_t checks = checks_.size();
  mlir::func::FuncOp function;
  {
    mlir::OpBuilder::InsertionGuard guard(builder_);
    builder_.setInsertionPoint(main);
    function =
        mlir::func::FuncOp::create(builder_, loc_,
                                   std::string("flowc_") + runtime::kernelKindName(kind) +
                                       "_" + std::to_string(libraryFunctions_++),
                                   builder_.getFunctionType(argTypes, {result}));
    function.setPrivate();
    // The kernel writes only its result (as the outline pass's functions).
    for (unsigned i = 0; i < argTypes.size(); ++i)
      function.setArgAttr(i, mlir::bufferization::BufferizationDialect::kWritableAttrName,
                          builder_.getBoolAttr(false));
    builder_.setInsertionPointToStart(function.addEntryBlock());
    FLOWC_ASSIGN_OR_RETURN(Value computed, body(function.getArguments()));
    mlir::func::ReturnOp::create(builder_, loc_, computed);
  }
  // A check's flag would be a value of the callee, which @main cannot return.
  if (checks_.size() != checks)
    return internalError(std::string("the body of a ") + runtime::kernelKindName(kind) +
                         " kernel added a run-time check");
  return Value(LibraryCallOp::create(builder_, loc_, result,
                                     static_cast<LibraryKernelKind>(kind),
                                     function.getSymName(), params, inputs,
                                     /*arg_attrs=*/nullptr, /*res_attrs=*/nullptr));
}

// TopK ----------------------------------------------------------------------

/// The order TopK picks from each row of `key` ([rows, n], no NaN): k
/// steps, each taking the best value not yet taken, the lowest index among
/// equals. [rows, k] int32.
Expected<Value> Importer::topKStepwise(const Node &node, Value key, int64_t k,
                                       bool largest) {
  Shape shape = shapeOf(key);
  int64_t rows = shape[0], n = shape[1];
  mlir::Type element = elementTypeOf(key), i1 = builder_.getI1Type(),
             i32 = builder_.getI32Type();
  FLOWC_ASSIGN_OR_RETURN(Value positions, iota(node, i32, n, 2, 1));
  Value fill = extreme(element, !largest, 2);
  Value past = integer(i32, n, 2);
  Value taken = zeros(i1, shape);
  llvm::SmallVector<Value> picks;
  Shape column = {rows, 1};
  auto axis1 = attr("axis", builder_.getI32IntegerAttr(1));
  for (int64_t step = 0; step < k; ++step) {
    Value open = buildTyped<mlir::tosa::SelectOp>(element, shape, {taken, fill, key});
    Value best =
        largest ? buildTyped<mlir::tosa::ReduceMaxOp>(element, column, {open}, {axis1})
                : buildTyped<mlir::tosa::ReduceMinOp>(element, column, {open}, {axis1});
    // A taken element holds the fill, which an open one may equal.
    Value hit = buildTyped<mlir::tosa::LogicalAndOp>(
        i1, shape,
        {buildTyped<mlir::tosa::EqualOp>(i1, shape, {open, best}),
         buildTyped<mlir::tosa::LogicalNotOp>(i1, shape, {taken})});
    Value candidates =
        buildTyped<mlir::tosa::SelectOp>(i32, shape, {hit, positions, past});
    Value pick = buildTyped<mlir::tosa::ReduceMinOp>(i32, column, {candidates}, {axis1});
    // A float reduction starts from the largest finite value, so a row
    // whose open values are all the fill (-inf for largest) hits nothing:
    // its first open element is the pick.
    Value first = buildTyped<mlir::tosa::ReduceMinOp>(
        i32, column,
        {buildTyped<mlir::tosa::SelectOp>(i32, shape, {taken, past, positions})},
        {axis1});
    Value none = buildTyped<mlir::tosa::EqualOp>(i1, column, {pick, past});
    pick = buildTyped<mlir::tosa::SelectOp>(i32, column, {none, first, pick});
    taken = buildTyped<mlir::tosa::LogicalOrOp>(
        i1, shape,
        {taken, buildTyped<mlir::tosa::EqualOp>(i1, shape, {positions, pick})});
    picks.push_back(pick);
  }
  return picks.size() == 1 ? picks[0] : concatAlong(picks, 1);
}

/// The same order through ranks: element i's rank is the number of
/// elements of its row that come before it (better, or equal at a lower
/// index); output position p takes the element ranked p.
Expected<Value> Importer::topKRanked(const Node &node, Value key, int64_t k,
                                     bool largest) {
  Shape shape = shapeOf(key);
  int64_t rows = shape[0], n = shape[1];
  mlir::Type i1 = builder_.getI1Type(), i32 = builder_.getI32Type();
  Value mine = reshape(key, {rows, n, 1}), theirs = reshape(key, {rows, 1, n});
  Shape pairs = {rows, n, n};
  Value better = largest ? buildTyped<mlir::tosa::GreaterOp>(i1, pairs, {theirs, mine})
                         : buildTyped<mlir::tosa::GreaterOp>(i1, pairs, {mine, theirs});
  FLOWC_ASSIGN_OR_RETURN(Value other, iota(node, i32, n, 3, 2));
  Value self = reshape(other, {1, n, 1});
  Value earlier = buildTyped<mlir::tosa::GreaterOp>(i1, {1, n, n}, {self, other});
  Value tie = buildTyped<mlir::tosa::LogicalAndOp>(
      i1, pairs, {buildTyped<mlir::tosa::EqualOp>(i1, pairs, {theirs, mine}), earlier});
  Value ahead = buildTyped<mlir::tosa::CastOp>(
      i32, pairs, {buildTyped<mlir::tosa::LogicalOrOp>(i1, pairs, {better, tie})});
  auto axis2 = attr("axis", builder_.getI32IntegerAttr(2));
  Value rank = buildTyped<mlir::tosa::ReduceSumOp>(i32, {rows, n, 1}, {ahead}, {axis2});
  FLOWC_ASSIGN_OR_RETURN(Value slots, iota(node, i32, k, 3, 1));
  Shape matches = {rows, k, n};
  Value ranked =
      buildTyped<mlir::tosa::EqualOp>(i1, matches, {reshape(rank, {rows, 1, n}), slots});
  Value owner =
      buildTyped<mlir::tosa::SelectOp>(i32, matches, {ranked, other, integer(i32, 0, 3)});
  return reshape(buildTyped<mlir::tosa::ReduceSumOp>(i32, {rows, k, 1}, {owner}, {axis2}),
                 {rows, k});
}

/// TopK of float32, int32 or int64 along any axis, with a constant k.
/// Values come from a gather at the picked indices, so NaN, which picks
/// as +infinity does (after every finite value), shows as NaN.
Status Importer::importTopK(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  mlir::Type element = elementTypeOf(x);
  if (!element.isF32() && !element.isInteger(32) && !element.isInteger(64))
    return nodeUnsupported(node, "input is " + dtypeName(dtypeOf(x)) +
                                     " (float32, int32 and int64 are supported)");
  Shape shape = shapeOf(x);
  int64_t rank = static_cast<int64_t>(shape.size());
  if (rank == 0)
    return nodeError(node, "input is a scalar: TopK needs an axis");
  FLOWC_ASSIGN_OR_RETURN(int64_t axis, rankAxis(node, intAttr(node, "axis", -1), rank));
  int64_t k = intAttr(node, "k", -1);
  if (model_.opsetVersion >= 10) {
    auto given = hasOperand(node, 1) ? intConstant(node.inputs[1]) : std::nullopt;
    if (!given || given->values.size() != 1)
      return nodeUnsupported(node, "k must be a constant integer of one element (a "
                                   "run-time k would give a run-time shape)");
    k = given->values[0];
  }
  int64_t n = shape[axis];
  if (k < 0 || k > n)
    return nodeError(node, "k " + std::to_string(k) + " is outside [0, " +
                               std::to_string(n) + "], the extent of axis " +
                               std::to_string(axis) + " of " + shapeString(shape));
  Shape out = shape;
  out[axis] = k;
  FLOWC_RETURN_IF_ERROR(checkRuntimeShape(node, out));
  if (n > std::numeric_limits<int32_t>::max())
    return nodeUnsupported(node, "axis " + std::to_string(axis) + " has " +
                                     std::to_string(n) + " elements, over int32's range");
  bool largest = intAttr(node, "largest", 1) != 0;
  auto [perms, inverse] = axisLast(axis, rank);
  Value moved = axis == rank - 1 ? x : transpose(x, perms);
  int64_t rows = product(shape, 0, shape.size()) / n;
  Value flat = reshape(moved, {rows, n});
  // The TOSA order needs keys without NaN: NaN becomes +infinity, which
  // it ranks as. The kernel ranks NaN so itself and reads the data.
  auto keysOf = [&](Value data) {
    if (!element.isF32())
      return data;
    mlir::Type i1 = builder_.getI1Type();
    Value isNan = buildTyped<mlir::tosa::LogicalNotOp>(
        i1, {rows, n}, {buildTyped<mlir::tosa::EqualOp>(i1, {rows, n}, {data, data})});
    return build<mlir::tosa::SelectOp>({rows, n},
                                       {isNan, extreme(element, true, 2), data});
  };
  // Stepwise costs k passes over a row, ranking n: ranking from k > 16 on.
  bool ranks = k > kMaxStepwiseK && rows <= kMaxPairs / n / n;
  if (!ranks && k > kMaxTopKSteps)
    return nodeUnsupported(
        node, "k " + std::to_string(k) + " of " + std::to_string(n) + " in " +
                  std::to_string(rows) + " rows is past both limits: " +
                  std::to_string(kMaxTopKSteps) + " steps, or " +
                  std::to_string(kMaxPairs) + " compared pairs (rows x n x n)");
  // The order through the runtime's selection kernel; its callee's body is
  // the same order in TOSA.
  runtime::TopKParams params{rows, n, k, largest, *scalarTypeOf(element)};
  FLOWC_ASSIGN_OR_RETURN(
      Value order,
      libraryCall(runtime::KernelKind::TopK, runtime::paramWords(params), {flat},
                  mlir::RankedTensorType::get({rows, k}, builder_.getI32Type()),
                  [&](mlir::ValueRange data) {
                    Value keys = keysOf(data[0]);
                    return ranks ? topKRanked(node, keys, k, largest)
                                 : topKStepwise(node, keys, k, largest);
                  }));
  Value values = buildTyped<mlir::tosa::GatherOp>(element, {rows, k, 1},
                                                  {reshape(flat, {rows, n, 1}), order});
  Value indices =
      buildTyped<mlir::tosa::CastOp>(builder_.getI64Type(), {rows, k}, {order});
  Shape movedOut = out;
  for (int64_t i = 0; i < rank; ++i)
    movedOut[i] = out[perms[i]];
  // Each output back in place (a loop: clang 14 lambdas cannot capture
  // structured bindings).
  Value outputs[] = {values, indices};
  for (size_t i = 0; i < 2; ++i) {
    Value v = reshape(outputs[i], movedOut);
    FLOWC_RETURN_IF_ERROR(
        defineOutput(node, i, axis == rank - 1 ? v : transpose(v, inverse)));
  }
  return Status::ok();
}

// Hardmax, OneHot -----------------------------------------------------------

Value Importer::hardmaxLastAxis(Value x) {
  Shape shape = shapeOf(x);
  size_t rank = shape.size();
  Shape reduced = shape;
  reduced.back() = 1;
  mlir::Type i1 = builder_.getI1Type(), i32 = builder_.getI32Type();
  Value first = reshape(
      buildTyped<mlir::tosa::ArgMaxOp>(
          i32, Shape(shape.begin(), shape.end() - 1), {x},
          {attr("axis", builder_.getI32IntegerAttr(static_cast<int32_t>(rank - 1)))}),
      reduced);
  // The positions along the axis: a constant no larger than x's last axis.
  Shape line(rank, 1);
  line.back() = shape.back();
  std::vector<int32_t> count(static_cast<size_t>(shape.back()));
  std::iota(count.begin(), count.end(), 0);
  auto type = mlir::RankedTensorType::get(line, i32);
  Value positions = mlir::tosa::ConstOp::create(
      builder_, loc_, type, mlir::DenseElementsAttr::get(type, llvm::ArrayRef(count)));
  Value hit = buildTyped<mlir::tosa::EqualOp>(i1, shape, {positions, first});
  return build<mlir::tosa::SelectOp>(shape,
                                     {hit, scalar(1.0f, rank), scalar(0.0f, rank)});
}

/// OneHot: indices (int64, int32 or float32) against the positions along
/// the new axis; a negative index counts from the end, and one outside
/// [-depth, depth) matches nothing (all off).
Status Importer::importOneHot(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value indices, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value values, anyOperand(node, 2));
  int64_t depth = 0;
  if (auto given = intConstant(node.inputs[1])) {
    if (given->values.size() != 1)
      return nodeError(node, "depth has " + std::to_string(given->values.size()) +
                                 " values, not one");
    depth = given->values[0];
  } else {
    FLOWC_ASSIGN_OR_RETURN(float value, scalarConstant(node, 1));
    if (!(std::abs(value) < 9.0e18f))
      return nodeError(node, "depth " + std::to_string(value) + " is not a finite count");
    depth = static_cast<int64_t>(value);
  }
  if (depth < 1)
    return nodeError(node, "depth " + std::to_string(depth) + " is not positive");
  if (shapeOf(values) != Shape{2})
    return nodeError(node, "values have shape " + shapeString(shapeOf(values)) +
                               "; OneHot takes [off, on], shape [2]");
  Shape in = shapeOf(indices);
  int64_t rank = static_cast<int64_t>(in.size()) + 1;
  FLOWC_ASSIGN_OR_RETURN(int64_t axis, rankAxis(node, intAttr(node, "axis", -1), rank));
  Shape out = in;
  out.insert(out.begin() + axis, depth);
  FLOWC_RETURN_IF_ERROR(checkRuntimeShape(node, out));
  mlir::Type i64 = builder_.getI64Type(), i1 = builder_.getI1Type();
  mlir::Type indexType = elementTypeOf(indices);
  if (indexType.isInteger(32))
    indices = buildTyped<mlir::tosa::CastOp>(i64, in, {indices});
  else if (!indexType.isInteger(64) && !indexType.isF32())
    return nodeUnsupported(node, "indices are " + dtypeName(dtypeOf(indices)) +
                                     " (int64, int32 and float32 are supported)");
  // Float indices match a position only when whole, as in onnxruntime
  // and ONNX's reference (the text says they are cast: 1.7 would be 1).
  bool floats = indexType.isF32();
  if (floats && depth > (int64_t{1} << 24))
    return nodeUnsupported(node, "depth " + std::to_string(depth) +
                                     " is past float32's whole numbers (2^24) for float "
                                     "indices");
  mlir::Type element = floats ? builder_.getF32Type() : i64;
  Value zero = floats ? scalar(0.0f, in.size()) : integer(i64, 0, in.size());
  Value length = floats ? scalar(static_cast<float>(depth), in.size())
                        : integer(i64, depth, in.size());
  Value negative = buildTyped<mlir::tosa::GreaterOp>(i1, in, {zero, indices});
  Value wrapped = buildTyped<mlir::tosa::AddOp>(element, in, {indices, length});
  Shape lifted = in;
  lifted.insert(lifted.begin() + axis, 1);
  Value index =
      reshape(buildTyped<mlir::tosa::SelectOp>(element, in, {negative, wrapped, indices}),
              lifted);
  FLOWC_ASSIGN_OR_RETURN(Value positions, iota(node, i64, depth, rank, axis));
  if (floats) {
    Shape line(rank, 1);
    line[axis] = depth;
    positions = buildTyped<mlir::tosa::CastOp>(element, line, {positions});
  }
  Value hit = buildTyped<mlir::tosa::EqualOp>(i1, out, {index, positions});
  Shape ones(rank, 1);
  Value off = reshape(slice(values, {0}, {1}), ones);
  Value on = reshape(slice(values, {1}, {1}), ones);
  return define(
      node, buildTyped<mlir::tosa::SelectOp>(elementTypeOf(values), out, {hit, on, off}));
}

// GatherND ------------------------------------------------------------------

Expected<Value> Importer::tupleRows(const Node &node, Value tuples, const Shape &shape,
                                    int64_t firstAxis) {
  Shape tupleShape = shapeOf(tuples);
  int64_t count = tupleShape[0], q = tupleShape[1];
  mlir::Type i32 = builder_.getI32Type();
  Value rows = zeros(i32, {1, count});
  int64_t stride = 1;
  for (int64_t d = q - 1; d >= 0; --d) {
    int64_t axis = firstAxis + d, extent = shape[axis];
    Value index = reshape(sliceAlong(tuples, 1, d, 1), {1, count});
    index = checkedIndices(node, index, extent,
                           "axis " + std::to_string(axis) + " of " + shapeString(shape));
    if (!elementTypeOf(index).isInteger(32))
      index = buildTyped<mlir::tosa::CastOp>(i32, {1, count}, {index});
    index = fromEnd(index, extent);
    if (stride != 1)
      index = buildTyped<mlir::tosa::MulOp>(
          i32, {1, count}, {index, integer(i32, stride, 2), zeroShift()});
    rows = buildTyped<mlir::tosa::AddOp>(i32, {1, count}, {rows, index});
    stride *= extent;
  }
  return rows;
}

/// GatherND (batch_dims too): each index tuple names a row of the data
/// (its first q axes after the batch axes); one gather over all batches'
/// rows, the batch's first row added to each tuple's.
Status Importer::importGatherND(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value data, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value indices, anyOperand(node, 1));
  mlir::Type indexType = elementTypeOf(indices);
  if (!indexType.isInteger(64) && !indexType.isInteger(32))
    return nodeError(node, "indices must be int64 or int32");
  Shape shape = shapeOf(data), indexShape = shapeOf(indices);
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t indexRank = static_cast<int64_t>(indexShape.size());
  int64_t batch = intAttr(node, "batch_dims", 0);
  if (rank < 1 || indexRank < 1)
    return nodeError(node, "data " + shapeString(shape) + " and indices " +
                               shapeString(indexShape) + " must have rank 1 or more");
  if (batch < 0 || batch >= std::min(rank, indexRank))
    return nodeError(node, "batch_dims " + std::to_string(batch) +
                               " is not below the ranks of data and indices");
  int64_t q = indexShape.back();
  if (q < 1 || q > rank - batch)
    return nodeError(
        node, "indices " + shapeString(indexShape) + " end in " + std::to_string(q) +
                  ", outside [1, " + std::to_string(rank - batch) + "] for data " +
                  shapeString(shape) + " and batch_dims " + std::to_string(batch));
  for (int64_t d = 0; d < batch; ++d)
    if (indexShape[d] != shape[d])
      return nodeError(node, "indices " + shapeString(indexShape) + " and data " +
                                 shapeString(shape) + " differ in batch axis " +
                                 std::to_string(d));
  Shape axes(shape.begin() + batch, shape.begin() + batch + q);
  if (auto known = intConstant(node.inputs[1]))
    for (size_t i = 0; i < known->values.size(); ++i) {
      int64_t index = known->values[i], extent = axes[i % q];
      if (index < -extent || index >= extent)
        return nodeError(node,
                         "index " + std::to_string(index) + " is out of range for axis " +
                             std::to_string(batch + i % q) + " of " + shapeString(shape));
    }
  Shape out(indexShape.begin(), indexShape.end() - 1);
  out.insert(out.end(), shape.begin() + batch + q, shape.end());
  FLOWC_RETURN_IF_ERROR(checkRuntimeShape(node, out));
  int64_t batches = product(shape, 0, batch);
  int64_t perBatch = product(axes, 0, axes.size());
  int64_t width = product(shape, batch + q, rank);
  int64_t count = product(indexShape, 0, indexRank - 1);
  if (batches * perBatch > std::numeric_limits<int32_t>::max())
    return nodeUnsupported(node, "gathers from " + std::to_string(batches * perBatch) +
                                     " rows, over int32's range");
  FLOWC_ASSIGN_OR_RETURN(Value rows,
                         tupleRows(node, reshape(indices, {count, q}), shape, batch));
  if (batches > 1) {
    FLOWC_RETURN_IF_ERROR(reserveFolded(node, {count}).status());
    std::vector<int32_t> first(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      first[i] = static_cast<int32_t>(i / (count / batches) * perBatch);
    auto type = mlir::RankedTensorType::get({1, count}, builder_.getI32Type());
    Value offsets = mlir::tosa::ConstOp::create(
        builder_, loc_, type, mlir::DenseElementsAttr::get(type, llvm::ArrayRef(first)));
    rows =
        buildTyped<mlir::tosa::AddOp>(builder_.getI32Type(), {1, count}, {rows, offsets});
  }
  FLOWC_ASSIGN_OR_RETURN(
      Value gathered, gatherRuntime(node, reshape(data, {batches * perBatch, width}),
                                    reshape(rows, {count}), 0, /*checkIndices=*/false));
  return define(node, reshape(gathered, out));
}

// Scatters ------------------------------------------------------------------

/// Where each update goes is known at import: without a reduction each row
/// takes its last update (as in onnxruntime) or keeps its data, through
/// mergeRows; with one, one gather per rank of arrival, combined in the
/// updates' order.
Expected<Value> Importer::scatterKnown(const Node &node, Value data, Value updates,
                                       const std::vector<int64_t> &targets,
                                       Reduction reduction) {
  Shape shape = shapeOf(data);
  int64_t rows = shape[0], width = shape[1];
  int64_t count = static_cast<int64_t>(targets.size());
  if (rows + count > std::numeric_limits<int32_t>::max())
    return nodeUnsupported(node, "scatters into " + std::to_string(rows) +
                                     " rows, over int32's range");
  FLOWC_RETURN_IF_ERROR(reserveFolded(node, {rows}).status());
  mlir::Type element = elementTypeOf(data);
  if (reduction != Reduction::None && !element.isF32() && !element.isInteger(32) &&
      !element.isInteger(64))
    return nodeUnsupported(node, "a reduction needs float32, int32 or int64 data, not " +
                                     dtypeName(dtypeOf(data)));
  if (reduction == Reduction::None) {
    std::vector<int32_t> source(static_cast<size_t>(rows), -1);
    for (int64_t j = 0; j < count; ++j)
      source[targets[j]] = static_cast<int32_t>(j);
    auto type = mlir::RankedTensorType::get({rows, 1}, builder_.getI32Type());
    return mergeRows(node, data, updates,
                     mlir::tosa::ConstOp::create(
                         builder_, loc_, type,
                         mlir::DenseElementsAttr::get(type, llvm::ArrayRef(source))));
  }
  // arrival[j]: how many updates reached update j's row before it.
  std::vector<int32_t> arrived(static_cast<size_t>(rows), 0), arrival(count);
  int64_t rounds = 0;
  for (int64_t j = 0; j < count; ++j) {
    arrival[j] = arrived[targets[j]]++;
    rounds = std::max<int64_t>(rounds, arrival[j] + 1);
  }
  if (rounds > kMaxScatterRounds)
    return nodeUnsupported(
        node, std::to_string(rounds) + " updates reach one destination; at most " +
                  std::to_string(kMaxScatterRounds) + " are supported with a reduction");
  for (int64_t round = 1; round < rounds; ++round)
    FLOWC_RETURN_IF_ERROR(reserveFolded(node, {rows}).status());
  // Row `count` of the source is the reduction's identity.
  Value identity = identityOf(element, reduction, 2);
  Value neutral = buildTyped<mlir::tosa::TileOp>(element, {1, width},
                                                 {identity, constShape({1, width})});
  Value source = concatAlong({updates, neutral}, 0);
  Value result = data;
  for (int64_t round = 0; round < rounds; ++round) {
    std::vector<int32_t> table(static_cast<size_t>(rows), static_cast<int32_t>(count));
    for (int64_t j = 0; j < count; ++j)
      if (arrival[j] == round)
        table[targets[j]] = static_cast<int32_t>(j);
    FLOWC_ASSIGN_OR_RETURN(Value arriving, gatherConstant(node, source, 0, table));
    result = combine(reduction, result, arriving);
  }
  return result;
}

/// Where each update goes is known at run time (`targets`, [1, count]
/// int32, in range): every row is compared with every target. Without a
/// reduction a row takes its last update or keeps its data (mergeRows);
/// `add` on float32 sums the matching updates as one matrix product; the
/// other reductions go through reduceMatches.
Expected<Value> Importer::scatterRuntime(const Node &node, Value data, Value updates,
                                         Value targets, Reduction reduction) {
  Shape shape = shapeOf(data);
  int64_t rows = shape[0], width = shape[1];
  int64_t count = shapeOf(targets)[1];
  mlir::Type element = elementTypeOf(data), i1 = builder_.getI1Type(),
             i32 = builder_.getI32Type();
  if (reduction != Reduction::None && !element.isF32() && !element.isInteger(32) &&
      !element.isInteger(64))
    return nodeUnsupported(node, "a reduction needs float32, int32 or int64 data, not " +
                                     dtypeName(dtypeOf(data)));
  if (rows > kMaxPairs / count)
    return nodeUnsupported(node, std::to_string(count) +
                                     " updates at run-time indices into " +
                                     std::to_string(rows) + " rows are over " +
                                     std::to_string(kMaxPairs) + " compared pairs");
  if (rows + count > std::numeric_limits<int32_t>::max())
    return nodeUnsupported(node, "scatters into " + std::to_string(rows) +
                                     " rows, over int32's range");
  FLOWC_ASSIGN_OR_RETURN(Value row, iota(node, i32, rows, 2, 0));
  Shape pairs = {rows, count};
  Value match = buildTyped<mlir::tosa::EqualOp>(i1, pairs, {row, targets});
  if (reduction == Reduction::Add && element.isF32()) {
    Value weights = reshape(build<mlir::tosa::CastOp>(pairs, {match}), {1, rows, count});
    Value sums = reshape(matmul3d(weights, reshape(updates, {1, count, width})), shape);
    return build<mlir::tosa::AddOp>(shape, {data, sums});
  }
  if (reduction != Reduction::None)
    return reduceMatches(node, data, updates, match, reduction);
  FLOWC_ASSIGN_OR_RETURN(Value update, iota(node, i32, count, 2, 1));
  Value last = buildTyped<mlir::tosa::ReduceMaxOp>(
      i32, {rows, 1},
      {buildTyped<mlir::tosa::SelectOp>(i32, pairs,
                                        {match, update, integer(i32, -1, 2)})},
      {attr("axis", builder_.getI32IntegerAttr(1))});
  return mergeRows(node, data, updates, last);
}

static_assert(static_cast<int>(Reduction::Add) ==
                  static_cast<int>(runtime::ScatterReduction::Add) &&
              static_cast<int>(Reduction::Min) ==
                  static_cast<int>(runtime::ScatterReduction::Min));

Expected<Value> Importer::scatterRows(const Node &node, Value data, Value updates,
                                      Value targets, Reduction reduction) {
  std::optional<runtime::ScalarType> type = scalarTypeOf(elementTypeOf(data));
  if (!type)
    return scatterRuntime(node, data, updates, targets, reduction);
  Shape shape = shapeOf(data);
  runtime::ScatterRowsParams params{shape[0], shape[1], shapeOf(targets)[1],
                                    static_cast<runtime::ScatterReduction>(reduction),
                                    *type};
  return libraryCall(runtime::KernelKind::ScatterRows, runtime::paramWords(params),
                     {data, updates, targets}, data.getType(),
                     [&](mlir::ValueRange args) {
                       return scatterRuntime(node, args[0], args[1], args[2], reduction);
                     });
}

Expected<Value> Importer::mergeRows(const Node &node, Value data, Value updates,
                                    Value source) {
  Shape shape = shapeOf(data);
  int64_t rows = shape[0];
  mlir::Type i1 = builder_.getI1Type(), i32 = builder_.getI32Type();
  Value kept =
      buildTyped<mlir::tosa::GreaterOp>(i1, {rows, 1}, {integer(i32, 0, 2), source});
  Value clamped =
      buildTyped<mlir::tosa::MaximumOp>(i32, {rows, 1}, {source, integer(i32, 0, 2)});
  FLOWC_ASSIGN_OR_RETURN(Value picked,
                         gatherRuntime(node, updates, reshape(clamped, {rows}), 0,
                                       /*checkIndices=*/false));
  return buildTyped<mlir::tosa::SelectOp>(elementTypeOf(data), shape,
                                          {kept, data, picked});
}

/// A run-time scatter's reduction other than float32 `add`: each row
/// reduces the updates that `match` ([rows, count]) sends it (the others
/// masked to the reduction's identity), then combines with its data; a
/// row no update reaches keeps its data.
Expected<Value> Importer::reduceMatches(const Node &node, Value data, Value updates,
                                        Value match, Reduction reduction) {
  Shape shape = shapeOf(data);
  int64_t rows = shape[0], width = shape[1], count = shapeOf(updates)[0];
  if (rows > kMaxPairs / count / width)
    return nodeUnsupported(node, std::to_string(count) + " updates of " +
                                     std::to_string(width) + " elements into " +
                                     std::to_string(rows) +
                                     " rows at run-time indices are over " +
                                     std::to_string(kMaxPairs) + " masked elements");
  mlir::Type element = elementTypeOf(data), i1 = builder_.getI1Type();
  Value identity = identityOf(element, reduction, 3);
  Shape masked = {rows, count, width};
  Value chosen = buildTyped<mlir::tosa::SelectOp>(
      element, masked,
      {reshape(match, {rows, count, 1}), reshape(updates, {1, count, width}), identity});
  auto axis1 = attr("axis", builder_.getI32IntegerAttr(1));
  Value gathered = reduceAlong(reduction, chosen, 1);
  Value combined = combine(reduction, data, reshape(gathered, shape));
  Value reached = buildTyped<mlir::tosa::ReduceAnyOp>(i1, {rows, 1}, {match}, {axis1});
  return buildTyped<mlir::tosa::SelectOp>(element, shape, {reached, combined, data});
}

/// ScatterND: each index tuple names a row of the data (its first q axes),
/// which takes (or is combined with) the update's row.
Status Importer::importScatterND(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value data, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value indices, anyOperand(node, 1));
  FLOWC_ASSIGN_OR_RETURN(Value updates, anyOperand(node, 2));
  FLOWC_ASSIGN_OR_RETURN(Reduction reduction, reductionOf(*this, node));
  FLOWC_RETURN_IF_ERROR(sameElementType(node, data, updates));
  mlir::Type indexType = elementTypeOf(indices);
  if (!indexType.isInteger(64) && !indexType.isInteger(32))
    return nodeError(node, "indices must be int64 or int32");
  Shape shape = shapeOf(data), indexShape = shapeOf(indices);
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t q = indexShape.empty() ? 0 : indexShape.back();
  if (q < 1 || q > rank)
    return nodeError(node, "indices of shape " + shapeString(indexShape) +
                               " must end in a dimension in [1, " + std::to_string(rank) +
                               "], the rank of data " + shapeString(shape));
  Shape expected(indexShape.begin(), indexShape.end() - 1);
  expected.insert(expected.end(), shape.begin() + q, shape.end());
  if (shapeOf(updates) != expected)
    return nodeError(node, "updates have shape " + shapeString(shapeOf(updates)) +
                               "; indices " + shapeString(indexShape) + " into data " +
                               shapeString(shape) + " need " + shapeString(expected));
  int64_t rows = product(shape, 0, q), width = product(shape, q, rank);
  int64_t count = product(indexShape, 0, indexShape.size() - 1);
  if (count == 0)
    return define(node, data);
  Value flatData = reshape(data, {rows, width});
  Value flatUpdates = reshape(updates, {count, width});
  auto known = intConstant(node.inputs[1]);
  if (!known) {
    FLOWC_ASSIGN_OR_RETURN(Value targets,
                           tupleRows(node, reshape(indices, {count, q}), shape, 0));
    FLOWC_ASSIGN_OR_RETURN(Value scattered,
                           scatterRows(node, flatData, flatUpdates, targets, reduction));
    return define(node, reshape(scattered, shape));
  }
  std::vector<int64_t> targets(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) {
    int64_t row = 0;
    for (int64_t d = 0; d < q; ++d) {
      int64_t index = known->values[j * q + d];
      if (index < -shape[d] || index >= shape[d])
        return nodeError(node, "index " + std::to_string(index) + " (update " +
                                   std::to_string(j) + ") is out of range for axis " +
                                   std::to_string(d) + " of " + shapeString(shape));
      row = row * shape[d] + (index < 0 ? index + shape[d] : index);
    }
    targets[j] = row;
  }
  FLOWC_ASSIGN_OR_RETURN(Value scattered,
                         scatterKnown(node, flatData, flatUpdates, targets, reduction));
  return define(node, reshape(scattered, shape));
}

/// ScatterElements: update i goes to data[i with its `axis` coordinate
/// replaced by indices[i]], as GatherElements reads.
Status Importer::importScatterElements(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value data, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value indices, anyOperand(node, 1));
  FLOWC_ASSIGN_OR_RETURN(Value updates, anyOperand(node, 2));
  FLOWC_ASSIGN_OR_RETURN(Reduction reduction, reductionOf(*this, node));
  FLOWC_RETURN_IF_ERROR(sameElementType(node, data, updates));
  Shape shape = shapeOf(data), indexShape = shapeOf(indices);
  if (shapeOf(updates) != indexShape)
    return nodeError(node, "updates " + shapeString(shapeOf(updates)) + " and indices " +
                               shapeString(indexShape) + " differ in shape");
  int64_t rank = static_cast<int64_t>(shape.size());
  FLOWC_ASSIGN_OR_RETURN(int64_t axis, rankAxis(node, intAttr(node, "axis", 0), rank));
  if (!intConstant(node.inputs[1])) {
    FLOWC_ASSIGN_OR_RETURN(Value scattered, scatterElementsAt(node, data, indices,
                                                              updates, axis, reduction));
    return define(node, scattered);
  }
  FLOWC_ASSIGN_OR_RETURN(ElementOffsets offsets,
                         elementOffsets(node, indices, shape, axis));
  int64_t total = product(shape, 0, shape.size());
  int64_t count = product(indexShape, 0, indexShape.size());
  FLOWC_ASSIGN_OR_RETURN(Value scattered, scatterKnown(node, reshape(data, {total, 1}),
                                                       reshape(updates, {count, 1}),
                                                       *offsets.known, reduction));
  return define(node, reshape(scattered, shape));
}

/// ScatterElements at run-time indices: each update's offset in the data
/// (checked as the graph runs) is its row in the runtime's row scatter
/// (one element per row), whose callee's body is scatterElementsRuntime.
/// Bool data stays generated code.
Expected<Value> Importer::scatterElementsAt(const Node &node, Value data, Value indices,
                                            Value updates, int64_t axis,
                                            Reduction reduction) {
  Shape shape = shapeOf(data), indexShape = shapeOf(indices);
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t total = product(shape, 0, rank), count = product(indexShape, 0, rank);
  int64_t extent = shape[axis], inner = product(shape, axis + 1, rank);
  FLOWC_ASSIGN_OR_RETURN(ElementOffsets offsets,
                         elementOffsets(node, indices, shape, axis));
  // An offset's coordinate along the axis: (offset / inner) mod extent.
  mlir::Type i32 = builder_.getI32Type();
  auto lineIndex = [&](Value offset) {
    Shape flat = {1, count};
    Value line =
        buildTyped<mlir::tosa::IntDivOp>(i32, flat, {offset, integer(i32, inner, 2)});
    Value lines =
        buildTyped<mlir::tosa::IntDivOp>(i32, flat, {line, integer(i32, extent, 2)});
    Value start = buildTyped<mlir::tosa::MulOp>(
        i32, flat, {lines, integer(i32, extent, 2), zeroShift()});
    return reshape(buildTyped<mlir::tosa::SubOp>(i32, flat, {line, start}), indexShape);
  };
  std::optional<runtime::ScalarType> type = scalarTypeOf(elementTypeOf(data));
  if (!type)
    return scatterElementsRuntime(node, data, lineIndex(offsets.runtime), updates, axis,
                                  reduction);
  runtime::ScatterRowsParams params{
      total, 1, count, static_cast<runtime::ScatterReduction>(reduction), *type};
  Value rows = reshape(data, {total, 1});
  FLOWC_ASSIGN_OR_RETURN(
      Value scattered,
      libraryCall(runtime::KernelKind::ScatterRows, runtime::paramWords(params),
                  {rows, reshape(updates, {count, 1}), offsets.runtime}, rows.getType(),
                  [&](mlir::ValueRange args) -> Expected<Value> {
                    FLOWC_ASSIGN_OR_RETURN(
                        Value result,
                        scatterElementsRuntime(
                            node, reshape(args[0], shape), lineIndex(args[2]),
                            reshape(args[1], indexShape), axis, reduction));
                    return reshape(result, {total, 1});
                  }));
  return reshape(scattered, shape);
}

/// ScatterElements with `index` (int32, in range, counted from the axis's
/// start): an update can only land in the data's line along `axis` through
/// its own other coordinates, so each line compares its positions with its
/// updates' indices ([outer, A, J, inner]: the data's elements times the
/// updates per line).
Expected<Value> Importer::scatterElementsRuntime(const Node &node, Value data,
                                                 Value index, Value updates, int64_t axis,
                                                 Reduction reduction) {
  Shape shape = shapeOf(data), indexShape = shapeOf(index);
  size_t rank = shape.size();
  mlir::Type element = elementTypeOf(data), i1 = builder_.getI1Type(),
             i32 = builder_.getI32Type();
  if (reduction != Reduction::None && !element.isF32() && !element.isInteger(32) &&
      !element.isInteger(64))
    return nodeUnsupported(node, "a reduction needs float32, int32 or int64 data, not " +
                                     dtypeName(dtypeOf(data)));
  int64_t outer = product(shape, 0, axis), extent = shape[axis],
          inner = product(shape, axis + 1, rank), perLine = indexShape[axis];
  int64_t total = outer * extent * inner;
  if (perLine > kMaxPairs / total)
    return nodeUnsupported(node, std::to_string(perLine) +
                                     " updates per line at run-time "
                                     "indices into " +
                                     std::to_string(total) + " elements are over " +
                                     std::to_string(kMaxPairs) + " compared pairs");
  // Where the updates are shorter than the data off the axis, the indices
  // are padded with -1, which matches no position.
  Shape lines = shape;
  lines[axis] = perLine;
  if (lines != indexShape) {
    Shape pads;
    for (size_t d = 0; d < rank; ++d) {
      pads.push_back(0);
      pads.push_back(lines[d] - indexShape[d]);
    }
    index = buildTyped<mlir::tosa::PadOp>(i32, lines,
                                          {index, constShape(pads), integer(i32, -1, 1)});
    updates = buildTyped<mlir::tosa::PadOp>(
        element, lines,
        {updates, constShape(pads), identityOf(element, Reduction::Add, 1)});
  }
  Shape pairs = {outer, extent, perLine, inner}, reduced = {outer, extent, 1, inner};
  FLOWC_ASSIGN_OR_RETURN(Value positions, iota(node, i32, extent, 4, 1));
  Value match = buildTyped<mlir::tosa::EqualOp>(
      i1, pairs, {reshape(index, {outer, 1, perLine, inner}), positions});
  auto axis2 = attr("axis", builder_.getI32IntegerAttr(2));
  Shape flat = {outer, extent, inner};
  Value reached =
      reshape(buildTyped<mlir::tosa::ReduceAnyOp>(i1, reduced, {match}, {axis2}), flat);
  Value lineUpdates = reshape(updates, {outer, 1, perLine, inner});
  Value base = reshape(data, flat);
  Value arriving;
  if (reduction == Reduction::None) {
    // The last update to each element, gathered from its line's updates.
    FLOWC_ASSIGN_OR_RETURN(Value order, iota(node, i32, perLine, 4, 2));
    Value last = buildTyped<mlir::tosa::ReduceMaxOp>(
        i32, reduced,
        {buildTyped<mlir::tosa::SelectOp>(i32, pairs,
                                          {match, order, integer(i32, 0, 4)})},
        {axis2});
    // tosa.gather per (outer, inner) line: values [lines, J, 1], indices
    // [lines, A].
    Value values =
        reshape(transpose(reshape(updates, {outer, perLine, inner}), {0, 2, 1}),
                {outer * inner, perLine, 1});
    Value picks =
        reshape(transpose(reshape(last, flat), {0, 2, 1}), {outer * inner, extent});
    Value gathered = buildTyped<mlir::tosa::GatherOp>(element, {outer * inner, extent, 1},
                                                      {values, picks});
    arriving = transpose(reshape(gathered, {outer, inner, extent}), {0, 2, 1});
  } else {
    Value masked = buildTyped<mlir::tosa::SelectOp>(
        element, pairs, {match, lineUpdates, identityOf(element, reduction, 4)});
    Value folded = reduceAlong(reduction, masked, 2);
    arriving = combine(reduction, base, reshape(folded, flat));
  }
  return reshape(
      buildTyped<mlir::tosa::SelectOp>(element, flat, {reached, arriving, base}), shape);
}

namespace {

using I = Importer;

// The family's op table (OpRegistry.h).
constexpr OpInfo kOps[] = {
    {.name = "GatherND",
     .sinceVersion = 11,
     .signature = {2, 2, 1, 1},
     .import = &I::importGatherND,
     .cost = dataMovement},
    {.name = "Hardmax", .import = &I::importHardmax, .cost = perElement<1>},
    {.name = "OneHot",
     .sinceVersion = 9,
     .signature = {3, 3, 1, 1},
     .import = &I::importOneHot,
     .cost = dataMovement},
    {.name = "Scatter",
     .sinceVersion = 9,
     .untilVersion = 10,
     .signature = {3, 3, 1, 1},
     .import = &I::importScatterElements,
     .cost = dataMovement},
    {.name = "ScatterElements",
     .sinceVersion = 11,
     .signature = {3, 3, 1, 1},
     .import = &I::importScatterElements,
     .cost = dataMovement},
    {.name = "ScatterND",
     .sinceVersion = 11,
     .signature = {3, 3, 1, 1},
     .import = &I::importScatterND,
     .cost = dataMovement},
    {.name = "TopK",
     .untilVersion = 9,
     .signature = {1, 1, 2, 2},
     .import = &I::importTopK},
    {.name = "TopK",
     .sinceVersion = 10,
     .signature = {2, 2, 2, 2},
     .import = &I::importTopK},
};

} // namespace

std::span<const OpInfo> selectionOps() { return kOps; }

} // namespace flowc::compiler::import
