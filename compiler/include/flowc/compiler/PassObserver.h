// Who watches a compile's passes: each pass's name and wall time as it
// ends, for progress events and traces. Not a compile option: watching
// changes no code, so it is in no cache key.
#pragma once

#include "flowc/compiler/Compiler.h"

#include <functional>
#include <string>

namespace flowc::compiler {

/// Called on the compiling thread after each pass: its argument
/// ("canonicalize", "tosa-to-linalg-named"; a pass run on each function is
/// reported once, with its time summed), and "llvm-codegen" for LLVM's
/// translation, optimization and object emission of @main.
using PassObserver = std::function<void(const std::string &pass, double seconds)>;

/// planCompile, reporting each pass to `observer` (which may be empty).
Expected<CompilePlan> planCompile(const std::string &irBytecode,
                                  const CompileOptions &options, const CodeTarget &target,
                                  const PassObserver &observer);

} // namespace flowc::compiler
