// TopK's selection on the CPU: the library kernel of KernelKind::TopK
// (KernelAbi.h's TopKParams), which the TOSA lowering of ONNX's TopK
// calls instead of k reductions over each row.
#pragma once

#include "flowc/runtime/KernelAbi.h"

#include <cstdint>

namespace flowc::runtime {

/// Writes each row's order (TopKParams) of the dense [rows, n] `keys` into
/// the dense [rows, k] `indices`. Rows run on the session's OpenMP threads
/// when there are enough of them.
void topKRows(const TopKParams &params, const void *keys, int32_t *indices);

} // namespace flowc::runtime
