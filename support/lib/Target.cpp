#include "flowc/support/Target.h"

#include <array>
#include <fstream>
#include <thread>
#include <utility>

namespace flowc {

namespace {

constexpr std::array<std::pair<Target, const char *>, 8> kTargets = {{
    {Target::Cpu, "cpu"},
    {Target::CudaSm75, "cuda:sm_75"},
    {Target::CudaSm80, "cuda:sm_80"},
    {Target::CudaSm86, "cuda:sm_86"},
    {Target::CudaSm89, "cuda:sm_89"},
    {Target::CudaSm90, "cuda:sm_90"},
    {Target::CudaSm100, "cuda:sm_100"},
    {Target::CudaSm120, "cuda:sm_120"},
}};

/// What "cuda" alone means: the data-centre GPU of this generation.
constexpr Target kDefaultCudaTarget = Target::CudaSm90;
constexpr int64_t kCudaTag = 1000;

constexpr std::array<std::pair<Precision, const char *>, 3> kPrecisions = {{
    {Precision::Fp32, "fp32"},
    {Precision::Bf16, "bf16"},
    {Precision::Fp16, "fp16"},
}};

template <typename Table> std::string joinNames(const Table &table) {
  std::string names;
  for (const auto &entry : table)
    names += (names.empty() ? "" : ", ") + std::string(entry.second);
  return names;
}

template <typename Enum, typename Table>
Expected<Enum> parseName(const Table &table, std::string_view name, const char *what) {
  for (const auto &entry : table)
    if (name == entry.second)
      return entry.first;
  return invalidArgument("unknown " + std::string(what) + " '" + std::string(name) +
                         "' (supported: " + joinNames(table) + ")");
}

template <typename Enum, typename Table>
const char *nameOf(const Table &table, Enum value) {
  for (const auto &entry : table)
    if (entry.first == value)
      return entry.second;
  return "unknown";
}

} // namespace

const char *targetName(Target target) { return nameOf(kTargets, target); }
Expected<Target> parseTarget(std::string_view name) {
  if (name == "cuda")
    return kDefaultCudaTarget;
  return parseName<Target>(kTargets, name, "target");
}
bool isCudaTarget(Target target) { return cudaComputeCapability(target) > 0; }
int cudaComputeCapability(Target target) {
  auto value = static_cast<int64_t>(target);
  if (value <= kCudaTag || std::string_view(targetName(target)) == "unknown")
    return 0;
  return static_cast<int>(value - kCudaTag);
}
std::string cudaChip(Target target) {
  int capability = cudaComputeCapability(target);
  return capability ? "sm_" + std::to_string(capability) : std::string();
}
std::string targetNames() { return joinNames(kTargets); }

const char *precisionName(Precision precision) { return nameOf(kPrecisions, precision); }
Expected<Precision> parsePrecision(std::string_view name) {
  return parseName<Precision>(kPrecisions, name, "precision");
}
std::string precisionNames() { return joinNames(kPrecisions); }

std::string hostCpuDescription() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line, model, flags;
  while (std::getline(cpuinfo, line)) {
    if (model.empty() && line.starts_with("model name"))
      model = line.substr(line.find(':') + 2);
    if (flags.empty() && line.starts_with("flags"))
      flags = " " + line.substr(line.find(':') + 1) + " ";
  }
  auto has = [&](const char *flag) {
    return flags.find(" " + std::string(flag) + " ") != std::string::npos ? "yes" : "no";
  };
  return (model.empty() ? "unknown CPU" : model) + ", " +
         std::to_string(std::thread::hardware_concurrency()) + " cores, ISA: avx2 " +
         has("avx2") + ", avx512f " + has("avx512f") + ", amx " + has("amx_tile");
}

} // namespace flowc
