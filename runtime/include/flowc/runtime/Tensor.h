// Host tensors and the NumPy `.npy` format used by `flowc run`.
#pragma once

#include "flowc/support/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace flowc::runtime {

/// A dense, row-major float32 tensor in host memory.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<float> data;

  static Tensor zeros(const std::vector<int64_t> &shape);
};

/// Reads a little-endian float32 C-order `.npy` file (versions 1-3).
/// InvalidArgument naming the file for other dtypes, Fortran order or a
/// truncated payload.
Expected<Tensor> readNpy(const std::string &path);

/// Writes `tensor` as a version 1 `.npy` file atomically.
Status writeNpy(const std::string &path, const Tensor &tensor);

} // namespace flowc::runtime
