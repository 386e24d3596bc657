// Library kernels on the device: LibraryKernels.h. Built with the CUDA
// toolkit's headers (cudnn.h, cublasLt.h) and nvcc (Helpers.cu); without
// them openLibraryKernels says so.
#include "LibraryKernels.h"

#include "flowc/runtime/KernelAbi.h"
#include "flowc/runtime/Tuning.h"

#ifdef FLOWC_HAVE_CUDA_LIBRARIES

#include "Coalesce.h"
#include "DynamicLibrary.h"
#include "HelperAbi.h"

#include <cublasLt.h>
#include <cudnn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <vector>

/// The fat binary of Helpers.cu (every supported architecture), embedded
/// by Helpers.S.
extern "C" const unsigned char flowc_gpu_helpers[];

namespace flowc::runtime::gpu {

namespace {

/// Where the configure step found the toolkit's libraries, for a machine
/// whose loader does not know that directory.
constexpr const char *kLibraryDir = FLOWC_CUDA_LIBRARY_DIR;
constexpr const char *kCudnnLibrary = "libcudnn.so.9";
constexpr const char *kCublasLtLibrary = "libcublasLt.so.13";
/// The workspace every cuBLASLt product may use (the size NVIDIA suggests
/// for Hopper); cuDNN plans get what they ask for.
constexpr uint64_t kMatMulWorkspaceBytes = uint64_t{32} << 20;
/// The most workspace a convolution's trial run may take, but for the
/// heuristics' first choice, which runs whatever it needs.
constexpr int64_t kMaxTrialWorkspaceBytes = int64_t{256} << 20;

#define FLOWC_LIBRARY_FUNCTION(name) decltype(&::name) name = nullptr

/// The cuDNN and cuBLASLt functions the kernels call.
struct Libraries {
  FLOWC_LIBRARY_FUNCTION(cudnnGetVersion);
  FLOWC_LIBRARY_FUNCTION(cudnnGetErrorString);
  FLOWC_LIBRARY_FUNCTION(cudnnGetLastErrorString);
  FLOWC_LIBRARY_FUNCTION(cudnnCreate);
  FLOWC_LIBRARY_FUNCTION(cudnnDestroy);
  FLOWC_LIBRARY_FUNCTION(cudnnSetStream);
  FLOWC_LIBRARY_FUNCTION(cudnnBackendCreateDescriptor);
  FLOWC_LIBRARY_FUNCTION(cudnnBackendDestroyDescriptor);
  FLOWC_LIBRARY_FUNCTION(cudnnBackendFinalize);
  FLOWC_LIBRARY_FUNCTION(cudnnBackendSetAttribute);
  FLOWC_LIBRARY_FUNCTION(cudnnBackendGetAttribute);
  FLOWC_LIBRARY_FUNCTION(cudnnBackendExecute);
  FLOWC_LIBRARY_FUNCTION(cublasLtGetVersion);
  FLOWC_LIBRARY_FUNCTION(cublasLtGetStatusString);
  FLOWC_LIBRARY_FUNCTION(cublasLtCreate);
  FLOWC_LIBRARY_FUNCTION(cublasLtDestroy);
  FLOWC_LIBRARY_FUNCTION(cublasLtMatmul);
  FLOWC_LIBRARY_FUNCTION(cublasLtMatmulDescCreate);
  FLOWC_LIBRARY_FUNCTION(cublasLtMatmulDescDestroy);
  FLOWC_LIBRARY_FUNCTION(cublasLtMatmulDescSetAttribute);
  FLOWC_LIBRARY_FUNCTION(cublasLtMatrixLayoutCreate);
  FLOWC_LIBRARY_FUNCTION(cublasLtMatrixLayoutDestroy);
  FLOWC_LIBRARY_FUNCTION(cublasLtMatrixLayoutSetAttribute);
  FLOWC_LIBRARY_FUNCTION(cublasLtMatmulPreferenceCreate);
  FLOWC_LIBRARY_FUNCTION(cublasLtMatmulPreferenceDestroy);
  FLOWC_LIBRARY_FUNCTION(cublasLtMatmulPreferenceSetAttribute);
  FLOWC_LIBRARY_FUNCTION(cublasLtMatmulAlgoGetHeuristic);
  FLOWC_LIBRARY_FUNCTION(cublasLtMatmulAlgoConfigGetAttribute);
  std::string versions;
};

#undef FLOWC_LIBRARY_FUNCTION

#define FLOWC_BIND(library, name) bindSymbol(library, libraries.name, #name, missing)

Expected<Libraries> loadLibraries() {
  FLOWC_ASSIGN_OR_RETURN(void *cudnn, openLibrary(kCudnnLibrary, kLibraryDir));
  FLOWC_ASSIGN_OR_RETURN(void *cublasLt, openLibrary(kCublasLtLibrary, kLibraryDir));
  Libraries libraries;
  std::vector<std::string> missing;
  FLOWC_BIND(cudnn, cudnnGetVersion);
  FLOWC_BIND(cudnn, cudnnGetErrorString);
  FLOWC_BIND(cudnn, cudnnGetLastErrorString);
  FLOWC_BIND(cudnn, cudnnCreate);
  FLOWC_BIND(cudnn, cudnnDestroy);
  FLOWC_BIND(cudnn, cudnnSetStream);
  FLOWC_BIND(cudnn, cudnnBackendCreateDescriptor);
  FLOWC_BIND(cudnn, cudnnBackendDestroyDescriptor);
  FLOWC_BIND(cudnn, cudnnBackendFinalize);
  FLOWC_BIND(cudnn, cudnnBackendSetAttribute);
  FLOWC_BIND(cudnn, cudnnBackendGetAttribute);
  FLOWC_BIND(cudnn, cudnnBackendExecute);
  FLOWC_BIND(cublasLt, cublasLtGetVersion);
  FLOWC_BIND(cublasLt, cublasLtGetStatusString);
  FLOWC_BIND(cublasLt, cublasLtCreate);
  FLOWC_BIND(cublasLt, cublasLtDestroy);
  FLOWC_BIND(cublasLt, cublasLtMatmul);
  FLOWC_BIND(cublasLt, cublasLtMatmulDescCreate);
  FLOWC_BIND(cublasLt, cublasLtMatmulDescDestroy);
  FLOWC_BIND(cublasLt, cublasLtMatmulDescSetAttribute);
  FLOWC_BIND(cublasLt, cublasLtMatrixLayoutCreate);
  FLOWC_BIND(cublasLt, cublasLtMatrixLayoutDestroy);
  FLOWC_BIND(cublasLt, cublasLtMatrixLayoutSetAttribute);
  FLOWC_BIND(cublasLt, cublasLtMatmulPreferenceCreate);
  FLOWC_BIND(cublasLt, cublasLtMatmulPreferenceDestroy);
  FLOWC_BIND(cublasLt, cublasLtMatmulPreferenceSetAttribute);
  FLOWC_BIND(cublasLt, cublasLtMatmulAlgoGetHeuristic);
  FLOWC_BIND(cublasLt, cublasLtMatmulAlgoConfigGetAttribute);
  if (!missing.empty())
    return unavailable("the CUDA libraries lack " + joinedNames(missing) +
                       " (this runtime needs " + kCudnnLibrary + " and " +
                       kCublasLtLibrary + ")");
  libraries.versions =
      "cuDNN " + dottedVersion(static_cast<int64_t>(libraries.cudnnGetVersion())) +
      ", cuBLASLt " + dottedVersion(static_cast<int64_t>(libraries.cublasLtGetVersion()));
  return libraries;
}

#undef FLOWC_BIND

/// The process's libraries, loaded by the first caller (they stay loaded).
const Expected<Libraries> &processLibraries() {
  static const Expected<Libraries> libraries = loadLibraries();
  return libraries;
}

// Strides, in elements, of the [N, C, H, W] view of a 4-D activation and
// of the [K, C/groups, R, S] view of convolution weights.

Index4 activationStrides(const Index4 &shape, ActivationLayout layout) {
  auto [n, c, h, w] = shape.dims;
  (void)n;
  if (layout == ActivationLayout::Nhwc)
    return {{h * w * c, 1, w * c, c}};
  return {{c * h * w, h * w, w, 1}};
}

Index4 weightStrides(const Index4 &shape, ConvWeightLayout layout) {
  auto [k, c, r, s] = shape.dims;
  switch (layout) {
  case ConvWeightLayout::Ohwi:
    return {{r * s * c, 1, s * c, c}};
  case ConvWeightLayout::Hwcm:
    // [KH, KW, channels, multiplier]: output channel k = channel * M + m is
    // the fastest dimension; one input channel per group.
    return {{1, 1, s * k, k}};
  case ConvWeightLayout::Oihw:
    break;
  }
  return {{c * r * s, r * s, s, 1}};
}

/// The weight order cuDNN reads alongside activations in `layout`: KCRS
/// with NCHW, KRSC with NHWC.
ConvWeightLayout filterFormatOf(ActivationLayout layout) {
  return layout == ActivationLayout::Nhwc ? ConvWeightLayout::Ohwi
                                          : ConvWeightLayout::Oihw;
}

/// The largest power of two (from 2 up to 256) that divides `address`:
/// what a library may assume of a buffer's alignment (a 16-bit batch
/// stride may be odd).
int64_t alignmentOf(uintptr_t address) {
  // At most the arena's: every session buffer has it, so the libraries'
  // lists for a kernel do not depend on where its buffers happen to sit
  // (tuning records name candidates from those lists), and no cuDNN or
  // cuBLASLt kernel asks for more.
  int64_t alignment = static_cast<int64_t>(kArenaAlignment);
  while (alignment > 2 && address % static_cast<uintptr_t>(alignment) != 0)
    alignment /= 2;
  return alignment;
}

int64_t alignmentOf(const void *pointer) {
  return alignmentOf(reinterpret_cast<uintptr_t>(pointer));
}

/// Whether the `bytes` at `a` and the `bytes` at `b` share any byte.
bool overlap(const void *a, const void *b, uint64_t bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

/// Whether a convolution pads unevenly (ONNX's SAME_UPPER, TensorFlow's
/// SAME with a stride): cuDNN's engines pad alike on both sides.
bool isPadded(const Conv2dParams &p) {
  return p.padTop != p.padBottom || p.padLeft != p.padRight;
}

/// The element type a kernel of `precision` hands the library: AMP rounds
/// activations and weights to 16 bits, and accumulates in fp32.
ElementType elementType(Precision precision) {
  switch (precision) {
  case Precision::Fp16:
    return kF16;
  case Precision::Bf16:
    return kBf16;
  case Precision::Fp32:
    break;
  }
  return kF32;
}

uint64_t elementBytes(ElementType type) { return type == kF32 ? 4 : 2; }

cudnnDataType_t cudnnType(ElementType type) {
  return type == kF16    ? CUDNN_DATA_HALF
         : type == kBf16 ? CUDNN_DATA_BFLOAT16
                         : CUDNN_DATA_FLOAT;
}

cudaDataType_t cudaType(ElementType type) {
  return type == kF16 ? CUDA_R_16F : type == kBf16 ? CUDA_R_16BF : CUDA_R_32F;
}

int64_t elements(const Index4 &shape) {
  return shape.dims[0] * shape.dims[1] * shape.dims[2] * shape.dims[3];
}

/// How many of cuBLASLt's heuristic results a decided candidate is looked
/// for among: more than any trial search times.
constexpr int kListedAlgorithms = 64;

/// `count` elements as one dense row.
Index4 flat(int64_t count) { return {{1, 1, 1, count}}; }
Index4 flatStrides() { return {{0, 0, 0, 1}}; }

uint64_t blocksFor(int64_t elements) {
  uint64_t blocks = (static_cast<uint64_t>(elements) + kHelperBlock - 1) / kHelperBlock;
  return std::clamp<uint64_t>(blocks, 1, uint64_t{1} << 20);
}

/// A cuDNN backend descriptor, destroyed with its owner.
class Descriptor {
public:
  Descriptor() = default;
  Descriptor(const Libraries &libraries, cudnnBackendDescriptor_t descriptor)
      : libraries_(&libraries), descriptor_(descriptor) {}
  Descriptor(Descriptor &&other) noexcept
      : libraries_(other.libraries_), descriptor_(std::exchange(other.descriptor_, {})) {}
  Descriptor &operator=(Descriptor &&other) noexcept {
    std::swap(libraries_, other.libraries_);
    std::swap(descriptor_, other.descriptor_);
    return *this;
  }
  Descriptor(const Descriptor &) = delete;
  Descriptor &operator=(const Descriptor &) = delete;
  ~Descriptor() {
    if (descriptor_)
      libraries_->cudnnBackendDestroyDescriptor(descriptor_);
  }
  cudnnBackendDescriptor_t get() const { return descriptor_; }

  /// Creates a backend descriptor of `type` into `out` (left empty when
  /// cuDNN fails); cuDNN's status.
  static cudnnStatus_t create(const Libraries &libraries,
                              cudnnBackendDescriptorType_t type, Descriptor &out) {
    cudnnBackendDescriptor_t descriptor = nullptr;
    cudnnStatus_t status = libraries.cudnnBackendCreateDescriptor(type, &descriptor);
    if (status == CUDNN_STATUS_SUCCESS)
      out = Descriptor(libraries, descriptor);
    return status;
  }

private:
  const Libraries *libraries_ = nullptr;
  cudnnBackendDescriptor_t descriptor_ = nullptr;
};

/// A cuDNN execution plan, its workspace and the engine configuration it
/// was made from (kept as long as the plan, as cuDNN's frontend does).
struct ConvPlan {
  Descriptor plan;
  int64_t workspaceBytes = 0;
  Descriptor config;
  /// The plan of the graph with the epilogue in it (convGraph): it reads
  /// the bias and residual and writes the graph's fp32 result itself.
  bool fused = false;
};

/// A convolution site: its cuDNN execution plan in the compute layout, and
/// the buffers that convert to and from the graph's layouts.
struct ConvSite {
  Conv2dParams params;
  /// The layout cuDNN computes in (source, weights in the matching filter
  /// format, and result), and the element type of all three.
  ActivationLayout layout = ActivationLayout::Nchw;
  ElementType type = kF32;
  Index4 sourceShape, weightShape, destinationShape;
  /// The source cuDNN reads: sourceShape with the padding in it when the
  /// padding is asymmetric (cuDNN's engines pad alike on both sides), the
  /// graph's source at element `interior` of it.
  Index4 paddedShape;
  int64_t interior = 0;
  /// Null when the graph's buffer is already in the compute layout and
  /// type (and needs no padding).
  void *source = nullptr, *weights = nullptr, *destination = nullptr;
  /// Constant weights are repacked once per session.
  bool weightsPacked = false;
  ConvPlan plan;
  /// The smallest alignment of the buffers each graph's tensors were told
  /// of: the convolution's (source, weights, result) and the fused one's
  /// (source, weights, the graph's result, bias, residual).
  int64_t alignment = 0, fusedAlignment = 0;
};

/// The buffers of one call of a convolution site.
struct ConvCall {
  void *source = nullptr, *weights = nullptr;
  /// Where cuDNN writes the convolution alone (the epilogue kernel reads
  /// it): a buffer of the site's, or `out`.
  void *result = nullptr;
  const void *bias = nullptr, *residual = nullptr;
  /// The graph's result: fp32, or the 16-bit type where the compiler kept
  /// the buffer in 16 bits (sixteenBitDestination).
  void *out = nullptr;
};

/// Whether cuDNN can run a convolution's epilogue inside its graph: bias,
/// residual and no activation or ReLU, the result written in the layout
/// cuDNN computes in. Other activations (their cuDNN forms differ from the
/// runtime's at the edges) and layout changes stay with the epilogue
/// kernel.
bool epilogueFuses(const Conv2dParams &p, ActivationLayout computeLayout) {
  return (p.activation == Activation::None || isRelu(p.activation, p.alpha, p.beta)) &&
         p.destinationLayout == computeLayout;
}

/// The element type of a convolution's source, residual or destination
/// buffer: the site's 16-bit type where the compiler kept it in 16 bits.
ElementType bufferType(const ConvSite &conv, int64_t sixteenBit) {
  return sixteenBit ? conv.type : kF32;
}

/// The epilogue kernel's work after a convolution alone: bias[channel],
/// the residual and the activation on cuDNN's result, in fp32, into the
/// graph's layout and the destination's type.
EpilogueArgs convEpilogue(const ConvSite &conv, const ConvCall &call) {
  const Conv2dParams &p = conv.params;
  EpilogueArgs args{};
  args.out = call.out;
  args.outType = bufferType(conv, p.sixteenBitDestination);
  args.in = call.result;
  args.inType = conv.type;
  args.bias = static_cast<const float *>(call.bias);
  args.residual = call.residual;
  args.residualType = bufferType(conv, p.sixteenBitResidual);
  args.shape = conv.destinationShape;
  args.outStrides = activationStrides(conv.destinationShape, p.destinationLayout);
  args.inStrides = activationStrides(conv.destinationShape, conv.layout);
  args.channelAxis = 1;
  args.activation = static_cast<int64_t>(p.activation);
  args.alpha = paramFloat(p.alpha);
  args.beta = paramFloat(p.beta);
  return args;
}

/// A matrix product site: its cuBLASLt descriptors and algorithm.
struct MatMulSite {
  explicit MatMulSite(const Libraries &libraries) : libraries(libraries) {}
  MatMulSite(const MatMulSite &) = delete;
  MatMulSite &operator=(const MatMulSite &) = delete;
  ~MatMulSite() {
    for (cublasLtMatrixLayout_t layout : {weightsLayout, sourceLayout, resultLayout})
      if (layout)
        libraries.cublasLtMatrixLayoutDestroy(layout);
    if (operation)
      libraries.cublasLtMatmulDescDestroy(operation);
  }

  const Libraries &libraries;
  MatMulParams params;
  /// AMP: A and B rounded into these (fp32 accumulation and result);
  /// null in fp32. A constant B is rounded once per session.
  ElementType type = kF32;
  void *a = nullptr, *b = nullptr;
  bool bRounded = false;
  cublasLtMatmulDesc_t operation = nullptr;
  cublasLtMatrixLayout_t weightsLayout = nullptr, sourceLayout = nullptr,
                         resultLayout = nullptr;
  cublasLtMatmulAlgo_t algorithm{};
  /// The activation runs in cuBLASLt's epilogue.
  bool fusedActivation = false;
  /// Scale, mask or an activation cuBLASLt does not have: the helper
  /// epilogue runs on the result.
  bool helperEpilogue = false;
  /// What the algorithm was chosen for: the alignment of cuBLASLt's A, B,
  /// C and D and of the bias (bytes).
  std::array<int64_t, 5> alignments{};
};

/// CUDNN_ATTR_OPERATIONGRAPH_HANDLE and CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
/// by number: their names are deprecated in cuDNN 9.
constexpr auto kGraphHandleAttribute = static_cast<cudnnBackendAttributeName_t>(800);
constexpr auto kPlanHandleAttribute = static_cast<cudnnBackendAttributeName_t>(400);

/// cuDNN's unique ids of a convolution's tensors: those of the variant
/// pack, then the fused graph's virtual ones between its operations.
enum TensorId : int64_t {
  kSourceId = 1,
  kWeightsId = 2,
  kResultId = 3,
  kBiasId = 4,
  kResidualId = 5,
  kConvolvedId = 6,
  kBiasedId = 7,
  kSummedId = 8,
};

/// The tensors of a convolution plan's variant pack: their ids and the
/// call's buffers (at most five: source, weights, result, bias, residual).
struct VariantPack {
  std::array<int64_t, 5> ids{};
  std::array<void *, 5> data{};
  int64_t count = 0;

  void add(int64_t id, const void *pointer) {
    ids[static_cast<size_t>(count)] = id;
    data[static_cast<size_t>(count++)] = const_cast<void *>(pointer);
  }
  /// The smallest alignment of its buffers: what its tensors are told.
  int64_t alignment() const {
    int64_t smallest = alignmentOf(data[0]);
    for (int64_t i = 1; i < count; ++i)
      smallest = std::min(smallest, alignmentOf(data[static_cast<size_t>(i)]));
    return smallest;
  }
};

/// What cuDNN reads and writes in `call`: the convolution alone writes its
/// own result; the fused graph also reads the bias and residual and writes
/// the graph's buffer.
VariantPack variantPack(bool fused, const ConvCall &call) {
  VariantPack pack;
  pack.add(kSourceId, call.source);
  pack.add(kWeightsId, call.weights);
  if (!fused) {
    pack.add(kResultId, call.result);
    return pack;
  }
  pack.add(kResultId, call.out);
  pack.add(kBiasId, call.bias);
  if (call.residual)
    pack.add(kResidualId, call.residual);
  return pack;
}

/// `call`'s failure with `status`, with cuDNN's own detail when it has one:
/// ResourceExhausted when memory ran out, else Internal.
Status cudnnFailure(const Libraries &libraries, cudnnStatus_t status,
                    const std::string &call) {
  char detail[512] = {};
  libraries.cudnnGetLastErrorString(detail, sizeof(detail));
  std::string message = call + " failed: " + libraries.cudnnGetErrorString(status);
  if (detail[0])
    message += std::string(" (") + detail + ")";
  bool exhausted = status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
                   status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
  return exhausted ? resourceExhausted(message) : internalError(message);
}

/// Builds cuDNN backend descriptors and keeps the first failure instead of
/// failing the run: a fused graph is optional (cuDNN may not fuse it), and
/// the tests build graphs with no device.
class GraphBuilder {
public:
  GraphBuilder(const Libraries &libraries, cudnnHandle_t handle)
      : libraries_(libraries), handle_(handle) {}

  bool ok() const { return status_.isOk(); }
  const Status &status() const { return status_; }

  Descriptor make(cudnnBackendDescriptorType_t type, const char *what) {
    Descriptor descriptor;
    check(Descriptor::create(libraries_, type, descriptor),
          std::string("cudnnBackendCreateDescriptor of ") + what);
    return descriptor;
  }
  bool set(const Descriptor &descriptor, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t count, const void *values) {
    return descriptor.get() && check(libraries_.cudnnBackendSetAttribute(
                                         descriptor.get(), name, type, count, values),
                                     "cudnnBackendSetAttribute " + std::to_string(name));
  }
  bool setDescriptor(const Descriptor &descriptor, cudnnBackendAttributeName_t name,
                     const Descriptor &value) {
    cudnnBackendDescriptor_t handle = value.get();
    return handle && set(descriptor, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &handle);
  }
  bool finalize(const Descriptor &descriptor, const char *what) {
    return descriptor.get() && check(libraries_.cudnnBackendFinalize(descriptor.get()),
                                     std::string("cudnnBackendFinalize of ") + what);
  }

  /// A tensor of `type` (fp32 when virtual: cuDNN keeps what flows between
  /// a fused graph's operations in registers, never in memory).
  Descriptor tensor(int64_t id, const Index4 &shape, const Index4 &strides,
                    ElementType elementType, int64_t alignment, bool isVirtual = false) {
    Descriptor tensor = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "a tensor");
    cudnnDataType_t type = cudnnType(elementType);
    bool made =
        set(tensor, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type) &&
        set(tensor, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, shape.dims) &&
        set(tensor, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.dims) &&
        set(tensor, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id) &&
        set(tensor, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment) &&
        set(tensor, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &isVirtual) &&
        finalize(tensor, "a tensor");
    return made ? std::move(tensor) : Descriptor();
  }

  /// y = mode(x[, b]), computed in fp32.
  Descriptor pointwise(cudnnPointwiseMode_t mode, const Descriptor &x,
                       const Descriptor *b, const Descriptor &y) {
    Descriptor function =
        make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "a pointwise function");
    cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    if (!set(function, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode) ||
        !set(function, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1,
             &precision) ||
        !finalize(function, "a pointwise function"))
      return {};
    Descriptor operation =
        make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "a pointwise operation");
    if (!setDescriptor(operation, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
                       function) ||
        !setDescriptor(operation, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x) ||
        (b && !setDescriptor(operation, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b)) ||
        !setDescriptor(operation, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y) ||
        !finalize(operation, "a pointwise operation"))
      return {};
    return operation;
  }

  /// The operation graph of `operations`, in order.
  Descriptor graph(const std::vector<const Descriptor *> &operations) {
    std::vector<cudnnBackendDescriptor_t> handles;
    for (const Descriptor *operation : operations) {
      if (!operation->get())
        return {};
      handles.push_back(operation->get());
    }
    Descriptor graph =
        make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "an operation graph");
    if (!set(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
             static_cast<int64_t>(handles.size()), handles.data()))
      return {};
    // Deprecated in cuDNN 9 (cudnnBackendExecute names the handle), still
    // read by versions that choose engines for the handle's device; a
    // version that dropped it may refuse it, which changes nothing. Tests
    // build graphs with no handle.
    if (handle_)
      libraries_.cudnnBackendSetAttribute(graph.get(), kGraphHandleAttribute,
                                          CUDNN_TYPE_HANDLE, 1, &handle_);
    return finalize(graph, "an operation graph") ? std::move(graph) : Descriptor();
  }

private:
  bool check(cudnnStatus_t status, const std::string &call) {
    if (status == CUDNN_STATUS_SUCCESS)
      return true;
    if (status_.isOk())
      status_ = cudnnFailure(libraries_, status, call);
    return false;
  }

  const Libraries &libraries_;
  cudnnHandle_t handle_ = nullptr;
  Status status_;
};

/// A convolution site's shapes and layouts, before any buffer: what its
/// graphs are made of.
ConvSite describeConv(const Conv2dParams &p) {
  ConvSite conv;
  conv.params = p;
  // Grouped convolutions (depthwise ones) in NCHW, where cuDNN has engines
  // for every group count; dense ones in the source's layout.
  conv.layout = p.groups > 1 ? ActivationLayout::Nchw : p.sourceLayout;
  conv.type = elementType(p.precision);
  conv.sourceShape = {{p.batch, p.inChannels, p.inHeight, p.inWidth}};
  conv.weightShape = {
      {p.outChannels, p.inChannels / p.groups, p.kernelHeight, p.kernelWidth}};
  conv.destinationShape = {{p.batch, p.outChannels, p.outHeight, p.outWidth}};
  // Asymmetric padding (ONNX's SAME_UPPER, TensorFlow's SAME with a
  // stride) is written into a padded copy of the source; cuDNN then pads
  // nothing.
  conv.paddedShape = conv.sourceShape;
  if (isPadded(p)) {
    conv.paddedShape.dims[2] += p.padTop + p.padBottom;
    conv.paddedShape.dims[3] += p.padLeft + p.padRight;
    Index4 strides = activationStrides(conv.paddedShape, conv.layout);
    conv.interior = p.padTop * strides.dims[2] + p.padLeft * strides.dims[3];
  }
  return conv;
}

/// `conv`'s cuDNN operation graph: the forward convolution alone, its
/// result in `conv.type` in the compute layout; or, `fused`, the
/// convolution then pointwise operations in fp32 (+ bias[channel],
/// + residual, ReLU) writing the graph's result (fp32, or 16 bits where
/// the compiler kept it so; the residual likewise). Null, with `builder`'s
/// failure, when cuDNN refuses a piece.
Descriptor convGraph(GraphBuilder &builder, const ConvSite &conv, bool fused) {
  const Conv2dParams &p = conv.params;
  int64_t alignment = fused ? conv.fusedAlignment : conv.alignment;
  Index4 resultStrides = activationStrides(conv.destinationShape, conv.layout);
  Descriptor x = builder.tensor(kSourceId, conv.paddedShape,
                                activationStrides(conv.paddedShape, conv.layout),
                                conv.type, alignment);
  Descriptor w = builder.tensor(
      kWeightsId, conv.weightShape,
      weightStrides(conv.weightShape, filterFormatOf(conv.layout)), conv.type, alignment);
  Descriptor y = fused ? builder.tensor(kConvolvedId, conv.destinationShape,
                                        resultStrides, kF32, alignment, true)
                       : builder.tensor(kResultId, conv.destinationShape, resultStrides,
                                        conv.type, alignment);

  Descriptor convolution =
      builder.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "a convolution");
  cudnnDataType_t accumulate = CUDNN_DATA_FLOAT;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  bool padded = isPadded(p);
  int64_t spatialDims = 2;
  int64_t dilations[] = {p.dilationH, p.dilationW};
  int64_t strides[] = {p.strideH, p.strideW};
  int64_t prePadding[] = {padded ? 0 : p.padTop, padded ? 0 : p.padLeft};
  int64_t postPadding[] = {padded ? 0 : p.padBottom, padded ? 0 : p.padRight};
  if (!builder.set(convolution, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1,
                   &accumulate) ||
      !builder.set(convolution, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                   CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode) ||
      !builder.set(convolution, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1,
                   &spatialDims) ||
      !builder.set(convolution, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2,
                   dilations) ||
      !builder.set(convolution, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64,
                   2, strides) ||
      !builder.set(convolution, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2,
                   prePadding) ||
      !builder.set(convolution, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2,
                   postPadding) ||
      !builder.finalize(convolution, "a convolution"))
    return {};

  Descriptor operation = builder.make(
      CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, "a forward convolution");
  float alpha = 1.0f, beta = 0.0f;
  if (!builder.setDescriptor(operation, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x) ||
      !builder.setDescriptor(operation, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w) ||
      !builder.setDescriptor(operation, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y) ||
      !builder.setDescriptor(
          operation, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, convolution) ||
      !builder.set(operation, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                   CUDNN_TYPE_FLOAT, 1, &alpha) ||
      !builder.set(operation, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                   CUDNN_TYPE_FLOAT, 1, &beta) ||
      !builder.finalize(operation, "a forward convolution"))
    return {};
  if (!fused)
    return builder.graph({&operation});

  // The epilogue as the runtime's kernel computes it, in fp32: the last
  // operation writes the graph's buffer (kResultId), the others virtual
  // tensors.
  // epilogueFuses: no activation, or ReLU.
  bool relu = p.activation != Activation::None;
  auto step = [&](int64_t id, bool last) {
    return last ? builder.tensor(kResultId, conv.destinationShape, resultStrides,
                                 bufferType(conv, p.sixteenBitDestination), alignment)
                : builder.tensor(id, conv.destinationShape, resultStrides, kF32,
                                 alignment, true);
  };
  // The bias as a [1, C, 1, 1] tensor in the result's layout, as cuDNN's
  // own convolution-bias-activation graphs lay it out.
  Index4 biasShape = {{1, p.outChannels, 1, 1}};
  Descriptor bias = builder.tensor(
      kBiasId, biasShape, activationStrides(biasShape, conv.layout), kF32, alignment);
  Descriptor biased = step(kBiasedId, !p.hasResidual && !relu);
  Descriptor addBias = builder.pointwise(CUDNN_POINTWISE_ADD, y, &bias, biased);
  std::vector<const Descriptor *> operations = {&operation, &addBias};
  const Descriptor *last = &biased;
  Descriptor residual, summed, addResidual;
  if (p.hasResidual) {
    residual = builder.tensor(kResidualId, conv.destinationShape, resultStrides,
                              bufferType(conv, p.sixteenBitResidual), alignment);
    summed = step(kSummedId, !relu);
    addResidual = builder.pointwise(CUDNN_POINTWISE_ADD, biased, &residual, summed);
    operations.push_back(&addResidual);
    last = &summed;
  }
  Descriptor result, activation;
  if (relu) {
    result = step(kResultId, true);
    activation = builder.pointwise(CUDNN_POINTWISE_RELU_FWD, *last, nullptr, result);
    operations.push_back(&activation);
  }
  if (!builder.ok())
    return {};
  return builder.graph(operations);
}

} // namespace

class LibraryKernels {
public:
  LibraryKernels(DeviceServices &device, const Libraries &libraries, int64_t sites,
                 LibraryTuning tuning, std::string path)
      : device_(device), libraries_(libraries), path_(std::move(path)),
        tuning_(std::move(tuning)), trials_(std::max(tuning_.trials, 1)), convs_(sites),
        matmuls_(sites) {
    tuning_.planned.resize(static_cast<size_t>(std::max<int64_t>(sites, 0)));
  }
  LibraryKernels(const LibraryKernels &) = delete;
  LibraryKernels &operator=(const LibraryKernels &) = delete;
  ~LibraryKernels();

  Status open(int64_t kinds);

  void conv(int64_t site, const int64_t *words, void **buffers);
  void matmul(int64_t site, const int64_t *words, void **buffers);
  void pool(int64_t site, const int64_t *words, void **buffers);
  void softmax(int64_t site, const int64_t *words, void **buffers);
  void layerNorm(int64_t site, const int64_t *words, void **buffers);
  void topK(int64_t site, const int64_t *words, void **buffers);
  void scatter(int64_t site, const int64_t *words, void **buffers);

  std::vector<GpuKernelChoice> choices() const;

private:
  /// A candidate decided before any trial run: the tuning record's for
  /// `signature`, else the plan's for `site`.
  struct Decided {
    std::string candidate;
    GpuKernelChoice::Source source;
  };
  /// A record's candidate for the site, else the plan's; one that splits
  /// the site over several GPUs is passed over (runsOnOneDevice).
  std::optional<Decided> decided(int64_t site, KernelKind kind,
                                 const std::vector<int64_t> &params,
                                 const std::string &signature);
  /// Whether `decided` runs on one device; a tensor-parallel split does
  /// not, and is set aside with a warning (saying too when it would not fit
  /// the site).
  bool runsOnOneDevice(int64_t site, KernelKind kind, const std::vector<int64_t> &params,
                       const Decided &decided) const;
  /// Says that the decided candidate is not one the library lists here.
  void setAside(int64_t site, const char *kind, const Decided &decided);
  /// `words` as `Params`, the site in range (fails the run otherwise);
  /// nullopt once the run has failed.
  template <typename Params>
  std::optional<Params> paramsOf(int64_t site, const int64_t *words, const char *kind);
  void failSite(int64_t site, const char *kind, const std::string &why);
  bool check(cudnnStatus_t status, const std::string &call);
  bool check(cublasStatus_t status, const std::string &call);

  Descriptor makeDescriptor(cudnnBackendDescriptorType_t type, const std::string &what);
  ConvCall convCall(const ConvSite &conv, void **buffers) const;
  std::unique_ptr<ConvSite> createConv(int64_t site, const Conv2dParams &p,
                                       void **buffers);
  /// Chooses the site's plan among those of `graph` (the convolution
  /// alone) and `fusedGraph` (with its epilogue; null when it has none).
  bool planConv(int64_t site, ConvSite &conv, const Descriptor &graph,
                const Descriptor &fusedGraph, const ConvCall &call);
  /// Appends `graph`'s plans whose configurations finalize, in the
  /// heuristics' order (mode A, else the fallback engines), to `exact` (the
  /// kernel's numerics) until it has `limit` more; the first plan with other
  /// numerics goes to `inexact` when there is one to fill (null: none wanted).
  void listConvPlans(const Descriptor &graph, ElementType type, bool fused, size_t limit,
                     std::vector<ConvPlan> &exact, std::optional<ConvPlan> *inexact);
  /// Heuristic `mode`'s engine configurations for `graph`, in its order
  /// (none when the mode cannot serve it).
  std::vector<Descriptor> engineConfigs(const Descriptor &graph,
                                        cudnnBackendHeurMode_t mode);
  /// `config`'s execution plan, if it finalizes.
  std::optional<ConvPlan> makeConvPlan(Descriptor config);
  /// The configuration that `candidate` describes among those the
  /// heuristics list for `graph`, or for `fusedGraph` when it names a fused
  /// epilogue, as a plan. Only a configuration with the kernel's numerics
  /// (hasExactNumerics) qualifies: a record or plan never moves fp32 onto
  /// TF32.
  std::optional<ConvPlan> listedConvPlan(const Descriptor &graph,
                                         const Descriptor &fusedGraph,
                                         const std::string &candidate, ElementType type);
  /// `config` as a GPU candidate (Tuning.h); empty when cuDNN cannot say.
  std::string configText(cudnnBackendDescriptor_t config, bool fused);
  std::string algoText(const cublasLtMatmulAlgo_t &algo);
  /// Queues `plan` on the call's buffers.
  cudnnStatus_t executePlan(const ConvPlan &plan, const ConvCall &call);
  /// Queues `plan` and, unless it fused the epilogue, the epilogue kernel
  /// after it; false once the run has failed.
  bool runConv(const ConvSite &conv, const ConvPlan &plan, const ConvCall &call);
  /// Whether engine configuration `config` computes as `type` promises:
  /// no inputs converted down, no reduction in reduced precision (AMP
  /// accumulates in fp32), and no TF32 tensor cores for fp32.
  bool hasExactNumerics(cudnnBackendDescriptor_t config, ElementType type);
  /// Whether `config`'s engine compiles its kernel when its plan is made
  /// (cuDNN's runtime fusion engines: NVRTC, up to seconds a plan).
  bool compilesAtRuntime(cudnnBackendDescriptor_t config);
  /// The notes of `config`'s engine under `attribute` (numerical or
  /// behavior notes, of `type`); none when cuDNN cannot say.
  template <typename Note>
  std::vector<Note> engineNotes(cudnnBackendDescriptor_t config,
                                cudnnBackendAttributeName_t attribute,
                                cudnnBackendAttributeType_t type);
  /// Milliseconds per call of `run` on the device (a warm-up call, then
  /// kGpuTrialRuns timed ones); infinity when it fails.
  double timeCalls(const std::function<bool()> &run);
  void setHandle(const Descriptor &descriptor, cudnnBackendAttributeName_t name);
  /// `a`, `b`, `c`, `d` and `bias`: the buffers of its first call, which
  /// its trial runs use.
  std::unique_ptr<MatMulSite> createMatMul(int64_t site, const MatMulParams &p,
                                           const void *a, const void *b, const void *c,
                                           const void *d, const void *bias);
  /// Device memory of `workspace_` of at least `bytes`.
  void *workspace(uint64_t bytes);

  void gather(void *out, const void *in, const Index4 &shape, const Index4 &outStrides,
              const Index4 &inStrides, ElementType outType = kF32,
              ElementType inType = kF32);
  void epilogue(EpilogueArgs args);
  template <typename Args> void launch(const char *kernel, uint64_t blocks, Args args);

  DeviceServices &device_;
  const Libraries &libraries_;
  std::string path_;
  LibraryTuning tuning_;
  int trials_ = 1;
  std::map<int64_t, GpuKernelChoice> choices_;
  cudnnHandle_t cudnn_ = nullptr;
  cublasLtHandle_t cublasLt_ = nullptr;
  void *helpers_ = nullptr;
  /// The helper kernels looked up so far, by name.
  std::map<std::string, void *> functions_;
  /// Session-lifetime workspaces: a larger one replaces the current, the
  /// old ones stay (launches queued before may still use them).
  std::vector<void *> workspaces_;
  uint64_t workspaceBytes_ = 0;
  std::vector<std::unique_ptr<ConvSite>> convs_;
  std::vector<std::unique_ptr<MatMulSite>> matmuls_;
};

void LibraryKernelsDeleter::operator()(LibraryKernels *kernels) const { delete kernels; }

LibraryKernels::~LibraryKernels() {
  matmuls_.clear();
  convs_.clear();
  if (cublasLt_)
    libraries_.cublasLtDestroy(cublasLt_);
  if (cudnn_)
    libraries_.cudnnDestroy(cudnn_);
}

Status LibraryKernels::open(int64_t kinds) {
  auto uses = [&](KernelKind kind) { return (kinds >> static_cast<int64_t>(kind)) & 1; };
  // A cuda compile inlines the integer kernels (they have no slot below).
  for (KernelKind kind : {KernelKind::IntegerMatMul, KernelKind::IntegerConv2d})
    if (uses(kind))
      return dataLoss(std::string("the code calls an ") + kernelKindName(kind) +
                      " kernel, which no cuda compile writes and this runtime has "
                      "on the CPU only");
  if (uses(KernelKind::Conv2d)) {
    if (cudnnStatus_t status = libraries_.cudnnCreate(&cudnn_);
        status != CUDNN_STATUS_SUCCESS) {
      cudnn_ = nullptr;
      return internalError("cudnnCreate on " + device_.label() +
                           " failed: " + libraries_.cudnnGetErrorString(status));
    }
    if (cudnnStatus_t status = libraries_.cudnnSetStream(
            cudnn_, static_cast<cudaStream_t>(device_.stream()));
        status != CUDNN_STATUS_SUCCESS)
      return internalError(std::string("cudnnSetStream failed: ") +
                           libraries_.cudnnGetErrorString(status));
  }
  if (uses(KernelKind::MatMul))
    if (cublasStatus_t status = libraries_.cublasLtCreate(&cublasLt_);
        status != CUBLAS_STATUS_SUCCESS) {
      cublasLt_ = nullptr;
      return internalError("cublasLtCreate on " + device_.label() +
                           " failed: " + libraries_.cublasLtGetStatusString(status));
    }
  helpers_ = device_.loadModule(flowc_gpu_helpers, "the runtime's helper kernels");
  if (!helpers_)
    return internalError("the runtime's helper kernels do not load on " +
                         device_.label());
  return Status::ok();
}

template <typename Params>
std::optional<Params> LibraryKernels::paramsOf(int64_t site, const int64_t *words,
                                               const char *kind) {
  // After a failure the run's result is known: the rest of it is skipped.
  if (device_.failed())
    return std::nullopt;
  if (site < 0 || site >= static_cast<int64_t>(convs_.size())) {
    failSite(site, kind, "the code declares " + std::to_string(convs_.size()) + " sites");
    return std::nullopt;
  }
  Params params;
  std::memcpy(&params, words, sizeof(Params));
  return params;
}

void LibraryKernels::failSite(int64_t site, const char *kind, const std::string &why) {
  device_.fail(internalError(std::string(kind) + " kernel site " + std::to_string(site) +
                             " of '" + path_ + "' on " + device_.label() + ": " + why));
}

bool LibraryKernels::check(cudnnStatus_t status, const std::string &call) {
  if (status == CUDNN_STATUS_SUCCESS)
    return true;
  device_.fail(cudnnFailure(libraries_, status, call));
  return false;
}

bool LibraryKernels::check(cublasStatus_t status, const std::string &call) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return true;
  std::string message = call + " failed: " + libraries_.cublasLtGetStatusString(status);
  device_.fail(status == CUBLAS_STATUS_ALLOC_FAILED ? resourceExhausted(message)
                                                    : internalError(message));
  return false;
}

Descriptor LibraryKernels::makeDescriptor(cudnnBackendDescriptorType_t type,
                                          const std::string &what) {
  Descriptor descriptor;
  check(Descriptor::create(libraries_, type, descriptor),
        "cudnnBackendCreateDescriptor of " + what);
  return descriptor;
}

void *LibraryKernels::workspace(uint64_t bytes) {
  if (bytes <= workspaceBytes_)
    return workspaces_.empty() ? nullptr : workspaces_.back();
  void *buffer = device_.allocate(bytes, "a library kernel's workspace");
  if (!buffer)
    return nullptr;
  workspaces_.push_back(buffer);
  workspaceBytes_ = bytes;
  return buffer;
}

template <typename Args>
void LibraryKernels::launch(const char *kernel, uint64_t blocks, Args args) {
  // Looked up once: a launch is then one driver call, which is also all a
  // CUDA graph capture sees.
  void *&function = functions_[kernel];
  if (!function && !(function = device_.moduleFunction(helpers_, kernel)))
    return;
  void *params[] = {&args};
  device_.launch(function, blocks, kHelperBlock, params);
}

void LibraryKernels::gather(void *out, const void *in, const Index4 &shape,
                            const Index4 &outStrides, const Index4 &inStrides,
                            ElementType outType, ElementType inType) {
  GatherArgs args{out, in, shape, outStrides, inStrides, outType, inType};
  launch(kGatherKernel, blocksFor(elements(shape)), inOutputOrder(args));
}

void LibraryKernels::epilogue(EpilogueArgs args) {
  launch(kEpilogueKernel, blocksFor(elements(args.shape)), inOutputOrder(args));
}

// Convolutions: cuDNN's graph API, one forward-convolution operation in
// NCHW or NHWC with weights in the matching filter format, then the helper
// epilogue (bias, residual, activation), which also writes the graph's
// layout when it differs.

template <typename Note>
std::vector<Note> LibraryKernels::engineNotes(cudnnBackendDescriptor_t config,
                                              cudnnBackendAttributeName_t attribute,
                                              cudnnBackendAttributeType_t type) {
  cudnnBackendDescriptor_t engine = nullptr;
  if (libraries_.cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) !=
      CUDNN_STATUS_SUCCESS)
    return {};
  Descriptor owned(libraries_, engine);
  int64_t got = 0;
  // A newer library may have more notes than these headers: cuDNN writes
  // at most the room it is given, and says how many it has.
  std::vector<Note> notes(64);
  int64_t count = 0;
  if (libraries_.cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                                          &engine) != CUDNN_STATUS_SUCCESS ||
      libraries_.cudnnBackendGetAttribute(engine, attribute, type,
                                          static_cast<int64_t>(notes.size()), &count,
                                          notes.data()) != CUDNN_STATUS_SUCCESS)
    return {};
  notes.resize(static_cast<size_t>(std::clamp<int64_t>(count, 0, notes.size())));
  return notes;
}

bool LibraryKernels::hasExactNumerics(cudnnBackendDescriptor_t config, ElementType type) {
  // A version that cannot say has no notes to respect.
  for (cudnnBackendNumericalNote_t note : engineNotes<cudnnBackendNumericalNote_t>(
           config, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE)) {
    if (note == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS)
      return false;
    // AMP promises fp32 accumulation: 16-bit sums lose it over a
    // convolution's thousands of terms.
    if (note == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)
      return false;
    // Tensor cores on fp32 data are TF32: 10-bit mantissas.
    if (note == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && type == kF32)
      return false;
  }
  return true;
}

bool LibraryKernels::compilesAtRuntime(cudnnBackendDescriptor_t config) {
  std::vector<cudnnBackendBehaviorNote_t> notes = engineNotes<cudnnBackendBehaviorNote_t>(
      config, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE);
  return std::find(notes.begin(), notes.end(), CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) !=
         notes.end();
}

double LibraryKernels::timeCalls(const std::function<bool()> &run) {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  if (!run() || !device_.synchronize())
    return kNever;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kGpuTrialRuns; ++i)
    if (!run())
      return kNever;
  if (!device_.synchronize())
    return kNever;
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                   start)
             .count() /
         kGpuTrialRuns;
}

cudnnStatus_t LibraryKernels::executePlan(const ConvPlan &plan, const ConvCall &call) {
  void *workspacePointer = nullptr;
  if (plan.workspaceBytes > 0 &&
      !(workspacePointer = workspace(static_cast<uint64_t>(plan.workspaceBytes))))
    return CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED;
  VariantPack buffers = variantPack(plan.fused, call);
  cudnnBackendDescriptor_t pack = nullptr;
  cudnnStatus_t status = libraries_.cudnnBackendCreateDescriptor(
      CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
  if (status != CUDNN_STATUS_SUCCESS)
    return status;
  Descriptor owned(libraries_, pack);
  for (auto [name, type, n, values] :
       {std::tuple<cudnnBackendAttributeName_t, cudnnBackendAttributeType_t, int64_t,
                   void *>{CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                           buffers.count, buffers.ids.data()},
        {CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, buffers.count,
         buffers.data.data()},
        {CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspacePointer}})
    if ((status = libraries_.cudnnBackendSetAttribute(pack, name, type, n, values)) !=
        CUDNN_STATUS_SUCCESS)
      return status;
  if ((status = libraries_.cudnnBackendFinalize(pack)) != CUDNN_STATUS_SUCCESS)
    return status;
  return libraries_.cudnnBackendExecute(cudnn_, plan.plan.get(), pack);
}

bool LibraryKernels::runConv(const ConvSite &conv, const ConvPlan &plan,
                             const ConvCall &call) {
  if (executePlan(plan, call) != CUDNN_STATUS_SUCCESS)
    return false;
  if (!plan.fused)
    epilogue(convEpilogue(conv, call));
  return !device_.failed();
}

std::vector<Descriptor> LibraryKernels::engineConfigs(const Descriptor &graph,
                                                      cudnnBackendHeurMode_t mode) {
  auto ok = [](cudnnStatus_t status) { return status == CUDNN_STATUS_SUCCESS; };
  const Libraries &cudnn = libraries_;
  cudnnBackendDescriptor_t graphDescriptor = graph.get();
  Descriptor heuristics =
      makeDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
  int64_t count = 0;
  if (!heuristics.get() ||
      !ok(cudnn.cudnnBackendSetAttribute(
          heuristics.get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graphDescriptor)) ||
      !ok(cudnn.cudnnBackendSetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_MODE,
                                         CUDNN_TYPE_HEUR_MODE, 1, &mode)) ||
      !ok(cudnn.cudnnBackendFinalize(heuristics.get())) ||
      !ok(cudnn.cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                         nullptr)) ||
      count <= 0)
    return {};
  std::vector<Descriptor> configs;
  std::vector<cudnnBackendDescriptor_t> handles;
  for (int64_t i = 0; i < count; ++i) {
    configs.push_back(
        makeDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "an engine configuration"));
    if (!configs.back().get())
      return {};
    handles.push_back(configs.back().get());
  }
  int64_t returned = 0;
  if (!ok(cudnn.cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned,
                                         handles.data())))
    return {};
  configs.resize(static_cast<size_t>(std::clamp<int64_t>(returned, 0, count)));
  return configs;
}

std::optional<ConvPlan> LibraryKernels::makeConvPlan(Descriptor config) {
  auto ok = [](cudnnStatus_t status) { return status == CUDNN_STATUS_SUCCESS; };
  Descriptor plan =
      makeDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "an execution plan");
  cudnnBackendDescriptor_t handle = config.get();
  int64_t workspace = 0;
  int64_t got = 0;
  if (!plan.get() || !ok(libraries_.cudnnBackendSetAttribute(
                         plan.get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &handle)))
    return std::nullopt;
  setHandle(plan, kPlanHandleAttribute);
  if (!ok(libraries_.cudnnBackendFinalize(plan.get())) ||
      !ok(libraries_.cudnnBackendGetAttribute(plan.get(),
                                              CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                              CUDNN_TYPE_INT64, 1, &got, &workspace)))
    return std::nullopt;
  // The configuration lives as long as its plan.
  return ConvPlan{std::move(plan), workspace, std::move(config)};
}

std::string LibraryKernels::configText(cudnnBackendDescriptor_t config, bool fused) {
  auto ok = [](cudnnStatus_t status) { return status == CUDNN_STATUS_SUCCESS; };
  const Libraries &cudnn = libraries_;
  cudnnBackendDescriptor_t engine = nullptr;
  if (!ok(cudnn.cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine)))
    return {};
  Descriptor ownedEngine(libraries_, engine);
  GpuCandidate candidate;
  candidate.library = GpuCandidate::Library::Cudnn;
  candidate.fusedEpilogue = fused;
  int64_t got = 0;
  if (!ok(cudnn.cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_ENGINE,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got,
                                         &engine)) ||
      !ok(cudnn.cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                         CUDNN_TYPE_INT64, 1, &got, &candidate.id)))
    return {};
  // Room for a choice of every knob type there is; cuDNN says how many it
  // filled.
  constexpr int64_t count = CUDNN_KNOB_TYPE_COUNTS;
  got = 0;
  std::vector<Descriptor> knobs;
  std::vector<cudnnBackendDescriptor_t> handles;
  for (int64_t i = 0; i < count; ++i) {
    cudnnBackendDescriptor_t knob = nullptr;
    if (!ok(cudnn.cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR,
                                               &knob)))
      return {};
    knobs.emplace_back(libraries_, knob);
    handles.push_back(knob);
  }
  if (!ok(cudnn.cudnnBackendGetAttribute(config, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                         handles.data())))
    return {};
  for (int64_t i = 0; i < std::min(got, count); ++i) {
    cudnnBackendKnobType_t type{};
    int64_t value = 0, read = 0;
    if (!ok(cudnn.cudnnBackendGetAttribute(handles[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                           CUDNN_TYPE_KNOB_TYPE, 1, &read, &type)) ||
        !ok(cudnn.cudnnBackendGetAttribute(handles[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                                           CUDNN_TYPE_INT64, 1, &read, &value)))
      return {};
    candidate.knobs.emplace_back(static_cast<int64_t>(type), value);
  }
  std::sort(candidate.knobs.begin(), candidate.knobs.end());
  std::string text = formatGpuCandidate(candidate);
  // Only what parses back names a configuration (a negative value would not).
  return parseGpuCandidate(text) ? text : std::string();
}

std::optional<ConvPlan> LibraryKernels::listedConvPlan(const Descriptor &graph,
                                                       const Descriptor &fusedGraph,
                                                       const std::string &candidate,
                                                       ElementType type) {
  Expected<GpuCandidate> parsed = parseGpuCandidate(candidate);
  bool fused = parsed && parsed->fusedEpilogue;
  const Descriptor &listing = fused ? fusedGraph : graph;
  if (!parsed || !listing.get())
    return std::nullopt;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK})
    for (Descriptor &config : engineConfigs(listing, mode))
      if (configText(config.get(), fused) == candidate) {
        if (!hasExactNumerics(config.get(), type))
          return std::nullopt;
        std::optional<ConvPlan> plan = makeConvPlan(std::move(config));
        if (plan)
          plan->fused = fused;
        return plan;
      }
  return std::nullopt;
}

std::optional<LibraryKernels::Decided>
LibraryKernels::decided(int64_t site, KernelKind kind, const std::vector<int64_t> &params,
                        const std::string &signature) {
  std::optional<Decided> found;
  if (tuning_.record)
    if (std::optional<std::string> recorded = tuning_.record(signature);
        recorded && !recorded->empty())
      found = Decided{*recorded, GpuKernelChoice::Source::Record};
  if (found && !runsOnOneDevice(site, kind, params, *found))
    found.reset();
  if (!found && site >= 0 && static_cast<size_t>(site) < tuning_.planned.size() &&
      !tuning_.planned[site].empty())
    found = Decided{tuning_.planned[site], GpuKernelChoice::Source::Plan};
  if (found && !runsOnOneDevice(site, kind, params, *found))
    found.reset();
  return found;
}

bool LibraryKernels::runsOnOneDevice(int64_t site, KernelKind kind,
                                     const std::vector<int64_t> &params,
                                     const Decided &decided) const {
  Expected<GpuCandidate> parsed = parseGpuCandidate(decided.candidate);
  if (!parsed || !parsed->split)
    return true;
  Status fits = checkTensorSplit(kind, params, *parsed->split);
  spdlog::warn(
      "{} site {} of '{}': the {} candidate '{}' splits it over {} GPUs (tensor "
      "parallel{}); a session runs on one, so it is set aside",
      kernelKindName(kind), site, path_,
      decided.source == GpuKernelChoice::Source::Record ? "tuning record's" : "plan's",
      decided.candidate, parsed->split->ways, fits ? "" : ", and " + fits.message());
  return false;
}

void LibraryKernels::setAside(int64_t site, const char *kind, const Decided &decided) {
  spdlog::warn("{} site {} of '{}': the {} candidate '{}' is not one the library lists "
               "for it on {}; trial runs choose instead",
               kind, site, path_,
               decided.source == GpuKernelChoice::Source::Record ? "tuning record's"
                                                                 : "plan's",
               decided.candidate, device_.label());
}

void LibraryKernels::listConvPlans(const Descriptor &graph, ElementType type, bool fused,
                                   size_t limit, std::vector<ConvPlan> &exact,
                                   std::optional<ConvPlan> *inexact) {
  size_t before = exact.size();
  // Heuristic mode A first (its engines are the fast ones), then the
  // fallback engines, which cover every convolution the library has. A
  // mode or a configuration that cannot serve this shape is skipped.
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (Descriptor &config : engineConfigs(graph, mode)) {
      if (exact.size() - before >= limit)
        break;
      // Making such a plan compiles its kernel: seconds of a session's
      // first call, for every fused shape.
      if (fused && !tuning_.compiledFusion && compilesAtRuntime(config.get()))
        continue;
      // Of the others only the first can ever run (when no engine keeps
      // the numerics): no plan is made for the rest.
      bool numericsKept = hasExactNumerics(config.get(), type);
      if (!numericsKept && (!inexact || inexact->has_value()))
        continue;
      if (std::optional<ConvPlan> plan = makeConvPlan(std::move(config))) {
        plan->fused = fused;
        if (numericsKept)
          exact.push_back(std::move(*plan));
        else
          *inexact = std::move(plan);
      }
    }
    if (device_.failed() || exact.size() > before)
      return;
  }
}

bool LibraryKernels::planConv(int64_t site, ConvSite &conv, const Descriptor &graph,
                              const Descriptor &fusedGraph, const ConvCall &call) {
  GpuKernelChoice choice;
  choice.site = site;
  choice.kind = "conv2d";
  choice.signature = librarySignature(KernelKind::Conv2d, paramWords(conv.params));
  // A record's or the plan's candidate, when the heuristics list it.
  if (std::optional<Decided> known =
          decided(site, KernelKind::Conv2d, paramWords(conv.params), choice.signature)) {
    if (std::optional<ConvPlan> plan =
            listedConvPlan(graph, fusedGraph, known->candidate, conv.type)) {
      conv.plan = std::move(*plan);
      choice.fusedEpilogue = conv.plan.fused;
      choice.candidate = known->candidate;
      choice.source = known->source;
      choices_[site] = std::move(choice);
      return true;
    }
    if (device_.failed())
      return false;
    setAside(site, "conv2d", *known);
  }
  // Candidates: the fused graph's plans (one pass less over the result),
  // up to half the trials, then the convolution's alone, followed by the
  // epilogue kernel, to fill them; each in the heuristics' order of
  // expected speed, so one trial takes the fused graph's first. Engines
  // whose numerics are not the kernel's (TF32 tensor cores for fp32,
  // inputs converted down) are never fused, and run the convolution alone
  // only when nothing else can.
  std::vector<ConvPlan> plans;
  std::optional<ConvPlan> inexact;
  auto trials = static_cast<size_t>(trials_);
  if (fusedGraph.get())
    listConvPlans(fusedGraph, conv.type, true, std::max<size_t>(trials / 2, 1), plans,
                  nullptr);
  // The convolution alone fills the trials left, and is listed when
  // nothing fused is, for an engine with other numerics as the last resort.
  if (plans.size() < trials || plans.empty())
    listConvPlans(graph, conv.type, false, std::max<size_t>(trials - plans.size(), 1),
                  plans, &inexact);
  if (device_.failed())
    return false;
  // A trial's workspace stays for the session, and one the device cannot
  // give fails it: beyond the first choice, engines needing more than this
  // are not tried.
  if (plans.size() > 1)
    plans.erase(std::remove_if(plans.begin() + 1, plans.end(),
                               [](const ConvPlan &plan) {
                                 return plan.workspaceBytes > kMaxTrialWorkspaceBytes;
                               }),
                plans.end());
  if (plans.empty() && inexact) {
    spdlog::warn("conv2d site {} of '{}': cuDNN has only engines with TF32 or "
                 "down-converted inputs for it; results may differ from fp32 by ~1e-3",
                 site, path_);
    plans.push_back(std::move(*inexact));
  }
  // A trial times the whole site: the convolution and, unless fused, the
  // epilogue kernel. When the residual is the result's own buffer, the
  // trials' epilogues write the workspace instead: running them into the
  // result would add the residual again on each run. (The workspace is
  // free between cuDNN's calls: both queue on the one stream.)
  ConvCall trialCall = call;
  uint64_t resultBytes = static_cast<uint64_t>(elements(conv.destinationShape)) * 4;
  if (call.residual && overlap(call.residual, call.out, resultBytes) &&
      !(trialCall.out = workspace(resultBytes)))
    return false;
  auto timed = [&](const ConvPlan &plan) {
    return timeCalls([&] { return runConv(conv, plan, trialCall); });
  };
  if (plans.size() == 1) {
    choice.candidate = configText(plans[0].config.get(), plans[0].fused);
    // Timed too (when trials are asked for): a record of the only
    // candidate spares the next session and compile the search.
    if (trials_ > 1)
      choice.timings.emplace_back(choice.candidate, timed(plans[0]));
    if (device_.failed())
      return false;
    conv.plan = std::move(plans[0]);
    choice.fusedEpilogue = conv.plan.fused;
    choices_[site] = std::move(choice);
    return true;
  }
  if (!plans.empty()) {
    // Trial runs: the fastest on this device and these buffers.
    size_t best = 0;
    double bestMs = std::numeric_limits<double>::infinity();
    choice.source = GpuKernelChoice::Source::Trials;
    for (size_t i = 0; i < plans.size(); ++i) {
      double ms = timed(plans[i]);
      choice.timings.emplace_back(configText(plans[i].config.get(), plans[i].fused), ms);
      if (ms < bestMs) {
        best = i;
        bestMs = ms;
      }
    }
    if (device_.failed())
      return false;
    if (std::isfinite(bestMs)) {
      spdlog::debug("conv2d site {} of '{}': engine configuration {} of {} ({:.3f} ms{})",
                    site, path_, best, plans.size(), bestMs,
                    plans[best].fused ? ", epilogue fused" : "");
      choice.candidate = choice.timings[best].first;
      conv.plan = std::move(plans[best]);
      choice.fusedEpilogue = conv.plan.fused;
      choices_[site] = std::move(choice);
      return true;
    }
  }
  const Conv2dParams &p = conv.params;
  char detail[512] = {};
  libraries_.cudnnGetLastErrorString(detail, sizeof(detail));
  failSite(site, "conv2d",
           "cuDNN has no engine for this convolution (" + std::to_string(p.batch) + "x" +
               std::to_string(p.inChannels) + "x" + std::to_string(p.inHeight) + "x" +
               std::to_string(p.inWidth) + " to " + std::to_string(p.outChannels) +
               " channels, " + std::to_string(p.kernelHeight) + "x" +
               std::to_string(p.kernelWidth) + " kernel, " + std::to_string(p.groups) +
               " groups)" + (detail[0] ? std::string(": ") + detail : std::string()));
  return false;
}

void LibraryKernels::setHandle(const Descriptor &descriptor,
                               cudnnBackendAttributeName_t name) {
  // Deprecated in cuDNN 9 (cudnnBackendExecute names the handle), still
  // read by versions that choose engines for the handle's device; a
  // version that dropped it may refuse it, which changes nothing.
  libraries_.cudnnBackendSetAttribute(descriptor.get(), name, CUDNN_TYPE_HANDLE, 1,
                                      &cudnn_);
}

std::unique_ptr<ConvSite> LibraryKernels::createConv(int64_t site, const Conv2dParams &p,
                                                     void **buffers) {
  auto conv = std::make_unique<ConvSite>(describeConv(p));
  auto bytes = [&](const Index4 &shape) {
    return static_cast<uint64_t>(elements(shape)) * elementBytes(conv->type);
  };
  bool padded = isPadded(p);
  // AMP rounds all three into 16-bit buffers of their own, but for a source
  // the compiler kept in 16 bits.
  bool amp = conv->type != kF32;
  std::string what = "conv2d site " + std::to_string(site);
  if (((amp && !p.sixteenBitSource) || padded || p.sourceLayout != conv->layout) &&
      !(conv->source =
            device_.allocate(bytes(conv->paddedShape), "the source of " + what)))
    return nullptr;
  // The border stays zero: only the interior is written after this.
  if (padded)
    gather(conv->source, nullptr, conv->paddedShape,
           activationStrides(conv->paddedShape, conv->layout), {}, conv->type);
  if ((amp || p.weightLayout != filterFormatOf(conv->layout)) &&
      !(conv->weights =
            device_.allocate(bytes(conv->weightShape), "the weights of " + what)))
    return nullptr;
  // cuDNN writes its result before the epilogue adds the residual, so a
  // residual in the result's own buffer (the memory plan's add-to-output)
  // needs the result elsewhere; so do trial runs, which write it too. Such
  // a site is not fused: cuDNN would read the residual where it writes.
  uint64_t resultBytes = static_cast<uint64_t>(elements(conv->destinationShape)) * 4;
  bool residualInResult = p.hasResidual && overlap(buffers[3], buffers[4], resultBytes);
  // In place, each element written in another width would overwrite its
  // neighbours' residual before they are read (the compiler never plans it).
  if (residualInResult && p.sixteenBitResidual != p.sixteenBitDestination) {
    failSite(site, "conv2d",
             "the residual shares the result's buffer in another element type");
    return nullptr;
  }
  if ((amp || p.destinationLayout != conv->layout || residualInResult) &&
      !(conv->destination =
            device_.allocate(bytes(conv->destinationShape), "the result of " + what)))
    return nullptr;

  ConvCall call = convCall(*conv, buffers);
  conv->alignment = variantPack(false, call).alignment();
  conv->fusedAlignment = variantPack(true, call).alignment();
  GraphBuilder builder(libraries_, cudnn_);
  Descriptor graph = convGraph(builder, *conv, false);
  if (!graph.get()) {
    device_.fail(builder.status());
    return nullptr;
  }
  // The fused graph is optional: a cuDNN that refuses it (or lists no
  // engine for it) leaves the epilogue kernel.
  Descriptor fusedGraph;
  if (epilogueFuses(p, conv->layout) && !residualInResult) {
    GraphBuilder fusedBuilder(libraries_, cudnn_);
    fusedGraph = convGraph(fusedBuilder, *conv, true);
    if (!fusedGraph.get())
      spdlog::debug("{} of '{}': its epilogue stays a kernel of its own: {}", what, path_,
                    fusedBuilder.status().message());
  }
  if (!planConv(site, *conv, graph, fusedGraph, call))
    return nullptr;
  return conv;
}

ConvCall LibraryKernels::convCall(const ConvSite &conv, void **buffers) const {
  bool residual = conv.params.hasResidual;
  ConvCall call;
  call.source = conv.source ? conv.source : buffers[0];
  call.weights = conv.weights ? conv.weights : buffers[1];
  call.bias = buffers[2];
  call.residual = residual ? buffers[3] : nullptr;
  call.out = buffers[3 + residual];
  call.result = conv.destination ? conv.destination : call.out;
  return call;
}

void LibraryKernels::conv(int64_t site, const int64_t *words, void **buffers) {
  std::optional<Conv2dParams> p = paramsOf<Conv2dParams>(site, words, "conv2d");
  if (!p)
    return;
  std::unique_ptr<ConvSite> &slot = convs_[site];
  if (!slot && !(slot = createConv(site, *p, buffers)))
    return;
  ConvSite &conv = *slot;
  ConvCall call = convCall(conv, buffers);
  uint64_t resultBytes = static_cast<uint64_t>(elements(conv.destinationShape)) * 4;
  if (call.residual && (conv.plan.fused || !conv.destination) &&
      overlap(call.residual, call.out, resultBytes)) {
    failSite(site, "conv2d",
             "the residual moved into the result's buffer after the site was planned");
    return;
  }
  if (conv.source)
    gather(static_cast<char *>(conv.source) + conv.interior * elementBytes(conv.type),
           buffers[0], conv.sourceShape, activationStrides(conv.paddedShape, conv.layout),
           activationStrides(conv.sourceShape, p->sourceLayout), conv.type,
           bufferType(conv, p->sixteenBitSource));
  if (conv.weights && !(p->constantWeights && conv.weightsPacked)) {
    gather(conv.weights, buffers[1], conv.weightShape,
           weightStrides(conv.weightShape, filterFormatOf(conv.layout)),
           weightStrides(conv.weightShape, p->weightLayout), conv.type);
    conv.weightsPacked = true;
  }
  // The buffers cuDNN sees must stay as aligned as its tensors were told.
  if (variantPack(conv.plan.fused, call).alignment() <
      (conv.plan.fused ? conv.fusedAlignment : conv.alignment)) {
    failSite(site, "conv2d", "a buffer moved to a less aligned address between runs");
    return;
  }
  if (!check(executePlan(conv.plan, call),
             "cudnnBackendExecute of conv2d site " + std::to_string(site)))
    return;
  if (!conv.plan.fused)
    epilogue(convEpilogue(conv, call));
}

// Matrix products: cuBLASLt. Its matrices are column-major, the graph's
// row-major: the row-major D[m, n] = A[m, k] x B[k, n] is the column-major
// D^T[n, m] = B^T[n, k] x A^T[k, m], so cuBLASLt's first operand is the
// graph's B and its second the graph's A, each read as stored.

namespace {

/// The alignments (bytes) of cuBLASLt's A (the graph's B), B (the graph's
/// A), C, D and of the bias, each matrix's also bounded by its batch
/// stride.
std::array<int64_t, 5> matmulAlignments(const MatMulParams &p, ElementType type,
                                        const void *a, const void *b, const void *c,
                                        const void *d, const void *bias) {
  auto alignment = [&](const void *pointer, int64_t batchStride, ElementType of) {
    int64_t bytes = alignmentOf(pointer);
    if (p.batch > 1)
      bytes = std::min(
          bytes, alignmentOf(static_cast<uintptr_t>(batchStride) * elementBytes(of)));
    return bytes;
  };
  return {alignment(b, p.n * p.k, type), alignment(a, p.m * p.k, type),
          alignment(c, p.m * p.n, kF32), alignment(d, p.m * p.n, kF32),
          bias ? alignmentOf(bias) : 256};
}

} // namespace

std::unique_ptr<MatMulSite> LibraryKernels::createMatMul(int64_t site,
                                                         const MatMulParams &p,
                                                         const void *a, const void *b,
                                                         const void *c, const void *d,
                                                         const void *bias) {
  auto matmul = std::make_unique<MatMulSite>(libraries_);
  matmul->params = p;
  matmul->type = elementType(p.precision);
  if (matmul->type != kF32) {
    std::string what = " of matmul site " + std::to_string(site) + " in 16 bits";
    uint64_t bytes = elementBytes(matmul->type);
    if (!(matmul->a = device_.allocate(bytes * p.batch * p.m * p.k, "A" + what)) ||
        !(matmul->b = device_.allocate(bytes * p.batch * p.k * p.n, "B" + what)))
      return nullptr;
    a = matmul->a;
    b = matmul->b;
  }
  auto layout = [&](uint64_t rows, uint64_t columns, int64_t stride, ElementType type,
                    cublasLtMatrixLayout_t &made) {
    if (!check(libraries_.cublasLtMatrixLayoutCreate(&made, cudaType(type), rows, columns,
                                                     static_cast<int64_t>(rows)),
               "cublasLtMatrixLayoutCreate"))
      return false;
    int32_t batch = static_cast<int32_t>(p.batch);
    return p.batch <= 1 ||
           (check(libraries_.cublasLtMatrixLayoutSetAttribute(
                      made, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)),
                  "setting a layout's batch count") &&
            check(libraries_.cublasLtMatrixLayoutSetAttribute(
                      made, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                      sizeof(stride)),
                  "setting a layout's batch stride"));
  };
  // B stored [k, n] is column-major n x k; stored transposed ([n, k]) it is
  // column-major k x n, read transposed.
  uint64_t n = p.n, m = p.m, k = p.k;
  ElementType type = matmul->type;
  if (!(p.transposedB ? layout(k, n, p.n * p.k, type, matmul->weightsLayout)
                      : layout(n, k, p.n * p.k, type, matmul->weightsLayout)) ||
      !layout(k, m, p.m * p.k, type, matmul->sourceLayout) ||
      !layout(n, m, p.m * p.n, kF32, matmul->resultLayout))
    return nullptr;
  if (!check(libraries_.cublasLtMatmulDescCreate(&matmul->operation, CUBLAS_COMPUTE_32F,
                                                 CUDA_R_32F),
             "cublasLtMatmulDescCreate"))
    return nullptr;
  cublasOperation_t transposeA = p.transposedB ? CUBLAS_OP_T : CUBLAS_OP_N;
  // ReLU (a clip to [0, +inf)) is cuBLASLt's; the other activations, the
  // scale and the mask are the helper epilogue's, after the product.
  bool relu = isRelu(p.activation, p.alpha, p.beta);
  bool postProcessed = p.scale != 0 || p.hasMask;
  matmul->fusedActivation = relu && !postProcessed;
  matmul->helperEpilogue =
      postProcessed || (p.activation != Activation::None && !matmul->fusedActivation);
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  if (p.hasBias)
    epilogue =
        matmul->fusedActivation ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  else if (matmul->fusedActivation)
    epilogue = CUBLASLT_EPILOGUE_RELU;
  if (!check(libraries_.cublasLtMatmulDescSetAttribute(matmul->operation,
                                                       CUBLASLT_MATMUL_DESC_TRANSA,
                                                       &transposeA, sizeof(transposeA)),
             "setting a product's transposition") ||
      !check(libraries_.cublasLtMatmulDescSetAttribute(matmul->operation,
                                                       CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                       &epilogue, sizeof(epilogue)),
             "setting a product's epilogue"))
    return nullptr;

  cublasLtMatmulPreference_t preference = nullptr;
  if (!check(libraries_.cublasLtMatmulPreferenceCreate(&preference),
             "cublasLtMatmulPreferenceCreate"))
    return nullptr;
  uint64_t workspaceBytes = kMatMulWorkspaceBytes;
  // What the algorithm may assume of each matrix's address (and of every
  // batch's) and of the bias's: an algorithm that needs more is not
  // chosen. The heuristics read the bias pointer for its alignment.
  matmul->alignments = matmulAlignments(p, type, a, b, c, d, bias);
  uint32_t alignments[4];
  for (int i = 0; i < 4; ++i)
    alignments[i] = static_cast<uint32_t>(matmul->alignments[i]);
  if (bias && !check(libraries_.cublasLtMatmulDescSetAttribute(
                         matmul->operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                         sizeof(bias)),
                     "setting a product's bias"))
    return nullptr;
  cublasLtMatmulPreferenceAttributes_t alignmentAttributes[] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  bool preferred = check(libraries_.cublasLtMatmulPreferenceSetAttribute(
                             preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                             &workspaceBytes, sizeof(workspaceBytes)),
                         "setting a product's workspace");
  for (int i = 0; i < 4 && preferred; ++i)
    preferred = check(
        libraries_.cublasLtMatmulPreferenceSetAttribute(
            preference, alignmentAttributes[i], &alignments[i], sizeof(alignments[i])),
        "setting a product's alignment");
  GpuKernelChoice choice;
  choice.site = site;
  choice.kind = "matmul";
  choice.signature = librarySignature(KernelKind::MatMul, paramWords(p));
  std::optional<Decided> known =
      decided(site, KernelKind::MatMul, paramWords(p), choice.signature);
  int requested = known ? std::max(trials_, kListedAlgorithms) : trials_;
  std::vector<cublasLtMatmulHeuristicResult_t> results(requested);
  int returned = 0;
  bool found = preferred &&
               check(libraries_.cublasLtMatmulAlgoGetHeuristic(
                         cublasLt_, matmul->operation, matmul->weightsLayout,
                         matmul->sourceLayout, matmul->resultLayout, matmul->resultLayout,
                         preference, requested, results.data(), &returned),
                     "cublasLtMatmulAlgoGetHeuristic");
  libraries_.cublasLtMatmulPreferenceDestroy(preference);
  if (!found)
    return nullptr;
  results.resize(std::max(returned, 0));
  std::erase_if(results, [](const cublasLtMatmulHeuristicResult_t &result) {
    return result.state != CUBLAS_STATUS_SUCCESS;
  });
  if (results.empty()) {
    failSite(site, "matmul",
             "cuBLASLt has no algorithm for a " + std::to_string(p.batch) + " x " +
                 std::to_string(p.m) + "x" + std::to_string(p.k) + " by " +
                 std::to_string(p.k) + "x" + std::to_string(p.n) + " product");
    return nullptr;
  }
  // A record's or the plan's candidate, when the heuristics list it for
  // these alignments.
  if (known) {
    auto listed = std::find_if(results.begin(), results.end(),
                               [&](const cublasLtMatmulHeuristicResult_t &result) {
                                 return algoText(result.algo) == known->candidate;
                               });
    if (listed != results.end()) {
      matmul->algorithm = listed->algo;
      choice.candidate = known->candidate;
      choice.source = known->source;
      choices_[site] = std::move(choice);
      return matmul;
    }
    setAside(site, "matmul", *known);
    results.resize(std::min<size_t>(results.size(), static_cast<size_t>(trials_)));
  }
  // Results the candidate text cannot tell apart are one candidate: the
  // first stands for them.
  std::vector<std::string> texts;
  std::erase_if(results, [&](const cublasLtMatmulHeuristicResult_t &result) {
    std::string text = algoText(result.algo);
    if (!text.empty() && std::find(texts.begin(), texts.end(), text) != texts.end())
      return true;
    texts.push_back(std::move(text));
    return false;
  });
  matmul->algorithm = results[0].algo;
  choice.candidate = texts[0];
  // One candidate is still timed when trials are asked for: a record of it
  // spares the next session and compile the search.
  if (trials_ <= 1) {
    choices_[site] = std::move(choice);
    return matmul;
  }
  // Trial runs of the heuristics' candidates: the fastest on this device.
  // A residual in the result's own buffer (the memory plan's add-to-output)
  // must survive them: they write a scratch result after the workspace.
  uint64_t resultBytes = static_cast<uint64_t>(p.batch * p.m * p.n) * sizeof(float);
  bool residualInResult = p.hasResidual && overlap(c, d, resultBytes);
  void *workspacePointer =
      workspace(kMatMulWorkspaceBytes + (residualInResult ? resultBytes : 0));
  if (!workspacePointer)
    return nullptr;
  void *trialResult = residualInResult
                          ? static_cast<char *>(workspacePointer) + kMatMulWorkspaceBytes
                          : const_cast<void *>(d);
  float alpha = 1.0f, beta = p.hasResidual ? 1.0f : 0.0f;
  double bestMs = std::numeric_limits<double>::infinity();
  if (results.size() > 1)
    choice.source = GpuKernelChoice::Source::Trials;
  for (const cublasLtMatmulHeuristicResult_t &result : results) {
    double ms = timeCalls([&] {
      return libraries_.cublasLtMatmul(
                 cublasLt_, matmul->operation, &alpha, b, matmul->weightsLayout, a,
                 matmul->sourceLayout, &beta, c, matmul->resultLayout, trialResult,
                 matmul->resultLayout, &result.algo, workspacePointer,
                 kMatMulWorkspaceBytes,
                 static_cast<cudaStream_t>(device_.stream())) == CUBLAS_STATUS_SUCCESS;
    });
    choice.timings.emplace_back(texts[&result - results.data()], ms);
    if (ms < bestMs) {
      bestMs = ms;
      matmul->algorithm = result.algo;
      choice.candidate = choice.timings.back().first;
    }
  }
  if (device_.failed())
    return nullptr;
  choices_[site] = std::move(choice);
  spdlog::debug("matmul site {} of '{}': {:.3f} ms, the fastest of {} candidates", site,
                path_, bestMs, results.size());
  return matmul;
}

std::string LibraryKernels::algoText(const cublasLtMatmulAlgo_t &algo) {
  // Each attribute read at the size cuBLASLt stores it (int32, uint32 or
  // uint16), little-endian.
  auto attribute =
      [&](cublasLtMatmulAlgoConfigAttributes_t name) -> std::optional<int64_t> {
    size_t size = 0;
    uint64_t value = 0;
    if (libraries_.cublasLtMatmulAlgoConfigGetAttribute(&algo, name, nullptr, 0, &size) !=
            CUBLAS_STATUS_SUCCESS ||
        size == 0 || size > sizeof(value) ||
        libraries_.cublasLtMatmulAlgoConfigGetAttribute(&algo, name, &value, size,
                                                        &size) != CUBLAS_STATUS_SUCCESS)
      return std::nullopt;
    return static_cast<int64_t>(value);
  };
  static constexpr cublasLtMatmulAlgoConfigAttributes_t kFields[] = {
      CUBLASLT_ALGO_CONFIG_TILE_ID,        CUBLASLT_ALGO_CONFIG_STAGES_ID,
      CUBLASLT_ALGO_CONFIG_SPLITK_NUM,     CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
      CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,  CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION,
      CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID};
  static_assert(std::size(kFields) == std::size(kCublasLtConfigFields));
  GpuCandidate candidate;
  candidate.library = GpuCandidate::Library::CublasLt;
  std::optional<int64_t> id = attribute(CUBLASLT_ALGO_CONFIG_ID);
  if (!id)
    return {};
  candidate.id = *id;
  for (cublasLtMatmulAlgoConfigAttributes_t name : kFields) {
    std::optional<int64_t> value = attribute(name);
    if (!value)
      return {};
    candidate.config.push_back(*value);
  }
  std::string text = formatGpuCandidate(candidate);
  return parseGpuCandidate(text) ? text : std::string();
}

std::vector<GpuKernelChoice> LibraryKernels::choices() const {
  std::vector<GpuKernelChoice> all;
  for (const auto &[site, choice] : choices_)
    all.push_back(choice);
  return all;
}

void LibraryKernels::matmul(int64_t site, const int64_t *words, void **buffers) {
  std::optional<MatMulParams> p = paramsOf<MatMulParams>(site, words, "matmul");
  if (!p)
    return;
  int next = 2;
  const void *bias = p->hasBias ? buffers[next++] : nullptr;
  const void *residual = p->hasResidual ? buffers[next++] : nullptr;
  const float *mask = p->hasMask ? static_cast<const float *>(buffers[next++]) : nullptr;
  void *result = buffers[next];
  std::unique_ptr<MatMulSite> &slot = matmuls_[site];
  if (!slot && !(slot = createMatMul(site, *p, buffers[0], buffers[1],
                                     residual ? residual : result, result, bias)))
    return;
  MatMulSite &matmul = *slot;
  const void *a = buffers[0];
  const void *b = buffers[1];
  std::array<int64_t, 5> alignments =
      matmulAlignments(*p, matmul.type, matmul.a ? matmul.a : a, matmul.b ? matmul.b : b,
                       residual ? residual : result, result, bias);
  for (size_t i = 0; i < alignments.size(); ++i)
    if (alignments[i] < matmul.alignments[i]) {
      failSite(site, "matmul", "a buffer moved to a less aligned address between runs");
      return;
    }
  if (matmul.type != kF32) {
    gather(matmul.a, a, flat(p->batch * p->m * p->k), flatStrides(), flatStrides(),
           matmul.type);
    if (!(p->constantB && matmul.bRounded))
      gather(matmul.b, b, flat(p->batch * p->k * p->n), flatStrides(), flatStrides(),
             matmul.type);
    matmul.bRounded = true;
    a = matmul.a;
    b = matmul.b;
  }
  if (bias && !check(libraries_.cublasLtMatmulDescSetAttribute(
                         matmul.operation, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                         sizeof(bias)),
                     "setting a product's bias"))
    return;
  void *workspacePointer = workspace(kMatMulWorkspaceBytes);
  if (!workspacePointer)
    return;
  // D = A x B + residual (+ bias, ReLU in the epilogue).
  float alpha = 1.0f, beta = residual ? 1.0f : 0.0f;
  if (!check(libraries_.cublasLtMatmul(
                 cublasLt_, matmul.operation, &alpha, b, matmul.weightsLayout, a,
                 matmul.sourceLayout, &beta, residual ? residual : result,
                 matmul.resultLayout, result, matmul.resultLayout, &matmul.algorithm,
                 workspacePointer, kMatMulWorkspaceBytes,
                 static_cast<cudaStream_t>(device_.stream())),
             "cublasLtMatmul of matmul site " + std::to_string(site)))
    return;
  if (!matmul.helperEpilogue)
    return;
  EpilogueArgs args{};
  args.out = result;
  args.in = args.out;
  args.inType = kF32;
  args.shape = {{p->batch, p->m, p->n, 1}};
  args.outStrides = args.inStrides = {{p->m * p->n, p->n, 1, 1}};
  args.hasScale = p->scale != 0;
  args.scale = paramFloat(p->scale);
  args.mask = mask;
  // [1, M or 1, N or 1]: broadcast over the batch.
  args.maskStrides = {
      {0, p->maskRows ? (p->maskColumns ? p->n : 1) : 0, p->maskColumns ? 1 : 0, 0}};
  args.activation = matmul.fusedActivation ? 0 : static_cast<int64_t>(p->activation);
  args.alpha = paramFloat(p->alpha);
  args.beta = paramFloat(p->beta);
  epilogue(args);
}

void LibraryKernels::pool(int64_t site, const int64_t *words, void **buffers) {
  std::optional<Pool2dParams> p = paramsOf<Pool2dParams>(site, words, "pool2d");
  if (!p)
    return;
  PoolArgs args{};
  args.out = static_cast<float *>(buffers[1]);
  args.in = static_cast<const float *>(buffers[0]);
  args.outShape = {{p->batch, p->channels, p->outHeight, p->outWidth}};
  args.outStrides = activationStrides(args.outShape, p->destinationLayout);
  args.inShape = {{p->batch, p->channels, p->inHeight, p->inWidth}};
  args.inStrides = activationStrides(args.inShape, p->sourceLayout);
  args.kernelH = p->kernelHeight;
  args.kernelW = p->kernelWidth;
  args.strideH = p->strideH;
  args.strideW = p->strideW;
  args.padTop = p->padTop;
  args.padLeft = p->padLeft;
  args.average = p->algorithm == PoolAlgorithm::AverageExcludingPadding;
  std::array<int, 4> order = memoryOrder(args.outShape, args.outStrides);
  args.order = {{order[0], order[1], order[2], order[3]}};
  launch(kPoolKernel, blocksFor(elements(args.outShape)), args);
}

void LibraryKernels::softmax(int64_t site, const int64_t *words, void **buffers) {
  std::optional<SoftmaxParams> p = paramsOf<SoftmaxParams>(site, words, "softmax");
  if (!p)
    return;
  RowArgs args{};
  args.out = static_cast<float *>(buffers[1]);
  args.in = static_cast<const float *>(buffers[0]);
  args.rows = p->rows;
  args.channels = p->channels;
  launch(kSoftmaxKernel, std::clamp<uint64_t>(p->rows, 1, 65535), args);
}

void LibraryKernels::layerNorm(int64_t site, const int64_t *words, void **buffers) {
  std::optional<LayerNormParams> p = paramsOf<LayerNormParams>(site, words, "layernorm");
  if (!p)
    return;
  RowArgs args{};
  int next = 1;
  args.in = static_cast<const float *>(buffers[0]);
  args.scale = p->hasScale ? static_cast<const float *>(buffers[next++]) : nullptr;
  args.shift = p->hasShift ? static_cast<const float *>(buffers[next++]) : nullptr;
  args.out = static_cast<float *>(buffers[next]);
  args.rows = p->rows;
  args.channels = p->channels;
  args.epsilon = paramFloat(p->epsilon);
  launch(kLayerNormKernel, std::clamp<uint64_t>(p->rows, 1, 65535), args);
}

void LibraryKernels::topK(int64_t site, const int64_t *words, void **buffers) {
  std::optional<TopKParams> p = paramsOf<TopKParams>(site, words, "topk");
  if (!p)
    return;
  TopKArgs args{};
  args.in = buffers[0];
  args.out = static_cast<int32_t *>(buffers[1]);
  args.rows = p->rows;
  args.n = p->n;
  args.k = p->k;
  args.largest = p->largest;
  const char *kernel = p->keyType == ScalarType::I64   ? kTopKI64Kernel
                       : p->keyType == ScalarType::I32 ? kTopKI32Kernel
                                                       : kTopKF32Kernel;
  launch(kernel, std::clamp<uint64_t>(p->rows, 1, 65535), args);
}

void LibraryKernels::scatter(int64_t site, const int64_t *words, void **buffers) {
  std::optional<ScatterRowsParams> p =
      paramsOf<ScatterRowsParams>(site, words, "scatter");
  if (!p)
    return;
  int64_t elementBytes = p->type == ScalarType::I64 ? 8 : 4;
  CopyArgs copy{buffers[3], buffers[0], p->rows * p->width * elementBytes / 4};
  launch(kCopyWordsKernel, blocksFor(copy.words), copy);
  ScatterArgs args{};
  args.out = buffers[3];
  args.updates = buffers[1];
  args.targets = static_cast<const int32_t *>(buffers[2]);
  args.rows = p->rows;
  args.width = p->width;
  args.count = p->count;
  args.reduction = static_cast<int64_t>(p->reduction);
  const char *kernel = p->type == ScalarType::I64   ? kScatterI64Kernel
                       : p->type == ScalarType::I32 ? kScatterI32Kernel
                                                    : kScatterF32Kernel;
  launch(kernel, std::clamp<uint64_t>(p->count, 1, 65535), args);
}

namespace {

// The table's functions (KernelAbi.h's KernelFunction).
template <void (LibraryKernels::*Method)(int64_t, const int64_t *, void **)>
void tableEntry(void *context, int64_t site, const int64_t *params, void **buffers) {
  (static_cast<LibraryKernels *>(context)->*Method)(site, params, buffers);
}

} // namespace

Expected<LibraryKernelsPtr> openLibraryKernels(DeviceServices &device, int64_t kinds,
                                               int64_t sites, LibraryTuning tuning,
                                               const std::string &path) {
  const Expected<Libraries> &libraries = processLibraries();
  if (!libraries)
    return unavailable("'" + path +
                       "' calls cuDNN and cuBLASLt: " + libraries.status().message());
  LibraryKernelsPtr kernels(
      new LibraryKernels(device, *libraries, sites, std::move(tuning), path));
  FLOWC_RETURN_IF_ERROR(kernels->open(kinds).withContext(
      "opening the library kernels of '" + path + "' (" + libraries->versions + ")"));
  return kernels;
}

std::vector<GpuKernelChoice> kernelChoices(const LibraryKernels &kernels) {
  return kernels.choices();
}

void fillKernelTable(LibraryKernels &kernels, void **table, void **context) {
  static_assert(kKernelKindCount == 9, "every KernelKind but IntegerMatMul and "
                                       "IntegerConv2d (CPU only: open refuses them) "
                                       "has a slot below");
  auto slot = [&](KernelKind kind, KernelFunction function) {
    table[static_cast<int64_t>(kind)] = reinterpret_cast<void *>(function);
  };
  slot(KernelKind::Conv2d, tableEntry<&LibraryKernels::conv>);
  slot(KernelKind::MatMul, tableEntry<&LibraryKernels::matmul>);
  slot(KernelKind::Pool2d, tableEntry<&LibraryKernels::pool>);
  slot(KernelKind::Softmax, tableEntry<&LibraryKernels::softmax>);
  slot(KernelKind::LayerNorm, tableEntry<&LibraryKernels::layerNorm>);
  slot(KernelKind::TopK, tableEntry<&LibraryKernels::topK>);
  slot(KernelKind::ScatterRows, tableEntry<&LibraryKernels::scatter>);
  *context = &kernels;
}

Expected<ConvGraphCheck> checkConvGraphs(const Conv2dParams &params) {
  const Expected<Libraries> &libraries = processLibraries();
  if (!libraries)
    return libraries.status();
  ConvSite conv = describeConv(params);
  conv.alignment = conv.fusedAlignment = static_cast<int64_t>(kArenaAlignment);
  ConvGraphCheck check;
  GraphBuilder alone(*libraries, nullptr);
  convGraph(alone, conv, false);
  check.alone = alone.status();
  if (epilogueFuses(params, conv.layout)) {
    GraphBuilder fused(*libraries, nullptr);
    convGraph(fused, conv, true);
    check.fused = fused.status();
  }
  return check;
}

Expected<std::string> libraryVersions() {
  const Expected<Libraries> &libraries = processLibraries();
  if (!libraries)
    return libraries.status();
  return libraries->versions;
}

} // namespace flowc::runtime::gpu

#else // !FLOWC_HAVE_CUDA_LIBRARIES

namespace flowc::runtime::gpu {

class LibraryKernels {};

void LibraryKernelsDeleter::operator()(LibraryKernels *kernels) const { delete kernels; }

namespace {
constexpr const char *kNotBuilt =
    "this runtime was built without the CUDA toolkit (nvcc, cudnn.h, cublasLt.h), "
    "so it has no library kernels for CUDA code";
} // namespace

Expected<LibraryKernelsPtr> openLibraryKernels(DeviceServices &, int64_t, int64_t,
                                               LibraryTuning, const std::string &path) {
  return unimplemented("'" + path + "' calls library kernels: " + kNotBuilt);
}

std::vector<GpuKernelChoice> kernelChoices(const LibraryKernels &) { return {}; }

void fillKernelTable(LibraryKernels &, void **, void **) {}

Expected<ConvGraphCheck> checkConvGraphs(const Conv2dParams &) {
  return unimplemented(kNotBuilt);
}

Expected<std::string> libraryVersions() { return unimplemented(kNotBuilt); }

} // namespace flowc::runtime::gpu

#endif
