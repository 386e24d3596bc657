// Shape folding at import.
//
// With static shapes, the Shape/Gather/Concat/... subgraphs that exporters
// emit for reshapes and expands compute constants. They are evaluated here
// on integer tensors and become constants like initializers, so the
// compiled graph never contains them.
#include "Importer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

namespace flowc::compiler::import {

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

std::optional<IntTensor> toInts(const TensorData &tensor) {
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

Expected<IntTensor>
Importer::foldRearranged(const Node &node, const IntTensor &a, const Shape &out,
                         llvm::function_ref<void(const Shape &, Shape &)> source) {
  FLOWC_ASSIGN_OR_RETURN(int64_t count, reserveFolded(node, out));
  IntTensor result{out, {}, a.dtype};
  result.values.reserve(static_cast<size_t>(count));
  Shape at(out.size(), 0), from(a.shape.size(), 0);
  for (int64_t i = 0; i < count; ++i) {
    source(at, from);
    int64_t offset = 0;
    for (size_t d = 0; d < from.size(); ++d)
      offset = offset * a.shape[d] + from[d];
    result.values.push_back(a.values[static_cast<size_t>(offset)]);
    // The next output coordinate, last axis fastest.
    for (size_t d = out.size(); d-- > 0;) {
      if (++at[d] < out[d])
        break;
      at[d] = 0;
    }
  }
  return result;
}

Expected<bool> Importer::tryFold(const Node &node) {
  const std::string &op = node.opType;
  if (op == "Shape") {
    FLOWC_ASSIGN_OR_RETURN(Value x, anyOperand(node, 0));
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
  static const std::set<std::string> foldable = {"ConstantOfShape",
                                                 "Gather",
                                                 "Unsqueeze",
                                                 "Squeeze",
                                                 "Reshape",
                                                 "Concat",
                                                 "Add",
                                                 "Sub",
                                                 "Mul",
                                                 "Div",
                                                 "Equal",
                                                 "Where",
                                                 "Slice",
                                                 "Cast",
                                                 "Expand",
                                                 "Mod",
                                                 "Transpose",
                                                 "Identity",
                                                 "Not",
                                                 "And",
                                                 "Or",
                                                 "Xor",
                                                 "Less",
                                                 "LessOrEqual",
                                                 "Greater",
                                                 "GreaterOrEqual"};
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
    if (value && value->info.dtype != DType::F32 && !isHalf(value->info.dtype) &&
        !toInts(*value))
      return nodeUnsupported(node, "a " + dtypeName(value->info.dtype) +
                                       " value is not supported (" + kCarriedDtypes +
                                       ")");
    if (a.shape.size() != 1)
      return nodeError(node, "shape input must be 1-D, got " + shapeString(a.shape));
    Shape shape(a.values.begin(), a.values.end());
    FLOWC_ASSIGN_OR_RETURN(int64_t count, reserveFolded(node, shape));
    if (value && isHalf(value->info.dtype)) {
      if (node.outputs.empty())
        return nodeError(node, "node has no output");
      auto bytes = std::make_shared<std::string>(static_cast<size_t>(count) * 2, '\0');
      for (size_t i = 0; i < static_cast<size_t>(count); ++i)
        std::memcpy(bytes->data() + 2 * i, value->bytes.data(), 2);
      addFolded(node.outputs[0], value->info.dtype, shape, std::move(bytes));
      return true;
    }
    // Without a value, ONNX fills with float32 zeros.
    if (!value || value->info.dtype == DType::F32) {
      float fill = 0.0f;
      if (value)
        std::memcpy(&fill, value->bytes.data(), 4);
      FLOWC_RETURN_IF_ERROR(defineFloatConstant(
          node, shape, std::vector<float>(static_cast<size_t>(count), fill)));
      return true;
    }
    int64_t fill = 0;
    if (auto values = toInts(*value); values && !values->values.empty())
      fill = values->values[0];
    result = {shape, std::vector<int64_t>(static_cast<size_t>(count), fill),
              value->info.dtype};
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
  } else if (op == "And" || op == "Or" || op == "Xor" || op == "Less" ||
             op == "LessOrEqual" || op == "Greater" || op == "GreaterOrEqual") {
    if (inputs.size() != 2)
      return nodeError(node, op + " needs two inputs");
    using Fn = int64_t (*)(int64_t, int64_t);
    Fn fn = op == "And"    ? Fn([](int64_t x, int64_t y) { return int64_t{x && y}; })
            : op == "Or"   ? Fn([](int64_t x, int64_t y) { return int64_t{x || y}; })
            : op == "Xor"  ? Fn([](int64_t x, int64_t y) { return int64_t{!x != !y}; })
            : op == "Less" ? Fn([](int64_t x, int64_t y) { return int64_t{x < y}; })
            : op == "LessOrEqual"
                ? Fn([](int64_t x, int64_t y) { return int64_t{x <= y}; })
            : op == "Greater" ? Fn([](int64_t x, int64_t y) { return int64_t{x > y}; })
                              : Fn([](int64_t x, int64_t y) { return int64_t{x >= y}; });
    FLOWC_ASSIGN_OR_RETURN(result, foldBinary(node, a, *inputs[1], fn));
    result.dtype = DType::Bool;
  } else if (op == "Not") {
    for (int64_t &value : result.values)
      value = value == 0;
    result.dtype = DType::Bool;
  } else if (op == "Identity") {
    // result is the input.
  } else if (op == "Mod") {
    if (inputs.size() != 2)
      return nodeError(node, "Mod needs two inputs");
    using Fn = int64_t (*)(int64_t, int64_t);
    // fmod 0 takes the divisor's sign (Python's %), fmod 1 the dividend's
    // (C's). A zero divisor folds to 0, like Div; -1 divides everything.
    Fn fn = intAttr(node, "fmod", 0) != 0
                ? Fn([](int64_t x, int64_t y) {
                    return y == 0 || y == -1 ? int64_t{0} : x % y;
                  })
                : Fn([](int64_t x, int64_t y) {
                    if (y == 0 || y == -1)
                      return int64_t{0};
                    int64_t r = x % y;
                    return r != 0 && (r < 0) != (y < 0) ? r + y : r;
                  });
    FLOWC_ASSIGN_OR_RETURN(result, foldBinary(node, a, *inputs[1], fn));
    result.dtype = a.dtype;
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
    // A bool holds 0 or 1, an int32 wraps.
    for (int64_t &value : result.values)
      value = to == DType::Bool  ? int64_t{value != 0}
              : to == DType::I32 ? int64_t{static_cast<int32_t>(value)}
                                 : value;
    result.dtype = to == DType::Bool ? DType::Bool : DType::I64;
  } else if (op == "Reshape" || op == "Unsqueeze" || op == "Squeeze") {
    FLOWC_ASSIGN_OR_RETURN(
        result.shape, op == "Reshape" ? reshapeTarget(node, a.shape)
                                      : squeezedShape(node, a.shape, op == "Unsqueeze"));
  } else if (op == "Concat") {
    int64_t rank = static_cast<int64_t>(a.shape.size());
    FLOWC_ASSIGN_OR_RETURN(int64_t axis, rankAxis(node, intAttr(node, "axis", 0), rank));
    Shape out = a.shape;
    out[axis] = 0;
    for (const std::optional<IntTensor> &input : inputs) {
      Shape other = input->shape;
      if (other.size() != a.shape.size())
        return nodeError(node, "inputs of shapes " + shapeString(a.shape) + " and " +
                                   shapeString(other) + " differ in rank");
      other[axis] = out[axis];
      if (other != out)
        return nodeError(node, "inputs of shapes " + shapeString(a.shape) + " and " +
                                   shapeString(input->shape) + " differ off axis " +
                                   std::to_string(axis));
      out[axis] += input->shape[axis];
    }
    FLOWC_RETURN_IF_ERROR(reserveFolded(node, out).status());
    // Each input's block of axis * inner elements, for each outer index.
    int64_t outer = product(out, 0, axis), inner = product(out, axis + 1, out.size());
    result = {out, {}, a.dtype};
    for (int64_t o = 0; o < outer; ++o)
      for (const std::optional<IntTensor> &input : inputs) {
        int64_t block = input->shape[axis] * inner;
        auto begin = input->values.begin() + o * block;
        result.values.insert(result.values.end(), begin, begin + block);
      }
  } else if (op == "Slice") {
    FLOWC_ASSIGN_OR_RETURN(auto ranges, sliceRanges(node, a.shape));
    Shape out;
    for (const SliceAxis &range : ranges)
      out.push_back(range.count);
    FLOWC_ASSIGN_OR_RETURN(
        result, foldRearranged(node, a, out, [&](const Shape &at, Shape &from) {
          for (size_t d = 0; d < at.size(); ++d)
            from[d] = ranges[d].begin + at[d] * ranges[d].step;
        }));
  } else if (op == "Transpose") {
    size_t rank = a.shape.size();
    Shape identity(rank);
    std::iota(identity.begin(), identity.end(), int64_t{0});
    Shape perm = intsAttr(node, "perm", Shape(identity.rbegin(), identity.rend()));
    Shape sorted = perm;
    std::sort(sorted.begin(), sorted.end());
    if (sorted != identity)
      return nodeError(node, "perm " + shapeString(perm) + " is not a permutation of " +
                                 std::to_string(rank) + " axes");
    Shape out;
    for (int64_t axis : perm)
      out.push_back(a.shape[axis]);
    // Output axis d walks input axis perm[d].
    FLOWC_ASSIGN_OR_RETURN(
        result, foldRearranged(node, a, out, [&](const Shape &at, Shape &from) {
          for (size_t d = 0; d < at.size(); ++d)
            from[perm[d]] = at[d];
        }));
  } else if (op == "Gather") {
    if (a.shape.size() != 1)
      return false;
    std::vector<int64_t> picked;
    int64_t n = static_cast<int64_t>(a.values.size());
    for (int64_t index : inputs[1]->values) {
      int64_t k = index < 0 ? index + n : index;
      if (k < 0 || k >= n)
        return nodeError(node, "index " + std::to_string(index) +
                                   " is out of range for " + std::to_string(n) +
                                   " elements");
      picked.push_back(a.values[k]);
    }
    result = {inputs[1]->shape, picked, DType::I64};
  }
  FLOWC_RETURN_IF_ERROR(defineConstant(node, result));
  return true;
}

} // namespace flowc::compiler::import
