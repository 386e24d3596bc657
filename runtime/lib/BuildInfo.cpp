#include "flowc/runtime/BuildInfo.h"

#include "Gpu.h"
#include "gpu/LibraryKernels.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <sstream>

namespace flowc::runtime {

std::string cpuIsaName() {
  using dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
  case cpu_isa::sse41:
    return "sse41";
  case cpu_isa::avx:
    return "avx";
  case cpu_isa::avx2:
    return "avx2";
  case cpu_isa::avx2_vnni:
    return "avx2_vnni";
  case cpu_isa::avx512_core:
    return "avx512_core";
  case cpu_isa::avx512_core_vnni:
    return "avx512_core_vnni";
  case cpu_isa::avx512_core_bf16:
    return "avx512_core_bf16";
  case cpu_isa::avx512_core_amx:
    return "avx512_core_amx";
  default:
    return "other";
  }
}

namespace {

/// Whether oneDNN builds a bf16 matrix product here: the kernels flowc
/// calls exist for bf16 exactly when this does (oneDNN 2.6 has none below
/// AVX-512).
bool probeBf16MatMul() {
  try {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    using tag = dnnl::memory::format_tag;
    auto bf16 = dnnl::memory::data_type::bf16;
    dnnl::memory::desc a({16, 16}, bf16, tag::ab);
    dnnl::memory::desc c({16, 16}, dnnl::memory::data_type::f32, tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), engine);
    return std::string(pd.impl_info_str()).find("ref") == std::string::npos;
  } catch (const dnnl::error &) {
    return false;
  }
}

} // namespace

Status bf16KernelsSupported() {
  static const bool supported = probeBf16MatMul();
  if (supported)
    return Status::ok();
  return unimplemented("--precision bf16 needs a CPU with AVX-512 (avx512f, avx512bw, "
                       "avx512vl, avx512dq; native bf16 with avx512_bf16 or AMX), and "
                       "this one offers " +
                       cpuIsaName() +
                       " at best: oneDNN has no bf16 kernels for it; use "
                       "--precision fp32");
}

namespace {

/// The CUDA libraries the library kernels of CUDA code open and the GPU
/// sessions run on, or why there are none.
std::string cudaText() {
  Expected<std::string> libraries = gpu::libraryVersions();
  Expected<GpuDevice> device = openGpu();
  return (libraries ? *libraries
                    : "no cuDNN/cuBLASLt (" + libraries.status().message() + ")") +
         "; GPU: " +
         (device ? device->description() : "none (" + device.status().message() + ")");
}

} // namespace

Expected<std::vector<std::string>> gpuDescriptions() {
  FLOWC_ASSIGN_OR_RETURN(std::vector<GpuDevice> devices, listGpus());
  std::vector<std::string> descriptions;
  for (const GpuDevice &device : devices)
    descriptions.push_back(device.description());
  return descriptions;
}

std::string versionText(const std::string &program) {
  const dnnl_version_t *dnnl = dnnl_version();
  std::ostringstream out;
  out << program << " " << FLOWC_VERSION << "\n"
      << "build id: " << FLOWC_BUILD_ID << "\n"
      << "MLIR/LLVM: " << FLOWC_LLVM_VERSION << "\n"
      << "oneDNN: " << dnnl->major << "." << dnnl->minor << "." << dnnl->patch
      << (std::string(dnnl->hash) == "N/A" ? "" : std::string(" (") + dnnl->hash + ")")
      << ", CPU ISA " << cpuIsaName() << "\n"
      << "CUDA: " << cudaText() << "\n";
  return out.str();
}

} // namespace flowc::runtime
