// Reading graph IR that did not come from the importer (a reproducer's
// graph.mlirbc): what its @main takes and returns, so that the tensors bound
// to it can be checked before anything is compiled.
#pragma once

#include "flowc/compiler/OnnxModel.h"
#include "flowc/support/Status.h"

#include <string>
#include <vector>

namespace flowc::compiler {

/// The ABI of a graph's @main, in argument order: inputs, then weights
/// (arguments tagged `flowc.weight`), then results. IR carries no input or
/// output names, so those TensorInfo names are empty; a weight's name is
/// its key.
struct GraphSignature {
  std::vector<TensorInfo> inputs;
  std::vector<TensorInfo> weights;
  std::vector<TensorInfo> outputs;
};

/// Parses and verifies graph IR (MLIR bytecode, or MLIR text) with the
/// dialects codegen accepts, and reads @main's signature. DataLoss with the
/// parser's first diagnostics when it does not parse or verify;
/// InvalidArgument when there is no @main, an argument or result is not a
/// statically shaped tensor of a known element type, or an input follows a
/// weight. Thread-safe: each call owns its MLIR context.
Expected<GraphSignature> readGraphSignature(const std::string &irBytecode);

} // namespace flowc::compiler
