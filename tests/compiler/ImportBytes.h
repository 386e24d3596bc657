// The compiler tests' way in: an ONNX model's bytes, parsed and imported.
#pragma once

#include "flowc/compiler/Compiler.h"

#include <string>

namespace flowc::testing {

/// Weight views in the result point into `bytes`; `name` is the file name
/// messages give the model.
inline Expected<compiler::ImportedGraph> importBytes(const std::string &bytes,
                                                     const std::string &name) {
  FLOWC_ASSIGN_OR_RETURN(compiler::OnnxModel model,
                         compiler::parseOnnxModel(bytes, name));
  return compiler::importOnnx(model);
}

} // namespace flowc::testing
