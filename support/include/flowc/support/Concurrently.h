// Running independent calls a few at a time: requests that each wait on a
// round trip (a remote cache's lookups) overlap instead of adding up.
#pragma once

#include <cstddef>
#include <functional>

namespace flowc {

/// Calls `body(i)` once for each i < count, on up to `width` threads at a
/// time (the calling thread is one of them), and returns when every call
/// has. The calls must be safe to run at once; `body` must not throw.
void forEachConcurrently(size_t count, size_t width,
                         const std::function<void(size_t)> &body);

} // namespace flowc
