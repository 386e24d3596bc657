// What this build of flowc is and what it runs on: versions for --version,
// and the CPU features that decide which library kernels exist here.
#pragma once

#include "flowc/support/Status.h"

#include <optional>
#include <string>
#include <vector>

namespace flowc::runtime {

/// Several lines: flowc's version and build id, the MLIR/LLVM, oneDNN and
/// CUDA versions, and the CPU ISA oneDNN uses on this machine.
std::string versionText(const std::string &program);

/// This machine's NVIDIA GPUs, as workers advertise them: "device 0
/// (NVIDIA H200, sm_90, 139.8 GiB, CUDA driver 13.0)", one per device the
/// driver sees; Unavailable saying why there is none (no driver, no
/// device). Needs no CUDA toolkit.
Expected<std::vector<std::string>> gpuDescriptions();

/// Unavailable, naming the first fault on the device in this process
/// (an illegal address, a launch failure, ...), once there was one: every
/// later use of the GPU in this process fails with it, and CUDA needs the
/// process restarted. None while the GPU is usable or was never used.
std::optional<Status> gpuProcessFault();

/// The instruction set oneDNN dispatches to on this CPU ("avx2",
/// "avx512_core_amx", ...).
std::string cpuIsaName();

/// OK if oneDNN has bfloat16 convolution and matrix-product kernels on this
/// CPU (AVX-512 or newer); Unimplemented naming the missing instructions
/// otherwise, so that `--precision bf16` is refused before any compile.
/// Thread-safe; probes once.
Status bf16KernelsSupported();

} // namespace flowc::runtime
