// The ONNX wire reader and importer on arbitrary bytes: loadOnnxModel reads
// them as model.onnx (mmapped, as the daemon does), with a 4 KiB
// "weights.bin" beside it for external-data locations to name, then
// importOnnx builds the graph IR. An error Status is a pass; a crash, UB, a
// leak, a hang or an allocation past the fuzzer's limit is a finding.
#include "ScratchDir.h"

#include "flowc/compiler/Compiler.h"
#include "flowc/compiler/OnnxModel.h"

#include <spdlog/spdlog.h>

#include <string>

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // Importer warnings per input would drown the fuzzer's own output.
  spdlog::set_level(spdlog::level::off);
  std::string data(4096, '\0');
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<char>(i * 7 + 1);
  flowc::fuzz::scratch().write("weights.bin", data);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path =
      flowc::fuzz::scratch().write("model.onnx", flowc::fuzz::asView(data, size));
  auto model = flowc::compiler::loadOnnxModel(path);
  if (!model)
    return 0;
  auto graph = flowc::compiler::importOnnx(*model);
  (void)graph;
  return 0;
}
