// The arguments of the runtime's own CUDA kernels (Helpers.cu), shared by
// the kernels and the host code that launches them (LibraryKernels.cpp).
// Each kernel takes one of these structs by value: every field is 8 bytes
// wide, so nvcc and the host compiler lay it out alike.
#pragma once

#include <cstdint>

namespace flowc::runtime::gpu {

/// Four dimensions and, for each of up to three buffers, the stride of
/// each dimension in elements (0: broadcast along it).
struct Index4 {
  int64_t dims[4];
};

/// Element types of the helpers' buffers: fp32, and the 16-bit types AMP
/// hands the libraries (KernelAbi.h's Precision names them).
enum ElementType : int64_t { kF32 = 0, kF16 = 1, kBf16 = 2 };

/// out[i] = in[i] over `shape`, each buffer with its own strides and
/// element type: layout changes of activations, repacks of weights, and
/// the conversions to and from 16 bits (rounding to nearest even). A null
/// `in` writes zeros (a padded source's border).
struct GatherArgs {
  void *out;
  const void *in;
  Index4 shape;
  Index4 outStrides;
  Index4 inStrides;
  int64_t outType, inType;
};

/// out = activation(((in + bias[channel]) + residual) * scale + mask) over
/// `shape`, computed in fp32; `in` (of `inType`) may be `out` (same
/// strides and type). The residual has `out`'s strides. Null pointers and
/// hasScale 0 skip their step. `activation`, `alpha` and `beta` are
/// KernelAbi.h's Activation and its bounds. `in`, `out` and the residual
/// are of their types (a convolution's 16-bit buffers), the bias and mask
/// fp32.
struct EpilogueArgs {
  void *out;
  int64_t outType;
  const void *in;
  int64_t inType;
  const float *bias;
  const void *residual;
  int64_t residualType;
  const float *mask;
  Index4 shape;
  Index4 outStrides;
  Index4 inStrides;
  Index4 maskStrides;
  int64_t channelAxis;
  int64_t hasScale;
  double scale;
  int64_t activation;
  double alpha, beta;
};

/// TOSA's 2-D pooling of an [N, C, H, W] source (any strides) into an
/// [N, C, OH, OW] destination (any strides): padding never enters a
/// window's maximum or average. `average` 0: maximum. Threads take the
/// destination's elements in the order of dimensions `order` (outermost
/// first; Coalesce.h's memoryOrder of the destination).
struct PoolArgs {
  float *out;
  const float *in;
  Index4 outShape;
  Index4 outStrides;
  Index4 inShape;
  Index4 inStrides;
  int64_t kernelH, kernelW, strideH, strideW, padTop, padLeft;
  int64_t average;
  Index4 order;
};

/// Row-wise softmax or layer normalization of a dense [rows, channels]
/// buffer, one block per row.
struct RowArgs {
  float *out;
  const float *in;
  const float *scale;
  const float *shift;
  int64_t rows, channels;
  double epsilon;
};

/// TopK's order of each row of a dense [rows, n] key buffer into the
/// dense int32 [rows, k] `out` (KernelAbi.h's TopKParams), one block per
/// row. The key type is the kernel's: flowc_topk_f32, _i32 or _i64.
struct TopKArgs {
  int32_t *out;
  const void *in;
  int64_t rows, n, k;
  int64_t largest;
};

/// out[i] = in[i] for `words` 4-byte words (a scatter's copy of its data).
struct CopyArgs {
  void *out;
  const void *in;
  int64_t words;
};

/// A row scatter's updates (KernelAbi.h's ScatterRowsParams) onto `out`,
/// which already holds the data. One block per update: the block of the
/// first update to a row applies every update to that row, in order (each
/// thread its own columns), and the others leave. The element type is the
/// kernel's: flowc_scatter_f32, _i32 or _i64.
struct ScatterArgs {
  void *out;
  const void *updates;
  const int32_t *targets;
  int64_t rows, width, count;
  int64_t reduction;
};

/// Threads per block of every helper kernel; the row kernels' reductions
/// assume it.
inline constexpr int64_t kHelperBlock = 256;

inline constexpr const char *kGatherKernel = "flowc_gather";
inline constexpr const char *kEpilogueKernel = "flowc_epilogue";
inline constexpr const char *kPoolKernel = "flowc_pool2d";
inline constexpr const char *kSoftmaxKernel = "flowc_softmax";
inline constexpr const char *kLayerNormKernel = "flowc_layernorm";
inline constexpr const char *kTopKF32Kernel = "flowc_topk_f32";
inline constexpr const char *kTopKI32Kernel = "flowc_topk_i32";
inline constexpr const char *kTopKI64Kernel = "flowc_topk_i64";
inline constexpr const char *kCopyWordsKernel = "flowc_copy_words";
inline constexpr const char *kScatterF32Kernel = "flowc_scatter_f32";
inline constexpr const char *kScatterI32Kernel = "flowc_scatter_i32";
inline constexpr const char *kScatterI64Kernel = "flowc_scatter_i64";

} // namespace flowc::runtime::gpu
