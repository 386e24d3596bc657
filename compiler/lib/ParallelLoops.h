// Multithreaded generated code: which loop nests of the graph run on the
// runtime's threads.
//
// After linalg lowers to scf.parallel / scf.for, each outermost parallel
// nest of @main that does enough work keeps its leading dimensions
// parallel and runs its innermost dimension as a sequential loop (so LLVM
// still vectorizes it); everything else becomes sequential loops. MLIR's
// `convert-scf-to-openmp` then turns the remaining scf.parallel ops into
// OpenMP worksharing loops, which run on the same OpenMP runtime as the
// library kernels (see runtime/lib/Session.cpp). A search candidate
// (LoopSearch.h) can override how many leading dimensions run in parallel
// through the pass's `parallel-dims` option.
#pragma once

#include <cstdint>
#include <span>

namespace flowc::compiler {

/// Loop nests with fewer iterations than this (counting nested loops) stay
/// on one thread: a fork-join costs about as much as this many cheap
/// iterations.
inline constexpr int64_t kMinParallelIterations = 1 << 14;

/// How many leading dimensions of an outermost parallel nest run in
/// parallel when no candidate says otherwise: none for fewer than
/// kMinParallelIterations `iterations` (nested loops counted), all but the
/// innermost (the vectorized one) when the others have more than one
/// iteration, all of them otherwise. `trips`: the trip counts of the nest's
/// own dimensions, outermost first.
unsigned defaultParallelDims(std::span<const int64_t> trips, int64_t iterations);

} // namespace flowc::compiler
