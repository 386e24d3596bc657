// The .npy reader (flowc run --input) on arbitrary bytes, read from a file
// as the CLI does; a tensor it accepts must hold exactly its shape's bytes.
#include "ScratchDir.h"

#include "flowc/runtime/Tensor.h"

#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string path =
      flowc::fuzz::scratch().write("input.npy", flowc::fuzz::asView(data, size));
  auto tensor = flowc::runtime::readNpy(path);
  if (!tensor)
    return 0;
  size_t expected = static_cast<size_t>(tensor->elementCount()) *
                    flowc::runtime::dtypeBytes(tensor->dtype);
  if (tensor->bytes.size() != expected) {
    std::fprintf(stderr, "readNpy returned %zu bytes for %zu expected\n",
                 tensor->bytes.size(), expected);
    std::abort();
  }
  return 0;
}
