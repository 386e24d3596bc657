// What an MLIR context needs to hold flowc's IR, shared by Codegen and
// flowc-opt so the tests see the compiler's dialects and passes.
#pragma once

namespace mlir {
class DialectRegistry;
} // namespace mlir

namespace flowc::compiler {

/// Inserts every dialect the pipelines produce or consume, their
/// bufferization and deallocation interfaces, and the LLVM IR translations.
void registerFlowcDialects(mlir::DialectRegistry &registry);

/// Registers, under their arguments, the upstream passes the pipelines run,
/// for flowc-opt's command line. Upstream's `linalg-fuse-elementwise-ops` is
/// left out: flowc's pass of that name replaces it. Call once, before
/// parsing options.
void registerPipelineUpstreamPasses();

} // namespace flowc::compiler
