// flowc-opt: mlir-opt over flowc's dialects and passes, e.g.
//   flowc-opt graph.mlir --flowc-derive-weights
//   flowc-opt kernel.mlir --pass-pipeline='builtin.module(flowc-partition-kernels)'
// for the .mlir tests in tests/compiler/ and for running one pass of the
// pipeline on IR printed with `flowc compile --print-ir-after`.
#include "Registration.h"
#include "transforms/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  flowc::compiler::registerFlowcPasses();
  flowc::compiler::registerPipelineUpstreamPasses();
  mlir::DialectRegistry registry;
  flowc::compiler::registerFlowcDialects(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "flowc's MLIR pass driver\n", registry));
}
