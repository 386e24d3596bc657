#include "flowc/support/Target.h"

#include <array>
#include <utility>

namespace flowc {

namespace {

constexpr std::array<std::pair<Target, const char *>, 1> kTargets = {{
    {Target::Cpu, "cpu"},
}};

constexpr std::array<std::pair<Precision, const char *>, 2> kPrecisions = {{
    {Precision::Fp32, "fp32"},
    {Precision::Bf16, "bf16"},
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
  return parseName<Target>(kTargets, name, "target");
}
std::string targetNames() { return joinNames(kTargets); }

const char *precisionName(Precision precision) { return nameOf(kPrecisions, precision); }
Expected<Precision> parsePrecision(std::string_view name) {
  return parseName<Precision>(kPrecisions, name, "precision");
}
std::string precisionNames() { return joinNames(kPrecisions); }

} // namespace flowc
