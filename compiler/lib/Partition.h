// Partitioning into kernels: each loop nest of @main (one linalg op on
// buffers, after elementwise fusion and memory planning) becomes a function
// of its own, named after a hash of its IR. Identical nests (the repeated
// layers of a transformer) share one function, and each function is lowered,
// compiled and cached on its own: the kernel cache's unit, so editing one
// layer recompiles only the kernels that changed.
//
// Two steps around the lowering pipeline:
//  1. `createPartitionKernelsPass` outlines the nests into private functions
//     tagged `flowc.loop_kernel` and calls them from @main.
//  2. `splitKernelModules` moves each tagged function into a module of its
//     own and leaves a declaration behind; Codegen lowers each module
//     separately and the linker joins the objects.
#pragma once

#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace flowc::compiler {

/// Tags an outlined loop kernel until splitKernelModules moves it out.
inline constexpr const char *kLoopKernelAttr = "flowc.loop_kernel";
/// Prefix of loop kernel symbols; a hash of the kernel's IR follows.
inline constexpr const char *kLoopKernelPrefix = "flowc_loops_";

/// The global `read` reads if it is a constant with its value: what a
/// kernel clones (and its module carries) instead of taking the host's
/// address, and what CUDA code gives the device a copy of.
mlir::memref::GlobalOp constantGlobalOf(mlir::memref::GetGlobalOp read);

/// One partitioned kernel in a module of its own.
struct KernelModule {
  std::string symbol;
  /// The module's MLIR text: what its compiled object depends on, besides
  /// the target and the lowering options.
  std::string text;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  /// Calls of it in @main.
  int callSites = 0;
};

/// Per function that @main calls (loop kernels, library kernels), the graph
/// nodes it computes: those named by its calls' locations and, for a
/// function with a body, by its ops' (SourceNodes.h).
std::map<std::string, std::vector<int32_t>> kernelSourceNodes(mlir::ModuleOp module);

/// A kernel call of @main that profile marks surround.
struct ProfiledCall {
  std::string callee;
  /// The graph nodes this call computes (SourceNodes.h).
  std::vector<int32_t> nodes;
  /// Bytes of the buffers it is passed, each once: at most what it reads
  /// and writes.
  uint64_t bytes = 0;
};

/// Declares `@<kProfileMarkFunction>(i64)` and calls it around each call of
/// @main to a function in `kernels`: event 2*i before call i, 2*i+1 after
/// (runtime/KernelAbi.h says what the runtime makes of them). Returns the
/// calls in event order; a library call's nodes also include `calleeNodes`'
/// (its body's, gone by now). Without such calls nothing is declared.
std::vector<ProfiledCall>
addProfileMarks(mlir::ModuleOp module, const std::set<std::string> &kernels,
                const std::map<std::string, std::vector<int32_t>> &calleeNodes);

/// Moves every tagged kernel of `module` into its own module (public, the
/// tag removed) and leaves a private declaration in its place.
std::vector<KernelModule> splitKernelModules(mlir::ModuleOp module);

} // namespace flowc::compiler
