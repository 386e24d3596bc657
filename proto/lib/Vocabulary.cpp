#include "flowc/rpc/Vocabulary.h"

#include <array>
#include <utility>

namespace flowc::rpc {

namespace {

constexpr std::array<std::pair<Target, flowc::v1::Target>, 8> kTargets = {{
    {Target::Cpu, flowc::v1::TARGET_CPU},
    {Target::CudaSm75, flowc::v1::TARGET_CUDA_SM75},
    {Target::CudaSm80, flowc::v1::TARGET_CUDA_SM80},
    {Target::CudaSm86, flowc::v1::TARGET_CUDA_SM86},
    {Target::CudaSm89, flowc::v1::TARGET_CUDA_SM89},
    {Target::CudaSm90, flowc::v1::TARGET_CUDA_SM90},
    {Target::CudaSm100, flowc::v1::TARGET_CUDA_SM100},
    {Target::CudaSm120, flowc::v1::TARGET_CUDA_SM120},
}};

constexpr std::array<std::pair<Precision, flowc::v1::Precision>, 3> kPrecisions = {{
    {Precision::Fp32, flowc::v1::PRECISION_FP32},
    {Precision::Bf16, flowc::v1::PRECISION_BF16},
    {Precision::Fp16, flowc::v1::PRECISION_FP16},
}};

template <typename Enum, typename Table>
Expected<Enum> fromWire(const Table &table, int value, std::string_view field,
                        const std::string &supported) {
  for (const auto &[ours, theirs] : table)
    if (static_cast<int>(theirs) == value)
      return ours;
  return invalidArgument(std::string(field) + " is " + std::to_string(value) +
                         ", not a value this daemon knows (supported: " + supported +
                         ")");
}

} // namespace

flowc::v1::Target toProto(Target target) {
  for (const auto &[ours, theirs] : kTargets)
    if (ours == target)
      return theirs;
  return flowc::v1::TARGET_UNSPECIFIED;
}

flowc::v1::Precision toProto(Precision precision) {
  for (const auto &[ours, theirs] : kPrecisions)
    if (ours == precision)
      return theirs;
  return flowc::v1::PRECISION_UNSPECIFIED;
}

Expected<Target> targetFromProto(int target, std::string_view field) {
  if (target == flowc::v1::TARGET_UNSPECIFIED)
    return Target::Cpu;
  return fromWire<Target>(kTargets, target, field, targetNames());
}

Expected<Precision> precisionFromProto(int precision, std::string_view field) {
  if (precision == flowc::v1::PRECISION_UNSPECIFIED)
    return Precision::Fp32;
  return fromWire<Precision>(kPrecisions, precision, field, precisionNames());
}

flowc::v1::SearchBudget toProto(const SearchBudget &budget) {
  flowc::v1::SearchBudget out;
  switch (budget.mode) {
  case SearchBudget::Mode::None:
    out.set_mode(flowc::v1::SearchBudget::SEARCH_NONE);
    break;
  case SearchBudget::Mode::Seconds:
    out.set_mode(flowc::v1::SearchBudget::SEARCH_SECONDS);
    out.set_seconds(budget.seconds);
    break;
  case SearchBudget::Mode::Exhaustive:
    out.set_mode(flowc::v1::SearchBudget::SEARCH_EXHAUSTIVE);
    break;
  }
  return out;
}

Expected<SearchBudget> searchBudgetFromProto(const flowc::v1::SearchBudget &budget,
                                             std::string_view field) {
  switch (budget.mode()) {
  case flowc::v1::SearchBudget::SEARCH_NONE:
    return SearchBudget{};
  case flowc::v1::SearchBudget::SEARCH_EXHAUSTIVE:
    return SearchBudget{SearchBudget::Mode::Exhaustive, 0};
  case flowc::v1::SearchBudget::SEARCH_SECONDS:
    if (!(budget.seconds() > 0) || budget.seconds() > kMaxSearchSeconds)
      return invalidArgument(std::string(field) + ".seconds is " +
                             std::to_string(budget.seconds()) +
                             ", not a number of seconds in (0, 1e6]");
    return SearchBudget{SearchBudget::Mode::Seconds, budget.seconds()};
  default:
    break;
  }
  return invalidArgument(std::string(field) + ".mode is " +
                         std::to_string(budget.mode()) +
                         ", not a value this daemon knows (none, seconds, exhaustive)");
}

} // namespace flowc::rpc
