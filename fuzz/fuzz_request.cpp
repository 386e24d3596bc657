// The compile service's request checks on arbitrary bytes: each of
// SubmitRequest, InspectRequest and ReproRequest parsed from them (bytes
// that are not that message are skipped) and validated as the daemon and
// the worker process do, then turned into the canonical text that cache
// keys are made of.
#include "flowc/worker/RequestValidation.h"

#include <google/protobuf/stubs/logging.h>
#include <spdlog/spdlog.h>

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  spdlog::set_level(spdlog::level::off);
  // Protobuf logs every string field that is not UTF-8: once per input.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  int length = static_cast<int>(size);
  if (flowc::v1::SubmitRequest submit; submit.ParseFromArray(data, length)) {
    if (auto request = flowc::worker::validateSubmitRequest(submit)) {
      (void)request->options.canonical();
      (void)flowc::compiler::canonicalInputShapes(request->inputShapes);
    }
  }
  if (flowc::v1::InspectRequest inspect; inspect.ParseFromArray(data, length)) {
    if (auto shapes = flowc::worker::validateInspectRequest(inspect))
      (void)flowc::compiler::canonicalInputShapes(*shapes);
  }
  if (flowc::v1::ReproRequest repro; repro.ParseFromArray(data, length)) {
    if (auto parameters = flowc::worker::validateReproRequest(repro))
      (void)parameters->options.canonical();
  }
  return 0;
}
