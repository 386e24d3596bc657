// Library kernel weights packed ahead of time: at link, a constant weight of
// a convolution or matrix product goes into the layout that kernel reads on
// this CPU (oneDNN's blocked layouts), so that every session maps it in
// place from the artifact instead of repacking a heap copy of its own.
#pragma once

#include "flowc/runtime/KernelAbi.h"
#include "flowc/support/Status.h"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace flowc::runtime {

struct PackedWeight {
  /// What a session compares with the layout its kernel wants
  /// (PackedWeightSpec::layout).
  std::string layout;
  std::string bytes;
};

/// `source`, buffer `buffer` of a `kind` kernel with `params` (dense, in the
/// graph's layout), in the layout the runtime's kernel reads it in on this
/// CPU. nullopt when that kernel reads the buffer as it is: not a constant
/// weight, or already in the wanted layout. InvalidArgument when `source`
/// has the wrong size; Internal when the library refuses the parameters.
/// Thread-safe.
/// `candidate` is the search candidate the site runs (Plan::tuned); empty:
/// the default.
Expected<std::optional<PackedWeight>>
packKernelWeight(KernelKind kind, const std::vector<int64_t> &params, int64_t buffer,
                 std::string_view source, std::string_view candidate = {});

} // namespace flowc::runtime
