// flowc's own CPU kernels for the importer's library calls (KernelAbi.h):
// TopK's selection (KernelKind::TopK), which replaces k reductions over
// each row, and the row scatter (KernelKind::ScatterRows), which replaces
// comparing every row with every update.
#pragma once

#include "flowc/runtime/KernelAbi.h"

#include <cstdint>

namespace flowc::runtime {

/// Writes each row's order (TopKParams) of the dense [rows, n] `keys` into
/// the dense [rows, k] `indices`. Rows run on the session's OpenMP threads
/// when there are enough of them.
void topKRows(const TopKParams &params, const void *keys, int32_t *indices);

/// Writes `data` scattered with `updates` at `targets` (ScatterRowsParams)
/// into `destination`, which does not overlap the inputs. Large copies run
/// on the session's OpenMP threads; the updates apply in order.
void scatterRows(const ScatterRowsParams &params, const void *data, const void *updates,
                 const int32_t *targets, void *destination);

} // namespace flowc::runtime
