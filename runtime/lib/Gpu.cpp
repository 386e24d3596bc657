#include "Gpu.h"
#include "flowc/runtime/BuildInfo.h"
#include "Kernels.h"
#include "flowc/runtime/GpuAbi.h"
#include "flowc/runtime/Tuning.h"
#include "gpu/LibraryKernels.h"
#include "gpu/Nccl.h"
#include "flowc/runtime/KernelAbi.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <optional>
#include <random>
#include <unordered_set>
#include <utility>

namespace flowc::runtime {

namespace {

// The driver API's types and constants, declared here instead of taken from
// cuda.h so that the runtime builds without the CUDA toolkit. They are the
// driver's binary interface, which its versions keep.
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
struct CUctx_st;
struct CUstream_st;
struct CUmod_st;
struct CUfunc_st;
struct CUgraph_st;
struct CUgraphExec_st;
using CUcontext = CUctx_st *;
using CUstream = CUstream_st *;
using CUmodule = CUmod_st *;
using CUfunction = CUfunc_st *;
using CUgraph = CUgraph_st *;
using CUgraphExec = CUgraphExec_st *;

constexpr CUresult kCudaSuccess = 0;
constexpr int kAttributeCapabilityMajor = 75;
constexpr int kAttributeCapabilityMinor = 76;
/// CU_STREAM_NON_BLOCKING: the session's stream does not wait for work
/// other code in the process queues on the legacy default stream.
constexpr unsigned kStreamNonBlocking = 1;

constexpr const char *kDriverLibrary = "libcuda.so.1";
/// What cuMemAlloc aligns every allocation to, and so the offsets of the
/// buffers sessions place in one allocation.
constexpr uint64_t kDeviceAlignment = 256;
static_assert(kDeviceAlignment % kArenaAlignment == 0,
              "the device arena is aligned as the ABI promises");
/// Each of the two pinned buffers host-device copies go through: large
/// enough for full-speed copies, fixed so that host memory does not grow
/// with the weights.
constexpr uint64_t kStagingBytes = uint64_t{16} << 20;

/// The driver functions the runtime calls (the _v2 names where the driver
/// has them: the unversioned ones are the 32-bit-size originals).
struct Driver {
  CUresult (*init)(unsigned flags) = nullptr;
  CUresult (*driverGetVersion)(int *version) = nullptr;
  CUresult (*getErrorName)(CUresult error, const char **name) = nullptr;
  CUresult (*getErrorString)(CUresult error, const char **text) = nullptr;
  CUresult (*deviceGetCount)(int *count) = nullptr;
  CUresult (*deviceGet)(CUdevice *device, int ordinal) = nullptr;
  CUresult (*deviceGetName)(char *name, int length, CUdevice device) = nullptr;
  CUresult (*deviceGetAttribute)(int *value, int attribute, CUdevice device) = nullptr;
  CUresult (*deviceTotalMem)(size_t *bytes, CUdevice device) = nullptr;
  CUresult (*primaryCtxRetain)(CUcontext *context, CUdevice device) = nullptr;
  CUresult (*primaryCtxRelease)(CUdevice device) = nullptr;
  CUresult (*ctxGetCurrent)(CUcontext *context) = nullptr;
  CUresult (*ctxSetCurrent)(CUcontext context) = nullptr;
  CUresult (*streamCreate)(CUstream *stream, unsigned flags) = nullptr;
  CUresult (*streamSynchronize)(CUstream stream) = nullptr;
  CUresult (*streamDestroy)(CUstream stream) = nullptr;
  CUresult (*moduleLoadData)(CUmodule *module, const void *image) = nullptr;
  CUresult (*moduleUnload)(CUmodule module) = nullptr;
  CUresult (*moduleGetFunction)(CUfunction *function, CUmodule module,
                                const char *name) = nullptr;
  CUresult (*launchKernel)(CUfunction function, unsigned gridX, unsigned gridY,
                           unsigned gridZ, unsigned blockX, unsigned blockY,
                           unsigned blockZ, unsigned sharedBytes, CUstream stream,
                           void **params, void **extra) = nullptr;
  CUresult (*memAlloc)(CUdeviceptr *pointer, size_t bytes) = nullptr;
  CUresult (*memFree)(CUdeviceptr pointer) = nullptr;
  CUresult (*memAllocHost)(void **pointer, size_t bytes) = nullptr;
  CUresult (*memFreeHost)(void *pointer) = nullptr;
  CUresult (*memcpyHtoDAsync)(CUdeviceptr destination, const void *source, size_t bytes,
                              CUstream stream) = nullptr;
  CUresult (*memcpyDtoHAsync)(void *destination, CUdeviceptr source, size_t bytes,
                              CUstream stream) = nullptr;
  CUresult (*streamBeginCapture)(CUstream stream, int mode) = nullptr;
  CUresult (*streamEndCapture)(CUstream stream, CUgraph *graph) = nullptr;
  CUresult (*graphInstantiate)(CUgraphExec *exec, CUgraph graph,
                               unsigned long long flags) = nullptr;
  CUresult (*graphLaunch)(CUgraphExec exec, CUstream stream) = nullptr;
  CUresult (*graphExecDestroy)(CUgraphExec exec) = nullptr;
  CUresult (*graphDestroy)(CUgraph graph) = nullptr;
};

/// Looks up driver functions, collecting the names the driver lacks.
struct SymbolBinder {
  void *library;
  std::vector<std::string> missing;

  template <typename Function> void operator()(Function &slot, const char *name) {
    slot = reinterpret_cast<Function>(dlsym(library, name));
    if (!slot)
      missing.push_back(name);
  }
};

/// Fills `driver` from the loaded `library`; Unavailable naming what it
/// lacks.
Status bindDriver(void *library, Driver &driver) {
  SymbolBinder bind{library, {}};
  bind(driver.init, "cuInit");
  bind(driver.driverGetVersion, "cuDriverGetVersion");
  bind(driver.getErrorName, "cuGetErrorName");
  bind(driver.getErrorString, "cuGetErrorString");
  bind(driver.deviceGetCount, "cuDeviceGetCount");
  bind(driver.deviceGet, "cuDeviceGet");
  bind(driver.deviceGetName, "cuDeviceGetName");
  bind(driver.deviceGetAttribute, "cuDeviceGetAttribute");
  bind(driver.deviceTotalMem, "cuDeviceTotalMem_v2");
  bind(driver.primaryCtxRetain, "cuDevicePrimaryCtxRetain");
  bind(driver.primaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  bind(driver.ctxGetCurrent, "cuCtxGetCurrent");
  bind(driver.ctxSetCurrent, "cuCtxSetCurrent");
  bind(driver.streamCreate, "cuStreamCreate");
  bind(driver.streamSynchronize, "cuStreamSynchronize");
  bind(driver.streamDestroy, "cuStreamDestroy_v2");
  bind(driver.moduleLoadData, "cuModuleLoadData");
  bind(driver.moduleUnload, "cuModuleUnload");
  bind(driver.moduleGetFunction, "cuModuleGetFunction");
  bind(driver.launchKernel, "cuLaunchKernel");
  bind(driver.memAlloc, "cuMemAlloc_v2");
  bind(driver.memFree, "cuMemFree_v2");
  bind(driver.memAllocHost, "cuMemAllocHost_v2");
  bind(driver.memFreeHost, "cuMemFreeHost");
  bind(driver.memcpyHtoDAsync, "cuMemcpyHtoDAsync_v2");
  bind(driver.memcpyDtoHAsync, "cuMemcpyDtoHAsync_v2");
  bind(driver.streamBeginCapture, "cuStreamBeginCapture_v2");
  bind(driver.streamEndCapture, "cuStreamEndCapture");
  bind(driver.graphInstantiate, "cuGraphInstantiateWithFlags");
  bind(driver.graphLaunch, "cuGraphLaunch");
  bind(driver.graphExecDestroy, "cuGraphExecDestroy");
  bind(driver.graphDestroy, "cuGraphDestroy");
  if (bind.missing.empty())
    return Status::ok();
  std::string names;
  for (const std::string &name : bind.missing)
    names += (names.empty() ? "" : ", ") + name;
  return unavailable(std::string("the NVIDIA driver (") + kDriverLibrary + ") lacks " +
                     names + ": it is older than this runtime needs (CUDA 11 or newer)");
}

/// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)"; the number when the driver
/// does not know it.
std::string errorText(const Driver &driver, CUresult result) {
  const char *name = nullptr;
  const char *text = nullptr;
  if (driver.getErrorName)
    driver.getErrorName(result, &name);
  if (driver.getErrorString)
    driver.getErrorString(result, &text);
  std::string described = name ? name : "CUresult " + std::to_string(result);
  if (text)
    described += std::string(" (") + text + ")";
  return described;
}

/// Whether `result` says the device or driver cannot serve (now), as
/// opposed to a fault of the code or of this runtime.
bool isUnavailableResult(CUresult result) {
  switch (result) {
  case 4:   // CUDA_ERROR_DEINITIALIZED
  case 34:  // CUDA_ERROR_STUB_LIBRARY
  case 35:  // CUDA_ERROR_INSUFFICIENT_DRIVER
  case 46:  // CUDA_ERROR_DEVICE_UNAVAILABLE
  case 100: // CUDA_ERROR_NO_DEVICE
  case 214: // CUDA_ERROR_ECC_UNCORRECTABLE
  case 803: // CUDA_ERROR_SYSTEM_DRIVER_MISMATCH
  case 804: // CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE
    return true;
  default:
    return false;
  }
}

/// Whether `result` is a fault on the device that leaves every context of
/// the process unusable: cuda.h says the process must be restarted.
bool isProcessFatalResult(CUresult result) {
  switch (result) {
  case 700: // CUDA_ERROR_ILLEGAL_ADDRESS
  case 702: // CUDA_ERROR_LAUNCH_TIMEOUT
  case 710: // CUDA_ERROR_ASSERT
  case 714: // CUDA_ERROR_HARDWARE_STACK_ERROR
  case 715: // CUDA_ERROR_ILLEGAL_INSTRUCTION
  case 716: // CUDA_ERROR_MISALIGNED_ADDRESS
  case 717: // CUDA_ERROR_INVALID_ADDRESS_SPACE
  case 718: // CUDA_ERROR_INVALID_PC
  case 719: // CUDA_ERROR_LAUNCH_FAILED
  case 721: // CUDA_ERROR_TENSOR_MEMORY_LEAK
  case 810: // CUDA_ERROR_MPS_CLIENT_TERMINATED
    return true;
  default:
    return false;
  }
}

/// The first device fault of the process (isProcessFatalResult), which
/// every later use of the GPU reports: sessions share the primary context.
class ProcessFault {
public:
  void record(const std::string &message) {
    std::lock_guard lock(mutex_);
    if (message_.empty())
      message_ = message;
    faulted_ = true;
  }
  std::optional<Status> status() const {
    if (!faulted_)
      return std::nullopt;
    std::lock_guard lock(mutex_);
    return Status(StatusCode::Unavailable,
                  "the GPU is unusable in this process since a fault on the device (" +
                      message_ + "); CUDA needs the process restarted");
  }

private:
  mutable std::mutex mutex_;
  std::atomic<bool> faulted_{false};
  std::string message_;
};

ProcessFault &processFault() {
  static ProcessFault fault;
  return fault;
}

/// The Status of CUDA call `what` that answered `result`: ResourceExhausted
/// for out of memory, Unavailable for a driver or device that cannot serve
/// and for a device fault (every later use reports it too), Internal
/// otherwise.
Status cudaError(const Driver &driver, CUresult result, const std::string &what) {
  constexpr CUresult kOutOfMemory = 2;
  std::string message = what + " failed: " + errorText(driver, result);
  if (isProcessFatalResult(result)) {
    processFault().record(message);
    return Status(StatusCode::Unavailable,
                  message + "; CUDA needs the process restarted before it runs again");
  }
  StatusCode code = StatusCode::Internal;
  if (result == kOutOfMemory)
    code = StatusCode::ResourceExhausted;
  else if (isUnavailableResult(result))
    code = StatusCode::Unavailable;
  return Status(code, message);
}

/// The loaded driver and every device it sees, by ordinal, as the
/// process's first openGpu found them.
struct ProcessGpu {
  Driver driver;
  std::vector<CUdevice> handles;
  std::vector<GpuDevice> all;
};

/// Device `ordinal` (`handle`) as the driver describes it.
Expected<GpuDevice> describeDevice(const Driver &driver, CUdevice handle, int ordinal) {
  char name[256] = {};
  int major = 0;
  int minor = 0;
  size_t totalBytes = 0;
  int version = 0;
  std::pair<CUresult, const char *> answers[] = {
      {driver.deviceGetName(name, sizeof name - 1, handle), "cuDeviceGetName"},
      {driver.deviceGetAttribute(&major, kAttributeCapabilityMajor, handle),
       "cuDeviceGetAttribute (capability major)"},
      {driver.deviceGetAttribute(&minor, kAttributeCapabilityMinor, handle),
       "cuDeviceGetAttribute (capability minor)"},
      {driver.deviceTotalMem(&totalBytes, handle), "cuDeviceTotalMem"},
      {driver.driverGetVersion(&version), "cuDriverGetVersion"},
  };
  for (const auto &[result, call] : answers)
    if (result != kCudaSuccess)
      return unavailable(
          cudaError(driver, result,
                    std::string(call) + " of device " + std::to_string(ordinal))
              .message());
  GpuDevice device;
  device.ordinal = ordinal;
  device.name = name;
  device.capability = int64_t{major} * 10 + minor;
  device.totalMemoryBytes = totalBytes;
  device.driverVersion = version;
  return device;
}

Expected<ProcessGpu> loadProcessGpu() {
  // Never closed: sessions on any thread may hold the driver until exit,
  // and unloading it under a live context is not something it supports.
  void *library = dlopen(kDriverLibrary, RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *why = dlerror();
    return unavailable(std::string("the NVIDIA driver (") + kDriverLibrary +
                       ") is not installed: " + (why ? why : "dlopen failed"));
  }
  ProcessGpu gpu;
  FLOWC_RETURN_IF_ERROR(bindDriver(library, gpu.driver));
  const Driver &driver = gpu.driver;
  if (CUresult result = driver.init(0); result != kCudaSuccess)
    return unavailable(cudaError(driver, result, "cuInit").message());
  int count = 0;
  if (CUresult result = driver.deviceGetCount(&count); result != kCudaSuccess)
    return unavailable(cudaError(driver, result, "cuDeviceGetCount").message());
  if (count == 0)
    return unavailable("the NVIDIA driver sees no GPU (cuDeviceGetCount is 0)");
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    CUdevice handle = 0;
    if (CUresult result = driver.deviceGet(&handle, ordinal); result != kCudaSuccess)
      return unavailable(
          cudaError(driver, result, "cuDeviceGet of device " + std::to_string(ordinal))
              .message());
    FLOWC_ASSIGN_OR_RETURN(GpuDevice device, describeDevice(driver, handle, ordinal));
    gpu.handles.push_back(handle);
    gpu.all.push_back(std::move(device));
  }
  return gpu;
}

/// The process's driver and device, or why there is none.
const Expected<ProcessGpu> &processGpu() {
  // Initialized once, on first use, by whichever thread gets here first
  // (the others wait): cuInit and the device queries run once per process.
  static const Expected<ProcessGpu> gpu = loadProcessGpu();
  return gpu;
}

/// A table slot: the ABI's functions, stored as one pointer type.
using GpuSlot = void (*)();

/// What CUDA code defines for the session (GpuAbi.h).
struct GpuCode {
  GpuSlot *table = nullptr;
  void (*load)() = nullptr;
  void (*unload)() = nullptr;
  int64_t capability = 0;
  /// flowc_arena_bytes, 0 when the code has no arena.
  uint64_t arenaBytes = 0;
  /// The library kernels' table and context slot (KernelAbi.h), null when
  /// the code calls none; the kinds it calls and its number of call sites.
  void **kernelTable = nullptr;
  void **kernelContext = nullptr;
  int64_t kernelKinds = 0;
  int64_t kernelSites = 0;
};

/// Reads the library-kernel symbols of `library` into `code`: DataLoss when
/// one is missing, FailedPrecondition for another kernel ABI.
Status readKernelSymbols(void *library, const std::string &path, GpuCode &code) {
  code.kernelTable = static_cast<void **>(dlsym(library, kKernelTableSymbol));
  if (!code.kernelTable)
    return Status::ok();
  code.kernelContext = static_cast<void **>(dlsym(library, kKernelContextSymbol));
  auto *kinds = static_cast<const int64_t *>(dlsym(library, kKernelKindsSymbol));
  auto *sites = static_cast<const int64_t *>(dlsym(library, kKernelSitesSymbol));
  auto *abi = static_cast<const int64_t *>(dlsym(library, kKernelAbiSymbol));
  if (!code.kernelContext || !kinds || !sites || !abi)
    return dataLoss("'" + path + "': CUDA code with library kernels lacks one of " +
                    kKernelContextSymbol + ", " + kKernelKindsSymbol + ", " +
                    kKernelSitesSymbol + " and " + kKernelAbiSymbol);
  if (*abi != kKernelAbiVersion)
    return failedPrecondition("'" + path + "' was compiled for kernel ABI " +
                              std::to_string(*abi) + ", this runtime has " +
                              std::to_string(kKernelAbiVersion) +
                              ": compile the model again with this flowc");
  if (*kinds < 0 || *kinds >= (int64_t{1} << kKernelKindCount) || *sites < 0)
    return dataLoss("'" + path + "': CUDA code declares library kernel kinds " +
                    std::to_string(*kinds) + " and " + std::to_string(*sites) +
                    " sites, which no compile writes");
  code.kernelKinds = *kinds;
  code.kernelSites = *sites;
  return Status::ok();
}

/// Reads the GPU symbols of CUDA code `library` (of `path`) and checks what
/// needs no device: DataLoss when one is missing, FailedPrecondition for
/// another GPU or kernel ABI.
Expected<GpuCode> readGpuCode(void *library, const std::string &path) {
  GpuCode code;
  code.table = static_cast<GpuSlot *>(dlsym(library, kGpuTableSymbol));
  code.load = reinterpret_cast<void (*)()>(dlsym(library, kGpuLoadSymbol));
  code.unload = reinterpret_cast<void (*)()>(dlsym(library, kGpuUnloadSymbol));
  auto *capability = static_cast<const int64_t *>(dlsym(library, kGpuCapabilitySymbol));
  auto *abi = static_cast<const int64_t *>(dlsym(library, kGpuAbiSymbol));
  if (!code.table || !code.load || !code.unload || !capability || !abi)
    return dataLoss("'" + path + "': CUDA code lacks one of " + kGpuTableSymbol + ", " +
                    kGpuLoadSymbol + ", " + kGpuUnloadSymbol + ", " +
                    kGpuCapabilitySymbol + " and " + kGpuAbiSymbol);
  if (*abi != kGpuAbiVersion)
    return failedPrecondition("'" + path + "' was compiled for GPU ABI " +
                              std::to_string(*abi) + ", this runtime has " +
                              std::to_string(kGpuAbiVersion) +
                              ": compile the model again with this flowc");
  code.capability = *capability;
  if (auto *bytes = static_cast<const uint64_t *>(dlsym(library, kArenaBytesSymbol)))
    code.arenaBytes = *bytes;
  FLOWC_RETURN_IF_ERROR(readKernelSymbols(library, path, code));
  return code;
}

CUdeviceptr devicePointer(void *pointer) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(pointer));
}

void *hostView(CUdeviceptr pointer) {
  return reinterpret_cast<void *>(static_cast<uintptr_t>(pointer));
}

/// One kernel launch as mgpuLaunchKernel receives it.
struct KernelLaunch {
  CUfunction function;
  int64_t grid[3];
  int64_t block[3];
  int32_t sharedBytes;
  void **params;
  void **extra;
};

/// Whether every dimension of `launch` is one cuLaunchKernel takes.
bool hasValidDimensions(const KernelLaunch &launch) {
  auto fits = [](int64_t size) { return size >= 1 && size <= UINT32_MAX; };
  return std::all_of(std::begin(launch.grid), std::end(launch.grid), fits) &&
         std::all_of(std::begin(launch.block), std::end(launch.block), fits) &&
         launch.sharedBytes >= 0;
}

} // namespace

std::string GpuDevice::label() const {
  return "device " + std::to_string(ordinal) + " (" + name + ")";
}

std::string GpuDevice::description() const {
  char memory[32];
  std::snprintf(memory, sizeof memory, "%.1f GiB",
                static_cast<double>(totalMemoryBytes) / (uint64_t{1} << 30));
  return "device " + std::to_string(ordinal) + " (" + name + ", sm_" +
         std::to_string(capability) + ", " + memory + ", CUDA driver " +
         std::to_string(driverVersion / 1000) + "." +
         std::to_string(driverVersion % 1000 / 10) + ")";
}

std::optional<Status> gpuProcessFault() { return processFault().status(); }

namespace {

/// NotFound naming the devices there are when `ordinal` is not one.
Status checkOrdinal(const ProcessGpu &gpu, int ordinal) {
  if (ordinal >= 0 && static_cast<size_t>(ordinal) < gpu.all.size())
    return Status::ok();
  std::string devices;
  for (const GpuDevice &device : gpu.all)
    devices += (devices.empty() ? "" : ", ") + device.label();
  return notFound("there is no GPU device " + std::to_string(ordinal) +
                  ": the driver sees " + std::to_string(gpu.all.size()) + " (" + devices +
                  ")");
}

} // namespace

Expected<GpuDevice> openGpu(int ordinal) {
  const Expected<ProcessGpu> &gpu = processGpu();
  if (!gpu)
    return gpu.status();
  if (std::optional<Status> fault = processFault().status())
    return *fault;
  FLOWC_RETURN_IF_ERROR(checkOrdinal(*gpu, ordinal));
  return gpu->all[static_cast<size_t>(ordinal)];
}

Expected<std::vector<GpuDevice>> listGpus() {
  const Expected<ProcessGpu> &gpu = processGpu();
  if (!gpu)
    return gpu.status();
  return gpu->all;
}

bool isGpuCode(void *library) { return dlsym(library, kGpuTableSymbol) != nullptr; }

namespace {
class SessionServices;
} // namespace

/// A session's device state. Every driver call that needs the session's
/// context runs inside an ActiveGpu scope.
class GpuContext {
public:
  /// On device `ordinal` of `gpu` (checkOrdinal first).
  GpuContext(const ProcessGpu &gpu, int ordinal, std::string artifactPath)
      : driver_(gpu.driver), handle_(gpu.handles[static_cast<size_t>(ordinal)]),
        device_(gpu.all[static_cast<size_t>(ordinal)]), path_(std::move(artifactPath)) {}
  GpuContext(const GpuContext &) = delete;
  GpuContext &operator=(const GpuContext &) = delete;
  ~GpuContext();

  /// Retains the device's primary context and creates the stream.
  Status start();
  /// Fills the code's table (and its library kernels', which time up to
  /// `trials` candidates each) and runs its flowc_gpu_load.
  Status load(const GpuCode &code, gpu::LibraryTuning tuning);
  std::vector<GpuKernelChoice> kernelChoices() const {
    return libraryKernels_ ? gpu::kernelChoices(*libraryKernels_)
                           : std::vector<GpuKernelChoice>();
  }
  /// measureGpuLibraryKernel on this context: the kernel called once on
  /// buffers of `floats` random values, its trial runs timed.
  Expected<GpuKernelChoice> measureLibraryKernel(KernelKind kind,
                                                 const std::vector<int64_t> &params,
                                                 int trials,
                                                 const std::vector<size_t> &floats);
  /// Allocates the weights, arena, inputs and outputs on the device and,
  /// when `upload`, uploads the weights.
  Status allocateBuffers(const Artifact &artifact, uint64_t arenaBytes, size_t checks,
                         bool upload);
  /// Uploads the weights from `artifact` (the one the buffers were
  /// allocated for).
  Status upload(const Artifact &artifact);
  /// The weights' block (every weight at its offset) as a broadcast's rank.
  gpu::BroadcastRank weightsRank() const {
    return {device_.ordinal, weightsBlock_, stream_};
  }
  uint64_t weightsBlockBytes() const { return weightsBlockBytes_; }
  /// Waits for everything queued on the stream.
  Status finishQueued();
  const std::string &path() const { return path_; }
  Status run(const std::vector<const void *> &inputs, const std::vector<void *> &outputs,
             const std::function<void(void **)> &callEntry);
  uint64_t arenaBytes() const { return arenaBytes_; }
  /// Whether runs may replay a CUDA graph of the entry's launches (on by
  /// default; off drops a captured one).
  void allowGraphs(bool allowed);
  bool replaysGraph() const { return graphExec_ != nullptr; }

  // The table functions' work (GpuAbi.h), and the library kernels'
  // (LibraryKernels.h). Errors are kept as the run's.
  void *loadModule(void *data, uint64_t bytes);
  /// Loads `image` (a cubin or fat binary of the runtime's), `what` for
  /// messages.
  void *loadImage(const void *image, const std::string &what);
  /// Device memory that lives as long as the session.
  void *allocateLasting(uint64_t bytes, const std::string &what);
  /// Keeps the first failure of the run: it caused the rest.
  void fail(Status status);
  bool failed() const { return !failure_.isOk(); }
  const GpuDevice &device() const { return device_; }
  void unloadModule(CUmodule module);
  void *moduleFunction(CUmodule module, const char *name);
  void launch(const KernelLaunch &launch);
  void *stream() const { return stream_; }
  void *allocateTemporary(uint64_t alignment, uint64_t bytes);
  void freeTemporary(CUdeviceptr pointer);
  void synchronize();

  /// Makes the session's context current on this thread; the one that was.
  CUcontext makeCurrent();
  /// Makes `previous` (makeCurrent's answer) current again.
  void restoreCurrent(CUcontext previous);

private:
  /// Keeps `call`'s failure; whether it succeeded.
  bool record(CUresult result, const std::string &call);
  /// The failure kept since the last call (OK if none), and forgets it.
  Status takeFailure();
  Status runSteps(const std::vector<const void *> &inputs,
                  const std::vector<void *> &outputs,
                  const std::function<void(void **)> &callEntry);
  Status synchronizeStream();
  /// Calls the entry: replays the graph, captures it, or launches directly.
  void runEntry(void **args, const std::function<void(void **)> &callEntry);
  void captureAndLaunch(void **args, const std::function<void(void **)> &callEntry);
  void dropGraph();
  /// The buffers of `sizes` in one allocation (nothing when all are empty);
  /// `blockBytes`, when given, receives the allocation's size.
  Expected<std::vector<CUdeviceptr>> allocateBlock(const std::vector<uint64_t> &sizes,
                                                   const std::string &what,
                                                   uint64_t *blockBytes = nullptr);
  Status allocateStaging(uint64_t largestCopy);
  Status uploadWeights(const Artifact &artifact);
  Status copyToDevice(CUdeviceptr device, const char *host, uint64_t bytes);
  Status copyToHost(char *host, CUdeviceptr device, uint64_t bytes);
  Status queueToHost(CUdeviceptr device, uint64_t bytes, uint64_t chunk);
  std::vector<void *> entryArguments() const;
  /// Logs a failed clean-up call: destruction has no caller to tell.
  void warnIfFailed(CUresult result, const char *call) const;

  const Driver &driver_;
  CUdevice handle_;
  GpuDevice device_;
  std::string path_;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;
  void (*unload_)() = nullptr;
  /// flowc_gpu_load ran, so flowc_gpu_unload is owed (even after a load
  /// that failed part way: it unloads what it got).
  bool loaded_ = false;
  Status failure_;
  /// Allocations of the session's lifetime: weights, arena, inputs, outputs.
  std::vector<CUdeviceptr> blocks_;
  std::vector<CUdeviceptr> weights_, inputs_, outputs_;
  /// The weights' allocation (0 when there are none) and its size.
  CUdeviceptr weightsBlock_ = 0;
  uint64_t weightsBlockBytes_ = 0;
  std::vector<uint64_t> inputBytes_, outputBytes_;
  CUdeviceptr arena_ = 0;
  uint64_t arenaBytes_ = 0;
  /// What the code allocated or loaded and has not yet given back; freed
  /// with the session if a failed run left any.
  std::unordered_set<CUdeviceptr> temporaries_;
  std::unordered_set<CUmodule> modules_;
  /// Pinned host buffers every host-device copy goes through, and the one
  /// the next upload chunk fills.
  void *staging_[2] = {nullptr, nullptr};
  uint64_t stagingBytes_ = 0;
  int nextStaging_ = 0;
  /// CUDA graphs: the second run of a session captures the entry's
  /// launches on the stream (the first creates the library kernels' plans
  /// and workspaces), and later runs replay them in one launch. Not for
  /// code that allocates temporaries while it runs (their addresses would
  /// be baked in), nor while profiling (its marks synchronize).
  bool graphsAllowed_ = true;
  int completedRuns_ = 0;
  int temporariesThisRun_ = 0;
  CUgraph graph_ = nullptr;
  CUgraphExec graphExec_ = nullptr;
  /// The library kernels of code that calls them, and what they call back.
  std::unique_ptr<SessionServices> services_;
  gpu::LibraryKernelsPtr libraryKernels_;
};

void GpuContextDeleter::operator()(GpuContext *context) const { delete context; }

namespace {

/// What a session's library kernels need of it (LibraryKernels.h).
class SessionServices final : public gpu::DeviceServices {
public:
  explicit SessionServices(GpuContext &gpu) : gpu_(gpu) {}
  void *stream() const override { return gpu_.stream(); }
  void *allocate(uint64_t bytes, const std::string &what) override {
    return gpu_.allocateLasting(bytes, what);
  }
  void *loadModule(const void *image, const std::string &what) override {
    return gpu_.loadImage(image, what);
  }
  void *moduleFunction(void *module, const char *name) override {
    return gpu_.moduleFunction(static_cast<CUmodule>(module), name);
  }
  void launch(void *function, uint64_t blocks, uint64_t threads, void **params) override {
    gpu_.launch({static_cast<CUfunction>(function),
                 {static_cast<int64_t>(blocks), 1, 1},
                 {static_cast<int64_t>(threads), 1, 1},
                 0,
                 params,
                 nullptr});
  }
  bool synchronize() override {
    gpu_.synchronize();
    return !gpu_.failed();
  }
  void fail(Status status) override { gpu_.fail(std::move(status)); }
  bool failed() const override { return gpu_.failed(); }
  std::string label() const override { return gpu_.device().label(); }

private:
  GpuContext &gpu_;
};

/// The GPU session whose load, run or unload is in progress on this thread:
/// the table's functions have no other way to find it.
thread_local GpuContext *activeGpu = nullptr;

/// Makes a session's context current and the session the table functions'
/// for a scope, and restores the thread's previous ones after it (code
/// around the runtime may use a context of its own).
class ActiveGpu {
public:
  explicit ActiveGpu(GpuContext &gpu)
      : gpu_(gpu), previous_(activeGpu), previousContext_(gpu.makeCurrent()) {
    activeGpu = &gpu;
  }
  ~ActiveGpu() {
    activeGpu = previous_;
    gpu_.restoreCurrent(previousContext_);
  }
  ActiveGpu(const ActiveGpu &) = delete;
  ActiveGpu &operator=(const ActiveGpu &) = delete;

private:
  GpuContext &gpu_;
  GpuContext *previous_;
  CUcontext previousContext_;
};

} // namespace

CUcontext GpuContext::makeCurrent() {
  CUcontext previous = nullptr;
  if (driver_.ctxGetCurrent(&previous) != kCudaSuccess)
    previous = nullptr;
  if (previous != context_)
    record(driver_.ctxSetCurrent(context_), "cuCtxSetCurrent");
  return previous;
}

void GpuContext::restoreCurrent(CUcontext previous) {
  if (previous != context_)
    warnIfFailed(driver_.ctxSetCurrent(previous),
                 "cuCtxSetCurrent (restoring the caller's context)");
}

GpuContext::~GpuContext() {
  // Nothing was made on the device without the context.
  if (!context_)
    return;
  {
    ActiveGpu active(*this);
    // A failed run may have left launches queued that still use the buffers.
    if (stream_)
      warnIfFailed(driver_.streamSynchronize(stream_), "cuStreamSynchronize");
    // The graph's launches name the code's kernels: it goes first.
    dropGraph();
    if (loaded_)
      unload_();
    libraryKernels_.reset();
    if (Status failure = takeFailure(); !failure.isOk())
      spdlog::warn("unloading the kernels of '{}': {}", path_, failure.message());
    for (CUmodule module : modules_)
      warnIfFailed(driver_.moduleUnload(module), "cuModuleUnload");
    for (CUdeviceptr pointer : temporaries_)
      warnIfFailed(driver_.memFree(pointer), "cuMemFree");
    for (CUdeviceptr pointer : blocks_)
      warnIfFailed(driver_.memFree(pointer), "cuMemFree");
    for (void *buffer : staging_)
      if (buffer)
        warnIfFailed(driver_.memFreeHost(buffer), "cuMemFreeHost");
    if (stream_)
      warnIfFailed(driver_.streamDestroy(stream_), "cuStreamDestroy");
  }
  warnIfFailed(driver_.primaryCtxRelease(handle_), "cuDevicePrimaryCtxRelease");
}

void GpuContext::warnIfFailed(CUresult result, const char *call) const {
  if (result != kCudaSuccess)
    spdlog::warn("releasing the GPU state of '{}': {} failed: {}", path_, call,
                 errorText(driver_, result));
}

void GpuContext::fail(Status status) {
  if (failure_.isOk())
    failure_ = std::move(status);
}

bool GpuContext::record(CUresult result, const std::string &call) {
  if (result == kCudaSuccess)
    return true;
  fail(cudaError(driver_, result, call));
  return false;
}

Status GpuContext::takeFailure() { return std::exchange(failure_, Status::ok()); }

Status GpuContext::start() {
  if (CUresult result = driver_.primaryCtxRetain(&context_, handle_);
      result != kCudaSuccess) {
    context_ = nullptr;
    return cudaError(driver_, result, "cuDevicePrimaryCtxRetain of " + device_.label());
  }
  ActiveGpu active(*this);
  FLOWC_RETURN_IF_ERROR(takeFailure());
  if (CUresult result = driver_.streamCreate(&stream_, kStreamNonBlocking);
      result != kCudaSuccess) {
    stream_ = nullptr;
    return cudaError(driver_, result, "cuStreamCreate on " + device_.label());
  }
  return Status::ok();
}

namespace {

// The table's functions: plain functions with the C signatures of
// GpuAbi.h, which forward to the session active on the calling thread.
// Outside a load, run or unload there is none; the code breaks its
// contract then, and gets null and no effect.

void *gpuModuleLoad(void *data, uint64_t bytes) {
  return activeGpu ? activeGpu->loadModule(data, bytes) : nullptr;
}

void gpuModuleUnload(void *module) {
  if (activeGpu)
    activeGpu->unloadModule(static_cast<CUmodule>(module));
}

void *gpuModuleGetFunction(void *module, const char *name) {
  return activeGpu ? activeGpu->moduleFunction(static_cast<CUmodule>(module), name)
                   : nullptr;
}

void gpuLaunchKernel(void *function, int64_t gridX, int64_t gridY, int64_t gridZ,
                     int64_t blockX, int64_t blockY, int64_t blockZ, int32_t sharedBytes,
                     void * /*stream: the session's, GpuAbi.h*/, void **params,
                     void **extra, uint64_t /*paramCount: the cubin knows*/) {
  if (activeGpu)
    activeGpu->launch({static_cast<CUfunction>(function),
                       {gridX, gridY, gridZ},
                       {blockX, blockY, blockZ},
                       sharedBytes,
                       params,
                       extra});
}

void *gpuStreamCreate() { return activeGpu ? activeGpu->stream() : nullptr; }

// The session synchronizes once at the end of the run, and its stream
// lives as long as the session.
void gpuStreamDestroy(void *) {}
void gpuStreamSynchronize(void *) {}

void *gpuMemAlloc(uint64_t bytes) {
  return activeGpu ? activeGpu->allocateTemporary(kDeviceAlignment, bytes) : nullptr;
}

void *gpuAlignedMemAlloc(uint64_t alignment, uint64_t bytes) {
  return activeGpu ? activeGpu->allocateTemporary(alignment, bytes) : nullptr;
}

void gpuMemFree(void *pointer) {
  if (activeGpu)
    activeGpu->freeTemporary(devicePointer(pointer));
}

/// Stores `function` in `slot`; the explicit Signature checks at compile
/// time that it has the ABI's signature for that slot.
template <typename Signature>
void setSlot(GpuSlot *table, GpuFunction slot, Signature function) {
  table[static_cast<int64_t>(slot)] = reinterpret_cast<GpuSlot>(function);
}

void fillTable(GpuSlot *table) {
  static_assert(kGpuFunctionCount == 10, "every slot of GpuFunction is filled below");
  setSlot<GpuModuleLoad>(table, GpuFunction::ModuleLoad, gpuModuleLoad);
  setSlot<GpuModuleUnload>(table, GpuFunction::ModuleUnload, gpuModuleUnload);
  setSlot<GpuModuleGetFunction>(table, GpuFunction::ModuleGetFunction,
                                gpuModuleGetFunction);
  setSlot<GpuLaunchKernel>(table, GpuFunction::LaunchKernel, gpuLaunchKernel);
  setSlot<GpuStreamCreate>(table, GpuFunction::StreamCreate, gpuStreamCreate);
  setSlot<GpuStreamDestroy>(table, GpuFunction::StreamDestroy, gpuStreamDestroy);
  setSlot<GpuStreamSynchronize>(table, GpuFunction::StreamSynchronize,
                                gpuStreamSynchronize);
  setSlot<GpuMemAlloc>(table, GpuFunction::MemAlloc, gpuMemAlloc);
  setSlot<GpuAlignedMemAlloc>(table, GpuFunction::AlignedMemAlloc, gpuAlignedMemAlloc);
  setSlot<GpuMemFree>(table, GpuFunction::MemFree, gpuMemFree);
}

} // namespace

Status GpuContext::load(const GpuCode &code, gpu::LibraryTuning tuning) {
  fillTable(code.table);
  unload_ = code.unload;
  ActiveGpu active(*this);
  FLOWC_RETURN_IF_ERROR(takeFailure());
  if (code.kernelTable) {
    services_ = std::make_unique<SessionServices>(*this);
    FLOWC_ASSIGN_OR_RETURN(libraryKernels_,
                           gpu::openLibraryKernels(*services_, code.kernelKinds,
                                                   code.kernelSites, std::move(tuning),
                                                   path_));
    FLOWC_RETURN_IF_ERROR(takeFailure());
    gpu::fillKernelTable(*libraryKernels_, code.kernelTable, code.kernelContext);
  }
  loaded_ = true;
  code.load();
  return takeFailure().withContext("loading the kernels of '" + path_ + "' on " +
                                   device_.label());
}

void *GpuContext::loadModule(void *data, uint64_t bytes) {
  CUmodule module = nullptr;
  if (!record(driver_.moduleLoadData(&module, data),
              "cuModuleLoadData of a " + std::to_string(bytes) + "-byte cubin"))
    return nullptr;
  modules_.insert(module);
  return module;
}

void *GpuContext::loadImage(const void *image, const std::string &what) {
  CUmodule module = nullptr;
  if (!record(driver_.moduleLoadData(&module, image), "cuModuleLoadData of " + what))
    return nullptr;
  modules_.insert(module);
  return module;
}

void *GpuContext::allocateLasting(uint64_t bytes, const std::string &what) {
  if (!failure_.isOk())
    return nullptr;
  Expected<std::vector<CUdeviceptr>> block = allocateBlock({bytes}, what);
  if (!block) {
    fail(block.status());
    return nullptr;
  }
  return hostView((*block)[0]);
}

void GpuContext::unloadModule(CUmodule module) {
  // A module whose load failed is null; that failure is already kept.
  if (!module)
    return;
  modules_.erase(module);
  record(driver_.moduleUnload(module), "cuModuleUnload");
}

void *GpuContext::moduleFunction(CUmodule module, const char *name) {
  if (!module)
    return nullptr;
  CUfunction function = nullptr;
  if (!record(driver_.moduleGetFunction(&function, module, name),
              std::string("cuModuleGetFunction of kernel '") + name + "'"))
    return nullptr;
  return function;
}

void GpuContext::launch(const KernelLaunch &launch) {
  // After a failure the run's result is known; its later kernels would
  // read what the failed step did not write.
  if (!failure_.isOk())
    return;
  if (!launch.function) {
    fail(internalError("a kernel launch of '" + path_ + "' has no kernel"));
    return;
  }
  if (!hasValidDimensions(launch)) {
    fail(internalError(
        "a kernel launch of '" + path_ + "' has grid " + std::to_string(launch.grid[0]) +
        "x" + std::to_string(launch.grid[1]) + "x" + std::to_string(launch.grid[2]) +
        ", block " + std::to_string(launch.block[0]) + "x" +
        std::to_string(launch.block[1]) + "x" + std::to_string(launch.block[2]) +
        " and " + std::to_string(launch.sharedBytes) +
        " shared bytes, which CUDA cannot launch"));
    return;
  }
  // Every launch of a run is queued in order on the session's stream,
  // which is also the one mgpuStreamCreate answered (GpuAbi.h).
  record(driver_.launchKernel(launch.function, static_cast<unsigned>(launch.grid[0]),
                              static_cast<unsigned>(launch.grid[1]),
                              static_cast<unsigned>(launch.grid[2]),
                              static_cast<unsigned>(launch.block[0]),
                              static_cast<unsigned>(launch.block[1]),
                              static_cast<unsigned>(launch.block[2]),
                              static_cast<unsigned>(launch.sharedBytes), stream_,
                              launch.params, launch.extra),
         "cuLaunchKernel");
}

void *GpuContext::allocateTemporary(uint64_t alignment, uint64_t bytes) {
  if (!failure_.isOk() || bytes == 0)
    return nullptr;
  if (alignment > kDeviceAlignment || alignment == 0 || (alignment & (alignment - 1))) {
    fail(internalError("'" + path_ + "' asked for device memory aligned to " +
                       std::to_string(alignment) + " bytes; CUDA allocations are " +
                       std::to_string(kDeviceAlignment) + "-byte aligned"));
    return nullptr;
  }
  ++temporariesThisRun_;
  CUdeviceptr pointer = 0;
  if (!record(driver_.memAlloc(&pointer, bytes),
              "cuMemAlloc of " + std::to_string(bytes) + " bytes for a temporary on " +
                  device_.label()))
    return nullptr;
  temporaries_.insert(pointer);
  return hostView(pointer);
}

void GpuContext::freeTemporary(CUdeviceptr pointer) {
  if (!pointer)
    return;
  // Still tracked (freed at the session's end) if the driver refuses now.
  if (record(driver_.memFree(pointer), "cuMemFree"))
    temporaries_.erase(pointer);
}

void GpuContext::runEntry(void **args, const std::function<void(void **)> &callEntry) {
  if (graphExec_) {
    record(driver_.graphLaunch(graphExec_, stream_), "cuGraphLaunch");
    return;
  }
  if (graphsAllowed_ && completedRuns_ > 0) {
    captureAndLaunch(args, callEntry);
    return;
  }
  temporariesThisRun_ = 0;
  callEntry(args);
}

void GpuContext::captureAndLaunch(void **args,
                                  const std::function<void(void **)> &callEntry) {
  // Thread-local capture: a call that may not be captured fails it, and
  // the run falls back to launching directly (nothing captured ran).
  constexpr int kCaptureThreadLocal = 1;
  auto fallBack = [&](const std::string &why) {
    spdlog::warn("'{}' runs without a CUDA graph: {}", path_, why);
    graphsAllowed_ = false;
    failure_ = Status::ok();
    callEntry(args);
  };
  if (CUresult result = driver_.streamBeginCapture(stream_, kCaptureThreadLocal);
      result != kCudaSuccess)
    return fallBack("cuStreamBeginCapture failed: " + errorText(driver_, result));
  callEntry(args);
  CUgraph graph = nullptr;
  CUresult ended = driver_.streamEndCapture(stream_, &graph);
  if (ended != kCudaSuccess || !graph || !failure_.isOk()) {
    std::string why = ended != kCudaSuccess
                          ? "cuStreamEndCapture failed: " + errorText(driver_, ended)
                          : failure_.message();
    if (graph)
      warnIfFailed(driver_.graphDestroy(graph), "cuGraphDestroy");
    return fallBack("capturing its launches: " + why);
  }
  CUgraphExec exec = nullptr;
  if (CUresult result = driver_.graphInstantiate(&exec, graph, 0);
      result != kCudaSuccess) {
    warnIfFailed(driver_.graphDestroy(graph), "cuGraphDestroy");
    return fallBack("cuGraphInstantiateWithFlags failed: " + errorText(driver_, result));
  }
  graph_ = graph;
  graphExec_ = exec;
  record(driver_.graphLaunch(graphExec_, stream_), "cuGraphLaunch");
}

void GpuContext::dropGraph() {
  if (graphExec_)
    warnIfFailed(driver_.graphExecDestroy(graphExec_), "cuGraphExecDestroy");
  if (graph_)
    warnIfFailed(driver_.graphDestroy(graph_), "cuGraphDestroy");
  graphExec_ = nullptr;
  graph_ = nullptr;
}

void GpuContext::allowGraphs(bool allowed) {
  graphsAllowed_ = allowed;
  if (!allowed && graphExec_) {
    ActiveGpu active(*this);
    // A graph may still be running: its resources go once it is done.
    warnIfFailed(driver_.streamSynchronize(stream_), "cuStreamSynchronize");
    dropGraph();
  }
}

void GpuContext::synchronize() {
  record(driver_.streamSynchronize(stream_), "cuStreamSynchronize");
}

Status GpuContext::synchronizeStream() {
  if (CUresult result = driver_.streamSynchronize(stream_); result != kCudaSuccess)
    return cudaError(driver_, result, "cuStreamSynchronize");
  return Status::ok();
}

Expected<std::vector<CUdeviceptr>>
GpuContext::allocateBlock(const std::vector<uint64_t> &sizes, const std::string &what,
                          uint64_t *blockBytes) {
  // One allocation with every buffer at an aligned offset: one cuMemAlloc
  // instead of one per weight.
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  for (uint64_t size : sizes) {
    offsets.push_back(total);
    uint64_t padded =
        size + (kDeviceAlignment - size % kDeviceAlignment) % kDeviceAlignment;
    if (padded < size || __builtin_add_overflow(total, padded, &total))
      return resourceExhausted(what + " of '" + path_ + "' exceed what can be allocated");
  }
  std::vector<CUdeviceptr> buffers(sizes.size(), 0);
  if (blockBytes)
    *blockBytes = total;
  if (total == 0)
    return buffers;
  CUdeviceptr base = 0;
  if (CUresult result = driver_.memAlloc(&base, total); result != kCudaSuccess)
    return cudaError(driver_, result,
                     "cuMemAlloc of " + std::to_string(total) + " bytes for " + what +
                         " of '" + path_ + "' on " + device_.label());
  blocks_.push_back(base);
  // Empty buffers stay null: the code never reads them.
  for (size_t i = 0; i < sizes.size(); ++i)
    if (sizes[i] > 0)
      buffers[i] = base + offsets[i];
  return buffers;
}

namespace {

/// A random finite value of `precision`'s 16-bit type in +-[2^-5, 1): its
/// sign, exponent and mantissa bits drawn.
uint16_t randomSixteenBit(Precision precision, std::mt19937 &random) {
  uint32_t bits = random();
  auto sign = static_cast<uint16_t>((bits >> 31) << 15);
  if (precision == Precision::Fp16)
    return sign | static_cast<uint16_t>((10 + bits % 5) << 10) | ((bits >> 8) & 0x3FF);
  return sign | static_cast<uint16_t>((122 + bits % 5) << 7) | ((bits >> 8) & 0x7F);
}

/// Whether a kernel of `params` reads its buffer `index` (KernelAbi.h's
/// order) in 16 bits: a convolution's source or residual the compiler kept
/// so. The precision when it does.
std::optional<Precision>
sixteenBitInput(KernelKind kind, const std::vector<int64_t> &params, size_t index) {
  std::optional<Conv2dParams> conv =
      kind == KernelKind::Conv2d ? paramsFromWords<Conv2dParams>(params) : std::nullopt;
  if (conv && ((index == 0 && conv->sixteenBitSource) ||
               (index == 3 && conv->hasResidual && conv->sixteenBitResidual)))
    return conv->precision;
  return std::nullopt;
}

} // namespace

Expected<GpuKernelChoice>
GpuContext::measureLibraryKernel(KernelKind kind, const std::vector<int64_t> &params,
                                 int trials, const std::vector<size_t> &floats) {
  // The same numbers everywhere, never a model's.
  constexpr uint32_t kSeed = 20261203;
  ActiveGpu active(*this);
  FLOWC_RETURN_IF_ERROR(takeFailure());
  std::vector<uint64_t> bytes;
  for (size_t count : floats)
    bytes.push_back(count * sizeof(float));
  FLOWC_RETURN_IF_ERROR(allocateStaging(*std::max_element(bytes.begin(), bytes.end())));
  FLOWC_ASSIGN_OR_RETURN(std::vector<CUdeviceptr> buffers,
                         allocateBlock(bytes, "the kernel's buffers"));
  std::mt19937 random(kSeed);
  std::uniform_real_distribution<float> values(-1.0f, 1.0f);
  std::vector<void *> pointers;
  for (size_t i = 0; i < buffers.size(); ++i) {
    std::vector<float> host(floats[i]);
    // A 16-bit buffer's bytes are 16-bit values, not fp32 ones read in halves.
    if (std::optional<Precision> sixteenBit = sixteenBitInput(kind, params, i)) {
      std::vector<uint16_t> halves(2 * host.size());
      for (uint16_t &half : halves)
        half = randomSixteenBit(*sixteenBit, random);
      std::memcpy(host.data(), halves.data(), bytes[i]);
    } else {
      for (float &value : host)
        value = values(random);
    }
    // copyToDevice waits for a staging buffer's last copy before refilling it.
    FLOWC_RETURN_IF_ERROR(
        copyToDevice(buffers[i], reinterpret_cast<const char *>(host.data()), bytes[i]));
    pointers.push_back(reinterpret_cast<void *>(buffers[i]));
  }
  services_ = std::make_unique<SessionServices>(*this);
  gpu::LibraryTuning tuning;
  tuning.trials = trials;
  tuning.compiledFusion = true;
  FLOWC_ASSIGN_OR_RETURN(libraryKernels_,
                         gpu::openLibraryKernels(*services_,
                                                 int64_t{1} << static_cast<int64_t>(kind),
                                                 1, std::move(tuning), path_));
  void *table[kKernelKindCount] = {};
  void *kernels = nullptr;
  gpu::fillKernelTable(*libraryKernels_, table, &kernels);
  reinterpret_cast<KernelFunction>(table[static_cast<int64_t>(kind)])(
      kernels, 0, params.data(), pointers.data());
  FLOWC_RETURN_IF_ERROR(takeFailure());
  FLOWC_RETURN_IF_ERROR(synchronizeStream());
  std::vector<GpuKernelChoice> choices = kernelChoices();
  if (choices.empty())
    return internalError(path_ + " made no choice");
  return choices.front();
}

Status GpuContext::allocateStaging(uint64_t largestCopy) {
  stagingBytes_ = std::min(kStagingBytes, largestCopy);
  if (stagingBytes_ == 0)
    return Status::ok();
  for (void *&buffer : staging_)
    if (CUresult result = driver_.memAllocHost(&buffer, stagingBytes_);
        result != kCudaSuccess) {
      buffer = nullptr;
      return cudaError(driver_, result,
                       "cuMemAllocHost of " + std::to_string(stagingBytes_) +
                           " bytes of staging for '" + path_ + "'");
    }
  return Status::ok();
}

Status GpuContext::allocateBuffers(const Artifact &artifact, uint64_t arenaBytes,
                                   size_t checks, bool upload) {
  const Plan &plan = artifact.plan();
  std::vector<uint64_t> weightBytes;
  for (size_t i = 0; i < plan.weights.size(); ++i)
    weightBytes.push_back(artifact.weightBytes(i).size());
  for (const TensorSpec &spec : plan.inputs)
    inputBytes_.push_back(spec.byteSize());
  for (const TensorSpec &spec : plan.outputs)
    outputBytes_.push_back(spec.byteSize());
  // A check's flag is a bool [1] result after the outputs.
  outputBytes_.insert(outputBytes_.end(), checks, 1);
  uint64_t largest = 0;
  for (const std::vector<uint64_t> *sizes : {&weightBytes, &inputBytes_, &outputBytes_})
    for (uint64_t size : *sizes)
      largest = std::max(largest, size);
  ActiveGpu active(*this);
  FLOWC_RETURN_IF_ERROR(takeFailure());
  // Everything is allocated before the (long) upload, so that a model too
  // large for the device fails at once.
  FLOWC_RETURN_IF_ERROR(allocateStaging(largest));
  FLOWC_ASSIGN_OR_RETURN(weights_,
                         allocateBlock(weightBytes, "the weights", &weightsBlockBytes_));
  weightsBlock_ = weightsBlockBytes_ > 0 ? blocks_.back() : 0;
  FLOWC_ASSIGN_OR_RETURN(std::vector<CUdeviceptr> arena,
                         allocateBlock({arenaBytes}, "the activation arena"));
  arena_ = arena[0];
  arenaBytes_ = arenaBytes;
  FLOWC_ASSIGN_OR_RETURN(inputs_, allocateBlock(inputBytes_, "the inputs"));
  FLOWC_ASSIGN_OR_RETURN(outputs_, allocateBlock(outputBytes_, "the outputs"));
  return upload ? uploadWeights(artifact) : Status::ok();
}

Status GpuContext::upload(const Artifact &artifact) {
  ActiveGpu active(*this);
  FLOWC_RETURN_IF_ERROR(takeFailure());
  return uploadWeights(artifact);
}

Status GpuContext::finishQueued() {
  ActiveGpu active(*this);
  FLOWC_RETURN_IF_ERROR(takeFailure());
  return synchronizeStream();
}

Status GpuContext::uploadWeights(const Artifact &artifact) {
  for (size_t i = 0; i < weights_.size(); ++i) {
    std::string_view bytes = artifact.weightBytes(i);
    FLOWC_RETURN_IF_ERROR(copyToDevice(weights_[i], bytes.data(), bytes.size())
                              .withContext("uploading weight '" +
                                           artifact.plan().weights[i].tensor.name +
                                           "' of '" + path_ + "'"));
  }
  return synchronizeStream();
}

Status GpuContext::copyToDevice(CUdeviceptr device, const char *host, uint64_t bytes) {
  // Chunks alternate between the two staging buffers: the host fills one
  // while the device reads the other. Before chunk k is queued the stream
  // is synchronized, which finishes chunk k-1: the buffer chunk k+1 fills
  // next is free then, and so is the one chunk k filled (read by chunk k-2).
  // The alternation continues across calls, so this holds across buffers.
  for (uint64_t done = 0; done < bytes;) {
    uint64_t chunk = std::min(stagingBytes_, bytes - done);
    void *buffer = staging_[nextStaging_];
    std::memcpy(buffer, host + done, chunk);
    FLOWC_RETURN_IF_ERROR(synchronizeStream());
    if (CUresult result = driver_.memcpyHtoDAsync(device + done, buffer, chunk, stream_);
        result != kCudaSuccess)
      return cudaError(driver_, result, "cuMemcpyHtoDAsync");
    nextStaging_ ^= 1;
    done += chunk;
  }
  return Status::ok();
}

Status GpuContext::queueToHost(CUdeviceptr device, uint64_t bytes, uint64_t chunk) {
  uint64_t offset = chunk * stagingBytes_;
  uint64_t size = std::min(stagingBytes_, bytes - offset);
  if (CUresult result =
          driver_.memcpyDtoHAsync(staging_[chunk % 2], device + offset, size, stream_);
      result != kCudaSuccess)
    return cudaError(driver_, result, "cuMemcpyDtoHAsync");
  return Status::ok();
}

Status GpuContext::copyToHost(char *host, CUdeviceptr device, uint64_t bytes) {
  if (bytes == 0)
    return Status::ok();
  // The staging buffers are free once the stream is idle (uploads read
  // them). Chunk k+1 is queued before chunk k is copied out of its buffer,
  // so that the device's copy overlaps the host's; its buffer held chunk
  // k-1, copied out already.
  FLOWC_RETURN_IF_ERROR(synchronizeStream());
  uint64_t chunks = (bytes + stagingBytes_ - 1) / stagingBytes_;
  FLOWC_RETURN_IF_ERROR(queueToHost(device, bytes, 0));
  for (uint64_t chunk = 0; chunk < chunks; ++chunk) {
    FLOWC_RETURN_IF_ERROR(synchronizeStream());
    if (chunk + 1 < chunks)
      FLOWC_RETURN_IF_ERROR(queueToHost(device, bytes, chunk + 1));
    uint64_t offset = chunk * stagingBytes_;
    std::memcpy(host + offset, staging_[chunk % 2],
                std::min(stagingBytes_, bytes - offset));
  }
  // Uploads pick up the alternation where they left it; both buffers are
  // free now, so any start is right.
  return Status::ok();
}

std::vector<void *> GpuContext::entryArguments() const {
  // The entry's arguments (KernelAbi.h), as device pointers.
  std::vector<void *> args;
  for (const std::vector<CUdeviceptr> *buffers : {&inputs_, &weights_, &outputs_})
    for (CUdeviceptr pointer : *buffers)
      args.push_back(hostView(pointer));
  if (arenaBytes_ > 0)
    args.push_back(hostView(arena_));
  return args;
}

Status GpuContext::run(const std::vector<const void *> &inputs,
                       const std::vector<void *> &outputs,
                       const std::function<void(void **)> &callEntry) {
  return runSteps(inputs, outputs, callEntry)
      .withContext("running '" + path_ + "' on " + device_.label());
}

Status GpuContext::runSteps(const std::vector<const void *> &inputs,
                            const std::vector<void *> &outputs,
                            const std::function<void(void **)> &callEntry) {
  failure_ = Status::ok();
  ActiveGpu active(*this);
  FLOWC_RETURN_IF_ERROR(takeFailure());
  for (size_t i = 0; i < inputs.size(); ++i)
    FLOWC_RETURN_IF_ERROR(
        copyToDevice(inputs_[i], static_cast<const char *>(inputs[i]), inputBytes_[i]));
  std::vector<void *> args = entryArguments();
  runEntry(args.data(), callEntry);
  // Launches are asynchronous: the run is over when the stream is idle, and
  // a kernel's fault shows here.
  synchronize();
  FLOWC_RETURN_IF_ERROR(takeFailure());
  for (size_t i = 0; i < outputs.size(); ++i)
    FLOWC_RETURN_IF_ERROR(
        copyToHost(static_cast<char *>(outputs[i]), outputs_[i], outputBytes_[i]));
  // The first complete run decides: temporaries rule graphs out.
  if (completedRuns_++ == 0 && temporariesThisRun_ > 0)
    graphsAllowed_ = false;
  return Status::ok();
}

Expected<GpuContextPtr> bindGpu(void *library, const Artifact &artifact,
                                const SessionOptions &options, size_t checks,
                                bool uploadWeights) {
  const std::string &path = artifact.path();
  // What the code says of itself is checked first: it needs no device.
  FLOWC_ASSIGN_OR_RETURN(GpuCode code, readGpuCode(library, path));
  gpu::LibraryTuning tuning;
  tuning.trials = options.gpuTrials;
  tuning.record = options.gpuRecord;
  FLOWC_ASSIGN_OR_RETURN(tuning.planned, tunedCandidates(artifact, code.kernelSites));
  const Expected<ProcessGpu> &gpu = processGpu();
  if (!gpu)
    return unavailable("'" + path + "' is CUDA code for sm_" +
                       std::to_string(code.capability) +
                       " and needs an NVIDIA GPU: " + gpu.status().message());
  if (std::optional<Status> fault = processFault().status())
    return fault->withContext("'" + path + "'");
  if (Status status = checkOrdinal(*gpu, options.gpuDevice); !status)
    return status.withContext("'" + path + "'");
  const GpuDevice &device = gpu->all[static_cast<size_t>(options.gpuDevice)];
  // A cubin runs on devices of its own capability only.
  if (device.capability != code.capability) {
    std::string other;
    for (const GpuDevice &candidate : gpu->all)
      if (candidate.capability == code.capability) {
        other = ", or run it on " + candidate.label() + " (--gpu-device " +
                std::to_string(candidate.ordinal) + ")";
        break;
      }
    return failedPrecondition(
        "'" + path + "' was compiled for sm_" + std::to_string(code.capability) + ", " +
        device.label() + " is sm_" + std::to_string(device.capability) +
        ": compile with --target cuda:sm_" + std::to_string(device.capability) + other);
  }
  GpuContextPtr context(new GpuContext(*gpu, options.gpuDevice, path));
  FLOWC_RETURN_IF_ERROR(context->start());
  FLOWC_RETURN_IF_ERROR(context->load(code, std::move(tuning)));
  FLOWC_RETURN_IF_ERROR(
      context->allocateBuffers(artifact, code.arenaBytes, checks, uploadWeights));
  return context;
}

namespace {

/// Broadcasts `source`'s weights to `replicas` through NCCL, restoring the
/// thread's current context after it (NCCL sets devices as it goes).
Expected<gpu::BroadcastTimes>
broadcastWeights(const Driver &driver, GpuContext &source,
                 const std::vector<GpuContext *> &replicas) {
  std::vector<GpuContext *> contexts = {&source};
  contexts.insert(contexts.end(), replicas.begin(), replicas.end());
  std::vector<gpu::BroadcastRank> ranks;
  for (GpuContext *context : contexts)
    ranks.push_back(context->weightsRank());
  auto synchronize = [&](size_t rank) { return contexts[rank]->finishQueued(); };
  CUcontext previous = nullptr;
  if (driver.ctxGetCurrent(&previous) != kCudaSuccess)
    previous = nullptr;
  // The source's upload has finished (uploadWeights waits for it).
  Expected<gpu::BroadcastTimes> times =
      gpu::ncclBroadcast(ranks, source.weightsBlockBytes(), synchronize);
  if (CUresult result = driver.ctxSetCurrent(previous); result != kCudaSuccess)
    spdlog::warn("restoring the thread's CUDA context after NCCL: {}",
                 errorText(driver, result));
  return times;
}

} // namespace

Expected<ReplicaWeights> copyGpuWeights(GpuContext &source,
                                        const std::vector<GpuContext *> &replicas,
                                        const Artifact &artifact) {
  ReplicaWeights copy;
  copy.bytes = source.weightsBlockBytes();
  if (replicas.empty() || copy.bytes == 0)
    return copy;
  auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  };
  Expected<std::string> nccl = gpu::ncclVersion();
  if (!nccl) {
    // Slower, never wrong: each device reads the artifact as one session
    // would.
    spdlog::warn("the weights of '{}' are uploaded to each GPU from the artifact: {}",
                 source.path(), nccl.status().message());
    for (GpuContext *replica : replicas)
      FLOWC_RETURN_IF_ERROR(replica->upload(artifact));
    copy.method = "upload";
    copy.seconds = seconds();
    return copy;
  }
  Expected<gpu::BroadcastTimes> times =
      broadcastWeights(processGpu()->driver, source, replicas);
  if (!times)
    return times.status().withContext("broadcasting the weights of '" + source.path() +
                                      "' from " + source.device().label() + " with " +
                                      *nccl);
  copy.method = *nccl;
  copy.setupSeconds = times->setupSeconds;
  copy.seconds = times->copySeconds;
  return copy;
}

uint64_t gpuArenaBytes(const GpuContext &gpu) { return gpu.arenaBytes(); }

void allowGpuGraphs(GpuContext &gpu, bool allowed) { gpu.allowGraphs(allowed); }

bool replaysGpuGraph(const GpuContext &gpu) { return gpu.replaysGraph(); }

std::vector<GpuKernelChoice> gpuKernelChoices(const GpuContext &gpu) {
  return gpu.kernelChoices();
}

namespace {

/// The product of `sizes`, or nullopt past 2^40 (no buffer a measurement
/// allocates is near it; int64 never overflows on the way).
std::optional<int64_t> boundedProduct(std::initializer_list<int64_t> sizes) {
  int64_t product = 1;
  for (int64_t size : sizes)
    if (size < 0 || __builtin_mul_overflow(product, size, &product) ||
        product > (int64_t{1} << 40))
      return std::nullopt;
  return product;
}

bool isFlag(int64_t value) { return value == 0 || value == 1; }

bool isActivation(Activation activation) {
  auto value = static_cast<int64_t>(activation);
  return value >= 0 && value <= static_cast<int64_t>(Activation::GeluTanh);
}

bool isPrecision(Precision precision) {
  auto value = static_cast<int64_t>(precision);
  return value >= 0 && value <= static_cast<int64_t>(Precision::Fp16);
}

/// The output extent a convolution's input, kernel, stride, dilation and
/// padding give along one axis; nullopt where there is none.
std::optional<int64_t> convExtent(int64_t in, int64_t kernel, int64_t stride,
                                  int64_t dilation, int64_t before, int64_t after) {
  std::optional<int64_t> span = boundedProduct({dilation, kernel - 1});
  if (!span || in + before + after - *span - 1 < 0)
    return std::nullopt;
  return (in + before + after - *span - 1) / stride + 1;
}

/// InvalidArgument, naming what is wrong, unless `words` are a convolution
/// or product the library kernels can run: what a measure task (text from
/// elsewhere) must be before any of it reaches cuDNN or cuBLASLt.
Status checkLibraryParams(KernelKind kind, const std::vector<int64_t> &words,
                          const std::string &what) {
  auto bad = [&](const std::string &why) {
    return invalidArgument(what + ": its params are not a kernel's (" + why + ")");
  };
  constexpr int64_t kMaxSize = int64_t{1} << 24;
  if (kind == KernelKind::Conv2d) {
    std::optional<Conv2dParams> p = paramsFromWords<Conv2dParams>(words);
    if (!p)
      return bad("not " + std::to_string(sizeof(Conv2dParams) / 8) + " words");
    for (int64_t size : {p->batch, p->inChannels, p->inHeight, p->inWidth, p->outChannels,
                         p->kernelHeight, p->kernelWidth, p->outHeight, p->outWidth,
                         p->strideH, p->strideW, p->dilationH, p->dilationW, p->groups})
      if (size < 1 || size > kMaxSize)
        return bad("a size, stride, dilation or group count outside 1..2^24");
    for (int64_t pad : {p->padTop, p->padLeft, p->padBottom, p->padRight})
      if (pad < 0 || pad > kMaxSize)
        return bad("a padding outside 0..2^24");
    if (p->inChannels % p->groups != 0 || p->outChannels % p->groups != 0)
      return bad("the groups do not divide the channels");
    if (convExtent(p->inHeight, p->kernelHeight, p->strideH, p->dilationH, p->padTop,
                   p->padBottom) != p->outHeight ||
        convExtent(p->inWidth, p->kernelWidth, p->strideW, p->dilationW, p->padLeft,
                   p->padRight) != p->outWidth)
      return bad("the output size is not what the input, kernel, stride, dilation and "
                 "padding give");
    auto isLayout = [](ActivationLayout layout) {
      return isFlag(static_cast<int64_t>(layout));
    };
    auto weights = static_cast<int64_t>(p->weightLayout);
    if (!isLayout(p->sourceLayout) || !isLayout(p->destinationLayout) || weights < 0 ||
        weights > static_cast<int64_t>(ConvWeightLayout::Hwcm) ||
        !isFlag(p->constantWeights) || !isFlag(p->hasResidual) ||
        !isActivation(p->activation) || !isPrecision(p->precision) ||
        !isFlag(p->sixteenBitSource) || !isFlag(p->sixteenBitResidual) ||
        !isFlag(p->sixteenBitDestination))
      return bad("a layout, flag, activation or precision out of range");
    if (hasSixteenBitBuffers(*p) && p->precision == Precision::Fp32)
      return bad("16-bit buffers in an fp32 convolution");
    if (p->sixteenBitResidual && !p->hasResidual)
      return bad("a 16-bit residual without a residual");
    if (!boundedProduct({p->batch, p->inChannels, p->inHeight, p->inWidth}) ||
        !boundedProduct({p->batch, p->outChannels, p->outHeight, p->outWidth}) ||
        !boundedProduct({p->outChannels, p->inChannels, p->kernelHeight, p->kernelWidth}))
      return bad("a buffer of more than 2^40 elements");
    return Status::ok();
  }
  std::optional<MatMulParams> p = paramsFromWords<MatMulParams>(words);
  if (!p)
    return bad("not " + std::to_string(sizeof(MatMulParams) / 8) + " words");
  for (int64_t size : {p->batch, p->m, p->n, p->k})
    if (size < 1 || size > kMaxSize)
      return bad("a size outside 1..2^24");
  for (int64_t flag : {p->transposedB, p->constantB, p->hasBias, p->hasResidual,
                       p->hasMask, p->maskRows, p->maskColumns})
    if (!isFlag(flag))
      return bad("a flag that is not 0 or 1");
  if (!isActivation(p->activation) || !isPrecision(p->precision))
    return bad("an activation or precision out of range");
  if (!boundedProduct({p->batch, p->m, p->k}) ||
      !boundedProduct({p->batch, p->k, p->n}) || !boundedProduct({p->batch, p->m, p->n}))
    return bad("a buffer of more than 2^40 elements");
  return Status::ok();
}

} // namespace

Expected<GpuKernelChoice> measureGpuLibraryKernel(KernelKind kind,
                                                  const std::vector<int64_t> &params,
                                                  int trials, int ordinal) {
  std::string what =
      std::string("a measurement of a ") + kernelKindName(kind) + " kernel";
  if (kind != KernelKind::Conv2d && kind != KernelKind::MatMul)
    return invalidArgument(what + ": only convolutions and matrix products have GPU "
                                  "candidates");
  FLOWC_RETURN_IF_ERROR(checkLibraryParams(kind, params, what));
  FLOWC_ASSIGN_OR_RETURN(std::vector<size_t> floats, bufferFloats(kind, params));
  const Expected<ProcessGpu> &gpu = processGpu();
  if (!gpu)
    return unavailable(what + " needs an NVIDIA GPU: " + gpu.status().message());
  if (std::optional<Status> fault = processFault().status())
    return fault->withContext(what);
  FLOWC_RETURN_IF_ERROR(checkOrdinal(*gpu, ordinal).withContext(what));
  GpuContext context(*gpu, ordinal, what);
  FLOWC_RETURN_IF_ERROR(context.start());
  return context.measureLibraryKernel(kind, params, trials, floats);
}

Status runOnGpu(GpuContext &gpu, const std::vector<const void *> &inputs,
                const std::vector<void *> &outputs,
                const std::function<void(void **)> &callEntry) {
  return gpu.run(inputs, outputs, callEntry);
}

void synchronizeActiveGpu() {
  if (activeGpu)
    activeGpu->synchronize();
}

} // namespace flowc::runtime
