// GPU candidates as text and the keys of GPU tuning records
// (flowc/runtime/Tuning.h). Nothing here needs the CUDA toolkit or a GPU
// but localGpuTuningDevice.
#include "flowc/runtime/Tuning.h"

#include "Gpu.h"
#include "gpu/LibraryKernels.h"

#include <algorithm>
#include <charconv>

namespace flowc::runtime {

namespace {

constexpr size_t kMaxCandidateBytes = 1024;
constexpr size_t kMaxKnobs = 64;
constexpr std::string_view kCudnnPrefix = "cudnn:";
constexpr std::string_view kCublasLtPrefix = "cublaslt:";
constexpr std::string_view kFusedEpilogue = "epilogue=fused";
constexpr std::string_view kSplitField = ";split=";

/// A non-negative decimal integer below 2^31 (every id and attribute the
/// libraries have is an int32 or an enum), all of `text`.
std::optional<int64_t> smallInteger(std::string_view text) {
  int64_t value = 0;
  if (text.empty() || text.size() > 10 || text[0] < '0' || text[0] > '9' ||
      (text.size() > 1 && text[0] == '0'))
    return std::nullopt;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || value < 0 ||
      value > INT32_MAX)
    return std::nullopt;
  return value;
}

/// smallInteger, or its negation written with a leading '-' (cuDNN's knob
/// values may be negative).
std::optional<int64_t> signedSmallInteger(std::string_view text) {
  if (text.size() > 1 && text[0] == '-' && text[1] != '0')
    if (std::optional<int64_t> magnitude = smallInteger(text.substr(1)))
      return -*magnitude;
  return smallInteger(text);
}

/// Splits `text` at `separator` (an empty text is no parts).
std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  while (!text.empty()) {
    size_t at = text.find(separator);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos)
      break;
    text.remove_prefix(at + 1);
    if (text.empty())
      parts.push_back(text);
  }
  return parts;
}

/// `field=value` with this field name and an integer value.
std::optional<int64_t> field(std::string_view part, std::string_view name) {
  if (part.size() <= name.size() || part.substr(0, name.size()) != name ||
      part[name.size()] != '=')
    return std::nullopt;
  return smallInteger(part.substr(name.size() + 1));
}

Expected<GpuCandidate> parseCudnn(std::string_view body, const std::string &what) {
  std::vector<std::string_view> parts = split(body, ';');
  GpuCandidate candidate;
  candidate.library = GpuCandidate::Library::Cudnn;
  std::optional<int64_t> engine =
      parts.size() == 2 || parts.size() == 3 ? field(parts[0], "engine") : std::nullopt;
  if (!engine || parts[1].substr(0, 6) != "knobs=" ||
      (parts.size() == 3 && parts[2] != kFusedEpilogue))
    return invalidArgument(
        what + ": expected 'cudnn:engine=N;knobs=TYPE:VALUE,...[;epilogue=fused]'");
  candidate.id = *engine;
  candidate.fusedEpilogue = parts.size() == 3;
  for (std::string_view knob : split(parts[1].substr(6), ',')) {
    size_t colon = knob.find(':');
    std::optional<int64_t> type = colon == std::string_view::npos
                                      ? std::nullopt
                                      : smallInteger(knob.substr(0, colon));
    std::optional<int64_t> value =
        type ? signedSmallInteger(knob.substr(colon + 1)) : std::nullopt;
    if (!value)
      return invalidArgument(what + ": knob '" + std::string(knob) +
                             "' is not TYPE:VALUE (integers, the type non-negative)");
    if (!candidate.knobs.empty() && candidate.knobs.back().first >= *type)
      return invalidArgument(what + ": knob types repeat or are out of order");
    if (candidate.knobs.size() == kMaxKnobs)
      return invalidArgument(what + ": more than " + std::to_string(kMaxKnobs) +
                             " knobs");
    candidate.knobs.emplace_back(*type, *value);
  }
  return candidate;
}

Expected<GpuCandidate> parseCublasLt(std::string_view body, const std::string &what) {
  std::vector<std::string_view> parts = split(body, ';');
  constexpr size_t kFields = std::size(kCublasLtConfigFields);
  GpuCandidate candidate;
  candidate.library = GpuCandidate::Library::CublasLt;
  std::optional<int64_t> algo =
      parts.size() == kFields + 1 ? field(parts[0], "algo") : std::nullopt;
  if (!algo)
    return invalidArgument(what + ": expected 'cublaslt:algo=N' and the " +
                           std::to_string(kFields) + " configuration fields");
  candidate.id = *algo;
  for (size_t i = 0; i < kFields; ++i) {
    std::optional<int64_t> value = field(parts[i + 1], kCublasLtConfigFields[i]);
    if (!value)
      return invalidArgument(what + ": field " + std::to_string(i + 2) + " is not '" +
                             kCublasLtConfigFields[i] + "=N' (a non-negative integer)");
    candidate.config.push_back(*value);
  }
  return candidate;
}

const char *axisName(TensorSplit::Axis axis) {
  return axis == TensorSplit::Axis::Columns ? "columns" : "rows";
}

/// `columns/K` or `rows/K`, K from 2 to kMaxSplitWays.
Expected<TensorSplit> parseSplit(std::string_view text, const std::string &what) {
  auto bad = [&] {
    return invalidArgument(what + ": split '" + std::string(text.substr(0, 40)) +
                           "' is not 'columns/K' or 'rows/K' with K from 2 to " +
                           std::to_string(kMaxSplitWays));
  };
  size_t slash = text.find('/');
  if (slash == std::string_view::npos)
    return bad();
  TensorSplit split;
  std::string_view axis = text.substr(0, slash);
  if (axis == "columns")
    split.axis = TensorSplit::Axis::Columns;
  else if (axis == "rows")
    split.axis = TensorSplit::Axis::Rows;
  else
    return bad();
  std::optional<int64_t> ways = smallInteger(text.substr(slash + 1));
  if (!ways || *ways < 2 || *ways > kMaxSplitWays)
    return bad();
  split.ways = *ways;
  return split;
}

} // namespace

std::string librarySignature(KernelKind kind, const std::vector<int64_t> &params) {
  std::string text = std::string("library.") + kernelKindName(kind) + ":";
  for (size_t i = 0; i < params.size(); ++i)
    text += (i ? "," : "") + std::to_string(params[i]);
  return text;
}

std::string formatGpuCandidate(const GpuCandidate &candidate) {
  std::string text;
  if (candidate.library == GpuCandidate::Library::Cudnn) {
    text = "cudnn:engine=" + std::to_string(candidate.id) + ";knobs=";
    for (size_t i = 0; i < candidate.knobs.size(); ++i)
      text += (i ? "," : "") + std::to_string(candidate.knobs[i].first) + ":" +
              std::to_string(candidate.knobs[i].second);
    if (candidate.fusedEpilogue)
      text += ";" + std::string(kFusedEpilogue);
  } else {
    text = "cublaslt:algo=" + std::to_string(candidate.id);
    for (size_t i = 0; i < std::size(kCublasLtConfigFields); ++i)
      text += std::string(";") + kCublasLtConfigFields[i] + "=" +
              std::to_string(i < candidate.config.size() ? candidate.config[i] : 0);
  }
  if (candidate.split)
    text += std::string(kSplitField) + axisName(candidate.split->axis) + "/" +
            std::to_string(candidate.split->ways);
  return text;
}

Expected<GpuCandidate> parseGpuCandidate(std::string_view text) {
  std::string what = "GPU candidate '" + std::string(text.substr(0, 80)) +
                     (text.size() > 80 ? "...'" : "'");
  if (text.size() > kMaxCandidateBytes)
    return invalidArgument(what + " is longer than " +
                           std::to_string(kMaxCandidateBytes) + " bytes");
  // The split is the last field of either library's candidate.
  std::optional<TensorSplit> split;
  if (size_t at = text.find(kSplitField); at != std::string_view::npos) {
    FLOWC_ASSIGN_OR_RETURN(split, parseSplit(text.substr(at + kSplitField.size()), what));
    text = text.substr(0, at);
  }
  Expected<GpuCandidate> candidate =
      text.substr(0, kCudnnPrefix.size()) == kCudnnPrefix
          ? parseCudnn(text.substr(kCudnnPrefix.size()), what)
      : text.substr(0, kCublasLtPrefix.size()) == kCublasLtPrefix
          ? parseCublasLt(text.substr(kCublasLtPrefix.size()), what)
          : Expected<GpuCandidate>(
                invalidArgument(what + ": not 'cudnn:...' nor 'cublaslt:...'"));
  if (candidate)
    candidate->split = split;
  return candidate;
}

Status checkTensorSplit(KernelKind kind, const std::vector<int64_t> &params,
                        const TensorSplit &split) {
  std::string ways = std::to_string(split.ways);
  auto divides = [&](int64_t extent, const std::string &what) -> Status {
    if (extent > 0 && extent % split.ways == 0)
      return Status::ok();
    return invalidArgument("a split " + ways + " ways does not divide the " + what +
                           " (" + std::to_string(extent) + ")");
  };
  bool columns = split.axis == TensorSplit::Axis::Columns;
  std::optional<MatMulParams> product =
      kind == KernelKind::MatMul ? paramsFromWords<MatMulParams>(params) : std::nullopt;
  if (product)
    return columns ? divides(product->n, "product's columns")
                   : divides(product->k, "product's reduction");
  std::optional<Conv2dParams> conv =
      kind == KernelKind::Conv2d ? paramsFromWords<Conv2dParams>(params) : std::nullopt;
  if (conv && !columns)
    return conv->groups == 1 ? divides(conv->inChannels, "convolution's input channels")
                             : invalidArgument("a grouped convolution (" +
                                               std::to_string(conv->groups) +
                                               " groups) splits by columns only");
  if (conv) {
    FLOWC_RETURN_IF_ERROR(divides(conv->outChannels, "convolution's output channels"));
    return conv->groups == 1 ? Status::ok()
                             : divides(conv->groups, "convolution's groups");
  }
  return invalidArgument(std::string("a ") + kernelKindName(kind) +
                         " kernel of these parameters has no tensor-parallel split");
}

bool isGpuCandidateOf(KernelKind kind, std::string_view text, int64_t devices) {
  Expected<GpuCandidate> candidate = parseGpuCandidate(text);
  if (!candidate || (candidate->split && candidate->split->ways != devices))
    return false;
  return kind == KernelKind::Conv2d
             ? candidate->library == GpuCandidate::Library::Cudnn
             : kind == KernelKind::MatMul &&
                   candidate->library == GpuCandidate::Library::CublasLt;
}

std::string gpuTuningDevice(const std::string &name, int64_t capability) {
  return kGpuTuningDevicePrefix + name + " sm_" + std::to_string(capability);
}

std::string gpuGroupTuningDevice(const std::string &name, int64_t capability,
                                 int64_t devices) {
  return gpuTuningDevice(name, capability) + " x" + std::to_string(devices);
}

bool isGpuTuningDeviceOf(std::string_view device, int64_t capability) {
  std::string_view prefix = kGpuTuningDevicePrefix;
  std::string suffix = " sm_" + std::to_string(capability);
  return device.size() > prefix.size() + suffix.size() &&
         device.substr(0, prefix.size()) == prefix &&
         device.substr(device.size() - suffix.size()) == suffix;
}

Expected<std::string> localGpuTuningDevice(int ordinal) {
  FLOWC_ASSIGN_OR_RETURN(GpuDevice device, openGpu(ordinal));
  return gpuTuningDevice(device.name, device.capability);
}

Expected<std::vector<std::string>> localGpuTuningDevices() {
  FLOWC_ASSIGN_OR_RETURN(std::vector<GpuDevice> gpus, listGpus());
  std::vector<std::string> devices;
  for (const GpuDevice &gpu : gpus)
    devices.push_back(gpuTuningDevice(gpu.name, gpu.capability));
  return devices;
}

std::optional<int> localGpuOrdinal(std::string_view device) {
  Expected<std::vector<std::string>> devices = localGpuTuningDevices();
  if (!devices)
    return std::nullopt;
  auto found = std::find(devices->begin(), devices->end(), device);
  if (found == devices->end())
    return std::nullopt;
  return static_cast<int>(found - devices->begin());
}

Expected<std::string> parseGpuName(std::string_view text) {
  auto bad = [&](const std::string &why) {
    return invalidArgument("GPU '" + std::string(text) + "': " + why +
                           " (a GPU is its driver's name and compute capability, "
                           "e.g. 'NVIDIA H200 sm_90')");
  };
  constexpr size_t kMaxNameBytes = 128;
  if (text.size() > kMaxNameBytes)
    return bad("longer than " + std::to_string(kMaxNameBytes) + " bytes");
  for (char c : text)
    if (c < 0x20 || c > 0x7e || c == ',')
      return bad("only printable ASCII other than ',' may name a GPU");
  size_t sm = text.rfind(" sm_");
  if (sm == std::string_view::npos || sm == 0 || text.front() == ' ')
    return bad("no name followed by ' sm_NN'");
  std::string_view digits = text.substr(sm + 4);
  int64_t capability = 0;
  auto [end, ec] =
      std::from_chars(digits.data(), digits.data() + digits.size(), capability);
  bool decimal = digits.size() >= 2 && digits.size() <= 3 && digits.front() >= '1' &&
                 digits.front() <= '9';
  if (!decimal || ec != std::errc() || end != digits.data() + digits.size())
    return bad("'" + std::string(digits) + "' is not a compute capability such as 90");
  return gpuTuningDevice(std::string(text.substr(0, sm)), capability);
}

Expected<std::vector<std::string>> parseGpuNames(const std::vector<std::string> &names) {
  std::vector<std::string> devices;
  for (const std::string &name : names) {
    FLOWC_ASSIGN_OR_RETURN(std::string device, parseGpuName(name));
    if (std::find(devices.begin(), devices.end(), device) == devices.end())
      devices.push_back(std::move(device));
  }
  return devices;
}

std::string_view gpuNameOf(std::string_view device) {
  std::string_view prefix = kGpuTuningDevicePrefix;
  if (device.substr(0, prefix.size()) == prefix)
    device.remove_prefix(prefix.size());
  return device;
}

Expected<std::string> gpuTuningVersions() {
  FLOWC_ASSIGN_OR_RETURN(std::string libraries, gpu::libraryVersions());
  return libraries + "; kernel abi " + std::to_string(kKernelAbiVersion) + "; trials " +
         std::to_string(kGpuTrialsVersion);
}

} // namespace flowc::runtime
