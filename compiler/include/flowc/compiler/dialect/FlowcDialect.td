// The flowc dialect: the attributes flowc puts on builtin, func, TOSA and
// SCF ops, declared once with their types and checked by one verifier.
#ifndef FLOWC_DIALECT_TD
#define FLOWC_DIALECT_TD

include "mlir/IR/DialectBase.td"

def Flowc_Dialect : Dialect {
  let name = "flowc";
  let cppNamespace = "::flowc::compiler";
  let summary = "flowc's discardable attributes";
  let description = [{
    The compiler marks the IR it hands from pass to pass with `flowc.*`
    attributes. This dialect declares them (ODS generates a typed helper
    for each, `FlowcDialect::getWeightAttrHelper()` and so on) and verifies
    them wherever they appear, so a malformed one is an error that names
    the op and the attribute instead of a wrong kernel later on:

    - on @main's arguments: `flowc.weight` (the weight key the argument
      binds), and on a derived weight `flowc.recipe` (the MLIR text of the
      module that computes it) with `flowc.recipe_inputs` (the keys it reads);
    - `flowc.unsigned` on an i8 argument or result of @main that holds
      uint8 (TOSA's integers are signless: int8 and uint8 are both i8);
    - on an outlined library kernel function: `flowc.kernel` (the kind, as
      runtime::kernelKindName spells it) and `flowc.kernel_params` (the
      kind's params struct of KernelAbi.h as int64 words);
    - `flowc.loop_kernel` on a partitioned loop kernel, `flowc.parallel` on
      a loop kept parallel, `flowc.arena_bytes` on @main once its
      temporaries share one arena;
    - `flowc.checks` on @main: what each of its run-time checks (its last
      results, tensor<1xi1> flags) says when it fails (GraphIr.h).
  }];
  let discardableAttrs = (ins
    "::mlir::StringAttr":$weight,
    "::mlir::StringAttr":$recipe,
    "::mlir::ArrayAttr":$recipe_inputs,
    "::mlir::StringAttr":$kernel,
    "::mlir::DenseI64ArrayAttr":$kernel_params,
    "::mlir::UnitAttr":$loop_kernel,
    "::mlir::UnitAttr":$parallel,
    "::mlir::IntegerAttr":$arena_bytes,
    "::mlir::ArrayAttr":$checks,
    "::mlir::UnitAttr":$unsigned
  );
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
}

#endif // FLOWC_DIALECT_TD
