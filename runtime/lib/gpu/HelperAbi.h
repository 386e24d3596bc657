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

/// out[i] = in[i] over `dims`, each buffer with its own strides: layout
/// changes of activations and repacks of weights.
struct GatherArgs {
  float *out;
  const float *in;
  Index4 shape;
  Index4 outStrides;
  Index4 inStrides;
};

/// out = activation(((in + bias[channel]) + residual) * scale + mask) over
/// `shape`; `in` may be `out` (same strides). The residual has `out`'s
/// strides. Null pointers and hasScale 0 skip their step. `activation`,
/// `alpha` and `beta` are KernelAbi.h's Activation and its bounds.
struct EpilogueArgs {
  float *out;
  const float *in;
  const float *bias;
  const float *residual;
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
/// window's maximum or average. `average` 0: maximum.
struct PoolArgs {
  float *out;
  const float *in;
  Index4 outShape;
  Index4 outStrides;
  Index4 inShape;
  Index4 inStrides;
  int64_t kernelH, kernelW, strideH, strideW, padTop, padLeft;
  int64_t average;
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

/// Threads per block of every helper kernel; the row kernels' reductions
/// assume it.
inline constexpr int64_t kHelperBlock = 256;

inline constexpr const char *kGatherKernel = "flowc_gather";
inline constexpr const char *kEpilogueKernel = "flowc_epilogue";
inline constexpr const char *kPoolKernel = "flowc_pool2d";
inline constexpr const char *kSoftmaxKernel = "flowc_softmax";
inline constexpr const char *kLayerNormKernel = "flowc_layernorm";

} // namespace flowc::runtime::gpu
