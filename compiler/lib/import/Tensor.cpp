// Data movement: reshapes, transposes, concatenation, slicing, gathers,
// casts, padding and constants. None of them computes, so their static
// cost is zero.
#include "Importer.h"
#include "OpCost.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <set>

namespace flowc::compiler::import {

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

Status Importer::importConcat(const Node &node) {
  llvm::SmallVector<Value> inputs;
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    FLOWC_ASSIGN_OR_RETURN(Value v, anyOperand(node, i));
    if (!inputs.empty())
      FLOWC_RETURN_IF_ERROR(sameElementType(node, inputs[0], v));
    inputs.push_back(v);
  }
  if (inputs.empty())
    return nodeError(node, "Concat needs at least one input");
  Shape reference = shapeOf(inputs[0]);
  int64_t rank = static_cast<int64_t>(reference.size());
  FLOWC_ASSIGN_OR_RETURN(int64_t axis, rankAxis(node, intAttr(node, "axis", 0), rank));
  reference[axis] = 0;
  for (Value v : inputs) {
    Shape other = shapeOf(v);
    if (other.size() == reference.size())
      other[axis] = 0;
    if (other != reference)
      return nodeError(node, "input " + shapeString(shapeOf(v)) +
                                 " does not match the others outside axis " +
                                 std::to_string(axis));
  }
  return define(node, concatAlong(inputs, axis));
}

Status Importer::importSqueezeLike(const Node &node, bool unsqueeze) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Shape out, squeezedShape(node, shapeOf(x), unsqueeze));
  return define(node, reshape(x, out));
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

Expected<std::vector<Importer::SliceAxis>> Importer::sliceRanges(const Node &node,
                                                                 const Shape &in) {
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
  std::vector<SliceAxis> ranges;
  for (int64_t d = 0; d < rank; ++d)
    ranges.push_back({0, in[d], 1});
  std::set<int64_t> seen;
  for (size_t i = 0; i < axes.size(); ++i) {
    FLOWC_ASSIGN_OR_RETURN(int64_t axis, rankAxis(node, axes[i], rank));
    if (!seen.insert(axis).second)
      return nodeError(node, "axes " + shapeString(axes) + " repeat axis " +
                                 std::to_string(axis));
    int64_t dim = in[axis], step = steps.empty() ? 1 : steps[i];
    // Bounds may sit at the int64 limits ("to the end"): saturated at 2^62
    // first, no sum below overflows.
    auto bounded = [dim](int64_t v) {
      v = std::clamp(v, -(int64_t{1} << 62), int64_t{1} << 62);
      return v < 0 ? v + dim : v;
    };
    // ONNX clamps into [0, dim] going forwards and [-1, dim - 1] going
    // backwards (-1: before the first element).
    int64_t low = step > 0 ? 0 : -1, high = step > 0 ? dim : dim - 1;
    int64_t begin = std::clamp(bounded(starts[i]), low, high);
    int64_t end = std::clamp(bounded(ends[i]), low, high);
    // Every |step|-th element from begin towards end.
    int64_t span = step > 0 ? end - begin : begin - end;
    int64_t stride = step > 0 ? step
                     : step == std::numeric_limits<int64_t>::min()
                         ? std::numeric_limits<int64_t>::max()
                         : -step;
    int64_t count = span <= 0 ? 0 : 1 + (span - 1) / stride;
    ranges[axis] = {begin, count, step};
  }
  return ranges;
}

Value Importer::stepAlong(Value x, int64_t axis, SliceAxis range) {
  int64_t dim = shapeOf(x)[axis], begin = range.begin, count = range.count,
          step = range.step;
  // Backwards: forwards through the reversed axis.
  if (step < 0) {
    x = reverseAlong(x, axis);
    begin = dim - 1 - begin;
    step = step == std::numeric_limits<int64_t>::min()
               ? std::numeric_limits<int64_t>::max()
               : -step;
  }
  if (count == 1)
    return sliceAlong(x, axis, begin, 1);
  // count >= 2 keeps step below dim: [begin, begin + count * step), padded
  // past the end with zeros, viewed as [count, step]; its first column.
  int64_t end = std::min(dim, begin + count * step);
  x = sliceAlong(x, axis, begin, end - begin);
  if (end - begin < count * step) {
    Shape filler = shapeOf(x);
    filler[axis] = count * step - (end - begin);
    x = concatAlong({x, zeros(elementTypeOf(x), filler)}, axis);
  }
  Shape split = shapeOf(x);
  split[axis] = step;
  split.insert(split.begin() + axis, count);
  Shape out = shapeOf(x);
  out[axis] = count;
  return reshape(sliceAlong(reshape(x, split), axis + 1, 0, 1), out);
}

Status Importer::importSlice(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  Shape shape = shapeOf(x);
  FLOWC_ASSIGN_OR_RETURN(auto ranges, sliceRanges(node, shape));
  // Unit steps first, as one slice (an empty result as it is: refused by
  // its shape); then each other step along its axis.
  Shape start, size;
  bool empty = false;
  for (size_t d = 0; d < ranges.size(); ++d) {
    bool unit = ranges[d].step == 1 || ranges[d].count == 0;
    start.push_back(unit ? ranges[d].begin : 0);
    size.push_back(unit ? ranges[d].count : shape[d]);
    empty |= ranges[d].count == 0;
  }
  if (empty)
    return define(node, slice(x, Shape(ranges.size(), 0), size));
  x = slice(x, start, size);
  for (size_t d = 0; d < ranges.size(); ++d)
    if (ranges[d].step != 1)
      x = stepAlong(x, static_cast<int64_t>(d), ranges[d]);
  return define(node, x);
}

Value Importer::checkedIndices(const Node &node, Value flat, int64_t k,
                               const std::string &what) {
  auto indexType = elementTypeOf(flat);
  unsigned bits = indexType.getIntOrFloatBitWidth();
  Shape shape = shapeOf(flat);
  // Bounds past the index type's range (an int32 index into more than 2^31
  // rows) cannot be crossed, so they saturate.
  int64_t typeMax =
      bits >= 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (bits - 1)) - 1;
  int64_t low = std::max(-k, -typeMax - 1), high = std::min(k - 1, typeMax);
  size_t rank = shape.size();
  auto i1 = builder_.getI1Type();
  Value below =
      buildTyped<mlir::tosa::GreaterOp>(i1, shape, {integer(indexType, low, rank), flat});
  Value above = buildTyped<mlir::tosa::GreaterOp>(i1, shape,
                                                  {flat, integer(indexType, high, rank)});
  Value outside = buildTyped<mlir::tosa::LogicalOrOp>(i1, shape, {below, above});
  failRunIf(node, outside,
            "an index is outside [" + std::to_string(-k) + ", " + std::to_string(k - 1) +
                "], the range of " + what);
  return buildTyped<mlir::tosa::SelectOp>(indexType, shape,
                                          {outside, integer(indexType, 0, rank), flat});
}

void Importer::failRunIf(const Node &node, Value flags, const std::string &problem) {
  // All dimensions reduced to one flag, a bool [1].
  Value any = flags;
  for (size_t dim = 0; dim < shapeOf(flags).size(); ++dim) {
    Shape reduced = shapeOf(any);
    reduced[dim] = 1;
    any = buildTyped<mlir::tosa::ReduceAnyOp>(
        builder_.getI1Type(), reduced, {any},
        {attr("axis", builder_.getI32IntegerAttr(dim))});
  }
  checks_.push_back({reshape(any, {1}), node.describe() + ": " + problem});
}

Value Importer::fromEnd(Value flat, int64_t k) {
  mlir::Type i32 = builder_.getI32Type();
  Shape shape = shapeOf(flat);
  size_t rank = shape.size();
  Value negative = buildTyped<mlir::tosa::GreaterOp>(builder_.getI1Type(), shape,
                                                     {integer(i32, 0, rank), flat});
  Value wrapped =
      buildTyped<mlir::tosa::AddOp>(i32, shape, {flat, integer(i32, k, rank)});
  return buildTyped<mlir::tosa::SelectOp>(i32, shape, {negative, wrapped, flat});
}

Expected<Value> Importer::gatherRuntime(const Node &node, Value data, Value indices,
                                        int64_t axis, bool checkIndices) {
  mlir::Type indexType = elementTypeOf(indices);
  if (!indexType.isInteger(64) && !indexType.isInteger(32))
    return nodeError(node, "indices must be int64 or int32");
  Shape shape = shapeOf(data), indexShape = shapeOf(indices);
  int64_t rank = static_cast<int64_t>(shape.size());
  int64_t k = shape[axis];
  // tosa.gather indexes with int32.
  if (k > std::numeric_limits<int32_t>::max())
    return nodeUnsupported(node, "gathers along an axis of " + std::to_string(k) +
                                     " elements, over int32's range");
  // Move `axis` first so the gather is over [1, K, C] values.
  llvm::SmallVector<int32_t> perms{static_cast<int32_t>(axis)};
  for (int64_t i = 0; i < rank; ++i)
    if (i != axis)
      perms.push_back(static_cast<int32_t>(i));
  Value front = transpose(data, perms);
  int64_t rest = product(shape, 0, shape.size()) / std::max<int64_t>(k, 1);
  int64_t count = product(indexShape, 0, indexShape.size());
  Value values = reshape(front, {1, k, rest});
  Value flat = reshape(indices, {1, count});
  if (checkIndices)
    flat = checkedIndices(node, flat, k,
                          "axis " + std::to_string(axis) + " of " + shapeString(shape));
  auto i32 = builder_.getI32Type();
  if (!indexType.isInteger(32))
    flat = buildTyped<mlir::tosa::CastOp>(i32, {1, count}, {flat});
  flat = fromEnd(flat, k);
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

Status Importer::checkElementIndices(const Node &node, Value indices, const Shape &shape,
                                     int64_t axis) {
  Shape indexShape = shapeOf(indices);
  int64_t rank = static_cast<int64_t>(shape.size());
  mlir::Type indexType = elementTypeOf(indices);
  if (!indexType.isInteger(64) && !indexType.isInteger(32))
    return nodeError(node, "indices must be int64 or int32");
  if (static_cast<int64_t>(indexShape.size()) != rank)
    return nodeError(node, "indices " + shapeString(indexShape) + " and data " +
                               shapeString(shape) + " differ in rank");
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && indexShape[d] > shape[d])
      return nodeError(node, "indices " + shapeString(indexShape) +
                                 " are longer than data " + shapeString(shape) +
                                 " along axis " + std::to_string(d));
  int64_t total = product(shape, 0, shape.size());
  if (total > std::numeric_limits<int32_t>::max())
    return nodeUnsupported(node, "indexes " + std::to_string(total) +
                                     " elements, over int32's range");
  return checkRuntimeShape(node, indexShape);
}

Expected<Importer::ElementOffsets> Importer::elementOffsets(const Node &node,
                                                            Value indices,
                                                            const Shape &shape,
                                                            int64_t axis) {
  FLOWC_RETURN_IF_ERROR(checkElementIndices(node, indices, shape, axis));
  Shape indexShape = shapeOf(indices);
  int64_t rank = static_cast<int64_t>(shape.size());
  FLOWC_ASSIGN_OR_RETURN(int64_t count, reserveFolded(node, indexShape));
  Shape strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  // Constant indices are checked here, as Gather's are, and give whole
  // offsets.
  auto known = intConstant(node.inputs[1]);
  if (known)
    for (int64_t index : known->values)
      if (index < -shape[axis] || index >= shape[axis])
        return nodeError(node, "index " + std::to_string(index) +
                                   " is out of range for axis " + std::to_string(axis) +
                                   " of " + shapeString(shape));
  // Each element's offset in data, its axis coordinate left out (known
  // indices: put in).
  std::vector<int64_t> base(static_cast<size_t>(count));
  Shape coordinate(rank, 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t offset = 0;
    for (int64_t d = 0; d < rank; ++d)
      offset += d == axis ? 0 : coordinate[d] * strides[d];
    if (known) {
      int64_t index = known->values[i];
      offset += (index < 0 ? index + shape[axis] : index) * strides[axis];
    }
    base[i] = offset;
    for (int64_t d = rank - 1; d >= 0 && ++coordinate[d] == indexShape[d]; --d)
      coordinate[d] = 0;
  }
  if (known)
    return ElementOffsets{std::move(base), {}};
  mlir::Type i32 = builder_.getI32Type(), indexType = elementTypeOf(indices);
  Shape flatShape = {1, count};
  Value flat =
      checkedIndices(node, reshape(indices, flatShape), shape[axis],
                     "axis " + std::to_string(axis) + " of " + shapeString(shape));
  if (!indexType.isInteger(32))
    flat = buildTyped<mlir::tosa::CastOp>(i32, flatShape, {flat});
  flat = fromEnd(flat, shape[axis]);
  std::vector<int32_t> narrow(base.begin(), base.end());
  auto baseType = mlir::RankedTensorType::get(flatShape, i32);
  Value offsets = mlir::tosa::ConstOp::create(
      builder_, loc_, baseType,
      mlir::DenseElementsAttr::get(baseType, llvm::ArrayRef(narrow)));
  flat = buildTyped<mlir::tosa::AddOp>(
      i32, flatShape,
      {offsets,
       buildTyped<mlir::tosa::MulOp>(
           i32, flatShape, {flat, integer(i32, strides[axis], 2), zeroShift()})});
  return ElementOffsets{std::nullopt, flat};
}

/// out[i] = data[i with its `axis` coordinate replaced by indices[i]]: one
/// gather from the flattened data.
Status Importer::importGatherElements(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value data, anyOperand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value indices, anyOperand(node, 1));
  Shape shape = shapeOf(data), indexShape = shapeOf(indices);
  int64_t rank = static_cast<int64_t>(shape.size());
  FLOWC_ASSIGN_OR_RETURN(int64_t axis, rankAxis(node, intAttr(node, "axis", 0), rank));
  FLOWC_ASSIGN_OR_RETURN(ElementOffsets offsets,
                         elementOffsets(node, indices, shape, axis));
  Value flatData = reshape(data, {product(shape, 0, shape.size())});
  if (offsets.known) {
    std::vector<int32_t> table(offsets.known->begin(), offsets.known->end());
    FLOWC_ASSIGN_OR_RETURN(Value gathered, gatherConstant(node, flatData, 0, table));
    return define(node, reshape(gathered, indexShape));
  }
  FLOWC_ASSIGN_OR_RETURN(
      Value gathered, gatherRuntime(node, flatData, reshape(offsets.runtime, indexShape),
                                    0, /*checkIndices=*/false));
  return define(node, gathered);
}

Status Importer::importGather(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value data, anyOperand(node, 0));
  Shape shape = shapeOf(data);
  int64_t rank = static_cast<int64_t>(shape.size());
  FLOWC_ASSIGN_OR_RETURN(int64_t axis, rankAxis(node, intAttr(node, "axis", 0), rank));
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
    // Constant indices were checked above; run-time ones are checked as
    // the graph runs.
    FLOWC_ASSIGN_OR_RETURN(Value y,
                           gatherRuntime(node, data, runtimeIndices, axis, !indices));
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
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
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
  // x + 0 (x or false) broadcasts x to `out` (TOSA has no broadcast_to).
  FLOWC_ASSIGN_OR_RETURN(x, broadcastTo(node, x, out.size()));
  mlir::Type element = elementTypeOf(x);
  Value zero = zeros(element, out);
  return define(node, element.isInteger(1)
                          ? buildTyped<mlir::tosa::LogicalOrOp>(element, out, {x, zero})
                          : buildTyped<mlir::tosa::AddOp>(element, out, {x, zero}));
}

/// Inference: Dropout passes its input through and keeps every element
/// (an all-true mask). So does training mode with a ratio of 0, which
/// exporters write for `F.dropout(x, p=0.0)` (torchvision's Swin).
/// If whose condition folds at import (exporters test shapes so: torch's
/// squeeze of a size-1 axis, its LocalResponseNorm): the chosen branch's
/// nodes imported in its place, its outputs the node's.
Status Importer::importIf(const Node &node) {
  std::optional<IntTensor> condition = intConstant(node.inputs[0]);
  if (!condition)
    return nodeUnsupported(node, "the condition '" + node.inputs[0] +
                                     "' is computed at run time; flowc imports an If "
                                     "whose condition folds at import (a shape test)");
  if (condition->values.size() != 1)
    return nodeError(node, "the condition has " +
                               std::to_string(condition->values.size()) +
                               " elements, not one");
  // Both branches are checked: the model is malformed whichever runs.
  for (const char *name : {"then_branch", "else_branch"}) {
    auto it = node.attributes.find(name);
    if (it == node.attributes.end() || !it->second.graph)
      return nodeError(node, std::string("has no ") + name + " graph");
    if (it->second.graph->outputs.size() != node.outputs.size())
      return nodeError(
          node, name + (" has " + std::to_string(it->second.graph->outputs.size())) +
                    " outputs, the node " + std::to_string(node.outputs.size()));
  }
  std::string chosen = condition->values[0] != 0 ? "then_branch" : "else_branch";
  const Graph &branch = *node.attributes.at(chosen).graph;
  auto defined = [&](const std::string &name) {
    return values_.count(name) || constants_.count(name);
  };
  for (const TensorData &tensor : branch.initializers) {
    if (defined(tensor.info.name))
      return nodeError(node, chosen + "'s initializer '" + tensor.info.name +
                                 "' is already defined (every value has one writer)");
    constants_[tensor.info.name] = &tensor;
    initializerNames_.insert(tensor.info.name);
  }
  for (const Node &inner : branch.nodes) {
    for (const std::string &output : inner.outputs)
      if (!output.empty() && defined(output))
        return nodeError(node, inner.describe() + " in " + chosen + " writes '" + output +
                                   "', which is already defined (every value has one "
                                   "writer)");
    FLOWC_RETURN_IF_ERROR(importNode(inner));
  }
  // Each output an Identity of the branch's: a folded constant stays one.
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (node.outputs[i].empty())
      continue;
    Node alias{node.name,         "Identity", "", {branch.outputs[i].name},
               {node.outputs[i]}, {}};
    FLOWC_RETURN_IF_ERROR(importNode(alias));
  }
  return Status::ok();
}

Status Importer::importIdentity(const Node &node) {
  if (node.opType == "Dropout" && hasOperand(node, 2)) {
    auto training = intConstant(node.inputs[2]);
    if (!training || training->values.size() != 1)
      return nodeUnsupported(node, "training_mode must be a constant");
    float ratio = 0.5f;
    if (training->values[0] != 0 && hasOperand(node, 1)) {
      FLOWC_ASSIGN_OR_RETURN(ratio, scalarConstant(node, 1));
    }
    if (training->values[0] != 0 && ratio != 0.0f)
      return nodeUnsupported(node, "training mode (random dropout, ratio " +
                                       std::to_string(ratio) + ") is not supported");
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

Status Importer::importCastLike(const Node &node) {
  if (!hasOperand(node, 1))
    return nodeError(node, "CastLike needs a target_type input");
  return importCastTo(node, describeValue(node.inputs[1]).dtype);
}

Status Importer::importCastTo(const Node &node, DType to) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  mlir::Type target = elementType(to);
  if (!target)
    return nodeUnsupported(node, "casting to " + dtypeName(to) + " is not supported");
  mlir::Type source = elementTypeOf(x);
  DType from = dtypeOf(x);
  if (from == to)
    return define(node, x);
  Shape shape = shapeOf(x);
  mlir::Type f32 = builder_.getF32Type();
  // Between int8 and uint8 the bytes stay (numpy's and onnxruntime's
  // wrap-around): a value of its own, marked as the target is.
  if (isByte(from) && isByte(to))
    return define(node, markBytes(buildTyped<mlir::tosa::ReshapeOp>(
                                      target, shape, {x, constShape(shape)}),
                                  to));
  // Other casts from bytes go through float32, which holds every int8 and
  // uint8 value; the rules below are float32's (truncation towards zero,
  // saturation).
  if (isByte(from)) {
    x = widenBytes(x);
    source = f32;
    if (target == source)
      return define(node, x);
  }
  // Half to anything goes through float32, which holds every half value:
  // the rules below are float32's. Anything to half goes to float32 first
  // and rounds once from there (to nearest even).
  if (source.isF16() || source.isBF16()) {
    x = buildTyped<mlir::tosa::CastOp>(f32, shape, {x});
    source = f32;
    if (target == source)
      return define(node, x);
  }
  if (target.isF16() || target.isBF16()) {
    if (!source.isF32())
      x = buildTyped<mlir::tosa::CastOp>(f32, shape, {x});
    return define(node, buildTyped<mlir::tosa::CastOp>(target, shape, {x}));
  }
  auto i1 = builder_.getI1Type();
  Value zero = zeros(source, Shape(shape.size(), 1));
  if (target.isInteger(1)) {
    // Anything nonzero (NaN included) is true.
    Value isZero = buildTyped<mlir::tosa::EqualOp>(i1, shape, {x, zero});
    return define(node, buildTyped<mlir::tosa::LogicalNotOp>(i1, shape, {isZero}));
  }
  if (source.isF32() && !target.isF32()) {
    // ONNX (and onnxruntime) truncate towards zero; tosa.cast rounds to
    // nearest.
    Value negative = buildTyped<mlir::tosa::GreaterOp>(i1, shape, {zero, x});
    x = build<mlir::tosa::SelectOp>(shape,
                                    {negative, build<mlir::tosa::CeilOp>(shape, {x}),
                                     build<mlir::tosa::FloorOp>(shape, {x})});
  }
  if (isByte(to)) {
    // Wider integers keep their low byte (two's complement wraps, as in
    // onnxruntime); floats saturate.
    if (!source.isF32())
      return define(node,
                    markBytes(buildTyped<mlir::tosa::CastOp>(target, shape, {x}), to));
    return define(node, narrowToBytes(x, to));
  }
  return define(node, buildTyped<mlir::tosa::CastOp>(target, shape, {x}));
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

/// Pad in constant mode with constant, non-negative pads.
Status Importer::importPad(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape shape = shapeOf(x);
  size_t rank = shape.size();
  std::string mode = stringAttr(node, "mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    return nodeError(node,
                     "mode '" + mode + "' is not one of constant, reflect, edge, wrap");
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
  if (mode != "constant") {
    FLOWC_RETURN_IF_ERROR(checkRuntimeShape(node, out));
    for (size_t axis = 0; axis < rank; ++axis) {
      FLOWC_ASSIGN_OR_RETURN(x, padAlong(node, x, static_cast<int64_t>(axis),
                                         padding[2 * axis], padding[2 * axis + 1], mode));
    }
    return define(node, x);
  }
  float value = 0.0f;
  if (hasOperand(node, 2)) {
    FLOWC_ASSIGN_OR_RETURN(value, scalarConstant(node, 2));
  }
  return define(
      node, build<mlir::tosa::PadOp>(out, {x, constShape(padding), scalar(value, 1)}));
}

/// Reflect (mirror without the edge), edge (the edge repeated) or wrap
/// (the other end) padding along one axis, from slices of `x`.
Expected<Value> Importer::padAlong(const Node &node, Value x, int64_t axis,
                                   int64_t before, int64_t after,
                                   const std::string &mode) {
  if (before == 0 && after == 0)
    return x;
  Shape shape = shapeOf(x);
  int64_t dim = shape[axis], most = std::max(before, after);
  if (mode == "wrap" && most > dim)
    return nodeUnsupported(node, "wrap pads " + std::to_string(before) + " and " +
                                     std::to_string(after) + " of axis " +
                                     std::to_string(axis) + " go around its " +
                                     std::to_string(dim) + " elements more than once");
  if (mode == "reflect" && most > dim - 1)
    return nodeError(node, "pads " + std::to_string(before) + " and " +
                               std::to_string(after) + " of axis " +
                               std::to_string(axis) + " exceed what mode '" + mode +
                               "' can take from its " + std::to_string(dim) +
                               " elements (" + std::to_string(dim - 1) + ")");
  auto side = [&](bool leading, int64_t count) -> Value {
    if (mode == "reflect")
      return reverseAlong(leading ? sliceAlong(x, axis, 1, count)
                                  : sliceAlong(x, axis, dim - 1 - count, count),
                          axis);
    if (mode == "edge") {
      Shape multiples(shape.size(), 1), out = shape;
      multiples[axis] = count;
      out[axis] = count;
      Value edge = sliceAlong(x, axis, leading ? 0 : dim - 1, 1);
      return buildTyped<mlir::tosa::TileOp>(elementTypeOf(x), out,
                                            {edge, constShape(multiples)});
    }
    return leading ? sliceAlong(x, axis, dim - count, count)
                   : sliceAlong(x, axis, 0, count);
  };
  llvm::SmallVector<Value> parts;
  if (before)
    parts.push_back(side(true, before));
  parts.push_back(x);
  if (after)
    parts.push_back(side(false, after));
  return concatAlong(parts, axis);
}

namespace {

/// The cubic convolution kernel (Keys) at `distance` from a tap, with
/// Resize's cubic_coeff_a `a`: 1 at 0, 0 at 1 and from 2 on.
float cubicKernel(float distance, float a) {
  float d = std::fabs(distance);
  if (d <= 1)
    return ((a + 2) * d - (a + 3)) * d * d + 1;
  if (d < 2)
    return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a;
  return 0;
}

/// Where output coordinate `x` of an axis resized from `in` to `out`
/// elements (scale `scale`) reads the input, by Resize's
/// coordinate_transformation_mode. In float, as onnxruntime computes it:
/// in double, (1 + 0.5) / 0.6f - 0.5 is 1.9999999 and floors to 1, where
/// onnxruntime's float gives 2. Where the spec leaves a choice (an output
/// of one element), onnxruntime's too.
std::optional<float> sourceCoordinate(const std::string &mode, float x, float scale,
                                      int64_t in, int64_t out) {
  auto inLength = static_cast<float>(in), outLength = static_cast<float>(out);
  if (mode == "half_pixel")
    return (x + 0.5f) / scale - 0.5f;
  if (mode == "pytorch_half_pixel")
    return out > 1 ? (x + 0.5f) / scale - 0.5f : 0.0f;
  if (mode == "align_corners")
    return out > 1 ? x * (inLength - 1) / (outLength - 1) : 0.0f;
  if (mode == "asymmetric")
    return x / scale;
  if (mode == "tf_half_pixel_for_nn")
    return (x + 0.5f) / scale;
  if (mode == "half_pixel_symmetric") {
    float adjustment = outLength / (scale * inLength);
    float offset = inLength / 2 * (1 - adjustment);
    return offset + (x + 0.5f) / scale - 0.5f;
  }
  return std::nullopt;
}

/// The input element nearest to source coordinate `x` by nearest_mode.
std::optional<int64_t> nearestIndex(const std::string &mode, float x) {
  float below = std::floor(x), fraction = x - below;
  if (mode == "floor")
    return static_cast<int64_t>(below);
  if (mode == "ceil")
    return static_cast<int64_t>(std::ceil(x));
  if (mode == "round_prefer_floor")
    return static_cast<int64_t>(fraction <= 0.5f ? below : below + 1);
  if (mode == "round_prefer_ceil")
    return static_cast<int64_t>(fraction < 0.5f ? below : below + 1);
  return std::nullopt;
}

} // namespace

Expected<Value> Importer::gatherConstant(const Node &node, Value x, int64_t axis,
                                         const std::vector<int32_t> &indices) {
  auto type = mlir::RankedTensorType::get({static_cast<int64_t>(indices.size())},
                                          builder_.getI32Type());
  Value table = mlir::tosa::ConstOp::create(
      builder_, loc_, type, mlir::DenseElementsAttr::get(type, llvm::ArrayRef(indices)));
  // In range by construction: no run-time check.
  return gatherRuntime(node, x, table, axis, /*checkIndices=*/false);
}

Expected<Value> Importer::resizeAxis(const Node &node, Value x, int64_t axis, int64_t out,
                                     float scale) {
  Shape shape = shapeOf(x);
  int64_t in = shape[axis];
  std::string mode = stringAttr(node, "mode", "nearest");
  std::string transform =
      stringAttr(node, "coordinate_transformation_mode", "half_pixel");
  std::string rounding = stringAttr(node, "nearest_mode", "round_prefer_floor");
  // onnxruntime's nearest picks differ from the spec's formula here where
  // a coordinate is a whole number (2 for 1 under floor).
  if (mode == "nearest" && transform == "half_pixel_symmetric")
    return nodeUnsupported(node, "coordinate_transformation_mode 'half_pixel_symmetric' "
                                 "is supported with mode 'linear' only");
  FLOWC_RETURN_IF_ERROR(reserveFolded(node, {out}).status());
  std::vector<int32_t> first(out), second(out);
  std::vector<float> weights(out);
  // Cubic: four taps around each coordinate, x[floor - 1 .. floor + 2].
  std::array<std::vector<int32_t>, 4> cubicTaps;
  std::array<std::vector<float>, 4> cubicWeights;
  for (int k = 0; k < 4; ++k) {
    cubicTaps[k].resize(out);
    cubicWeights[k].resize(out);
  }
  float cubicA = floatAttr(node, "cubic_coeff_a", -0.75f);
  bool excludeOutside = intAttr(node, "exclude_outside", 0) != 0;
  for (int64_t j = 0; j < out; ++j) {
    std::optional<float> source =
        sourceCoordinate(transform, static_cast<float>(j), scale, in, out);
    if (!source)
      return nodeUnsupported(node, "coordinate_transformation_mode '" + transform +
                                       "' is not supported");
    if (mode == "cubic") {
      // Past a few elements outside the axis every tap is an edge element
      // (or, excluded, nothing): the clamp only keeps the cast defined.
      float at = std::clamp(*source, -8.0f, static_cast<float>(in + 8));
      float base = std::floor(at), t = at - base;
      std::array<float, 4> distance = {t + 1, t, 1 - t, 2 - t};
      float sum = 0;
      for (int k = 0; k < 4; ++k) {
        int64_t index = static_cast<int64_t>(base) - 1 + k;
        bool outside = index < 0 || index >= in;
        float w = excludeOutside && outside ? 0.0f : cubicKernel(distance[k], cubicA);
        cubicTaps[k][j] = static_cast<int32_t>(std::clamp<int64_t>(index, 0, in - 1));
        cubicWeights[k][j] = w;
        sum += w;
      }
      if (excludeOutside && sum != 0)
        for (int k = 0; k < 4; ++k)
          cubicWeights[k][j] /= sum;
      continue;
    }
    if (mode == "nearest") {
      std::optional<int64_t> index = nearestIndex(rounding, *source);
      if (!index)
        return nodeError(node, "nearest_mode '" + rounding +
                                   "' is not one of floor, "
                                   "ceil, round_prefer_floor, "
                                   "round_prefer_ceil");
      first[j] = static_cast<int32_t>(std::clamp<int64_t>(*index, 0, in - 1));
      continue;
    }
    // Linear: the two neighbours of the clamped coordinate, weighted.
    float clamped = std::clamp(*source, 0.0f, static_cast<float>(in - 1));
    int64_t below = std::min(static_cast<int64_t>(clamped), in - 1);
    first[j] = static_cast<int32_t>(below);
    second[j] = static_cast<int32_t>(std::min(below + 1, in - 1));
    weights[j] = clamped - static_cast<float>(below);
  }
  // Nearest by a whole factor, each element repeated in place (PyTorch's
  // upsampling): a tile, not a gather.
  if (mode == "nearest" && out % in == 0) {
    int64_t factor = out / in;
    bool repeats = true;
    for (int64_t j = 0; j < out && repeats; ++j)
      repeats = first[j] == j / factor;
    if (repeats) {
      Shape split = shape, multiples(shape.size() + 1, 1), resized = shape;
      split.insert(split.begin() + axis + 1, 1);
      multiples[axis + 1] = factor;
      Shape tiled = split;
      tiled[axis + 1] = factor;
      resized[axis] = out;
      Value repeated =
          build<mlir::tosa::TileOp>(tiled, {reshape(x, split), constShape(multiples)});
      return reshape(repeated, resized);
    }
  }
  Shape weightShape(shape.size(), 1);
  weightShape[axis] = out;
  auto weightType = f32(weightShape);
  auto weightConstant = [&](const std::vector<float> &values) -> Value {
    return mlir::tosa::ConstOp::create(
        builder_, loc_, weightType,
        mlir::DenseElementsAttr::get(weightType, llvm::ArrayRef(values)));
  };
  if (mode == "cubic") {
    Value sum;
    for (int k = 0; k < 4; ++k) {
      FLOWC_ASSIGN_OR_RETURN(Value tap, gatherConstant(node, x, axis, cubicTaps[k]));
      Value term = mul(tap, weightConstant(cubicWeights[k]));
      sum = sum ? add(sum, term) : term;
    }
    return sum;
  }
  FLOWC_ASSIGN_OR_RETURN(Value low, gatherConstant(node, x, axis, first));
  if (mode == "nearest" ||
      std::all_of(weights.begin(), weights.end(), [](float w) { return w == 0; }))
    return low;
  FLOWC_ASSIGN_OR_RETURN(Value high, gatherConstant(node, x, axis, second));
  Shape resized = shapeOf(low);
  Value step = build<mlir::tosa::SubOp>(resized, {high, low});
  return build<mlir::tosa::AddOp>(resized, {low, mul(step, weightConstant(weights))});
}

/// Resize at opset 11 and up, nearest and linear, its scales or sizes
/// constants: each resized axis in turn, from index tables computed here
/// by the ONNX formulas (every coordinate_transformation_mode but
/// tf_crop_and_resize, every nearest_mode).
Status Importer::importResize(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape shape = shapeOf(x);
  int64_t rank = static_cast<int64_t>(shape.size());
  std::string mode = stringAttr(node, "mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return nodeUnsupported(node, "mode '" + mode +
                                     "' is not supported (nearest, linear, cubic)");
  if (intAttr(node, "antialias", 0) != 0)
    return nodeUnsupported(node, "antialias is not supported");
  if (std::string policy = stringAttr(node, "keep_aspect_ratio_policy", "stretch");
      policy != "stretch")
    return nodeUnsupported(node, "keep_aspect_ratio_policy '" + policy +
                                     "' is not supported (stretch)");
  Shape axes = intsAttr(node, "axes", {});
  for (int64_t &axis : axes) {
    FLOWC_ASSIGN_OR_RETURN(axis, rankAxis(node, axis, rank));
  }
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  if (std::set<int64_t>(axes.begin(), axes.end()).size() != axes.size())
    return nodeError(node, "axes " + shapeString(axes) + " repeat an axis");
  // Scales (input 2) or sizes (input 3): constants, one per axis; an empty
  // tensor stands for an absent one.
  std::vector<float> scales;
  Shape sizes;
  if (hasOperand(node, 2)) {
    FLOWC_ASSIGN_OR_RETURN(const TensorData *tensor, constantOperand(node, 2));
    if (tensor->info.dtype != DType::F32)
      return nodeError(node, "scales must be float32");
    for (int64_t i = 0; i < tensor->info.elementCount(); ++i) {
      float value;
      std::memcpy(&value, tensor->bytes.data() + 4 * i, 4);
      scales.push_back(value);
    }
  }
  if (hasOperand(node, 3)) {
    auto given = intConstant(node.inputs[3]);
    if (!given)
      return nodeUnsupported(node, "sizes must be a constant integer tensor");
    sizes = given->values;
  }
  if (scales.empty() == sizes.empty())
    return nodeError(node, "needs exactly one of scales and sizes, with one value per "
                           "resized axis");
  size_t count = scales.empty() ? sizes.size() : scales.size();
  if (count != axes.size())
    return nodeError(node, std::string(scales.empty() ? "sizes" : "scales") + " has " +
                               std::to_string(count) + " values for " +
                               std::to_string(axes.size()) + " axes");
  Shape out = shape;
  std::vector<float> axisScale(rank, 1.0f);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t axis = axes[i], in = shape[axis];
    if (!scales.empty()) {
      if (!(scales[i] > 0) || !std::isfinite(scales[i]))
        return nodeError(node, "scale " + std::to_string(scales[i]) + " of axis " +
                                   std::to_string(axis) + " is not positive and finite");
      // As onnxruntime rounds it: in float (10 x 0.7f is 7 there, 6.9999999
      // in double).
      float resized = std::floor(static_cast<float>(in) * scales[i]);
      if (resized > static_cast<float>(std::numeric_limits<int32_t>::max()))
        return nodeError(node, "axis " + std::to_string(axis) + " would have " +
                                   std::to_string(resized) + " elements");
      out[axis] = static_cast<int64_t>(resized);
      axisScale[axis] = scales[i];
    } else {
      if (sizes[i] > std::numeric_limits<int32_t>::max())
        return nodeError(node, "size " + std::to_string(sizes[i]) + " of axis " +
                                   std::to_string(axis) + " is too large");
      out[axis] = sizes[i];
      axisScale[axis] = static_cast<float>(sizes[i]) / static_cast<float>(in);
    }
    if (out[axis] <= 0)
      return nodeError(node, "axis " + std::to_string(axis) + " would have " +
                                 std::to_string(out[axis]) +
                                 " elements; the result needs some");
  }
  FLOWC_RETURN_IF_ERROR(checkRuntimeShape(node, out));
  for (int64_t axis : axes) {
    if (out[axis] == shape[axis] && axisScale[axis] == 1.0f)
      continue;
    FLOWC_ASSIGN_OR_RETURN(x, resizeAxis(node, x, axis, out[axis], axisScale[axis]));
  }
  return define(node, x);
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

/// `x` moved `by` places along `axis` towards its end, zeros filling in.
Value Importer::shiftAlong(Value x, int64_t axis, int64_t by) {
  Shape shape = shapeOf(x), filled = shape;
  if (by >= shape[axis])
    return zeros(elementTypeOf(x), shape);
  filled[axis] = by;
  return concatAlong(
      {zeros(elementTypeOf(x), filled), sliceAlong(x, axis, 0, shape[axis] - by)}, axis);
}

/// A running sum as a log-step scan: after the step adding the copy
/// shifted by s, each element holds the sum of the 2s elements ending at
/// it. ceil(log2(n)) adds, all TOSA; the axis is a sequence (position ids
/// from a mask), short next to the matrix products around it. Float sums
/// come out in another order than a sequential loop's (the same rounding
/// as a pairwise sum); integer sums wrap, as onnxruntime's do.
Status Importer::importCumSum(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  mlir::Type element = elementTypeOf(x);
  if (!element.isF32() && !element.isInteger(32) && !element.isInteger(64))
    return nodeUnsupported(node, "input '" + node.inputs[0] + "' is " +
                                     dtypeName(dtypeOf(x)) +
                                     "; CumSum is supported on float32, int32 and int64");
  auto axisValue = hasOperand(node, 1) ? intConstant(node.inputs[1]) : std::nullopt;
  if (!axisValue)
    return nodeUnsupported(node, "axis must be a constant integer");
  if (axisValue->values.size() != 1)
    return nodeError(node, "axis must hold one value, it has shape " +
                               shapeString(axisValue->shape));
  Shape shape = shapeOf(x);
  FLOWC_ASSIGN_OR_RETURN(int64_t axis, rankAxis(node, axisValue->values[0],
                                                static_cast<int64_t>(shape.size())));
  bool reverse = intAttr(node, "reverse", 0) != 0;
  if (reverse)
    x = reverseAlong(x, axis);
  int64_t n = shape[axis];
  // Exclusive: each element sums those before it, so the scan runs on the
  // input moved one place along.
  if (intAttr(node, "exclusive", 0) != 0 && n > 0)
    x = shiftAlong(x, axis, 1);
  for (int64_t step = 1; step < n; step *= 2)
    x = buildTyped<mlir::tosa::AddOp>(element, shape, {x, shiftAlong(x, axis, step)});
  return define(node, reverse ? reverseAlong(x, axis) : x);
}

/// Tile with constant repeats: tosa.tile, any element type.
Status Importer::importTile(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  auto repeats = hasOperand(node, 1) ? intConstant(node.inputs[1]) : std::nullopt;
  if (!repeats)
    return nodeUnsupported(node, "repeats must be a constant integer tensor");
  Shape shape = shapeOf(x);
  if (repeats->values.size() != shape.size())
    return nodeError(node, "repeats " + shapeString(repeats->values) + " has " +
                               std::to_string(repeats->values.size()) +
                               " values for an input of rank " +
                               std::to_string(shape.size()));
  Shape out = shape;
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t times = repeats->values[d];
    if (times < 0 ||
        (times > 0 && shape[d] > std::numeric_limits<int64_t>::max() / times))
      return nodeError(node, "repeats " + shapeString(repeats->values) +
                                 " cannot tile an input of shape " + shapeString(shape));
    out[d] = shape[d] * times;
  }
  FLOWC_RETURN_IF_ERROR(checkRuntimeShape(node, out));
  return define(node, buildTyped<mlir::tosa::TileOp>(elementTypeOf(x), out,
                                                     {x, constShape(repeats->values)}));
}

/// DepthToSpace and SpaceToDepth: a reshape, a transpose and a reshape.
/// DepthToSpace's DCR mode takes channels as [block, block, C], CRD as
/// [C, block, block]; SpaceToDepth writes DCR's order.
Status Importer::importDepthSpace(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  Shape shape = shapeOf(x);
  if (shape.size() != 4)
    return nodeError(node, "input " + shapeString(shape) + " must be 4-D (NCHW)");
  int64_t block = intAttr(node, "blocksize", 0);
  if (block < 1 || block > kMaxWindowValue)
    return nodeError(node, "blocksize " + std::to_string(block) + " is not positive");
  int64_t n = shape[0], c = shape[1], h = shape[2], w = shape[3];
  if (node.opType == "SpaceToDepth") {
    if (h % block || w % block)
      return nodeError(node, "blocksize " + std::to_string(block) +
                                 " does not divide the spatial dimensions of " +
                                 shapeString(shape));
    Value split = reshape(x, {n, c, h / block, block, w / block, block});
    Value moved = transpose(split, {0, 3, 5, 1, 2, 4});
    return define(node, reshape(moved, {n, c * block * block, h / block, w / block}));
  }
  if (c % (block * block))
    return nodeError(node, "blocksize " + std::to_string(block) +
                               " squared does not divide " + std::to_string(c) +
                               " channels");
  std::string mode = stringAttr(node, "mode", "DCR");
  if (mode != "DCR" && mode != "CRD")
    return nodeError(node, "mode '" + mode + "' is not DCR or CRD");
  int64_t depth = c / (block * block);
  Value moved =
      mode == "DCR"
          ? transpose(reshape(x, {n, block, block, depth, h, w}), {0, 3, 4, 1, 5, 2})
          : transpose(reshape(x, {n, depth, block, block, h, w}), {0, 1, 4, 2, 5, 3});
  return define(node, reshape(moved, {n, depth, h * block, w * block}));
}

/// Trilu: the last two axes kept on one side of diagonal k (a constant),
/// zeros elsewhere, through a constant mask.
Status Importer::importTrilu(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
  Shape shape = shapeOf(x);
  if (shape.size() < 2)
    return nodeError(node,
                     "input " + shapeString(shape) + " has fewer than 2 dimensions");
  int64_t k = 0;
  if (hasOperand(node, 1)) {
    auto given = intConstant(node.inputs[1]);
    if (!given || given->values.size() != 1)
      return nodeUnsupported(node, "k must be a constant integer scalar");
    k = given->values[0];
  }
  bool upper = intAttr(node, "upper", 1) != 0;
  int64_t rows = shape[shape.size() - 2], columns = shape.back();
  FLOWC_RETURN_IF_ERROR(reserveFolded(node, {rows, columns}).status());
  llvm::SmallVector<bool> keep;
  keep.reserve(static_cast<size_t>(rows * columns));
  // j - i compared in 128 bits: k may be anywhere in int64.
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < columns; ++j) {
      __int128 offset = static_cast<__int128>(j) - i;
      keep.push_back(upper ? offset >= k : offset <= k);
    }
  Shape maskShape(shape.size(), 1);
  maskShape[shape.size() - 2] = rows;
  maskShape.back() = columns;
  auto type = mlir::RankedTensorType::get(maskShape, builder_.getI1Type());
  Value mask = mlir::tosa::ConstOp::create(builder_, loc_, type,
                                           mlir::DenseElementsAttr::get(type, keep));
  mlir::Type element = elementTypeOf(x);
  return define(node,
                buildTyped<mlir::tosa::SelectOp>(
                    element, shape, {mask, x, zeros(element, Shape(shape.size(), 1))}));
}

namespace {

using I = Importer;
/// Inputs that older opsets took as attributes.
constexpr OpSignature kShapeFromInput{1, 2, 1, 1};

// The family's op table (OpRegistry.h): one entry per op and opset range.
// Shape, Size, ConstantOfShape and Range have no import function: they are
// evaluated at import (ShapeFolding.cpp), or refused.
constexpr OpInfo kOps[] = {
    {.name = "Cast", .import = &I::importCast, .cost = dataMovement},
    {.name = "CastLike",
     .sinceVersion = 15,
     .signature = {2, 2, 1, 1},
     .import = &I::importCastLike},
    {.name = "Concat",
     .signature = {1, kAnyCount, 1, 1, true},
     .import = &I::importConcat,
     .cost = dataMovement},
    {.name = "Constant",
     .signature = {0, 0, 1, 1},
     .import = &I::importConstant,
     .cost = dataMovement},
    {.name = "ConstantOfShape", .sinceVersion = 9, .cost = dataMovement},
    {.name = "CumSum",
     .sinceVersion = 11,
     .signature = {2, 2, 1, 1},
     .import = &I::importCumSum,
     .cost = perElement<1>},
    {.name = "DepthToSpace", .import = &I::importDepthSpace, .cost = dataMovement},
    {.name = "Dropout",
     .signature = {1, 3, 1, 2},
     .import = &I::importIdentity,
     .cost = dataMovement},
    {.name = "Expand",
     .sinceVersion = 8,
     .signature = {2, 2, 1, 1},
     .import = &I::importExpand,
     .cost = dataMovement},
    {.name = "Flatten", .import = &I::importFlatten, .cost = dataMovement},
    {.name = "Gather",
     .signature = {2, 2, 1, 1},
     .import = &I::importGather,
     .cost = dataMovement},
    {.name = "GatherElements",
     .sinceVersion = 11,
     .signature = {2, 2, 1, 1},
     .import = &I::importGatherElements,
     .cost = dataMovement},
    {.name = "Identity", .import = &I::importIdentity, .cost = dataMovement},
    {.name = "If", .signature = {1, 1, 1, kAnyCount}, .import = &I::importIf},
    {.name = "Pad",
     .signature = {1, 4, 1, 1},
     .import = &I::importPad,
     .cost = dataMovement},
    {.name = "Range", .sinceVersion = 11, .signature = {3, 3, 1, 1}},
    {.name = "Reshape",
     .signature = kShapeFromInput,
     .import = &I::importReshape,
     .cost = dataMovement},
    {.name = "Resize",
     .sinceVersion = 11,
     .signature = {1, 4, 1, 1},
     .import = &I::importResize,
     .cost = dataMovement},
    {.name = "Shape", .cost = dataMovement},
    {.name = "Size"},
    {.name = "Slice",
     .signature = {1, 5, 1, 1},
     .import = &I::importSlice,
     .cost = dataMovement},
    {.name = "SpaceToDepth", .import = &I::importDepthSpace, .cost = dataMovement},
    {.name = "Split",
     .signature = {1, 2, 1, kAnyCount},
     .import = &I::importSplit,
     .cost = dataMovement},
    {.name = "Squeeze",
     .signature = kShapeFromInput,
     .import = &I::importSqueeze,
     .cost = dataMovement},
    {.name = "Tile",
     .sinceVersion = 6,
     .signature = {2, 2, 1, 1},
     .import = &I::importTile,
     .cost = dataMovement},
    {.name = "Transpose", .import = &I::importTranspose, .cost = dataMovement},
    {.name = "Trilu",
     .sinceVersion = 14,
     .signature = {1, 2, 1, 1},
     .import = &I::importTrilu,
     .cost = dataMovement},
    {.name = "Unsqueeze",
     .signature = kShapeFromInput,
     .import = &I::importUnsqueeze,
     .cost = dataMovement},
};

} // namespace

std::span<const OpInfo> tensorOps() { return kOps; }

} // namespace flowc::compiler::import
