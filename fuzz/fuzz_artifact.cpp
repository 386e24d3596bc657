// The artifact reader on arbitrary bytes: Artifact::open maps them as an
// .fca file and validates header, section table, metadata and plan, and
// binds weights; external (thin) weights resolve to a 4 KiB file whatever
// their digest, so size checks against a real mapping run too. No code
// from the artifact is loaded or run.
#include "ScratchDir.h"

#include "flowc/runtime/Artifact.h"

#include <spdlog/spdlog.h>

#include <string>

namespace {
std::string externalPath;
} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  spdlog::set_level(spdlog::level::off);
  externalPath = flowc::fuzz::scratch().write("external.bin", std::string(4096, '\x5a'));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path =
      flowc::fuzz::scratch().write("model.fca", flowc::fuzz::asView(data, size));
  // Bounds only, as `flowc run --no-verify` opens: a mutated byte would
  // fail the digests before any other check ran.
  flowc::runtime::OpenOptions options;
  options.verification = flowc::runtime::Verification::BoundsOnly;
  options.threads = 1;
  options.external = [](const std::string &, const nlohmann::json &) {
    return flowc::MappedFile::open(externalPath);
  };
  auto artifact = flowc::runtime::Artifact::open(path, options);
  if (!artifact)
    return 0;
  // What inspect and a session read before any code is loaded.
  const flowc::runtime::Artifact &opened = **artifact;
  flowc::Status weights = opened.requireWeights();
  (void)weights;
  (void)opened.isThin();
  for (size_t i = 0; i < opened.plan().weights.size(); ++i)
    (void)opened.weightBytes(i);
  for (size_t i = 0; i < opened.plan().packed.size(); ++i)
    (void)opened.packedBytes(i);
  (void)opened.plan().toJson().dump();
  (void)opened.metadata().dump();
  return 0;
}
