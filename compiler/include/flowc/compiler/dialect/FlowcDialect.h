// The flowc dialect (FlowcDialect.td, FlowcOps.td): flowc's discardable
// attributes with their typed helpers and verifier, and flowc.library_call.
#pragma once

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/CallInterfaces.h"

#include "flowc/runtime/KernelAbi.h"

#include <optional>

#include "flowc/compiler/dialect/FlowcDialect.h.inc"
#include "flowc/compiler/dialect/FlowcEnums.h.inc"

#define GET_OP_CLASSES
#include "flowc/compiler/dialect/FlowcOps.h.inc"

namespace flowc::compiler {

/// The library kernels' name for `element` (TopK's keys, a scatter's rows),
/// if they take it: float32, int32 or int64.
std::optional<runtime::ScalarType> scalarTypeOf(mlir::Type element);

} // namespace flowc::compiler
