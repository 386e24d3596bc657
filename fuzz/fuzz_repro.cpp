// The reproducer reader on arbitrary bytes: the input is split at the first
// kSeparator into repro.json and graph.mlirbc (no separator: all of it is
// repro.json and the graph is missing), written as a reproducer directory,
// and loaded with loadReproducer (manifest checks, bytecode parse and
// verify, signature match, weight generation).
#include "ScratchDir.h"

#include "flowc/worker/Reproducer.h"

#include <spdlog/spdlog.h>

#include <string_view>

namespace {
// A line no JSON manifest holds and unlikely in bytecode; fuzz/corpus
// seeds are made with the same separator (scripts/fuzz_seeds.py).
constexpr std::string_view kSeparator = "\n--flowc-fuzz-graph--\n";
} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  spdlog::set_level(spdlog::level::off);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const flowc::fuzz::ScratchDir &dir = flowc::fuzz::scratch();
  std::string_view input = flowc::fuzz::asView(data, size);
  size_t split = input.find(kSeparator);
  dir.write(flowc::worker::kReproManifestFile, input.substr(0, split));
  if (split == std::string_view::npos)
    dir.remove(flowc::worker::kReproGraphFile);
  else
    dir.write(flowc::worker::kReproGraphFile, input.substr(split + kSeparator.size()));
  auto loaded = flowc::worker::loadReproducer(dir.path());
  (void)loaded;
  return 0;
}
