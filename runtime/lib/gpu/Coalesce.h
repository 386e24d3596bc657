// The helper kernels (Helpers.cu) give each thread one element of their
// shape, in row-major order: consecutive threads touch elements adjacent
// in the *shape*. When a buffer is NHWC and the shape [N, C, H, W], those
// elements sit a row of channels apart, and every store of a warp is a
// memory transaction of its own. Walking the dimensions in the order of the
// written buffer's strides makes a warp's stores contiguous, and the loads
// of buffers laid out alike with them.
#pragma once

#include "HelperAbi.h"

#include <algorithm>
#include <array>
#include <cstdint>

namespace flowc::runtime::gpu {

/// The dimensions of `shape`, outermost first, in the order that walks
/// `strides` through memory: decreasing stride, dimensions of extent 1
/// (which never move) outermost, ties in their own order.
inline std::array<int, 4> memoryOrder(const Index4 &shape, const Index4 &strides) {
  std::array<int, 4> order = {0, 1, 2, 3};
  auto key = [&](int d) { return shape.dims[d] == 1 ? INT64_MAX : strides.dims[d]; };
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return key(a) > key(b); });
  return order;
}

inline Index4 permuted(const Index4 &index, const std::array<int, 4> &order) {
  return {{index.dims[order[0]], index.dims[order[1]], index.dims[order[2]],
           index.dims[order[3]]}};
}

/// The position of dimension `axis` in `order`.
inline int64_t positionOf(int64_t axis, const std::array<int, 4> &order) {
  return std::find(order.begin(), order.end(), axis) - order.begin();
}

/// `args` with its dimensions in the order of the output's memory: the
/// same (output, input) element pairs.
inline GatherArgs inOutputOrder(GatherArgs args) {
  std::array<int, 4> order = memoryOrder(args.shape, args.outStrides);
  args.shape = permuted(args.shape, order);
  args.outStrides = permuted(args.outStrides, order);
  args.inStrides = permuted(args.inStrides, order);
  return args;
}

/// `args` with its dimensions in the order of the output's memory: the
/// same elements, each with its own bias channel, residual and mask.
inline EpilogueArgs inOutputOrder(EpilogueArgs args) {
  std::array<int, 4> order = memoryOrder(args.shape, args.outStrides);
  args.shape = permuted(args.shape, order);
  args.outStrides = permuted(args.outStrides, order);
  args.inStrides = permuted(args.inStrides, order);
  args.maskStrides = permuted(args.maskStrides, order);
  args.channelAxis = positionOf(args.channelAxis, order);
  return args;
}

} // namespace flowc::runtime::gpu
