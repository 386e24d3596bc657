// Neural-network ops: convolution, pooling, matrix products, softmax,
// normalizations and Gelu, with their static costs.
#include "Importer.h"
#include "OpCost.h"

#include <algorithm>
#include <cmath>

namespace flowc::compiler::import {

namespace {

/// A 1-D window op's kernel, stride or dilation as the 2-D one's over a
/// height of 1.
Shape overHeightOne(const Shape &values) { return {1, values[0]}; }
/// A 1-D window op's pads [begin, end] as 2-D pads [top, left, bottom, right].
Shape padsOverHeightOne(const Shape &pads) { return {0, pads[0], 0, pads[1]}; }

} // namespace

Expected<Importer::Window> Importer::windowAttributes(const Node &node, size_t dims,
                                                      Shape kernel) {
  Window window;
  FLOWC_ASSIGN_OR_RETURN(window.kernel,
                         windowInts(node, "kernel_shape", dims, kernel, 1));
  FLOWC_ASSIGN_OR_RETURN(window.strides,
                         windowInts(node, "strides", dims, Shape(dims, 1), 1));
  FLOWC_ASSIGN_OR_RETURN(window.dilations,
                         windowInts(node, "dilations", dims, Shape(dims, 1), 1));
  FLOWC_ASSIGN_OR_RETURN(window.pads,
                         windowInts(node, "pads", 2 * dims, Shape(2 * dims, 0), 0));
  if (dims == 1) {
    window.kernel = overHeightOne(window.kernel);
    window.strides = overHeightOne(window.strides);
    window.dilations = overHeightOne(window.dilations);
    window.pads = padsOverHeightOne(window.pads);
  }
  return window;
}

Expected<Importer::ConvOperands> Importer::convOperands(const Node &node,
                                                        const std::string &what,
                                                        size_t source, size_t weight,
                                                        bool anyType) {
  auto input = [&](size_t index) {
    return anyType ? anyOperand(node, index) : operand(node, index);
  };
  FLOWC_ASSIGN_OR_RETURN(Value x, input(source));
  FLOWC_ASSIGN_OR_RETURN(Value w, input(weight));
  Shape xs = shapeOf(x), ws = shapeOf(w);
  // A 1-D convolution (audio front ends, sequence models) is a 2-D one over
  // a height of 1.
  bool line = xs.size() == 3 && ws.size() == 3;
  if (line) {
    x = reshape(x, {xs[0], xs[1], 1, xs[2]});
    w = reshape(w, {ws[0], ws[1], 1, ws[2]});
    xs = shapeOf(x);
    ws = shapeOf(w);
  }
  if (xs.size() != 4 || ws.size() != 4)
    return nodeUnsupported(node, "only 1-D and 2-D " + what +
                                     " (3-D or 4-D input and weight) is supported, got "
                                     "input " +
                                     shapeString(xs) + ", weight " + shapeString(ws));
  if (ws[2] < 1 || ws[3] < 1)
    return nodeError(node, "weight " + shapeString(ws) + " has an empty kernel");
  size_t dims = line ? 1 : 2;
  FLOWC_ASSIGN_OR_RETURN(Window window,
                         windowAttributes(node, dims, Shape(ws.end() - dims, ws.end())));
  if (window.kernel != Shape{ws[2], ws[3]})
    return nodeError(node, "kernel_shape " + shapeString(window.kernel) +
                               " does not match weight " + shapeString(ws));
  return ConvOperands{window, x, w, line};
}

Expected<Importer::ConvGeometry> Importer::convGeometry(const Node &node, size_t source,
                                                        size_t weight, bool anyType) {
  ConvGeometry conv;
  FLOWC_ASSIGN_OR_RETURN(static_cast<ConvOperands &>(conv),
                         convOperands(node, "convolution", source, weight, anyType));
  Shape xs = shapeOf(conv.x), ws = shapeOf(conv.w);
  conv.groups = intAttr(node, "group", 1);
  if (conv.groups < 1 || ws[0] % conv.groups != 0)
    return nodeError(node, "group=" + std::to_string(conv.groups) +
                               " does not divide the " + std::to_string(ws[0]) +
                               " output channels");
  if (ws[1] * conv.groups != xs[1])
    return nodeError(node, "weight " + shapeString(ws) +
                               " with group=" + std::to_string(conv.groups) +
                               " expects " + std::to_string(ws[1] * conv.groups) +
                               " input channels, input " + shapeString(xs) + " has " +
                               std::to_string(xs[1]));
  FLOWC_ASSIGN_OR_RETURN(conv.padding,
                         windowPads(node, conv.pads, {xs[2], xs[3]}, conv.kernel,
                                    conv.strides, conv.dilations));
  return conv;
}

Value Importer::convResult(const ConvGeometry &conv, Value y) {
  Shape shape = shapeOf(y);
  return conv.line ? reshape(y, {shape[0], shape[1], shape[3]}) : y;
}

Status Importer::importConv(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value input, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value weight, operand(node, 1));
  if (shapeOf(input).size() == 5 && shapeOf(weight).size() == 5)
    return importVolumeConv(node, input, weight);
  FLOWC_ASSIGN_OR_RETURN(ConvGeometry conv, convGeometry(node));
  Value bias;
  if (hasOperand(node, 2)) {
    FLOWC_ASSIGN_OR_RETURN(bias, operand(node, 2));
  }
  FLOWC_ASSIGN_OR_RETURN(std::optional<Value> integer,
                         convolutionOfDequantized(node, conv, bias));
  if (integer)
    return define(node, convResult(conv, *integer));
  FLOWC_ASSIGN_OR_RETURN(Value y,
                         convolveNchw(node, conv.x, conv.w, bias, conv.padding,
                                      conv.strides, conv.dilations, conv.groups));
  return define(node, convResult(conv, y));
}

Expected<Value> Importer::convolveNchw(const Node &node, Value x, Value w, Value bias,
                                       std::array<int64_t, 4> pads, const Shape &strides,
                                       const Shape &dilations, int64_t groups,
                                       std::optional<int64_t> sourceZero) {
  Shape xs = shapeOf(x), ws = shapeOf(w), kernel = {ws[2], ws[3]};
  // Float, or TOSA's quantized convolution: int8 in, int32 sums.
  mlir::Type result =
      sourceZero ? mlir::Type(builder_.getI32Type()) : mlir::Type(builder_.getF32Type());
  if (bias) {
    if (shapeOf(bias) != Shape{ws[0]})
      return nodeError(node, "bias " + shapeString(shapeOf(bias)) + " does not match " +
                                 std::to_string(ws[0]) + " output channels");
  } else {
    auto type = mlir::RankedTensorType::get({ws[0]}, result);
    bias = mlir::tosa::ConstOp::create(builder_, loc_, type,
                                       sourceZero
                                           ? mlir::DenseElementsAttr::get(type, 0)
                                           : mlir::DenseElementsAttr::get(type, 0.0f));
  }
  Shape out = {xs[0], 0, 0, ws[0]};
  for (int i = 0; i < 2; ++i) {
    int64_t span = xs[2 + i] + pads[i] + pads[i + 2] - dilations[i] * (kernel[i] - 1) - 1;
    if (span < 0)
      return nodeError(node, "kernel larger than padded input " + shapeString(xs));
    out[1 + i] = span / strides[i] + 1;
  }
  Value xNhwc = fitWindows(transpose(x, {0, 2, 3, 1}), pads, kernel, strides, dilations);
  llvm::SmallVector<mlir::NamedAttribute> attrs = {
      attr("pad", builder_.getDenseI64ArrayAttr({pads[0], pads[2], pads[1], pads[3]})),
      attr("stride", builder_.getDenseI64ArrayAttr(strides)),
      attr("dilation", builder_.getDenseI64ArrayAttr(dilations)),
      attr("acc_type", mlir::TypeAttr::get(result))};
  Value zp = zeroPoint(), sourceZp = zp;
  if (sourceZero) {
    auto type = mlir::RankedTensorType::get({1}, builder_.getI8Type());
    auto byteZero = [&](int64_t value) -> Value {
      return mlir::tosa::ConstOp::create(
          builder_, loc_, type,
          mlir::DenseElementsAttr::get(
              type, llvm::ArrayRef<int8_t>(static_cast<int8_t>(value))));
    };
    sourceZp = byteZero(*sourceZero);
    zp = byteZero(0);
  }
  Value y;
  if (groups == 1) {
    y = buildTyped<mlir::tosa::Conv2DOp>(
        result, out, {xNhwc, transpose(w, {0, 2, 3, 1}), bias, sourceZp, zp}, attrs);
  } else if (groups == xs[1] && ws[1] == 1) {
    // Depthwise: ONNX [C*M, 1, KH, KW] is TOSA's [KH, KW, C, M] after a
    // reshape; output channel c*M + m is the same in both.
    int64_t multiplier = ws[0] / groups;
    Value hwcm = transpose(reshape(w, {groups, multiplier, ws[2], ws[3]}), {2, 3, 0, 1});
    y = buildTyped<mlir::tosa::DepthwiseConv2DOp>(
        result, out, {xNhwc, hwcm, bias, sourceZp, zp}, attrs);
  } else if (sourceZero) {
    return internalError(node.describe() + ": a quantized convolution of " +
                         std::to_string(groups) + " groups");
  } else {
    // Grouped: one convolution per group on its slice of channels.
    Shape xn = shapeOf(xNhwc);
    int64_t inPerGroup = ws[1], outPerGroup = ws[0] / groups;
    Value wOhwi = transpose(w, {0, 2, 3, 1});
    llvm::SmallVector<Value> parts;
    for (int64_t g = 0; g < groups; ++g) {
      Value xg =
          slice(xNhwc, {0, 0, 0, g * inPerGroup}, {xn[0], xn[1], xn[2], inPerGroup});
      Value wg =
          slice(wOhwi, {g * outPerGroup, 0, 0, 0}, {outPerGroup, ws[2], ws[3], ws[1]});
      Value bg = slice(bias, {g * outPerGroup}, {outPerGroup});
      parts.push_back(build<mlir::tosa::Conv2DOp>({out[0], out[1], out[2], outPerGroup},
                                                  {xg, wg, bg, zp, zp}, attrs));
    }
    y = build<mlir::tosa::ConcatOp>(out, parts,
                                    {attr("axis", builder_.getI32IntegerAttr(3))});
  }
  return transpose(y, {0, 3, 1, 2});
}

Status Importer::importConvTranspose(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(ConvOperands conv, convOperands(node, "transposed convolution"));
  Shape xs = shapeOf(conv.x), ws = shapeOf(conv.w);
  int64_t groups = intAttr(node, "group", 1);
  if (groups < 1 || xs[1] % groups != 0 || ws[0] != xs[1])
    return nodeError(node, "weight " + shapeString(ws) +
                               " with group=" + std::to_string(groups) +
                               " does not fit input " + shapeString(xs));
  size_t dims = conv.line ? 1 : 2;
  FLOWC_ASSIGN_OR_RETURN(Shape extra,
                         windowInts(node, "output_padding", dims, Shape(dims, 0), 0));
  FLOWC_ASSIGN_OR_RETURN(Shape outputShape,
                         windowInts(node, "output_shape", dims, {}, 1));
  if (conv.line) {
    extra = {0, extra[0]};
    if (!outputShape.empty())
      outputShape = {1, outputShape[0]};
  }
  std::string autoPad = stringAttr(node, "auto_pad", "NOTSET");
  if (autoPad != "NOTSET" && autoPad != "SAME_UPPER" && autoPad != "SAME_LOWER" &&
      autoPad != "VALID")
    return nodeError(node, "auto_pad '" + autoPad +
                               "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
  Shape &given = conv.pads, &strides = conv.strides, &dilations = conv.dilations;
  Shape out(2);
  for (int i = 0; i < 2; ++i) {
    if (extra[i] >= std::max(strides[i], dilations[i]))
      return nodeError(node, "output_padding " + std::to_string(extra[i]) +
                                 " is not below its stride or dilation");
    // The full output's extent, before pads (in 128 bits: a stride of 2^31
    // times a long axis is past int64).
    __int128 reach = static_cast<__int128>(strides[i]) * (xs[2 + i] - 1) + extra[i] +
                     static_cast<__int128>(dilations[i]) * (conv.kernel[i] - 1) + 1;
    if (reach > kMaxTensorBytes)
      return nodeError(node, "strides " + shapeString(strides) + " spread input " +
                                 shapeString(xs) + " past any addressable size");
    int64_t full = static_cast<int64_t>(reach);
    int64_t wanted = !outputShape.empty() ? outputShape[i]
                     : autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER"
                         ? xs[2 + i] * strides[i]
                         : -1;
    if (autoPad == "VALID")
      given[i] = given[i + 2] = 0;
    if (wanted >= 0) {
      // The odd element is cut at the end for SAME_UPPER, at the start
      // otherwise. An output_shape past the full extent widens the output
      // at its end (bias only there); auto_pad alone never widens it (a
      // stride past the kernel). Both as onnxruntime does.
      int64_t total = full - wanted;
      if (outputShape.empty())
        total = std::max<int64_t>(total, 0);
      given[i] = total < 0 ? 0 : autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      given[i + 2] = total - given[i];
    }
    if (given[i] + given[i + 2] >= full)
      return nodeError(node, "pads " + shapeString(given) + " leave no output");
    out[i] = full - given[i] - given[i + 2];
  }
  Value bias;
  if (hasOperand(node, 2)) {
    FLOWC_ASSIGN_OR_RETURN(bias, operand(node, 2));
    int64_t channels = ws[1] * groups;
    if (shapeOf(bias) != Shape{channels})
      return nodeError(node, "bias " + shapeString(shapeOf(bias)) + " does not match " +
                                 std::to_string(channels) + " output channels");
  }
  // Sub-pixel phases need every phase to see a tap: no stride past the
  // kernel, no holes in it.
  bool dense = dilations == Shape{1, 1} && strides[0] <= conv.kernel[0] &&
               strides[1] <= conv.kernel[1];
  FLOWC_ASSIGN_OR_RETURN(Value y, dense
                                      ? subPixelTranspose(node, conv, bias, out, groups)
                                      : spreadTranspose(node, conv, bias, extra, groups));
  return define(node, conv.line ? reshape(y, {xs[0], shapeOf(y)[1], shapeOf(y)[3]}) : y);
}

namespace {

/// [C_in, C_out / g, kh, kw] -> [C_out, C_in / g, kh, kw]: each group's
/// in and out channels swapped, as the convolution that computes a
/// transposed one takes them.
Shape swappedShape(const Shape &ws, int64_t groups) {
  return {groups * ws[1], ws[0] / groups, ws[2], ws[3]};
}

} // namespace

Value Importer::swapTransposedChannels(Value w, int64_t groups) {
  Shape ws = shapeOf(w);
  Value perGroup = reshape(w, {groups, ws[0] / groups, ws[1], ws[2], ws[3]});
  return reshape(transpose(perGroup, {0, 2, 1, 3, 4}), swappedShape(ws, groups));
}

/// Output element m (counted before the pads crop) of a transposed
/// convolution with stride s is the sum of x[i] * w[m - i*s], so phase
/// c = m mod s sees only taps c, c + s, c + 2s, ...: each phase is a
/// stride-1 convolution with a ceil(k / s) kernel over the input as it is,
/// and all phases are one convolution with s*s times the output channels
/// (kernel derived once at link), interleaved after it. No multiply-add
/// falls on inserted zeros.
Expected<Value> Importer::subPixelTranspose(const Node &node, const ConvOperands &conv,
                                            Value bias, const Shape &out,
                                            int64_t groups) {
  Shape xs = shapeOf(conv.x), ws = shapeOf(conv.w);
  const Shape &strides = conv.strides;
  int64_t channels = ws[1] * groups, phases = strides[0] * strides[1];
  Shape taps(2), rows(2), offset(2), start(4, 0), size = xs;
  std::array<int64_t, 4> pads;
  for (int i = 0; i < 2; ++i) {
    int64_t s = strides[i], n = xs[2 + i], begin = conv.pads[i];
    taps[i] = (conv.kernel[i] + s - 1) / s;
    // Phase rows lo..hi hold the output; each reads inputs from
    // row - (taps - 1) to row. A window wholly past the input (an output
    // that is all output_padding) starts earlier, at its last element.
    int64_t hi = (begin + out[i] - 1) / s, lo = std::min(begin / s, n + taps[i] - 2);
    int64_t from = lo - (taps[i] - 1);
    rows[i] = hi - lo + 1;
    offset[i] = begin - lo * s;
    pads[i] = std::max<int64_t>(0, -from);
    pads[i + 2] = std::max<int64_t>(0, hi - (n - 1));
    start[2 + i] = std::max<int64_t>(0, from);
    size[2 + i] = std::min(hi, n - 1) - start[2 + i] + 1;
  }
  Shape phased = {xs[0], channels * phases, rows[0], rows[1]};
  FLOWC_RETURN_IF_ERROR(checkRuntimeShape(node, phased));
  // Kernel [C_out, C_in/g, taps*s, taps*s] (zeros past k) as
  // [C_out, C_in/g, taps, s, taps, s] -> [C_out, s, s, C_in/g, taps, taps],
  // each phase's taps reversed into correlation order.
  Shape swapped = swappedShape(ws, groups);
  Shape padding = {
      0, 0, 0, 0, 0, taps[0] * strides[0] - ws[2], 0, taps[1] * strides[1] - ws[3]};
  Value padded = build<mlir::tosa::PadOp>(
      {swapped[0], swapped[1], taps[0] * strides[0], taps[1] * strides[1]},
      {swapTransposedChannels(conv.w, groups), constShape(padding), scalar(0.0f, 1)});
  Value split =
      reshape(padded, {swapped[0], swapped[1], taps[0], strides[0], taps[1], strides[1]});
  Value kernel = reshape(transpose(split, {0, 3, 5, 1, 2, 4}),
                         {swapped[0] * phases, swapped[1], taps[0], taps[1]});
  kernel = reverseAlong(reverseAlong(kernel, 2), 3);
  Value phaseBias;
  if (bias) {
    auto type = f32({1, phases});
    Value ones = mlir::tosa::ConstOp::create(builder_, loc_, type,
                                             mlir::DenseElementsAttr::get(type, 1.0f));
    phaseBias = reshape(mul(reshape(bias, {channels, 1}), ones), {channels * phases});
  }
  FLOWC_ASSIGN_OR_RETURN(Value y, convolveNchw(node, slice(conv.x, start, size), kernel,
                                               phaseBias, pads, {1, 1}, {1, 1}, groups));
  // [N, C_out, s, s, rows, rows] -> [N, C_out, rows, s, rows, s]: the phases
  // interleave, and the pads' share of the first row is cut.
  Value interleaved =
      transpose(reshape(y, {xs[0], channels, strides[0], strides[1], rows[0], rows[1]}),
                {0, 1, 4, 2, 5, 3});
  Value flat =
      reshape(interleaved, {xs[0], channels, rows[0] * strides[0], rows[1] * strides[1]});
  return slice(flat, {0, 0, offset[0], offset[1]}, {xs[0], channels, out[0], out[1]});
}

/// A transposed convolution whose stride passes its kernel, or with a
/// dilated one, as the convolution it is the gradient of: the input with
/// stride - 1 zeros between elements, padded by dilation * (k - 1) less the
/// node's pads (plus output_padding at the end; a negative pad crops), then
/// a stride-1 convolution with each group's kernel flipped and its in and
/// out channels swapped.
Expected<Value> Importer::spreadTranspose(const Node &node, const ConvOperands &conv,
                                          Value bias, const Shape &extra,
                                          int64_t groups) {
  Value x = conv.x;
  const Shape &strides = conv.strides, &dilations = conv.dilations, &given = conv.pads;
  for (int i = 0; i < 2; ++i) {
    int64_t stride = strides[i], axis = 2 + i;
    if (stride == 1)
      continue;
    // [.., n, ..] as [.., n, 1, ..], zeros appended along the 1 to stride,
    // then [.., n * stride, ..] without the trailing zeros.
    Shape in = shapeOf(x), spread = in;
    spread.insert(spread.begin() + axis + 1, 1);
    Shape wide = spread, filler = spread;
    wide[axis + 1] = stride;
    filler[axis + 1] = stride - 1;
    FLOWC_RETURN_IF_ERROR(checkRuntimeShape(node, wide));
    Value joined =
        concatAlong({reshape(x, spread), zeros(builder_.getF32Type(), filler)}, axis + 1);
    Shape flat = in;
    flat[axis] = in[axis] * stride;
    x = sliceAlong(reshape(joined, flat), axis, 0, (in[axis] - 1) * stride + 1);
  }
  // Pads of the convolution; negative ones crop the spread input.
  std::array<int64_t, 4> pads;
  Shape start(4, 0), size = shapeOf(x);
  for (int i = 0; i < 2; ++i) {
    int64_t reach = dilations[i] * (conv.kernel[i] - 1);
    int64_t begin = reach - given[i], end = reach - given[i + 2] + extra[i];
    if (begin < 0) {
      start[2 + i] = -begin;
      size[2 + i] += begin;
      begin = 0;
    }
    if (end < 0) {
      size[2 + i] += end;
      end = 0;
    }
    pads[i] = begin;
    pads[i + 2] = end;
  }
  if (size[2] < 1 || size[3] < 1)
    return nodeError(node, "pads " + shapeString(given) + " leave no output");
  Value flipped =
      reverseAlong(reverseAlong(swapTransposedChannels(conv.w, groups), 2), 3);
  return convolveNchw(node, slice(x, start, size), flipped, bias, pads, {1, 1}, dilations,
                      groups);
}

Status Importer::importPool(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  if (node.outputs.size() > 1)
    return nodeUnsupported(node, "the Indices output of MaxPool is not supported");
  if (shapeOf(x).size() == 5)
    return importVolumePool(node, x);
  FLOWC_ASSIGN_OR_RETURN(Value y, poolNchw(node, x));
  return define(node, y);
}

Expected<Value> Importer::poolNchw(const Node &node, Value x) {
  Shape xs = shapeOf(x);
  // 1-D pooling is 2-D pooling over a height of 1.
  bool line = xs.size() == 3;
  if (line) {
    x = reshape(x, {xs[0], xs[1], 1, xs[2]});
    xs = shapeOf(x);
  }
  if (xs.size() != 4)
    return nodeUnsupported(node, "only 1-D, 2-D and 3-D pooling (3-D, 4-D or 5-D input) "
                                 "is supported, got " +
                                     shapeString(xs));
  if (!node.attributes.count("kernel_shape"))
    return nodeError(node, "kernel_shape is required");
  FLOWC_ASSIGN_OR_RETURN(Window window, windowAttributes(node, line ? 1 : 2, {}));
  const Shape &kernel = window.kernel, &strides = window.strides,
              &dilations = window.dilations, &given = window.pads;
  // ONNX's shape inference demands it, and TOSA's pooling too: a window
  // entirely in padding has no value.
  for (int i = 0; i < 4; ++i)
    if (given[i] >= kernel[i % 2])
      return nodeError(node, "pads[" + std::to_string(i) +
                                 "] = " + std::to_string(given[i]) +
                                 " is not smaller than the kernel extent " +
                                 std::to_string(kernel[i % 2]));
  FLOWC_ASSIGN_OR_RETURN(
      auto pads, windowPads(node, given, {xs[2], xs[3]}, kernel, strides, dilations));
  if (dilations != Shape{1, 1}) {
    // TOSA's pooling has no dilation: one axis at a time, through its taps.
    for (int i = 0; i < 2; ++i) {
      WindowAxis window{kernel[i], strides[i], dilations[i], pads[i], pads[i + 2]};
      FLOWC_ASSIGN_OR_RETURN(x, poolAlong(node, x, 2 + i, window));
    }
    Shape ys = shapeOf(x);
    return line ? reshape(x, {ys[0], ys[1], ys[3]}) : x;
  }
  bool isMax = node.opType == "MaxPool";
  bool countPadding = !isMax && intAttr(node, "count_include_pad", 0) != 0;
  bool ceilMode = intAttr(node, "ceil_mode", 0) != 0;
  Shape out = {xs[0], 0, 0, xs[1]};
  for (int i = 0; i < 2; ++i) {
    int64_t span = xs[2 + i] + pads[i] + pads[i + 2] - kernel[i];
    if (span < 0)
      return nodeError(node, "kernel larger than padded input " + shapeString(xs));
    out[1 + i] = span / strides[i] + 1;
    if (!ceilMode || span % strides[i] == 0)
      continue;
    // ceil_mode adds a last, partial window unless it would start in the
    // trailing padding; extra trailing padding makes TOSA produce it (max
    // pooling pads with the lowest value, average pooling does not count
    // padding).
    if (out[1 + i] * strides[i] < xs[2 + i] + pads[i]) {
      pads[i + 2] += strides[i] - span % strides[i];
      out[1 + i] += 1;
    }
  }
  if (countPadding && pads != std::array<int64_t, 4>{0, 0, 0, 0}) {
    // Padding counted (ceil_mode's extra end too, as onnxruntime counts
    // it): its zeros put in, every window then whole.
    Shape padded = {xs[0], xs[1], xs[2] + pads[0] + pads[2], xs[3] + pads[1] + pads[3]};
    Shape padding = {0, 0, 0, 0, pads[0], pads[2], pads[1], pads[3]};
    x = build<mlir::tosa::PadOp>(padded, {x, constShape(padding), scalar(0.0f, 1)});
    pads = {0, 0, 0, 0};
  }
  Value xNhwc = fitWindows(transpose(x, {0, 2, 3, 1}), pads, kernel, strides, dilations);
  llvm::SmallVector<mlir::NamedAttribute> attrs = {
      attr("kernel", builder_.getDenseI64ArrayAttr(kernel)),
      attr("stride", builder_.getDenseI64ArrayAttr(strides)),
      attr("pad", builder_.getDenseI64ArrayAttr({pads[0], pads[2], pads[1], pads[3]}))};
  Value y;
  if (isMax) {
    y = build<mlir::tosa::MaxPool2dOp>(out, {xNhwc}, attrs);
  } else {
    attrs.push_back(attr("acc_type", mlir::TypeAttr::get(builder_.getF32Type())));
    Value zp = zeroPoint();
    y = build<mlir::tosa::AvgPool2dOp>(out, {xNhwc, zp, zp}, attrs);
  }
  y = transpose(y, {0, 3, 1, 2});
  return line ? reshape(y, {out[0], out[3], out[2]}) : y;
}

Expected<Importer::Volume> Importer::splitDepth(const Node &node, int64_t depth,
                                                Shape kernel) {
  Volume volume{node, {}};
  FLOWC_ASSIGN_OR_RETURN(kernel, windowInts(node, "kernel_shape", 3, kernel, 1));
  FLOWC_ASSIGN_OR_RETURN(Shape strides, windowInts(node, "strides", 3, Shape(3, 1), 1));
  FLOWC_ASSIGN_OR_RETURN(Shape dilations,
                         windowInts(node, "dilations", 3, Shape(3, 1), 1));
  FLOWC_ASSIGN_OR_RETURN(Shape pads, windowInts(node, "pads", 6, Shape(6, 0), 0));
  WindowAxis &axis = volume.depth;
  axis.kernel = kernel[0];
  axis.stride = strides[0];
  axis.dilation = dilations[0];
  if (axis.kernel > kMaxWindowTaps)
    return nodeUnsupported(node, "a depth kernel of " + std::to_string(axis.kernel) +
                                     " is over flowc's " +
                                     std::to_string(kMaxWindowTaps));
  // The height and width's auto_pad is windowPads's, on the 2-D node.
  std::string mode = stringAttr(node, "auto_pad", "NOTSET");
  int64_t reach = axis.dilation * (axis.kernel - 1) + 1;
  if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
    int64_t out = (depth + axis.stride - 1) / axis.stride;
    int64_t total = std::max<int64_t>(0, (out - 1) * axis.stride + reach - depth);
    axis.begin = mode == "SAME_UPPER" ? total / 2 : total - total / 2;
    axis.end = total - axis.begin;
  } else if (mode == "NOTSET") {
    axis.begin = pads[0];
    axis.end = pads[3];
  }
  int64_t span = depth + axis.begin + axis.end - reach;
  if (span < 0)
    return nodeError(node, "kernel depth " + std::to_string(axis.kernel) +
                               " is past the padded input depth " +
                               std::to_string(depth + axis.begin + axis.end));
  axis.out = span / axis.stride + 1;
  auto keep = [&](const char *name, Shape values) {
    auto it = volume.flat.attributes.find(name);
    if (it != volume.flat.attributes.end())
      it->second.ints = std::move(values);
  };
  keep("kernel_shape", {kernel[1], kernel[2]});
  keep("strides", {strides[1], strides[2]});
  keep("dilations", {dilations[1], dilations[2]});
  keep("pads", {pads[1], pads[2], pads[4], pads[5]});
  return volume;
}

llvm::SmallVector<Value> Importer::tapsAlong(Value x, int64_t axis,
                                             const WindowAxis &window, float fill) {
  if (window.begin || window.end) {
    Shape padded = shapeOf(x), padding(2 * padded.size(), 0);
    padded[axis] += window.begin + window.end;
    padding[2 * axis] = window.begin;
    padding[2 * axis + 1] = window.end;
    x = build<mlir::tosa::PadOp>(padded, {x, constShape(padding), scalar(fill, 1)});
  }
  llvm::SmallVector<Value> taps;
  for (int64_t k = 0; k < window.kernel; ++k)
    taps.push_back(stepAlong(x, axis, {k * window.dilation, window.out, window.stride}));
  return taps;
}

/// A 3-D convolution as a 2-D one over each output depth: the input
/// depths each output reads, stacked as channels (kernel depth times the
/// input), by the kernel with its depth taps folded into its input
/// channels. So a video model's convolutions run on the 2-D kernels
/// (oneDNN, cuDNN).
Status Importer::importVolumeConv(const Node &node, Value x, Value w) {
  Shape xs = shapeOf(x), ws = shapeOf(w);
  int64_t groups = intAttr(node, "group", 1);
  if (groups < 1 || ws[0] % groups != 0 || ws[1] * groups != xs[1])
    return nodeError(node, "weight " + shapeString(ws) +
                               " with group=" + std::to_string(groups) +
                               " does not fit input " + shapeString(xs));
  FLOWC_ASSIGN_OR_RETURN(Volume volume, splitDepth(node, xs[2], {ws[2], ws[3], ws[4]}));
  const WindowAxis &depth = volume.depth;
  FLOWC_ASSIGN_OR_RETURN(Window window, windowAttributes(volume.flat, 2, {ws[3], ws[4]}));
  if (depth.kernel != ws[2] || window.kernel != Shape{ws[3], ws[4]})
    return nodeError(node, "kernel_shape does not match weight " + shapeString(ws));
  int64_t taps = depth.kernel, perGroup = ws[1];
  Shape stacked = {xs[0] * depth.out, taps * xs[1], xs[3], xs[4]};
  FLOWC_RETURN_IF_ERROR(checkRuntimeShape(node, stacked));
  // [N, g, taps, C/g, D', H*W] -> [N, D', g, taps, C/g, H*W]: each group's
  // channels (tap, channel), as the folded kernel reads them.
  llvm::SmallVector<Value> parts;
  for (Value tap : tapsAlong(x, 2, depth, 0.0f))
    parts.push_back(reshape(tap, {xs[0], groups, 1, perGroup, depth.out, xs[3] * xs[4]}));
  Value input = reshape(transpose(concatAlong(parts, 2), {0, 4, 1, 2, 3, 5}), stacked);
  Value kernel =
      reshape(transpose(w, {0, 2, 1, 3, 4}), {ws[0], taps * perGroup, ws[3], ws[4]});
  FLOWC_ASSIGN_OR_RETURN(auto pads,
                         windowPads(volume.flat, window.pads, {xs[3], xs[4]},
                                    window.kernel, window.strides, window.dilations));
  Value bias;
  if (hasOperand(node, 2)) {
    FLOWC_ASSIGN_OR_RETURN(bias, operand(node, 2));
  }
  FLOWC_ASSIGN_OR_RETURN(Value y, convolveNchw(volume.flat, input, kernel, bias, pads,
                                               window.strides, window.dilations, groups));
  Shape ys = shapeOf(y);
  Value perDepth = reshape(y, {xs[0], depth.out, ws[0], ys[2] * ys[3]});
  return define(node, reshape(transpose(perDepth, {0, 2, 1, 3}),
                              {xs[0], ws[0], depth.out, ys[2], ys[3]}));
}

/// 3-D pooling as 2-D pooling of each depth slice, then the depth window
/// over the pooled slices: both max and average (its count of elements is
/// the product of each axis's) separate so.
Status Importer::importVolumePool(const Node &node, Value x) {
  Shape xs = shapeOf(x);
  if (!node.attributes.count("kernel_shape"))
    return nodeError(node, "kernel_shape is required");
  FLOWC_ASSIGN_OR_RETURN(Volume volume, splitDepth(node, xs[2], {}));
  FLOWC_ASSIGN_OR_RETURN(
      Value slices,
      poolNchw(volume.flat, reshape(x, {xs[0], xs[1] * xs[2], xs[3], xs[4]})));
  Shape ps = shapeOf(slices);
  FLOWC_ASSIGN_OR_RETURN(
      Value y, poolAlong(node, reshape(slices, {xs[0], xs[1], xs[2], ps[2], ps[3]}), 2,
                         volume.depth));
  return define(node, y);
}

Expected<Value> Importer::poolAlong(const Node &node, Value x, int64_t axis,
                                    WindowAxis window) {
  Shape xs = shapeOf(x);
  int64_t n = xs[axis];
  if (window.kernel > kMaxWindowTaps)
    return nodeUnsupported(
        node, "a window of " + std::to_string(window.kernel) + " along axis " +
                  std::to_string(axis) + " is over flowc's " +
                  std::to_string(kMaxWindowTaps) + " for dilated pooling");
  if (window.begin >= window.kernel || window.end >= window.kernel)
    return nodeError(node, "pads " + std::to_string(window.begin) + " and " +
                               std::to_string(window.end) + " of axis " +
                               std::to_string(axis) +
                               " are not smaller than the kernel extent " +
                               std::to_string(window.kernel));
  int64_t span =
      n + window.begin + window.end - window.dilation * (window.kernel - 1) - 1;
  if (span < 0)
    return nodeError(node, "kernel larger than padded input " + shapeString(xs));
  window.out = span / window.stride + 1;
  int64_t paddedEnd = n + window.end;
  // ceil_mode's last, partial window, unless it would start in the
  // trailing padding (as poolNchw's).
  if (intAttr(node, "ceil_mode", 0) != 0 && span % window.stride != 0 &&
      window.out * window.stride < n + window.begin) {
    window.end += window.stride - span % window.stride;
    window.out += 1;
  }
  bool isMax = node.opType == "MaxPool";
  Shape out = xs;
  out[axis] = window.out;
  auto taps =
      tapsAlong(x, axis, window, isMax ? -std::numeric_limits<float>::infinity() : 0.0f);
  Value y = taps[0];
  for (size_t k = 1; k < taps.size(); ++k)
    y = isMax ? build<mlir::tosa::MaximumOp>(out, {y, taps[k]})
              : build<mlir::tosa::AddOp>(out, {y, taps[k]});
  if (isMax)
    return y;
  // Each output's count of elements: the taps on real ones; where padding
  // counts, on padding too. As onnxruntime's, an undilated window counts
  // ceil_mode's extra end (as poolNchw's), a dilated one does not.
  int64_t low = 0, high = n;
  if (intAttr(node, "count_include_pad", 0) != 0) {
    low = -window.begin;
    high = window.dilation == 1 ? n + window.end : paddedEnd;
  }
  std::vector<float> scales;
  for (int64_t i = 0; i < window.out; ++i) {
    int64_t first = i * window.stride - window.begin, counted = 0;
    for (int64_t k = 0; k < window.kernel; ++k)
      counted += first + k * window.dilation >= low && first + k * window.dilation < high;
    // A dilated window may step over every real element: its sum is 0.
    scales.push_back(1.0f / static_cast<float>(std::max<int64_t>(counted, 1)));
  }
  Shape scaleShape(xs.size(), 1);
  scaleShape[axis] = window.out;
  auto type = f32(scaleShape);
  Value scale = mlir::tosa::ConstOp::create(
      builder_, loc_, type, mlir::DenseElementsAttr::get(type, llvm::ArrayRef(scales)));
  return mul(y, scale);
}

Status Importer::importGlobalAveragePool(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape shape = shapeOf(x);
  if (shape.size() < 3)
    return nodeError(node, "input " + shapeString(shape) + " has no spatial dimensions");
  bool max = node.opType == "GlobalMaxPool";
  int64_t count = 1;
  for (size_t axis = 2; axis < shape.size(); ++axis) {
    count *= shape[axis];
    shape[axis] = 1;
    auto axisAttr = attr("axis", builder_.getI32IntegerAttr(axis));
    x = max ? build<mlir::tosa::ReduceMaxOp>(shape, {x}, {axisAttr})
            : build<mlir::tosa::ReduceSumOp>(shape, {x}, {axisAttr});
  }
  if (max)
    return define(node, x);
  Value scale = scalar(1.0f / static_cast<float>(count), shape.size());
  return define(node, mul(x, scale));
}

Value Importer::matmul3d(Value a, Value b) {
  Shape as = shapeOf(a), bs = shapeOf(b);
  Value zp = zeroPoint();
  return build<mlir::tosa::MatMulOp>({as[0], as[1], bs[2]}, {a, b, zp, zp});
}

Status Importer::importGemm(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value a, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value b, operand(node, 1));
  if (shapeOf(a).size() != 2 || shapeOf(b).size() != 2)
    return nodeError(node, "Gemm needs 2-D inputs, got " + shapeString(shapeOf(a)) +
                               " and " + shapeString(shapeOf(b)));
  bool transA = intAttr(node, "transA", 0), transB = intAttr(node, "transB", 0);
  // The QDQ format's quantized product: its bytes multiplied in int8.
  std::optional<Value> exact;
  if (!transA) {
    FLOWC_ASSIGN_OR_RETURN(exact, productOfDequantized(a, b, transB));
  }
  if (transA)
    a = transpose(a, {1, 0});
  if (transB)
    b = transpose(b, {1, 0});
  Shape as = shapeOf(a), bs = shapeOf(b);
  if (as[1] != bs[0])
    return nodeError(node, "inner dimensions differ: A is " + shapeString(as) +
                               ", B is " + shapeString(bs) + " (after transA/transB)");
  Shape out = {as[0], bs[1]};
  Value y = exact ? *exact
                  : reshape(matmul3d(reshape(a, {1, as[0], as[1]}),
                                     reshape(b, {1, bs[0], bs[1]})),
                            out);
  float alpha = floatAttr(node, "alpha", 1.0f), beta = floatAttr(node, "beta", 1.0f);
  if (alpha != 1.0f)
    y = mul(y, scalar(alpha, 2));
  if (!hasOperand(node, 2) || beta == 0.0f)
    return define(node, y);
  FLOWC_ASSIGN_OR_RETURN(Value c, operand(node, 2));
  FLOWC_ASSIGN_OR_RETURN(Shape broadcast, broadcastShape(node, out, shapeOf(c)));
  if (broadcast != out)
    return nodeError(node, "C " + shapeString(shapeOf(c)) + " does not broadcast to " +
                               shapeString(out));
  FLOWC_ASSIGN_OR_RETURN(c, broadcastTo(node, c, 2));
  if (beta != 1.0f)
    c = mul(c, scalar(beta, 2));
  return define(node, build<mlir::tosa::AddOp>(out, {y, c}));
}

Status Importer::importMatMul(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value a, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value b, operand(node, 1));
  // The QDQ format's quantized product: its bytes multiplied in int8.
  FLOWC_ASSIGN_OR_RETURN(std::optional<Value> exact, productOfDequantized(a, b, false));
  if (exact)
    return define(node, *exact);
  FLOWC_ASSIGN_OR_RETURN(Value y, matmulValues(node, a, b));
  return define(node, y);
}

Expected<Value> Importer::matmulValues(const Node &node, Value a, Value b) {
  Shape as = shapeOf(a), bs = shapeOf(b);
  if (as.size() < 2 || bs.size() < 2)
    return nodeUnsupported(node, "1-D MatMul operands are not supported yet");
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  if (bs[bs.size() - 2] != k)
    return nodeError(node, "inner dimensions differ: " + shapeString(as) + " x " +
                               shapeString(bs));
  Shape out(as.begin(), as.end() - 2);
  if (bs.size() == 2) {
    // Fold all batch dimensions of A into M: one [1, batch*M, K] x [1, K, N].
    int64_t rows = product(as, 0, as.size() - 1);
    out.push_back(m);
    out.push_back(n);
    return reshape(matmul3d(reshape(a, {1, rows, k}), reshape(b, {1, k, n})), out);
  }
  Shape aBatch(as.begin(), as.end() - 2), bBatch(bs.begin(), bs.end() - 2);
  if (aBatch != bBatch)
    return nodeUnsupported(node, "broadcasting batch dimensions " + shapeString(as) +
                                     " x " + shapeString(bs) + " is not supported yet");
  int64_t batch = product(aBatch, 0, aBatch.size());
  out.push_back(m);
  out.push_back(n);
  return reshape(matmul3d(reshape(a, {batch, m, k}), reshape(b, {batch, k, n})), out);
}

Value Importer::softmaxLastAxis(Value x) {
  Shape shape = shapeOf(x), reduced = shape;
  int32_t axis = static_cast<int32_t>(shape.size() - 1);
  reduced[axis] = 1;
  auto axisAttr = attr("axis", builder_.getI32IntegerAttr(axis));
  Value max = build<mlir::tosa::ReduceMaxOp>(reduced, {x}, {axisAttr});
  Value shifted = build<mlir::tosa::SubOp>(shape, {x, max});
  Value exp = build<mlir::tosa::ExpOp>(shape, {shifted});
  Value sum = build<mlir::tosa::ReduceSumOp>(reduced, {exp}, {axisAttr});
  Value inverse = build<mlir::tosa::ReciprocalOp>(reduced, {sum});
  return mul(exp, inverse);
}

/// x - max - log(sum(exp(x - max))) over the last axis.
Value Importer::logSoftmaxLastAxis(Value x) {
  Shape shape = shapeOf(x), reduced = shape;
  int32_t axis = static_cast<int32_t>(shape.size() - 1);
  reduced[axis] = 1;
  auto axisAttr = attr("axis", builder_.getI32IntegerAttr(axis));
  Value shifted = build<mlir::tosa::SubOp>(
      shape, {x, build<mlir::tosa::ReduceMaxOp>(reduced, {x}, {axisAttr})});
  Value sum = build<mlir::tosa::ReduceSumOp>(
      reduced, {build<mlir::tosa::ExpOp>(shape, {shifted})}, {axisAttr});
  return build<mlir::tosa::SubOp>(shape,
                                  {shifted, build<mlir::tosa::LogOp>(reduced, {sum})});
}

Status Importer::importSoftmaxLike(const Node &node, Value (Importer::*lastAxis)(Value)) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape in = shapeOf(x);
  int64_t rank = static_cast<int64_t>(in.size());
  bool legacy = model_.opsetVersion < 13; // before 13 they flattened at `axis`
  FLOWC_ASSIGN_OR_RETURN(int64_t axis, axisOf(node, legacy ? 1 : -1, in));
  if (legacy) {
    Value flat = reshape(x, {product(in, 0, axis), product(in, axis, in.size())});
    return define(node, reshape((this->*lastAxis)(flat), in));
  }
  if (axis == rank - 1)
    return define(node, (this->*lastAxis)(x));
  // Move `axis` last, normalize, move it back.
  auto [perms, inverse] = axisLast(axis, rank);
  return define(node, transpose((this->*lastAxis)(transpose(x, perms)), inverse));
}

Status Importer::importBatchNormalization(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape xs = shapeOf(x);
  if (xs.size() < 2)
    return nodeError(node, "input " + shapeString(xs) + " has no channel dimension");
  if (node.outputs.size() > 1 || intAttr(node, "training_mode", 0) != 0)
    return nodeUnsupported(node,
                           "training mode (running statistics outputs) is not supported");
  // Per-channel vectors broadcast as [1, C, 1, ...].
  Shape channel(xs.size(), 1);
  channel[1] = xs[1];
  Value params[4];
  for (size_t i = 0; i < 4; ++i) {
    FLOWC_ASSIGN_OR_RETURN(params[i], operand(node, i + 1));
    if (shapeOf(params[i]) != Shape{xs[1]})
      return nodeError(node, "input #" + std::to_string(i + 1) + " has shape " +
                                 shapeString(shapeOf(params[i])) + ", expected [" +
                                 std::to_string(xs[1]) + "]");
    params[i] = reshape(params[i], channel);
  }
  auto [scale, bias, mean, variance] =
      std::tuple(params[0], params[1], params[2], params[3]);
  float epsilon = floatAttr(node, "epsilon", 1e-5f);
  Value inverse = build<mlir::tosa::RsqrtOp>(
      channel,
      {build<mlir::tosa::AddOp>(channel, {variance, scalar(epsilon, xs.size())})});
  // x * s + t, s = scale / sqrt(variance + epsilon), t = bias - mean * s:
  // s and t depend on weights only (derived weights; a convolution before
  // absorbs both, see compiler/lib/DerivedWeights.cpp).
  Value factor = mul(scale, inverse);
  Value shift = build<mlir::tosa::SubOp>(channel, {bias, mul(mean, factor)});
  return define(node, build<mlir::tosa::AddOp>(xs, {mul(x, factor), shift}));
}

/// (x - mean) / sqrt(var + epsilon) * scale + bias over the axes from `axis`
/// on, computed on an [outer, inner] view.
Value Importer::normalizeRows(Value flat, float epsilon, RowStatistics *statistics) {
  Shape shape = shapeOf(flat);
  int64_t outer = shape[0], inner = shape[1];
  auto axisAttr = attr("axis", builder_.getI32IntegerAttr(1));
  Value meanScale = scalar(1.0f / static_cast<float>(inner), 2);
  Value mean =
      mul(build<mlir::tosa::ReduceSumOp>({outer, 1}, {flat}, {axisAttr}), meanScale);
  Value centered = build<mlir::tosa::SubOp>({outer, inner}, {flat, mean});
  Value variance = mul(
      build<mlir::tosa::ReduceSumOp>({outer, 1}, {mul(centered, centered)}, {axisAttr}),
      meanScale);
  Value shifted = build<mlir::tosa::AddOp>({outer, 1}, {variance, scalar(epsilon, 2)});
  Value inverse = build<mlir::tosa::RsqrtOp>({outer, 1}, {shifted});
  if (statistics)
    *statistics = {mean, inverse};
  return mul(centered, inverse);
}

/// InstanceNormalization: each (n, c) plane normalized over its spatial
/// elements. GroupNormalization: each (n, group) normalized over its
/// channels' spatial elements; opset 21 scales per channel, 18 per group.
/// Both then scale and shift per channel.
Status Importer::importChannelNormalization(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value scale, operand(node, 1));
  FLOWC_ASSIGN_OR_RETURN(Value bias, operand(node, 2));
  Shape shape = shapeOf(x);
  if (shape.size() < 3)
    return nodeError(node, "input " + shapeString(shape) + " has no spatial dimensions");
  int64_t channels = shape[1];
  bool group = node.opType == "GroupNormalization";
  int64_t groups = group ? intAttr(node, "num_groups", 0) : channels;
  if (groups < 1 || channels % groups != 0)
    return nodeError(node, "num_groups " + std::to_string(groups) + " does not divide " +
                               std::to_string(channels) + " channels");
  // Opset 18's GroupNormalization scales per group, later ones per channel.
  int64_t perParameter = group && model_.opsetVersion < 21 ? groups : channels;
  for (Value parameter : {scale, bias})
    if (shapeOf(parameter) != Shape{perParameter})
      return nodeError(node, "scale and bias must have shape [" +
                                 std::to_string(perParameter) + "], got " +
                                 shapeString(shapeOf(parameter)));
  if (perParameter != channels) {
    // Each group's value repeated over its channels.
    int64_t repeat = channels / groups;
    auto toChannels = [&](Value v) {
      Value tiled = buildTyped<mlir::tosa::TileOp>(
          builder_.getF32Type(), {groups, repeat},
          {reshape(v, {groups, 1}), constShape({1, repeat})});
      return reshape(tiled, {channels});
    };
    scale = toChannels(scale);
    bias = toChannels(bias);
  }
  int64_t rows = shape[0] * groups;
  Value y =
      reshape(normalizeRows(reshape(x, {rows, product(shape, 0, shape.size()) / rows}),
                            floatAttr(node, "epsilon", 1e-5f)),
              shape);
  Shape perChannel(shape.size(), 1);
  perChannel[1] = channels;
  y = mul(y, reshape(scale, perChannel));
  return define(node, build<mlir::tosa::AddOp>(shape, {y, reshape(bias, perChannel)}));
}

/// LRN: x / (bias + alpha / size * (sum of squares over the channel window
/// [c - (size - 1) / 2, c + size / 2]))^beta, the window summed as shifted
/// slices of the zero-padded squares.
Status Importer::importLrn(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape shape = shapeOf(x);
  if (shape.size() < 3)
    return nodeError(node, "input " + shapeString(shape) + " has no spatial dimensions");
  int64_t size = intAttr(node, "size", 0);
  if (size < 1 || size > kMaxWindowValue)
    return nodeError(node, "size " + std::to_string(size) + " is not a positive window");
  // Window places past the channels add only zeros: at most channels - 1
  // on each side matter (a hostile size of 2^31 builds no more slices).
  int64_t channels = shape[1];
  int64_t before = std::min((size - 1) / 2, channels - 1),
          after = std::min(size / 2, channels - 1);
  size_t rank = shape.size();
  Shape padded = shape, padding(2 * rank, 0);
  padded[1] = channels + before + after;
  padding[2] = before;
  padding[3] = after;
  Value wide =
      build<mlir::tosa::PadOp>(padded, {mul(x, x), constShape(padding), scalar(0.0f, 1)});
  Value sum;
  for (int64_t offset = 0; offset < before + after + 1; ++offset) {
    Value window = sliceAlong(wide, 1, offset, channels);
    sum = sum ? build<mlir::tosa::AddOp>(shape, {sum, window}) : window;
  }
  float alpha = floatAttr(node, "alpha", 1e-4f), beta = floatAttr(node, "beta", 0.75f),
        bias = floatAttr(node, "bias", 1.0f);
  Value base = build<mlir::tosa::AddOp>(
      shape,
      {mul(sum, scalar(alpha / static_cast<float>(size), rank)), scalar(bias, rank)});
  Value denominator = build<mlir::tosa::PowOp>(shape, {base, scalar(beta, rank)});
  return define(node, mul(x, build<mlir::tosa::ReciprocalOp>(shape, {denominator})));
}

Expected<Value> Importer::broadcastToInput(const Node &node, Value v, const Shape &shape,
                                           const char *what) {
  FLOWC_ASSIGN_OR_RETURN(Shape out, broadcastShape(node, shape, shapeOf(v)));
  if (out != shape)
    return nodeError(node, std::string(what) + " " + shapeString(shapeOf(v)) +
                               " does not broadcast to the input " + shapeString(shape));
  return broadcastTo(node, v, shape.size());
}

Status Importer::importLayerNormalization(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  FLOWC_ASSIGN_OR_RETURN(Value scale, operand(node, 1));
  Shape shape = shapeOf(x);
  FLOWC_ASSIGN_OR_RETURN(int64_t axis, axisOf(node, -1, shape));
  int64_t outer = product(shape, 0, axis), inner = product(shape, axis, shape.size());
  RowStatistics statistics;
  Value y = reshape(normalizeRows(reshape(x, {outer, inner}),
                                  floatAttr(node, "epsilon", 1e-5f), &statistics),
                    shape);
  // Mean and InvStdDev keep x's rank, 1 along the normalized axes.
  Shape kept = shape;
  std::fill(kept.begin() + axis, kept.end(), 1);
  for (size_t output : {1, 2})
    if (output < node.outputs.size() && !node.outputs[output].empty())
      FLOWC_RETURN_IF_ERROR(defineOutput(
          node, output,
          reshape(output == 1 ? statistics.mean : statistics.inverse, kept)));
  FLOWC_ASSIGN_OR_RETURN(scale, broadcastToInput(node, scale, shape, "scale"));
  y = mul(y, scale);
  if (hasOperand(node, 2)) {
    FLOWC_ASSIGN_OR_RETURN(Value bias, operand(node, 2));
    FLOWC_ASSIGN_OR_RETURN(bias, broadcastToInput(node, bias, shape, "bias"));
    y = build<mlir::tosa::AddOp>(shape, {y, bias});
  }
  return define(node, y);
}

/// Opset 20's Gelu: x * Phi(x) exactly, or its tanh approximation.
Status Importer::importGelu(const Node &node) {
  FLOWC_ASSIGN_OR_RETURN(Value x, operand(node, 0));
  Shape shape = shapeOf(x);
  size_t rank = shape.size();
  std::string approximate = stringAttr(node, "approximate", "none");
  Value half = mul(x, scalar(0.5f, rank));
  Value inner;
  if (approximate == "none") {
    inner = build<mlir::tosa::ErfOp>(shape, {mul(x, scalar(float(M_SQRT1_2), rank))});
  } else if (approximate == "tanh") {
    Value cube = mul(mul(x, x), x);
    Value poly = build<mlir::tosa::AddOp>(shape, {x, mul(cube, scalar(0.044715f, rank))});
    inner = build<mlir::tosa::TanhOp>(
        shape, {mul(poly, scalar(static_cast<float>(std::sqrt(2.0 / M_PI)), rank))});
  } else {
    return nodeError(node, "approximate='" + approximate + "' is not 'none' or 'tanh'");
  }
  Value onePlus = build<mlir::tosa::AddOp>(shape, {inner, scalar(1.0f, rank)});
  return define(node, mul(half, onePlus));
}

namespace {

// Costs ------------------------------------------------------------------

/// Each input element meets C_out / group * kernel weights (weight
/// [C_in, C_out / group, k...]), whatever the pads crop.
std::optional<uint64_t> convTransposeFlops(const NodeRecord &record, const Node *) {
  if (!present(record, 1) || !hasShape(record.inputs[0]) || !hasShape(record.inputs[1]))
    return std::nullopt;
  uint64_t flops =
      2 * elements(record.inputs[0]) * trailingProduct(record.inputs[1].shape, 1);
  return flops + (present(record, 2) ? outputElements(record) : 0);
}

/// Y[M,N] = A·B (+ C): K is A's element count over M whether or not A is
/// transposed. alpha and beta scaling are not counted.
std::optional<uint64_t> gemmFlops(const NodeRecord &record, const Node *) {
  if (record.inputs.size() < 2 || !hasShape(record.inputs[0]) || record.outputs.empty() ||
      record.outputs[0].shape.size() != 2 || record.outputs[0].shape[0] <= 0)
    return std::nullopt;
  uint64_t m = static_cast<uint64_t>(record.outputs[0].shape[0]);
  uint64_t k = elements(record.inputs[0]) / m;
  uint64_t out = outputElements(record);
  return 2 * out * k + (present(record, 2) ? out : 0);
}

/// Every output element reads its window once (a compare or an add).
std::optional<uint64_t> poolFlops(const NodeRecord &record, const Node *source) {
  if (!source)
    return std::nullopt;
  auto it = source->attributes.find("kernel_shape");
  if (it == source->attributes.end() || it->second.ints.empty())
    return std::nullopt;
  uint64_t window = trailingProduct(it->second.ints, 0);
  return outputElements(record) * window;
}

/// Without the kernel size, the ratio of input to output elements: exact
/// for non-overlapping windows, low for overlapping ones.
uint64_t estimatedPoolFlops(const NodeRecord &record) {
  uint64_t out = outputElements(record);
  if (record.inputs.empty() || out == 0)
    return out;
  uint64_t in = elements(record.inputs[0]);
  return out * std::max<uint64_t>(1, (in + out - 1) / out);
}

/// y = (x - mean) * (scale * rsqrt(var + eps)) + bias: three per element,
/// three per channel.
std::optional<uint64_t> batchNormFlops(const NodeRecord &record, const Node *) {
  if (record.outputs.empty() || record.outputs[0].shape.size() < 2)
    return std::nullopt;
  uint64_t channels =
      static_cast<uint64_t>(std::max<int64_t>(record.outputs[0].shape[1], 0));
  return 3 * outputElements(record) + 3 * channels;
}

using I = Importer;

// The family's op table (OpRegistry.h): one entry per op and opset range.
constexpr OpInfo kOps[] = {
    {.name = "AveragePool",
     .import = &I::importPool,
     .cost = poolFlops,
     .estimate = estimatedPoolFlops},
    {.name = "BatchNormalization",
     .signature = {5, 5, 1, 5},
     .import = &I::importBatchNormalization,
     .cost = batchNormFlops,
     .positiveInputs = 1u << 4}, // the variance
    {.name = "Conv",
     .signature = {2, 3, 1, 1},
     .import = &I::importConv,
     .cost = convFlops},
    {.name = "ConvTranspose",
     .signature = {2, 3, 1, 1},
     .import = &I::importConvTranspose,
     .cost = convTransposeFlops},
    {.name = "Gelu", .sinceVersion = 20, .import = &I::importGelu},
    {.name = "Gemm",
     .signature = {2, 3, 1, 1},
     .import = &I::importGemm,
     .cost = gemmFlops},
    {.name = "GlobalAveragePool",
     .import = &I::importGlobalAveragePool,
     .cost = reduceFlops},
    {.name = "GlobalMaxPool", .import = &I::importGlobalAveragePool, .cost = reduceFlops},
    {.name = "GroupNormalization",
     .sinceVersion = 18,
     .signature = {3, 3, 1, 1},
     .import = &I::importChannelNormalization,
     .cost = perElement<7>},
    {.name = "InstanceNormalization",
     .signature = {3, 3, 1, 1},
     .import = &I::importChannelNormalization,
     .cost = perElement<7>},
    {.name = "LRN", .import = &I::importLrn},
    // mean, subtract, square, variance, normalize, scale, shift
    {.name = "LayerNormalization",
     .sinceVersion = 17,
     .signature = {2, 3, 1, 3},
     .import = &I::importLayerNormalization,
     .cost = perElement<7>},
    {.name = "LogSoftmax", .import = &I::importLogSoftmax},
    {.name = "MatMul",
     .signature = {2, 2, 1, 1},
     .import = &I::importMatMul,
     .cost = matMulFlops},
    {.name = "MaxPool",
     .signature = {1, 1, 1, 2},
     .import = &I::importPool,
     .cost = poolFlops,
     .estimate = estimatedPoolFlops},
    // max, subtract, exp, sum, divide
    {.name = "Softmax", .import = &I::importSoftmax, .cost = perElement<5>},
};

} // namespace

std::span<const OpInfo> nnOps() { return kOps; }

} // namespace flowc::compiler::import
