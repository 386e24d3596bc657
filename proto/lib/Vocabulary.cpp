#include "flowc/rpc/Vocabulary.h"

#include <array>
#include <utility>

namespace flowc::rpc {

namespace {

constexpr std::array<std::pair<Target, flowc::v1::Target>, 1> kTargets = {{
    {Target::Cpu, flowc::v1::TARGET_CPU},
}};

constexpr std::array<std::pair<Precision, flowc::v1::Precision>, 2> kPrecisions = {{
    {Precision::Fp32, flowc::v1::PRECISION_FP32},
    {Precision::Bf16, flowc::v1::PRECISION_BF16},
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

} // namespace flowc::rpc
