// Library kernels behind generated code (see flowc/runtime/KernelAbi.h):
// oneDNN primitives, created on a site's first call and kept for the
// session, with constant weights repacked once; a convolution or product
// builds the search candidate its artifact chose.
#pragma once

#include "flowc/runtime/Artifact.h"
#include "flowc/runtime/Session.h"
#include "flowc/support/Status.h"

#include <memory>
#include <string>
#include <vector>

namespace flowc::runtime {

/// Per-session kernel state (declared in Session.h): the oneDNN engine and
/// stream and one primitive per call site. One run at a time, like the
/// session that owns it.
using KernelContextPtr = std::unique_ptr<KernelContext, KernelContextDeleter>;

/// Fills the kernel table and context slot of a loaded code object. A code
/// object without library kernels gets no context (nullptr, OK); one that
/// uses a kernel kind this runtime lacks is Unavailable.
/// Weights the artifact packed at link time are read in place by the sites
/// whose kernels want their layout. Each library kernel site runs the
/// search candidate plan().tuned names for it (Tuning.h), the default
/// otherwise; DataLoss when the plan tunes a site the code does not have.
Expected<KernelContextPtr> bindKernels(void *library, const Artifact &artifact);

/// The candidate the plan chose for each of the code's `sites` library
/// kernel sites (Plan::tuned; empty: none), CPU and CUDA code alike.
/// DataLoss naming the artifact when the plan tunes a site the code lacks.
Expected<std::vector<std::string>> tunedCandidates(const Artifact &artifact,
                                                   int64_t sites);

/// How many sites read a packed artifact weight in place (so far: sites are
/// made on their first call).
int64_t prepackedWeightsInUse(const KernelContext &context);

/// A kernel context outside a session, for search and its tests: site i
/// runs `candidates[i]` (Tuning.h's text, one of libraryCandidates'; empty:
/// the default), with no packed artifact weights. Throws dnnl::error when
/// the library has no CPU engine.
KernelContextPtr makeKernelContext(std::vector<std::string> candidates);

/// What generated code calls for `kind` kernels, as bindKernels fills the
/// table: fn(context, site, params, buffers). nullptr for a kind this
/// runtime lacks.
KernelFunction kernelFunction(KernelKind kind);

/// The implementation library kernel `site` runs (oneDNN's impl_info_str);
/// empty before its first call or for a site the code lacks.
std::string siteImplementation(const KernelContext &context, int64_t site);

/// The first kernel failure since the last call (OK if none), and resets it.
Status takeKernelFailure(KernelContext &context);

/// The floats of each of a conv2d's or matmul's buffers (dense fp32 of
/// their params' shapes), in KernelAbi.h's order, the output last;
/// InvalidArgument for other kinds, params that are not the kind's, or a
/// buffer of more than 2^30 floats. What measurements allocate.
Expected<std::vector<size_t>> bufferFloats(KernelKind kind,
                                           const std::vector<int64_t> &words);

} // namespace flowc::runtime
