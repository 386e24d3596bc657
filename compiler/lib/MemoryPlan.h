// Static memory planning: every fixed-size temporary buffer of @main
// becomes a view into one activation arena, at an offset chosen so that
// buffers whose lifetimes overlap never share bytes. The runtime allocates
// the arena once per session; nothing is allocated while the graph runs.
#pragma once

#include "flowc/runtime/KernelAbi.h"

#include "mlir/IR/Value.h"

#include <cstdint>
#include <vector>

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace flowc::compiler {

/// A buffer's size and the first and last op (by position) that use it.
struct BufferLifetime {
  uint64_t bytes = 0;
  int64_t first = 0;
  int64_t last = 0;
};

/// Offsets (multiples of runtime::kArenaAlignment) such that buffers whose lifetimes
/// overlap never share bytes; largest buffers are placed first, each at the
/// lowest free offset. Returns the arena size.
uint64_t assignArenaOffsets(const std::vector<BufferLifetime> &buffers,
                            std::vector<uint64_t> &offsets);

/// The buffer `value` is a reshape of (memref.expand_shape / collapse_shape
/// keep a dense buffer's bytes in place), through any number of them;
/// `value` itself when it is no reshape.
mlir::Value bufferBehindReshapes(mlir::Value value);

/// @main's attribute holding the arena size in bytes.
inline constexpr const char *kArenaBytesAttr = "flowc.arena_bytes";

/// The planned arena size of `module`'s @main; 0 when nothing was planned.
uint64_t plannedArenaBytes(mlir::ModuleOp module);

} // namespace flowc::compiler
