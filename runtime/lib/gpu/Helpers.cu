// The runtime's own CUDA kernels: what surrounds the cuDNN and cuBLASLt
// calls of library kernels (layout changes, epilogues the libraries do not
// fuse) and the kernels no library call fits (pooling of any layout, and
// softmax and layer normalization fused into one pass per row, TopK's
// selection and the row scatter). Built by
// nvcc into a fat binary for every supported architecture, embedded in the
// runtime and loaded into a session's context with its first library
// kernel. Arguments: HelperAbi.h.
#include "HelperAbi.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

using namespace flowc::runtime::gpu;

namespace {

// KernelAbi.h's Activation values.
enum : int64_t {
  kNone = 0,
  kClip = 1,
  kSigmoid = 2,
  kTanh = 3,
  kSwish = 4,
  kHardSwish = 5,
  kGeluErf = 6,
  kGeluTanh = 7,
};

__device__ float activate(float x, int64_t activation, float alpha, float beta) {
  switch (activation) {
  case kClip:
    return fminf(fmaxf(x, alpha), beta);
  case kSigmoid:
    return 1.0f / (1.0f + expf(-x));
  case kTanh:
    return tanhf(x);
  case kSwish:
    return x / (1.0f + expf(-x));
  case kHardSwish:
    return x * fminf(fmaxf(x / 6.0f + 0.5f, 0.0f), 1.0f);
  case kGeluErf:
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  case kGeluTanh:
    return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
  default:
    return x;
  }
}

__device__ float load(const void *buffer, int64_t at, int64_t type) {
  switch (type) {
  case kF16:
    return __half2float(static_cast<const __half *>(buffer)[at]);
  case kBf16:
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(buffer)[at]);
  default:
    return static_cast<const float *>(buffer)[at];
  }
}

__device__ void store(void *buffer, int64_t at, int64_t type, float value) {
  switch (type) {
  case kF16:
    static_cast<__half *>(buffer)[at] = __float2half_rn(value);
    break;
  case kBf16:
    static_cast<__nv_bfloat16 *>(buffer)[at] = __float2bfloat16_rn(value);
    break;
  default:
    static_cast<float *>(buffer)[at] = value;
  }
}

/// The coordinates of element `linear` of `shape`, row-major. `Index` is
/// 32 bits when the shape has fewer than 2^32 elements: 64-bit division
/// is a long software routine on the GPU, and this runs once per element.
template <typename Index>
__device__ void coordinates(Index linear, const Index4 &shape, int64_t at[4]) {
  for (int d = 3; d >= 0; --d) {
    auto extent = static_cast<Index>(shape.dims[d]);
    at[d] = static_cast<int64_t>(linear % extent);
    linear /= extent;
  }
}

__device__ int64_t offset(const int64_t at[4], const Index4 &strides) {
  return at[0] * strides.dims[0] + at[1] * strides.dims[1] + at[2] * strides.dims[2] +
         at[3] * strides.dims[3];
}

__device__ int64_t elements(const Index4 &shape) {
  return shape.dims[0] * shape.dims[1] * shape.dims[2] * shape.dims[3];
}

/// Calls `body` with the coordinates of every element of `shape`, each
/// once, spread over the grid's threads: consecutive threads take
/// consecutive elements of the shape's row-major order (the host puts the
/// written buffer's dimensions in memory order, Coalesce.h).
template <typename Body> __device__ void forEachElement(const Index4 &shape, Body body) {
  int64_t total = elements(shape);
  bool narrow = total <= int64_t{UINT32_MAX};
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t at[4];
    if (narrow)
      coordinates(static_cast<uint32_t>(i), shape, at);
    else
      coordinates(i, shape, at);
    body(at);
  }
}

/// Sum (or maximum) over the block of each thread's `value`; every thread
/// gets the result. `shared` holds one float per warp.
template <bool Maximum> __device__ float blockReduce(float value, float *shared) {
  for (int offset = 16; offset > 0; offset /= 2) {
    float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = Maximum ? fmaxf(value, other) : value + other;
  }
  int warp = threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  __syncthreads(); // `shared` may still be read by a previous reduction
  if (lane == 0)
    shared[warp] = value;
  __syncthreads();
  int warps = blockDim.x / 32;
  value = lane < warps ? shared[lane] : (Maximum ? -FLT_MAX : 0.0f);
  for (int offset = 16; offset > 0; offset /= 2) {
    float other = __shfl_xor_sync(0xffffffffu, value, offset);
    value = Maximum ? fmaxf(value, other) : value + other;
  }
  return value;
}

/// TopK's order: NaN ranks as +infinity.
__device__ float rankKey(float key) {
  return isnan(key) ? __int_as_float(0x7f800000) : key;
}
__device__ int32_t rankKey(int32_t key) { return key; }
__device__ long long rankKey(long long key) { return key; }

/// Whether key x at index i ranks before key y at index j; index -1 is no
/// element, after every element.
template <typename Key>
__device__ bool ranksBefore(Key x, long long i, Key y, long long j, bool largest) {
  if (j < 0 || i < 0)
    return i >= 0 && j < 0;
  if (x != y)
    return largest ? x > y : x < y;
  return i < j;
}

/// One block per row. Step p picks the best key that ranks after step
/// p - 1's pick: the order is total (equal keys rank by index), so no
/// element needs marking and no scratch grows with the row. k passes over
/// a row that stays in L1/L2.
template <typename Key> __device__ void topKRows(const TopKArgs &a) {
  __shared__ Key warpKeys[32];
  __shared__ long long warpIndices[32];
  bool largest = a.largest != 0;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const Key *in = static_cast<const Key *>(a.in) + row * a.n;
    Key lastKey = Key();
    long long last = -1;
    for (int64_t p = 0; p < a.k; ++p) {
      Key best = Key();
      long long bestIndex = -1;
      for (long long i = threadIdx.x; i < a.n; i += blockDim.x) {
        Key key = rankKey(in[i]);
        if (last >= 0 && !ranksBefore(lastKey, last, key, i, largest))
          continue;
        if (ranksBefore(key, i, best, bestIndex, largest)) {
          best = key;
          bestIndex = i;
        }
      }
      for (int offset = 16; offset > 0; offset /= 2) {
        Key otherKey = __shfl_xor_sync(0xffffffffu, best, offset);
        long long otherIndex = __shfl_xor_sync(0xffffffffu, bestIndex, offset);
        if (ranksBefore(otherKey, otherIndex, best, bestIndex, largest)) {
          best = otherKey;
          bestIndex = otherIndex;
        }
      }
      if (lane == 0) {
        warpKeys[warp] = best;
        warpIndices[warp] = bestIndex;
      }
      __syncthreads();
      // Every thread reduces the warps' picks itself: no broadcast.
      for (int w = 0; w < warps; ++w)
        if (ranksBefore(warpKeys[w], warpIndices[w], best, bestIndex, largest)) {
          best = warpKeys[w];
          bestIndex = warpIndices[w];
        }
      __syncthreads(); // the next step overwrites the warps' picks
      lastKey = best;
      last = bestIndex;
      if (threadIdx.x == 0)
        a.out[row * a.k + p] = static_cast<int32_t>(bestIndex);
    }
  }
}

/// `row` met by `update` as KernelAbi.h's ScatterReduction `reduction`
/// says (not 0, none): integers wrap; a float NaN wins a maximum or minimum.
__device__ float combine(int64_t reduction, float row, float update) {
  switch (reduction) {
  case 1:
    return row + update;
  case 2:
    return row * update;
  case 3:
    return isnan(row) || isnan(update) ? __int_as_float(0x7fc00000) : fmaxf(row, update);
  default:
    return isnan(row) || isnan(update) ? __int_as_float(0x7fc00000) : fminf(row, update);
  }
}
template <typename T> __device__ T combine(int64_t reduction, T row, T update) {
  using Unsigned = typename std::make_unsigned<T>::type;
  switch (reduction) {
  case 1:
    return static_cast<T>(static_cast<Unsigned>(row) + static_cast<Unsigned>(update));
  case 2:
    return static_cast<T>(static_cast<Unsigned>(row) * static_cast<Unsigned>(update));
  case 3:
    return row > update ? row : update;
  default:
    return row < update ? row : update;
  }
}

template <typename T> __device__ void scatterRows(const ScatterArgs &a) {
  for (int64_t j = blockIdx.x; j < a.count; j += gridDim.x) {
    int32_t row = a.targets[j];
    if (row < 0 || row >= a.rows)
      continue;
    // Every thread reads the same targets: the block leaves as one.
    bool first = true;
    for (int64_t earlier = 0; earlier < j && first; ++earlier)
      first = a.targets[earlier] != row;
    if (!first)
      continue;
    T *line = static_cast<T *>(a.out) + row * a.width;
    for (int64_t u = j; u < a.count; ++u) {
      if (a.targets[u] != row)
        continue;
      const T *update = static_cast<const T *>(a.updates) + u * a.width;
      for (int64_t c = threadIdx.x; c < a.width; c += blockDim.x)
        line[c] = a.reduction == 0 ? update[c] : combine(a.reduction, line[c], update[c]);
    }
  }
}

} // namespace

extern "C" __global__ void flowc_copy_words(CopyArgs a) {
  const uint32_t *in = static_cast<const uint32_t *>(a.in);
  uint32_t *out = static_cast<uint32_t *>(a.out);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < a.words; i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = in[i];
}

extern "C" __global__ void flowc_scatter_f32(ScatterArgs a) { scatterRows<float>(a); }
extern "C" __global__ void flowc_scatter_i32(ScatterArgs a) { scatterRows<int32_t>(a); }
extern "C" __global__ void flowc_scatter_i64(ScatterArgs a) { scatterRows<long long>(a); }

extern "C" __global__ void flowc_topk_f32(TopKArgs a) { topKRows<float>(a); }
extern "C" __global__ void flowc_topk_i32(TopKArgs a) { topKRows<int32_t>(a); }
extern "C" __global__ void flowc_topk_i64(TopKArgs a) { topKRows<long long>(a); }

extern "C" __global__ void flowc_gather(GatherArgs a) {
  forEachElement(a.shape, [&](const int64_t at[4]) {
    store(a.out, offset(at, a.outStrides), a.outType,
          a.in ? load(a.in, offset(at, a.inStrides), a.inType) : 0.0f);
  });
}

extern "C" __global__ void flowc_epilogue(EpilogueArgs a) {
  float alpha = static_cast<float>(a.alpha);
  float beta = static_cast<float>(a.beta);
  float scale = static_cast<float>(a.scale);
  forEachElement(a.shape, [&](const int64_t at[4]) {
    int64_t out = offset(at, a.outStrides);
    float value = load(a.in, offset(at, a.inStrides), a.inType);
    if (a.bias)
      value += a.bias[at[a.channelAxis]];
    if (a.residual)
      value += load(a.residual, out, a.residualType);
    if (a.hasScale)
      value *= scale;
    if (a.mask)
      value += a.mask[offset(at, a.maskStrides)];
    store(a.out, out, a.outType, activate(value, a.activation, alpha, beta));
  });
}

extern "C" __global__ void flowc_pool2d(PoolArgs a) {
  Index4 walked;
  for (int d = 0; d < 4; ++d)
    walked.dims[d] = a.outShape.dims[a.order.dims[d]];
  forEachElement(walked, [&](const int64_t step[4]) {
    int64_t at[4];
    for (int d = 0; d < 4; ++d)
      at[a.order.dims[d]] = step[d];
    int64_t top = at[2] * a.strideH - a.padTop;
    int64_t left = at[3] * a.strideW - a.padLeft;
    int64_t h0 = max(top, int64_t(0)), h1 = min(top + a.kernelH, a.inShape.dims[2]);
    int64_t w0 = max(left, int64_t(0)), w1 = min(left + a.kernelW, a.inShape.dims[3]);
    const float *plane = a.in + at[0] * a.inStrides.dims[0] + at[1] * a.inStrides.dims[1];
    float result = a.average ? 0.0f : -FLT_MAX;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) {
        float x = plane[h * a.inStrides.dims[2] + w * a.inStrides.dims[3]];
        result = a.average ? result + x : fmaxf(result, x);
      }
    int64_t count = (h1 - h0) * (w1 - w0);
    if (a.average)
      result = count > 0 ? result / static_cast<float>(count) : 0.0f;
    a.out[offset(at, a.outStrides)] = result;
  });
}

extern "C" __global__ void flowc_softmax(RowArgs a) {
  __shared__ float shared[32];
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const float *in = a.in + row * a.channels;
    float *out = a.out + row * a.channels;
    float largest = -FLT_MAX;
    for (int64_t c = threadIdx.x; c < a.channels; c += blockDim.x)
      largest = fmaxf(largest, in[c]);
    largest = blockReduce<true>(largest, shared);
    float sum = 0.0f;
    for (int64_t c = threadIdx.x; c < a.channels; c += blockDim.x) {
      float e = expf(in[c] - largest);
      out[c] = e;
      sum += e;
    }
    sum = blockReduce<false>(sum, shared);
    float inverse = 1.0f / sum;
    // Each thread rescales the values it wrote itself.
    for (int64_t c = threadIdx.x; c < a.channels; c += blockDim.x)
      out[c] *= inverse;
  }
}

extern "C" __global__ void flowc_layernorm(RowArgs a) {
  __shared__ float shared[32];
  float count = static_cast<float>(a.channels);
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const float *in = a.in + row * a.channels;
    float *out = a.out + row * a.channels;
    // Two passes over the row (it is in cache for the second): the mean,
    // then the variance around it, which a sum of squares would lose to
    // cancellation.
    float sum = 0.0f;
    for (int64_t c = threadIdx.x; c < a.channels; c += blockDim.x)
      sum += in[c];
    float mean = blockReduce<false>(sum, shared) / count;
    float squares = 0.0f;
    for (int64_t c = threadIdx.x; c < a.channels; c += blockDim.x) {
      float centered = in[c] - mean;
      squares += centered * centered;
    }
    float variance = blockReduce<false>(squares, shared) / count;
    float inverse = rsqrtf(variance + static_cast<float>(a.epsilon));
    for (int64_t c = threadIdx.x; c < a.channels; c += blockDim.x) {
      float value = (in[c] - mean) * inverse;
      if (a.scale)
        value *= a.scale[c];
      if (a.shift)
        value += a.shift[c];
      out[c] = value;
    }
  }
}
