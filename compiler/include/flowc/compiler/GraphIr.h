// Reading graph IR that did not come from the importer (a reproducer's
// graph.mlirbc): what its @main takes and returns, so that the tensors bound
// to it can be checked before anything is compiled.
#pragma once

#include "flowc/compiler/OnnxModel.h"
#include "flowc/support/Status.h"

#include <string>
#include <vector>

namespace flowc::compiler {

/// @main's attribute listing its run-time checks: an array of strings, one
/// per check, each what a failed run says. The checks are @main's last
/// results, in that order, each a tensor<1xi1> that is true when the check
/// failed (an index out of range); the graph's outputs come before them.
inline constexpr const char *kChecksAttr = "flowc.checks";

/// The ABI of a graph's @main, in argument order: inputs, then weights
/// (arguments tagged `flowc.weight`), then results: outputs, then checks.
/// IR carries no input or output names, so those TensorInfo names are
/// empty; a weight's name is its key.
struct GraphSignature {
  std::vector<TensorInfo> inputs;
  std::vector<TensorInfo> weights;
  std::vector<TensorInfo> outputs;
  /// What each check's failure says (kChecksAttr).
  std::vector<std::string> checks;
};

/// Parses and verifies graph IR (MLIR bytecode, or MLIR text) with the
/// dialects codegen accepts, and reads @main's signature. DataLoss with the
/// parser's first diagnostics when it does not parse or verify;
/// InvalidArgument when there is no @main, an argument or result is not a
/// statically shaped tensor of a known element type, an input follows a
/// weight, or kChecksAttr is malformed. Thread-safe: each call owns its MLIR context.
Expected<GraphSignature> readGraphSignature(const std::string &irBytecode);

} // namespace flowc::compiler
