// Search on the runtime's side: the candidates of a tunable library kernel
// (a convolution, a matrix product) and their timing on this machine, on
// random data of the kernel's shapes (never a model's weights). A candidate
// is a short text, part of the kernel's tuning key; the artifact's plan
// names the one each site runs (Plan::tuned), and a site with none runs the
// first candidate, the default.
#pragma once

#include "flowc/runtime/KernelAbi.h"
#include "flowc/support/Measure.h"
#include "flowc/support/Status.h"

#include <string>
#include <vector>

namespace flowc::runtime {

/// Whether search has candidates for kernels of `kind`.
bool isTunable(KernelKind kind);

/// The candidates of a `kind` kernel with `params` on this CPU, in a
/// deterministic order (the same on every machine with the same CPU
/// features and library build); the first is the default. Empty for a kind
/// that is not tunable; InvalidArgument for params the library refuses.
Expected<std::vector<std::string>> libraryCandidates(KernelKind kind,
                                                     const std::vector<int64_t> &params);

/// What a library kernel's timing depends on besides the CPU ("onednn
/// 2.7.3 cpu_runtime omp"): part of a tuning record's key.
std::string libraryVersions();

/// Times `candidates` of the kernel against each other
/// (measureInterleaved) on random inputs and weights of its shapes.
/// InvalidArgument for a candidate that is not one of libraryCandidates'.
Expected<Measurement> measureLibraryKernel(KernelKind kind,
                                           const std::vector<int64_t> &params,
                                           const std::vector<std::string> &candidates,
                                           const MeasureOptions &options);

/// Pins this thread and the OpenMP threads kernels run on to one core each,
/// so that a measurement's threads do not migrate between its samples.
/// Call before measuring, from the measuring thread.
Status pinMeasurementThreads();

} // namespace flowc::runtime
