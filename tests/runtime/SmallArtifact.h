// A real, runnable artifact small enough to damage byte by byte: C code
// compiled by the system compiler computing y = x + w over four floats, a
// weight w, and a plan whose digests are the weights' own.
#pragma once

#include "flowc/runtime/Artifact.h"

#include "flowc/support/MappedFile.h"
#include "flowc/support/Sha256.h"
#include "flowc/support/Subprocess.h"

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace flowc::runtime::testing {

/// The code object of `source`, compiled with `cc -shared` in `dir`.
inline Expected<std::string> compileCode(const std::string &dir,
                                         const std::string &source) {
  std::ofstream(dir + "/code.c") << source;
  FLOWC_RETURN_IF_ERROR(
      runProgram({"cc", "-shared", "-fPIC", "-o", dir + "/code.so", dir + "/code.c"}));
  return readFileToString(dir + "/code.so");
}

inline const char *kAddSource = "void flowc_entry(void **args) {\n"
                                "  const float *x = args[0], *w = args[1];\n"
                                "  float *y = args[2];\n"
                                "  for (int i = 0; i < 4; ++i) y[i] = x[i] + w[i];\n"
                                "}\n";

/// The weight w's bytes: 10, 20, 30, 40.
inline std::string addWeightBytes() {
  std::vector<float> w = {10, 20, 30, 40};
  return std::string(reinterpret_cast<const char *>(w.data()), w.size() * sizeof(float));
}

/// "sha256:<hex>/<size>" of `bytes`, as plans name weights.
inline std::string weightDigest(std::string_view bytes) {
  return "sha256:" + sha256Hex(sha256Of(bytes)) + "/" + std::to_string(bytes.size());
}

/// The add model's plan; `w` lies at offset 0 of the weights section.
inline Plan addPlan() {
  Plan plan;
  plan.entry = "flowc_entry";
  plan.inputs = {{"x", "float32", {4}}};
  plan.outputs = {{"y", "float32", {4}}};
  plan.weights = {{{"w", "float32", {4}}, weightDigest(addWeightBytes()), 0, 16}};
  return plan;
}

/// Writes the add artifact with `plan` (external weights are left out of
/// the weights section).
inline Status writeArtifact(const std::string &path, std::string_view code,
                            const Plan &plan) {
  FLOWC_ASSIGN_OR_RETURN(auto writer, ArtifactWriter::create(path));
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::Metadata, R"({"model":"add"})"));
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::GraphIr, "graph bytecode"));
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::Code, code));
  std::string w = addWeightBytes();
  std::vector<std::string_view> pieces;
  for (const WeightSpec &weight : plan.weights)
    if (!weight.external)
      pieces.push_back(w);
  FLOWC_RETURN_IF_ERROR(writer->addWeights(pieces).status());
  FLOWC_RETURN_IF_ERROR(writer->addSection(SectionKind::Plan, plan.toJson().dump()));
  return writer->finish();
}

/// Where each section lies in an artifact file, read from its table.
struct SectionPlace {
  SectionKind kind;
  uint64_t offset;
  uint64_t size;
};
inline std::vector<SectionPlace> sectionPlaces(const std::string &bytes) {
  uint32_t count = 0;
  uint64_t table = 0;
  std::memcpy(&count, bytes.data() + 12, 4);
  std::memcpy(&table, bytes.data() + 16, 8);
  std::vector<SectionPlace> places;
  for (uint32_t i = 0; i < count; ++i) {
    const char *entry = bytes.data() + table + i * 56;
    SectionPlace place{};
    uint32_t kind = 0;
    std::memcpy(&kind, entry, 4);
    place.kind = static_cast<SectionKind>(kind);
    std::memcpy(&place.offset, entry + 8, 8);
    std::memcpy(&place.size, entry + 16, 8);
    places.push_back(place);
  }
  return places;
}

} // namespace flowc::runtime::testing
