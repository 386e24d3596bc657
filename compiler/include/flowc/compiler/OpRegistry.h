// The ONNX ops flowc imports, one versioned table: for each op and opset
// range, what ONNX lets a node of it look like, how the importer turns it
// into TOSA, what it costs in the static profile and which inputs a
// reproducer must keep positive. The importer's op families
// (compiler/lib/import/{Nn,Math,Tensor}.cpp) register their entries; the
// importer, the profile and the worker's reproducer all read this one
// table, so adding an op touches one family file.
#pragma once

#include "flowc/compiler/Compiler.h"

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>

namespace flowc::compiler {

namespace import {
class Importer;
} // namespace import

/// `maxInputs` / `maxOutputs` of an op that takes any number.
inline constexpr size_t kAnyCount = std::numeric_limits<size_t>::max();

/// Input and output counts ONNX defines for an op over the entry's opsets.
/// `variadic` ops take any number of inputs from `minInputs`, all of them
/// required; otherwise trailing optional inputs may be given as "".
struct OpSignature {
  size_t minInputs = 1, maxInputs = 1, minOutputs = 1, maxOutputs = 1;
  bool variadic = false;
};

/// FLOPs of one node from its recorded shapes (a multiply-add counts 2;
/// docs/compiler.md, "Static profile"). `source` is the ONNX node, for
/// attributes shapes do not imply (a pooling window); it may be null.
/// Nothing when a shape or attribute the formula needs is missing.
using OpCostFn = std::optional<uint64_t> (*)(const NodeRecord &record,
                                             const Node *source);
/// The order-of-magnitude FLOPs of a node whose formula had no answer.
using OpEstimateFn = uint64_t (*)(const NodeRecord &record);

struct OpInfo {
  /// The op type in the default (ai.onnx) domain.
  std::string_view name;
  /// The model opsets (inclusive) this entry imports.
  int64_t sinceVersion = kMinOpset;
  int64_t untilVersion = kMaxOpset;
  OpSignature signature = {};
  /// Builds the node's TOSA ops. Null for ops that are only ever computed
  /// at import time (Shape, Range, ...): a node the shape folder could not
  /// evaluate is refused as unsupported.
  Status (import::Importer::*import)(const Node &node) = nullptr;
  /// Null when flowc has no formula: the profile then counts one FLOP per
  /// output element and flags the row as estimated.
  OpCostFn cost = nullptr;
  /// What the profile counts when `cost` has no answer; null: one FLOP per
  /// output element.
  OpEstimateFn estimate = nullptr;
  /// Bit i set: a negative or zero input i makes the result NaN or
  /// infinite (a divisor, a variance under a square root), so reproducers
  /// fill it with positive values.
  uint32_t positiveInputs = 0;

  bool mustBePositive(size_t input) const {
    return input < 32 && (positiveInputs >> input & 1) != 0;
  }
};

/// The entry importing `name` at model opset `opset`; null when there is
/// none. Thread-safe (the table is built once, then only read).
const OpInfo *findOp(std::string_view name, int64_t opset);

/// The newest entry for `name` whatever the opset (costs and positive
/// inputs do not change across versions); null when flowc lacks the op.
const OpInfo *findOp(std::string_view name);

/// Every entry, by name then opset range. Thread-safe.
std::span<const OpInfo> registeredOps();

} // namespace flowc::compiler
