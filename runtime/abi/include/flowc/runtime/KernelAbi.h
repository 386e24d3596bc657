// The contract between generated code and the runtime's library kernels.
//
// The compiler outlines each heavy op (convolution, matrix product) with
// its layout changes and epilogue into a kernel function; in the code object
// that function's body is a thunk that calls
//
//   flowc_kernel_table[kind](flowc_kernel_context, site, params, buffers)
//
// `params` is a constant int64 array holding the kind's params struct, `buffers` the
// kernel's inputs in the documented order followed by its output, all dense
// row-major. The code object defines the table, the context slot and a mask
// of the kinds it uses; a session fills them after loading the code, and
// refuses code that needs a kind this runtime lacks.
#pragma once

#include "flowc/support/Target.h"

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

namespace flowc::runtime {

/// Defined by code whose temporaries live in one arena: its size in bytes.
/// The arena (kArenaAlignment-aligned) is then the entry's last argument.
inline constexpr const char *kArenaBytesSymbol = "flowc_arena_bytes";
inline constexpr uint64_t kArenaAlignment = 64;

/// Defined by code with run-time checks (an index out of range): a
/// NUL-terminated JSON array of strings, what each check says when it fails.
/// The entry then takes one buffer per check after the outputs (before the
/// arena), a bool [1] that the run sets true when that check failed; the
/// run's result is then an error, its outputs unspecified.
inline constexpr const char *kChecksSymbol = "flowc_checks";

/// Generated parallel loops call LLVM's OpenMP runtime (libomp's __kmpc_*
/// entry points); code objects link this soname. The runtime loads it ahead
/// of GCC's libgomp so that oneDNN's GOMP_* calls land in the same thread
/// pool instead of a second one competing for the cores.
inline constexpr const char *kOpenMpLibrary = "libomp.so.5";

/// Key prefix of derived weights (computed from the model's weights at link
/// time, e.g. BatchNorm folded into a convolution), which code binds like
/// graph weights.
inline constexpr const char *kDerivedWeightPrefix = "flowc.derived/";

/// Symbols every code object with library kernels defines.
inline constexpr const char *kKernelTableSymbol = "flowc_kernel_table";
inline constexpr const char *kKernelContextSymbol = "flowc_kernel_context";
inline constexpr const char *kKernelKindsSymbol = "flowc_kernel_kinds";
inline constexpr const char *kKernelSitesSymbol = "flowc_kernel_sites";
/// The version of this header's kernel parameters and buffer orders the
/// code was compiled against; a runtime refuses code of another version
/// (its parameter arrays would be read wrongly).
inline constexpr const char *kKernelAbiSymbol = "flowc_kernel_abi";
/// 2: matrix products gained the attention scale and mask. 3: convolutions
/// gained 16-bit source, residual and destination buffers (AMP on cuda).
/// 4: TopK's selection and the row scatter. 5: the integer matrix product.
/// 6: the integer convolution.
inline constexpr int64_t kKernelAbiVersion = 6;

/// Profile marks. The graph calls `flowc_profile_mark(2*i)` right before
/// its kernel call i (a loop kernel or a library kernel) and
/// `flowc_profile_mark(2*i+1)` right after; the mark calls the function in
/// `flowc_profile_hook` with the event when that is not null (a session
/// that profiles sets it; otherwise a mark is a load and a branch).
/// `flowc_profile_calls` is a NUL-terminated JSON array with one object per
/// call: {"kernel": callee symbol, "nodes": [graph node indices], "bytes":
/// the sizes of the buffers it is passed, each once} and, for a library
/// call, "site" and "kind" (kernelKindName). Code from before "bytes" lacks
/// it.
inline constexpr const char *kProfileMarkFunction = "flowc_profile_mark";
inline constexpr const char *kProfileHookSymbol = "flowc_profile_hook";
inline constexpr const char *kProfileCallsSymbol = "flowc_profile_calls";
using ProfileHook = void (*)(int64_t event);

using KernelFunction = void (*)(void *context, int64_t site, const int64_t *params,
                                void **buffers);

enum class KernelKind : int64_t {
  /// Buffers: source, weights, bias, [residual], destination.
  Conv2d = 0,
  /// Buffers: A, B, [bias], [residual], destination.
  MatMul = 1,
  /// Buffers: source, destination.
  Pool2d = 2,
  /// Buffers: source, destination.
  Softmax = 3,
  /// Buffers: source, [scale], [shift], destination.
  LayerNorm = 4,
  /// Buffers: keys, destination (int32 indices).
  TopK = 5,
  /// Buffers: data, updates, targets (int32), destination.
  ScatterRows = 6,
  /// Buffers: A, B, [A's zero point], [B's zero points], destination (int32).
  IntegerMatMul = 7,
  /// Buffers: source (int8), weights (int8), destination (int32).
  IntegerConv2d = 8,
};
inline constexpr int64_t kKernelKindCount = 9;

inline const char *kernelKindName(KernelKind kind) {
  switch (kind) {
  case KernelKind::Conv2d:
    return "conv2d";
  case KernelKind::MatMul:
    return "matmul";
  case KernelKind::Pool2d:
    return "pool2d";
  case KernelKind::Softmax:
    return "softmax";
  case KernelKind::LayerNorm:
    return "layernorm";
  case KernelKind::TopK:
    return "topk";
  case KernelKind::ScatterRows:
    return "scatter";
  case KernelKind::IntegerMatMul:
    return "integer_matmul";
  case KernelKind::IntegerConv2d:
    return "integer_conv2d";
  }
  return "unknown";
}

/// Activation applied last, on the (residual-added) result.
enum class Activation : int64_t {
  None = 0,
  /// clamp(x, alpha, beta); Relu is alpha 0, beta +inf.
  Clip = 1,
  Sigmoid = 2,
  Tanh = 3,
  /// x * sigmoid(x) (SiLU).
  Swish = 4,
  /// x * clamp(x / 6 + 1/2, 0, 1).
  HardSwish = 5,
  /// x * (1 + erf(x / sqrt(2))) / 2.
  GeluErf = 6,
  /// x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))).
  GeluTanh = 7,
};

/// Activation bounds travel as the bit pattern of a float.
inline int64_t floatParam(float value) { return std::bit_cast<uint32_t>(value); }
inline float paramFloat(int64_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits));
}

/// Whether `activation` with bounds `alpha` and `beta` (floatParam bits) is
/// ReLU: a clip to [0, +inf), which the libraries have as an activation of
/// its own.
inline bool isRelu(Activation activation, int64_t alpha, int64_t beta) {
  float upper = paramFloat(beta);
  return activation == Activation::Clip && paramFloat(alpha) == 0.0f &&
         std::isinf(upper) && upper > 0;
}

/// Memory order of 4-D activations and of convolution weights.
enum class ActivationLayout : int64_t { Nchw = 0, Nhwc = 1 };
enum class ConvWeightLayout : int64_t {
  /// [out, in/groups, kh, kw]: ONNX's layout, also grouped [g*o, i, kh, kw].
  Oihw = 0,
  /// [out, kh, kw, in]: TOSA's conv2d layout (groups 1 only).
  Ohwi = 1,
  /// [kh, kw, channels, multiplier]: TOSA's depthwise layout.
  Hwcm = 2,
};

/// A kernel's parameters are one of the structs below, passed as the
/// int64 array it is: every field is an int64 or an int64-sized enum, so
/// the compiler writes the words and the runtime reads the struct. Flags
/// are 0 or 1; float values travel as floatParam bits.
template <typename Params> constexpr bool isKernelParams() {
  return std::is_trivially_copyable_v<Params> && std::is_standard_layout_v<Params> &&
         sizeof(Params) % sizeof(int64_t) == 0;
}

struct Conv2dParams {
  int64_t batch, inChannels, inHeight, inWidth;
  int64_t outChannels, kernelHeight, kernelWidth, outHeight, outWidth;
  int64_t strideH, strideW, dilationH, dilationW;
  int64_t padTop, padLeft, padBottom, padRight;
  int64_t groups;
  ActivationLayout sourceLayout;
  ConvWeightLayout weightLayout;
  ActivationLayout destinationLayout;
  /// Weights are graph weights or constants: converted once per session.
  int64_t constantWeights;
  int64_t hasResidual;
  Activation activation;
  int64_t alpha, beta;
  /// Bf16: source and weights rounded to bfloat16, fp32 accumulation and
  /// output.
  Precision precision;
  /// AMP on cuda: the source, the residual or the destination buffer holds
  /// `precision`'s 16-bit type instead of fp32 (a buffer that only
  /// convolutions write and read: markSixteenBitBuffers, in the compiler).
  /// The epilogue still computes in fp32. Always 0 for fp32 and on the CPU.
  int64_t sixteenBitSource, sixteenBitResidual, sixteenBitDestination;
};
static_assert(isKernelParams<Conv2dParams>() && sizeof(Conv2dParams) == 30 * 8);
static_assert(offsetof(Conv2dParams, groups) == 17 * 8 &&
              offsetof(Conv2dParams, constantWeights) == 21 * 8 &&
              offsetof(Conv2dParams, precision) == 26 * 8 &&
              offsetof(Conv2dParams, sixteenBitDestination) == 29 * 8);

/// Whether any of the convolution's buffers holds 16 bits (AMP on cuda).
inline bool hasSixteenBitBuffers(const Conv2dParams &p) {
  return p.sixteenBitSource || p.sixteenBitResidual || p.sixteenBitDestination;
}

/// destination[b] = A[b] x B[b] (+ bias[n]) (+ residual[b]), then
/// (x scale + mask, attention scores), then activation. Buffers: A, B,
/// [bias], [residual], [mask], destination.
struct MatMulParams {
  int64_t batch, m, n, k;
  /// B is stored [batch, N, K] (a transposed weight) instead of [batch, K, N].
  int64_t transposedB;
  /// B is a graph weight or constant: repacked once per session.
  int64_t constantB;
  int64_t hasBias, hasResidual;
  Activation activation;
  int64_t alpha, beta;
  /// Bf16: A and B rounded to bfloat16, fp32 accumulation and output.
  Precision precision;
  /// floatParam of a constant the result is multiplied by; 0: none.
  int64_t scale;
  /// An additive mask, broadcast over the batch: its rows vary along M
  /// (maskRows) or not, its columns along N (maskColumns) or not.
  int64_t hasMask, maskRows, maskColumns;
};
static_assert(isKernelParams<MatMulParams>() && sizeof(MatMulParams) == 16 * 8);
static_assert(offsetof(MatMulParams, constantB) == 5 * 8 &&
              offsetof(MatMulParams, precision) == 11 * 8 &&
              offsetof(MatMulParams, maskColumns) == 15 * 8);

/// TOSA's pooling: padding never enters a window's maximum or average.
enum class PoolAlgorithm : int64_t { Max = 0, AverageExcludingPadding = 1 };

struct Pool2dParams {
  int64_t batch, channels, inHeight, inWidth, outHeight, outWidth;
  int64_t kernelHeight, kernelWidth, strideH, strideW;
  int64_t padTop, padLeft, padBottom, padRight;
  PoolAlgorithm algorithm;
  ActivationLayout sourceLayout, destinationLayout;
};
static_assert(isKernelParams<Pool2dParams>() && sizeof(Pool2dParams) == 17 * 8);
static_assert(offsetof(Pool2dParams, algorithm) == 14 * 8);

/// exp(x - max) / sum(exp(x - max)) along the last axis of a dense
/// [rows, channels] buffer.
struct SoftmaxParams {
  int64_t rows, channels;
};
static_assert(isKernelParams<SoftmaxParams>() && sizeof(SoftmaxParams) == 2 * 8);

/// (x - mean) / sqrt(variance + epsilon) (* scale[c]) (+ shift[c]) along the
/// last axis of a dense [rows, channels] buffer.
struct LayerNormParams {
  int64_t rows, channels;
  /// floatParam bits.
  int64_t epsilon;
  int64_t hasScale, hasShift;
};
static_assert(isKernelParams<LayerNormParams>() && sizeof(LayerNormParams) == 5 * 8);

/// The element type of TopK's keys and of a scatter's rows.
enum class ScalarType : int64_t { F32 = 0, I32 = 1, I64 = 2 };

/// ONNX TopK's order: destination[row, p] (int32) is the index of the
/// element ranked p in row `row` of a dense [rows, n] key buffer. With
/// `largest` the best element is the greatest, otherwise the least; equal
/// keys rank by index, lower first. A float NaN ranks as +infinity (the
/// importer passes the data as it is).
struct TopKParams {
  int64_t rows, n, k;
  int64_t largest;
  ScalarType keyType;
};
static_assert(isKernelParams<TopKParams>() && sizeof(TopKParams) == 5 * 8);

/// How a scatter's update meets its row: replaces it, or is added,
/// multiplied, or taken the maximum or minimum with (a NaN operand gives
/// NaN, as TOSA's maximum and minimum do).
enum class ScatterReduction : int64_t { None = 0, Add = 1, Mul = 2, Max = 3, Min = 4 };

/// ONNX's ScatterND (and ScatterElements, one element per row) at run-time
/// indices: destination = data ([rows, width]), then each update j in
/// order meets row targets[j] (int32 [1, count]) of the destination: a
/// later update to the same row replaces an earlier one, or combines with
/// the result so far. A target outside [0, rows) is skipped: the graph
/// checks the indices itself and fails the run.
struct ScatterRowsParams {
  int64_t rows, width, count;
  ScatterReduction reduction;
  ScalarType type;
};
static_assert(isKernelParams<ScatterRowsParams>() && sizeof(ScatterRowsParams) == 5 * 8);

/// ONNX's MatMulInteger, exact in int32: destination ([m, n] int32) =
/// (A - aZero) x (B - bZero), A [m, k] and B [k, n] (stored [n, k] with
/// transposedB) of 8-bit integers,
/// int8 or uint8 each (unsignedA, unsignedB). aZero is one element of A's
/// type; bZero one of B's type, or one per column. Buffers: A, B, [aZero],
/// [bZero], destination. Only the CPU runtime has it: a cuda compile
/// inlines the call's TOSA body.
struct IntegerMatMulParams {
  int64_t m, n, k;
  int64_t transposedB;
  /// B is a graph weight or constant: packed at link, or converted once per
  /// session.
  int64_t constantB;
  int64_t unsignedA, unsignedB;
  int64_t hasZeroA;
  /// B's zero points: 0 (none), 1 (one for every column) or n.
  int64_t zerosB;
};
static_assert(isKernelParams<IntegerMatMulParams>() &&
              sizeof(IntegerMatMulParams) == 9 * 8);

/// TOSA's quantized convolution, exact in int32: destination (int32) = the
/// convolution of (source - zeroSource) with weights, source and weights
/// int8, the padding zeroSource (0 once shifted: a quantized model pads
/// with the zero point's value). Geometry and layouts as Conv2dParams'
/// (groups 1, or depthwise). Buffers: source, weights, destination. Only
/// the CPU runtime has it: a cuda compile inlines the call's TOSA body.
struct IntegerConv2dParams {
  int64_t batch, inChannels, inHeight, inWidth;
  int64_t outChannels, kernelHeight, kernelWidth, outHeight, outWidth;
  int64_t strideH, strideW, dilationH, dilationW;
  int64_t padTop, padLeft, padBottom, padRight;
  int64_t groups;
  ActivationLayout sourceLayout;
  ConvWeightLayout weightLayout;
  ActivationLayout destinationLayout;
  /// Weights are graph weights or constants: packed at link, or converted
  /// once per session.
  int64_t constantWeights;
  /// The source's zero point, -128..127.
  int64_t zeroSource;
};
static_assert(isKernelParams<IntegerConv2dParams>() &&
              sizeof(IntegerConv2dParams) == 23 * 8);

/// The words of `params`, as the compiler emits them.
template <typename Params> std::vector<int64_t> paramWords(const Params &params) {
  static_assert(isKernelParams<Params>());
  std::vector<int64_t> words(sizeof(Params) / sizeof(int64_t));
  std::memcpy(words.data(), &params, sizeof(Params));
  return words;
}

/// `words` read as a `Params`, if there are exactly as many as it has.
template <typename Params>
std::optional<Params> paramsFromWords(std::span<const int64_t> words) {
  static_assert(isKernelParams<Params>());
  if (words.size() * sizeof(int64_t) != sizeof(Params))
    return std::nullopt;
  Params params;
  std::memcpy(&params, words.data(), sizeof(Params));
  return params;
}

} // namespace flowc::runtime
