// Search on the runtime's side: the candidates of a tunable library kernel
// (a convolution, a matrix product) and their timing on this machine, on
// random data of the kernel's shapes (never a model's weights). A candidate
// is a short text, part of the kernel's tuning key; the artifact's plan
// names the one each site runs (Plan::tuned), and a site with none runs the
// first candidate, the default.
//
// A library kernel's candidate is `field(;field)*`, fields in this order:
//   layout=L    conv: `any` (the library's blocked activation layouts, with
//               reorders from and to the graph's), `nhwc` or `nchw` (plain
//               activations, offered when the graph has that layout);
//               matmul: `any` (a constant B packed as the library prefers)
//               or `plain` (B read as the graph has it).
//   algo=A      conv only: `winograd` (the library's Winograd kernels, 3x3
//               with unit strides, in its blocked layouts; AVX-512 only in
//               oneDNN 2.6) or `direct`; absent: direct.
//   impl=NAME   the oneDNN implementation (its impl_info_str(), e.g.
//               `jit:avx2`, `brg:avx512_core`, `gemm:jit`); the first of
//               that name the library lists for the layout. Absent: the
//               library's first.
//   threads=N   OpenMP threads the kernel runs on (never more than the
//               session's); absent: the session's. Offered for small
//               kernels, where fork and join cost more than they win.
// e.g. `layout=nhwc;impl=jit:avx2`, `layout=any;impl=jit:avx2;threads=1` or
// `layout=any;algo=winograd;impl=jit_wino_4x3:avx512_core`. The default is
// the first candidate listed (Kernels.cpp's defaultConv: Winograd where it
// pays, else the library's NHWC kernel between NHWC buffers, else
// `layout=any;impl=<the library's first>`). A site whose candidate this
// machine's library cannot build (an artifact moved to another CPU) runs the
// default after one warning.
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
/// features, core count and library build); the first is the default. At
/// most 8. Empty for a kind that is not tunable; InvalidArgument for params
/// of the wrong count or that the library refuses. Thread-safe.
Expected<std::vector<std::string>> libraryCandidates(KernelKind kind,
                                                     const std::vector<int64_t> &params);

/// What a library kernel's timing depends on besides the CPU ("onednn
/// 2.6.3 cpu_runtime omp isa 0x7": the version, its threading runtime and
/// the instruction set it lets itself use): part of a tuning record's key.
std::string libraryVersions();

/// Times `candidates` of the kernel against each other
/// (measureInterleaved) on random inputs and weights of its shapes (a
/// fixed seed; never a model's weights). Each candidate's primitive is
/// made and its weights packed once, before the timing, as a session does;
/// a candidate whose output then differs from the first candidate's (beyond
/// the rounding of its precision), or whose kernel fails, is left out with
/// a warning: its timing has 0 samples and it is never the best.
/// InvalidArgument for no candidates or one that is not one of
/// libraryCandidates'; the library's error when the first candidate fails.
/// The caller pins (pinMeasurementThreads). Not thread-safe with other
/// measurements in the process: they would share the cores.
Expected<Measurement> measureLibraryKernel(KernelKind kind,
                                           const std::vector<int64_t> &params,
                                           const std::vector<std::string> &candidates,
                                           const MeasureOptions &options);

/// Runs `candidate` of a `kind` kernel with `params` once on `buffers` (the
/// kernel's buffers in KernelAbi.h's order, output last, dense fp32 of the
/// params' shapes), through the site code a session runs and that
/// measureLibraryKernel times: for tests that check each candidate's
/// result. InvalidArgument for a candidate not in libraryCandidates or the
/// wrong number of buffers; Internal when the library fails. Thread-safe
/// (each call makes its own primitive).
Status runLibraryCandidate(KernelKind kind, const std::vector<int64_t> &params,
                           const std::string &candidate,
                           const std::vector<void *> &buffers);

/// Pins this thread and the OpenMP threads kernels run on to one core each,
/// so that a measurement's threads do not migrate between its samples: the
/// cores they may run on now, in turn (thread i on the i-th, modulo their
/// count). Pinning again keeps the same cores. The pinning lasts for the
/// threads' lives: call it in a process that measures, before measuring,
/// from the measuring thread. Internal naming the thread and core when
/// the affinity call fails.
Status pinMeasurementThreads();

} // namespace flowc::runtime
