// The compile vocabulary that crosses component boundaries: what a compile
// targets and the arithmetic its library kernels use. Each has one
// parse/name pair; the CLI, the daemon, the compiler, the task protocol and
// the kernel ABI all carry the enum, never the spelling.
#pragma once

#include "flowc/support/Status.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace flowc {

/// What generated code runs on: the host CPU, or an NVIDIA GPU of one
/// compute capability (its cubins run on that capability only). A CUDA
/// value is 1000 + the capability as major * 10 + minor; values cross the
/// wire and never change.
enum class Target : int64_t {
  Cpu = 0,
  CudaSm75 = 1075,
  CudaSm80 = 1080,
  CudaSm86 = 1086,
  CudaSm89 = 1089,
  CudaSm90 = 1090,
  CudaSm100 = 1100,
  CudaSm120 = 1120,
};

/// The arithmetic of library kernels. Generated code is always fp32.
enum class Precision : int64_t {
  /// fp32 inputs, weights and accumulation.
  Fp32 = 0,
  /// Inputs and weights rounded to bfloat16, fp32 accumulation (AMX /
  /// AVX-512-BF16 where the CPU has them; tensor cores on a GPU).
  Bf16 = 1,
  /// Inputs and weights rounded to IEEE half, fp32 accumulation: cuda
  /// targets only (tensor cores).
  Fp16 = 2,
};

/// "cpu", "cuda:sm_90".
const char *targetName(Target target);
/// InvalidArgument listing the supported targets for anything else. "cuda"
/// alone is cuda:sm_90 (Hopper: H100, H200).
Expected<Target> parseTarget(std::string_view name);
/// Whether code for `target` runs on an NVIDIA GPU.
bool isCudaTarget(Target target);
/// A CUDA target's compute capability as major * 10 + minor (90 for
/// sm_90); 0 for the CPU.
int cudaComputeCapability(Target target);
/// A CUDA target's chip name for ptxas and LLVM ("sm_90"); empty for the CPU.
std::string cudaChip(Target target);
/// Every target's name, comma-separated (for help texts and errors).
std::string targetNames();

/// "fp32", "bf16".
const char *precisionName(Precision precision);
/// InvalidArgument listing the supported precisions for anything else.
Expected<Precision> parsePrecision(std::string_view name);
/// Every precision's name, comma-separated.
std::string precisionNames();

/// This machine's CPU as benchmarks and the workers page print it: "Intel(R)
/// Xeon(R) Processor, 2 cores, ISA: avx2 yes, avx512f yes, amx yes" (from
/// /proc/cpuinfo; "unknown CPU" where it cannot be read).
std::string hostCpuDescription();

} // namespace flowc
