// Derived weights: what the graph computes from weights alone is computed
// once, outside the generated code, and bound like a weight.
//
// `createDeriveWeightsPass` runs on the TOSA graph:
//  1. A per-channel affine `y * s + t` after a convolution (the importer's
//     BatchNormalization), with s and t computed from weights, folds into the
//     convolution: weights w * s, bias b * s + t.
//  2. Every value computed from weights only (arithmetic on weight arguments
//     and constants) that the rest of the graph reads becomes a new @main
//     weight argument carrying its recipe: the MLIR text of a module whose
//     `@derive` computes it from the source weights. Weight arguments nothing
//     reads any more are dropped.
// The code object therefore still holds no weight values, and a new
// fine-tune reuses the code: whoever binds the code evaluates the recipes
// (compiler::evaluateDerivedWeight) on the weights it has, and may cache
// the result by (recipe, input digests).
#pragma once

#include "flowc/compiler/Compiler.h"
#include "flowc/runtime/KernelAbi.h"

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace flowc::compiler {

/// @main argument attributes of a derived weight (besides `flowc.weight`).
inline constexpr const char *kRecipeAttr = "flowc.recipe";
inline constexpr const char *kRecipeInputsAttr = "flowc.recipe_inputs";

/// The weights @main binds, in argument order, at any stage that still has
/// func.func @main.
CodeWeights collectCodeWeights(mlir::ModuleOp module);

} // namespace flowc::compiler
