// Helpers for the op table's cost formulas (OpRegistry.h), shared by the op
// families and the profile. What one FLOP is for each op is listed in
// docs/compiler.md, "Static profile"; keep the two in step.
#pragma once

#include "flowc/compiler/OpRegistry.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

namespace flowc::compiler::import {

inline uint64_t elements(const TensorInfo &info) {
  int64_t count = info.elementCount();
  return count < 0 ? 0 : static_cast<uint64_t>(count);
}

inline bool hasShape(const TensorInfo &info) {
  return !info.name.empty() && info.elementCount() >= 0;
}

inline bool present(const NodeRecord &record, size_t input) {
  return input < record.inputs.size() && !record.inputs[input].name.empty();
}

inline uint64_t outputElements(const NodeRecord &record) {
  return record.outputs.empty() ? 0 : elements(record.outputs[0]);
}

/// Product of the dimensions from `from` on: the per-output-channel work of
/// a convolution kernel.
inline uint64_t trailingProduct(const std::vector<int64_t> &shape, size_t from) {
  uint64_t product = 1;
  for (size_t i = from; i < shape.size(); ++i)
    product *= static_cast<uint64_t>(std::max<int64_t>(shape[i], 0));
  return product;
}

/// Elementwise ops: `Flops` per output element. A transcendental function
/// (exp, erf, tanh, sqrt) counts as one, like a multiply.
template <uint64_t Flops>
std::optional<uint64_t> perElement(const NodeRecord &record, const Node *) {
  return Flops * outputElements(record);
}

/// Y = conv(X, W) + B with W [Cout, Cin/group, kh, kw]: every output element
/// is a dot product of length Cin/group * kh * kw.
inline std::optional<uint64_t> convFlops(const NodeRecord &record, const Node *) {
  if (!present(record, 1) || !hasShape(record.inputs[1]) || record.outputs.empty())
    return std::nullopt;
  uint64_t out = outputElements(record);
  uint64_t flops = 2 * out * trailingProduct(record.inputs[1].shape, 1);
  return flops + (present(record, 2) ? out : 0);
}

/// Y[..., M, N] = A[..., M, K] · B[..., K, N], batch dimensions broadcast:
/// every output element is a dot product of length K.
inline std::optional<uint64_t> matMulFlops(const NodeRecord &record, const Node *) {
  if (record.inputs.size() < 2 || !hasShape(record.inputs[0]) ||
      record.inputs[0].shape.empty() || record.outputs.empty())
    return std::nullopt;
  uint64_t k = static_cast<uint64_t>(record.inputs[0].shape.back());
  return 2 * outputElements(record) * k;
}

/// Ops that only move or reinterpret data: no arithmetic.
inline std::optional<uint64_t> dataMovement(const NodeRecord &, const Node *) {
  return 0;
}

/// A sum over the reduced elements, and a division per output for means.
inline std::optional<uint64_t> reduceFlops(const NodeRecord &record, const Node *) {
  if (record.inputs.empty() || !hasShape(record.inputs[0]))
    return std::nullopt;
  uint64_t in = elements(record.inputs[0]);
  bool mean = record.opType == "ReduceMean" || record.opType == "GlobalAveragePool";
  return in + (mean ? outputElements(record) : 0);
}

} // namespace flowc::compiler::import
