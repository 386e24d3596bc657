// Host tensors and the NumPy `.npy` format used by `flowc run`.
#pragma once

#include "flowc/support/Status.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace flowc::runtime {

/// Bytes per element of a dtype named as in artifacts ("float32", "int64",
/// "bool", "float16", ...); 0 for an unknown name. Tensors and `.npy` files
/// carry float32, float16, int64, int32, int8, uint8 and bool.
size_t dtypeBytes(const std::string &dtype);

/// std::allocator, except that resizing leaves new elements uninitialized
/// instead of zeroing them: a run's outputs are written whole by the code,
/// and zeroing them first was one more pass over every output (a third of a
/// one-thread KV-cache update).
template <typename T> struct DefaultInitAllocator : std::allocator<T> {
  template <typename U> struct rebind { using other = DefaultInitAllocator<U>; };
  DefaultInitAllocator() = default;
  template <typename U> DefaultInitAllocator(const DefaultInitAllocator<U> &) {}
  template <typename U, typename... Args> void construct(U *at, Args &&...args) {
    if constexpr (sizeof...(Args) == 0)
      ::new (static_cast<void *>(at)) U;
    else
      ::new (static_cast<void *>(at)) U(std::forward<Args>(args)...);
  }
};

/// A tensor's bytes: `resize` leaves new bytes unset; `assign(n, 0)` zeroes.
using TensorBytes = std::vector<uint8_t, DefaultInitAllocator<uint8_t>>;

/// A dense, row-major tensor in host memory.
struct Tensor {
  std::string dtype = "float32";
  std::vector<int64_t> shape;
  /// Little-endian elements; bool is one byte, 0 or 1.
  TensorBytes bytes;

  static Tensor zeros(const std::string &dtype, const std::vector<int64_t> &shape);
  /// A tensor whose bytes are not set: for what the caller writes whole.
  static Tensor uninitialized(const std::string &dtype,
                              const std::vector<int64_t> &shape);
  static Tensor fromFloats(const std::vector<int64_t> &shape,
                           const std::vector<float> &values);

  int64_t elementCount() const;
  /// A copy of the elements of a float32 tensor.
  std::vector<float> floats() const;
  /// Element `i` widened to double (for printing).
  double element(size_t i) const;
  const void *data() const { return bytes.data(); }
  void *data() { return bytes.data(); }
};

/// Reads a little-endian C-order `.npy` file (versions 1-3) of float32, float16,
/// int64, int32, int8, uint8 or bool. InvalidArgument naming the file for other dtypes,
/// Fortran order or a truncated payload.
Expected<Tensor> readNpy(const std::string &path);

/// Writes `tensor` as a version 1 `.npy` file atomically.
Status writeNpy(const std::string &path, const Tensor &tensor);

} // namespace flowc::runtime
