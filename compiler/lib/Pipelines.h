// The three lowering pipelines Codegen runs, built from CompileOptions
// (which are part of every cache key, so a pipeline is a pure function of
// them). See Pipelines.cpp for why each stage runs where it does.
#pragma once

#include "flowc/compiler/Compiler.h"

#include "LoopSearch.h"

namespace mlir {
class OpPassManager;
} // namespace mlir

namespace flowc::compiler {

/// Stage 1: the TOSA graph -> buffers, with the public ABI fixed (dense
/// identity-layout buffers, results as out-parameters, the activation arena
/// as the last argument when planned).
void buildBufferizePipeline(mlir::OpPassManager &pm, const CompileOptions &options);

/// Stage 2: loop nests on buffers, deallocated and ready to be cut into
/// kernels.
void buildPrepareLoopsPipeline(mlir::OpPassManager &pm, const CompileOptions &options);

/// Stage 3: buffers -> the LLVM dialect; run on @main's module and on each
/// kernel's. A kernel's search candidate may fix its parallel dimensions
/// (its loop hints are put on in LLVM IR, after this stage).
void buildLowerToLlvmPipeline(mlir::OpPassManager &pm, const CompileOptions &options,
                              const LoopCandidate &candidate = {});

/// Stage 3 for a kernel's module on a CUDA target: its loop nests become
/// GPU kernels (NVVM -> PTX through LLVM's NVPTX backend -> a cubin through
/// the toolkit's ptxas at `toolkitPath`, embedded), and its function the
/// host code that launches them through the GPU runtime table (GpuAbi.h).
void buildLowerKernelToCudaPipeline(mlir::OpPassManager &pm,
                                    const CompileOptions &options,
                                    const std::string &toolkitPath);

/// Whether the generated code calls the OpenMP runtime
/// (flowc-parallelize-loops runs), so the shared object must link it.
bool usesOpenMp(const CompileOptions &options);

} // namespace flowc::compiler
