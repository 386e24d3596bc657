// One pattern per library-kernel kind: what a convolution, a product
// (with attention's scale and mask), a pooling, a softmax and a layer norm
// kernel absorbs, and its params struct (KernelAbi.h).
#include "Matchers.h"

#include "mlir/Dialect/Tosa/IR/TosaOps.h"
#include "mlir/IR/Matchers.h"

#include <algorithm>
#include <type_traits>

namespace flowc::compiler::library {

using mlir::Operation;
using mlir::Value;
using runtime::KernelKind;

namespace {

/// A convolution's geometry, weights (absorbing the importer's layout
/// change of them) and source (absorbing its crop and NCHW transpose) into
/// `params`, whose fields the float and integer kinds name alike; then the
/// convolution and its result's NCHW transpose. Returns the source and the
/// weights the kernel reads.
template <typename ConvOp, typename Params>
std::pair<Value, Value> absorbConv(ConvOp conv, Candidate &candidate, Params &params) {
  constexpr bool depthwise = std::is_same_v<ConvOp, mlir::tosa::DepthwiseConv2DOp>;
  llvm::ArrayRef<int64_t> input = shapeOf(conv.getInput()); // NHWC
  llvm::ArrayRef<int64_t> output = shapeOf(conv.getOutput());
  llvm::ArrayRef<int64_t> weight = shapeOf(conv.getWeight());
  mlir::Type weightElement =
      mlir::cast<mlir::RankedTensorType>(conv.getWeight().getType()).getElementType();

  Value weights = conv.getWeight();
  if constexpr (depthwise) {
    // [KH, KW, C, M]; the importer's transpose(reshape(w)) of ONNX's
    // [C*M, 1, KH, KW] is absorbed and w read as grouped OIHW.
    params.weightLayout = runtime::ConvWeightLayout::Hwcm;
    params.kernelHeight = weight[0];
    params.kernelWidth = weight[1];
    params.outChannels = weight[2] * weight[3];
    params.groups = weight[2];
    if (auto transpose = transposeBy(weights, {2, 3, 0, 1})) {
      auto reshape = transpose.getInput1().getDefiningOp<mlir::tosa::ReshapeOp>();
      auto original =
          reshape ? mlir::dyn_cast<mlir::RankedTensorType>(reshape.getInput1().getType())
                  : nullptr;
      if (original && original.hasStaticShape() && original.getRank() == 4 &&
          original.getElementType() == weightElement) {
        weights = reshape.getInput1();
        params.weightLayout = runtime::ConvWeightLayout::Oihw;
        candidate.ops.push_back(reshape);
        candidate.ops.push_back(transpose);
      } else if (weight[3] == 1) {
        // A multiplier of 1: [C, 1, KH, KW] is [C, M, KH, KW] as it is, and
        // the importer writes no reshape.
        weights = transpose.getInput1();
        params.weightLayout = runtime::ConvWeightLayout::Oihw;
        candidate.ops.push_back(transpose);
      }
    }
  } else {
    params.weightLayout = runtime::ConvWeightLayout::Ohwi;
    params.kernelHeight = weight[1];
    params.kernelWidth = weight[2];
    params.outChannels = weight[0];
    params.groups = 1;
    if (auto transpose = transposeBy(weights, {0, 2, 3, 1})) {
      weights = transpose.getInput1();
      params.weightLayout = runtime::ConvWeightLayout::Oihw;
      candidate.ops.push_back(transpose);
    }
  }
  llvm::ArrayRef<int64_t> stride = conv.getStrideAttr().asArrayRef();
  llvm::ArrayRef<int64_t> dilation = conv.getDilationAttr().asArrayRef();
  llvm::ArrayRef<int64_t> pad = conv.getPadAttr().asArrayRef(); // t, b, l, r
  params.batch = input[0];
  params.inChannels = input[3];
  params.outHeight = output[1];
  params.outWidth = output[2];
  params.strideH = stride[0];
  params.strideW = stride[1];
  params.dilationH = dilation[0];
  params.dilationW = dilation[1];
  params.padTop = pad[0];
  params.padBottom = pad[1];
  params.padLeft = pad[2];
  params.padRight = pad[3];
  params.constantWeights = isConstantOrigin(weights);
  Value source = conv.getInput();
  absorbSourceCrop(candidate, source, output, {params.kernelHeight, params.kernelWidth},
                   stride, dilation, pad);
  input = shapeOf(source);
  params.inHeight = input[1];
  params.inWidth = input[2];
  params.sourceLayout = absorbSourceLayout(candidate, source);

  candidate.ops.push_back(conv);
  candidate.result = conv.getOutput();
  params.destinationLayout = absorbDestinationLayout(candidate);
  return {source, weights};
}

template <typename ConvOp> std::optional<Candidate> matchConv(ConvOp conv) {
  if (!isF32Tensor(conv.getInput()) || !isF32Tensor(conv.getWeight()) ||
      !isF32Tensor(conv.getBias()) || !isF32Tensor(conv.getOutput()))
    return std::nullopt;
  Candidate candidate;
  candidate.kind = KernelKind::Conv2d;
  auto &params = candidate.params.emplace<runtime::Conv2dParams>();
  auto [source, weights] = absorbConv(conv, candidate, params);
  candidate.inputs = {source, weights, conv.getBias()};
  Epilogue epilogue = absorbEpilogue(candidate, /*biasChannels=*/0);
  appendEpilogueInputs(candidate, epilogue);
  params.hasResidual = epilogue.residual != nullptr;
  params.activation = epilogue.activation;
  params.alpha = runtime::floatParam(epilogue.alpha);
  params.beta = runtime::floatParam(epilogue.beta);
  return candidate;
}

/// The value of a one-element integer constant, if `value` is one.
std::optional<int64_t> integerConstant(Value value) {
  mlir::DenseIntElementsAttr attr;
  if (!mlir::matchPattern(value, mlir::m_Constant(&attr)) || attr.getNumElements() != 1)
    return std::nullopt;
  return (*attr.value_begin<llvm::APInt>()).getSExtValue();
}

/// Whether `value` is a constant of zeros.
bool isZeroConstant(Value value) {
  mlir::DenseIntElementsAttr attr;
  return mlir::matchPattern(value, mlir::m_Constant(&attr)) &&
         llvm::all_of(attr.getValues<llvm::APInt>(),
                      [](const llvm::APInt &v) { return v.isZero(); });
}

/// TOSA's quantized convolution (the importer's, of a quantized model's
/// bytes): i8 source and weights, i32 sums, a constant source zero point,
/// weights' zero point 0 and no bias. It takes no epilogue: the scales,
/// the bias and the requantization after it are elementwise loops that
/// fuse into one.
template <typename ConvOp> std::optional<Candidate> matchIntegerConv(ConvOp conv) {
  if (!isIntegerTensor(conv.getInput(), 8) || !isIntegerTensor(conv.getWeight(), 8) ||
      !isIntegerTensor(conv.getOutput(), 32) || !isZeroConstant(conv.getBias()) ||
      !isZeroConstant(conv.getWeightZp()))
    return std::nullopt;
  std::optional<int64_t> zero = integerConstant(conv.getInputZp());
  if (!zero)
    return std::nullopt;
  Candidate candidate;
  candidate.kind = KernelKind::IntegerConv2d;
  auto &params = candidate.params.emplace<runtime::IntegerConv2dParams>();
  params.zeroSource = *zero;
  auto [source, weights] = absorbConv(conv, candidate, params);
  candidate.inputs = {source, weights};
  return candidate;
}

/// Attention scores, (Q x K^T) * scale + mask: a product whose only user
/// multiplies it by a splat constant, optionally followed by the add of a
/// mask that is the same for every batch and row (BERT's padding mask [1,
/// 1, 1, S]). Both become post-ops of the product (after its bias and
/// residual, which such a product does not have). A mask that varies by
/// row (a causal [1, 1, S, S]) stays a separate add: oneDNN 2.6 runs a
/// product with such a binary post-op on its reference implementation,
/// hundreds of times slower. Returns whether it absorbed the scale.
bool absorbScaleAndMask(Candidate &candidate) {
  auto &params = std::get<runtime::MatMulParams>(candidate.params);
  Operation *user = soleUser(candidate.result);
  std::optional<float> scale = splatConstant(otherFactor(user, candidate.result));
  if (!scale || *scale == 0.0f)
    return false;
  auto mul = mlir::cast<mlir::tosa::MulOp>(user);
  candidate.ops.push_back(mul);
  candidate.result = mul.getOutput();
  params.scale = runtime::floatParam(*scale);
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
  bool sameForEveryRow = maskShape[rank - 2] == 1;
  bool columnsFit = maskShape[rank - 1] == 1 || maskShape[rank - 1] == shape[rank - 1];
  if (!broadcastOverBatch || !sameForEveryRow || !columnsFit)
    return true;
  candidate.ops.push_back(add);
  candidate.result = add.getOutput();
  candidate.inputs.push_back(mask);
  params.hasMask = 1;
  params.maskRows = maskShape[rank - 2] != 1;
  params.maskColumns = maskShape[rank - 1] != 1;
  return true;
}

std::optional<Candidate> matchMatMul(mlir::tosa::MatMulOp matmul) {
  if (!isF32Tensor(matmul.getA()) || !isF32Tensor(matmul.getB()) ||
      !isF32Tensor(matmul.getOutput()))
    return std::nullopt;
  Candidate candidate;
  candidate.kind = KernelKind::MatMul;
  auto &params = candidate.params.emplace<runtime::MatMulParams>();
  llvm::ArrayRef<int64_t> a = shapeOf(matmul.getA()); // [batch, M, K]
  llvm::ArrayRef<int64_t> c = shapeOf(matmul.getOutput());
  params.batch = a[0];
  params.m = a[1];
  params.k = a[2];
  params.n = c[2];

  // B read transposed in place: attention's K^T, Gemm's transB weights.
  Value b = matmul.getB();
  if (auto transpose = transposeBy(b, {0, 2, 1})) {
    b = transpose.getInput1();
    params.transposedB = 1;
    candidate.ops.push_back(transpose);
  } else if (auto reshape = b.getDefiningOp<mlir::tosa::ReshapeOp>();
             reshape && a[0] == 1) {
    if (auto transpose = transposeBy(reshape.getInput1(), {1, 0})) {
      b = transpose.getInput1();
      params.transposedB = 1;
      candidate.ops.push_back(transpose);
      candidate.ops.push_back(reshape);
    }
  }
  params.constantB = isConstantOrigin(b);
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
  params.hasBias = epilogue.bias != nullptr;
  params.hasResidual = epilogue.residual != nullptr;
  params.activation = epilogue.activation;
  params.alpha = runtime::floatParam(epilogue.alpha);
  params.beta = runtime::floatParam(epilogue.beta);
  return candidate;
}

/// A max or average pooling with the NCHW<->NHWC transposes around it.
template <typename PoolOp> std::optional<Candidate> matchPool(PoolOp pool) {
  if (!isF32Tensor(pool.getInput()) || !isF32Tensor(pool.getOutput()))
    return std::nullopt;
  Candidate candidate;
  candidate.kind = KernelKind::Pool2d;
  auto &params = candidate.params.emplace<runtime::Pool2dParams>();
  llvm::ArrayRef<int64_t> input = shapeOf(pool.getInput()); // NHWC
  llvm::ArrayRef<int64_t> output = shapeOf(pool.getOutput());
  Value source = pool.getInput();
  params.sourceLayout = absorbSourceLayout(candidate, source);
  params.batch = input[0];
  params.inHeight = input[1];
  params.inWidth = input[2];
  params.channels = input[3];
  params.outHeight = output[1];
  params.outWidth = output[2];
  llvm::ArrayRef<int64_t> kernel = pool.getKernelAttr().asArrayRef();
  llvm::ArrayRef<int64_t> stride = pool.getStrideAttr().asArrayRef();
  llvm::ArrayRef<int64_t> pad = pool.getPadAttr().asArrayRef(); // t, b, l, r
  params.kernelHeight = kernel[0];
  params.kernelWidth = kernel[1];
  params.strideH = stride[0];
  params.strideW = stride[1];
  params.padTop = pad[0];
  params.padBottom = pad[1];
  params.padLeft = pad[2];
  params.padRight = pad[3];
  params.algorithm = std::is_same_v<PoolOp, mlir::tosa::MaxPool2dOp>
                         ? runtime::PoolAlgorithm::Max
                         : runtime::PoolAlgorithm::AverageExcludingPadding;
  candidate.ops.push_back(pool);
  candidate.result = pool.getOutput();
  params.destinationLayout = absorbDestinationLayout(candidate);
  candidate.inputs = {source};
  return candidate;
}

/// A global average pooling as the importer writes GlobalAveragePool and
/// ReduceMean over both spatial axes: sum over H, sum over W, times
/// 1/(H*W), on NHWC (axes 1, 2) or NCHW (axes 2, 3) data. Run as the
/// library's pooling with one H x W window: the generated reduction walks
/// H with the channels' stride, which does not vectorize (EfficientNet's
/// squeeze-and-excitation blocks spent 9% of the run there).
std::optional<Candidate> matchGlobalAveragePool(mlir::tosa::ReduceSumOp first) {
  Value x = first.getInput();
  llvm::ArrayRef<int64_t> shape = shapeOf(x);
  if (!isF32Tensor(x) || shape.size() != 4)
    return std::nullopt;
  auto second =
      mlir::dyn_cast_or_null<mlir::tosa::ReduceSumOp>(soleUser(first.getOutput()));
  if (!second)
    return std::nullopt;
  uint32_t low = std::min(first.getAxis(), second.getAxis());
  uint32_t high = std::max(first.getAxis(), second.getAxis());
  bool nhwc = low == 1 && high == 2, nchw = low == 2 && high == 3;
  if (!nhwc && !nchw)
    return std::nullopt;
  int64_t height = shape[low], width = shape[high];
  auto mean = mlir::dyn_cast_or_null<mlir::tosa::MulOp>(soleUser(second.getOutput()));
  if (!mean || !isScale(otherFactor(mean, second.getOutput()), 1.0f / (height * width)) ||
      shapeOf(mean.getOutput()) != shapeOf(second.getOutput()))
    return std::nullopt;
  Candidate candidate;
  candidate.kind = KernelKind::Pool2d;
  candidate.inputs = {x};
  candidate.ops = {first, second, mean};
  candidate.result = mean.getOutput();
  auto &params = candidate.params.emplace<runtime::Pool2dParams>();
  params.batch = shape[0];
  params.channels = nhwc ? shape[3] : shape[1];
  params.inHeight = params.kernelHeight = height;
  params.inWidth = params.kernelWidth = width;
  params.outHeight = params.outWidth = 1;
  params.strideH = params.strideW = 1;
  params.algorithm = runtime::PoolAlgorithm::AverageExcludingPadding;
  // A 1 x 1 result has the same bytes in either layout.
  params.sourceLayout = params.destinationLayout =
      nhwc ? runtime::ActivationLayout::Nhwc : runtime::ActivationLayout::Nchw;
  return candidate;
}

/// The importer's softmax along the last axis:
/// exp(x - max(x)) * reciprocal(sum(exp(x - max(x)))).
std::optional<Candidate> matchSoftmax(mlir::tosa::ReduceMaxOp max) {
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
  Candidate candidate;
  candidate.kind = KernelKind::Softmax;
  candidate.inputs = {x};
  candidate.ops = {max, sub, exp, sum, reciprocal, mul};
  candidate.result = mul.getOutput();
  auto &params = candidate.params.emplace<runtime::SoftmaxParams>();
  params.rows = rows;
  params.channels = channels;
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
  Candidate candidate;
  candidate.kind = KernelKind::LayerNorm;
  candidate.inputs = {x};
  candidate.ops = ops;
  candidate.result = normalize.getOutput();
  auto &params = candidate.params.emplace<runtime::LayerNormParams>();
  params.rows = rows;
  params.channels = channels;
  params.epsilon = runtime::floatParam(*epsilon);
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
    params.hasScale = 1;
  }
  if (auto add = mlir::dyn_cast_or_null<mlir::tosa::AddOp>(soleUser(candidate.result))) {
    Value beta = otherAddend(add, candidate.result);
    if (perChannel(beta) && shapeOf(add.getOutput()) == llvm::ArrayRef(resultShape)) {
      candidate.inputs.push_back(beta);
      candidate.ops.push_back(add);
      candidate.result = add.getOutput();
      params.hasShift = 1;
    }
  }
  return candidate;
}

} // namespace

bool isKernelRoot(Operation *op) {
  return mlir::isa<mlir::tosa::Conv2DOp, mlir::tosa::DepthwiseConv2DOp,
                   mlir::tosa::MatMulOp, mlir::tosa::MaxPool2dOp, mlir::tosa::AvgPool2dOp,
                   mlir::tosa::ReduceMaxOp, mlir::tosa::ReduceSumOp>(op);
}

std::optional<Candidate> matchKernel(Operation *root) {
  if (auto conv = mlir::dyn_cast<mlir::tosa::Conv2DOp>(root)) {
    if (auto integer = matchIntegerConv(conv))
      return integer;
    return matchConv(conv);
  }
  if (auto depthwise = mlir::dyn_cast<mlir::tosa::DepthwiseConv2DOp>(root)) {
    if (auto integer = matchIntegerConv(depthwise))
      return integer;
    return matchConv(depthwise);
  }
  if (auto maxPool = mlir::dyn_cast<mlir::tosa::MaxPool2dOp>(root))
    return matchPool(maxPool);
  if (auto avgPool = mlir::dyn_cast<mlir::tosa::AvgPool2dOp>(root))
    return matchPool(avgPool);
  if (auto max = mlir::dyn_cast<mlir::tosa::ReduceMaxOp>(root))
    return matchSoftmax(max);
  if (auto sum = mlir::dyn_cast<mlir::tosa::ReduceSumOp>(root)) {
    if (auto pool = matchGlobalAveragePool(sum))
      return pool;
    return matchLayerNorm(sum);
  }
  if (auto matmul = mlir::dyn_cast<mlir::tosa::MatMulOp>(root))
    return matchMatMul(matmul);
  return std::nullopt;
}

} // namespace flowc::compiler::library
