// GPU candidates and GPU names on arbitrary bytes. Candidates come from
// artifacts (Plan::tuned) and `flowc tuning import`; names from `flowcd
// --remote-gpu` and a task's platform properties: untrusted text. A
// candidate that parses must be exactly what formatGpuCandidate writes for
// it, and a candidate of its library's kind; its split, when it has one,
// is checked against parameters taken from the same bytes. A name that
// parses must parse back to the same device.
#include "flowc/runtime/KernelAbi.h"
#include "flowc/runtime/Tuning.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

using flowc::Expected;
using namespace flowc::runtime;

[[noreturn]] void finding(const std::string &what, std::string_view text) {
  std::fprintf(stderr, "%s: '%.*s'\n", what.c_str(), static_cast<int>(text.size()),
               text.data());
  std::abort();
}

/// The input's bytes as a kind's parameter words, zero-padded.
std::vector<int64_t> wordsOf(std::string_view text, size_t count) {
  std::vector<int64_t> words(count, 0);
  std::memcpy(words.data(), text.data(), std::min(text.size(), count * 8));
  return words;
}

void checkCandidate(std::string_view text) {
  Expected<GpuCandidate> candidate = parseGpuCandidate(text);
  if (!candidate)
    return;
  if (formatGpuCandidate(*candidate) != text)
    finding("a candidate that parses formats as '" + formatGpuCandidate(*candidate) + "'",
            text);
  KernelKind kind = candidate->library == GpuCandidate::Library::Cudnn
                        ? KernelKind::Conv2d
                        : KernelKind::MatMul;
  int64_t devices = candidate->split ? candidate->split->ways : 1;
  if (!isGpuCandidateOf(kind, text, devices))
    finding("a candidate that parses is not one of its kind", text);
  if (!candidate->split)
    return;
  (void)checkTensorSplit(KernelKind::Conv2d, wordsOf(text, sizeof(Conv2dParams) / 8),
                         *candidate->split);
  (void)checkTensorSplit(KernelKind::MatMul, wordsOf(text, sizeof(MatMulParams) / 8),
                         *candidate->split);
}

void checkGpuName(std::string_view text) {
  Expected<std::string> device = parseGpuName(text);
  if (!device)
    return;
  Expected<std::string> again = parseGpuName(gpuNameOf(*device));
  if (!again || *again != *device)
    finding("the GPU name of '" + *device + "' does not parse back", text);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string_view text(reinterpret_cast<const char *>(data), size);
  checkCandidate(text);
  checkGpuName(text);
  return 0;
}
