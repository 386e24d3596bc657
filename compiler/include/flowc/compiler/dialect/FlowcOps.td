// The flowc dialect's ops.
#ifndef FLOWC_OPS_TD
#define FLOWC_OPS_TD

include "flowc/compiler/dialect/FlowcDialect.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/CallInterfaces.td"

// The values are runtime::KernelKind's (KernelAbi.h); FlowcDialect.cpp
// static_asserts that they agree.
def Flowc_LibraryKernelKind : I64EnumAttr<"LibraryKernelKind", "a library kernel kind", [
    I64EnumAttrCase<"Conv2d", 0, "conv2d">,
    I64EnumAttrCase<"MatMul", 1, "matmul">,
    I64EnumAttrCase<"Pool2d", 2, "pool2d">,
    I64EnumAttrCase<"Softmax", 3, "softmax">,
    I64EnumAttrCase<"LayerNorm", 4, "layernorm">,
    I64EnumAttrCase<"TopK", 5, "topk">,
    I64EnumAttrCase<"ScatterRows", 6, "scatter">,
    I64EnumAttrCase<"IntegerMatMul", 7, "integer_matmul">,
    I64EnumAttrCase<"IntegerConv2d", 8, "integer_conv2d">]> {
  let cppNamespace = "::flowc::compiler";
}

def Flowc_LibraryCallOp : Op<Flowc_Dialect, "library_call", [
    CallOpInterface, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "a call of one of the runtime's library kernels";
  let description = [{
    What the outline pass leaves in @main for each match (and the importer
    for each TopK, each scatter at run-time indices and each
    MatMulInteger of a 2-D B): `callee` is the
    private function whose body is the exact TOSA the kernel replaces (it
    bufferizes like any function and so fixes the kernel's buffer ABI),
    `kind` the runtime kernel, `params` that kind's params struct of
    KernelAbi.h (int64 words, written and read by field name, in the
    struct's order: floats as floats), `inputs` the kernel's buffers in
    the kind's order. The verifier checks the words against the kind and the
    inputs against the params' flags and the kind's ranks.

    One-Shot Bufferize models `func.call` only: right before it,
    flowc-lower-library-calls turns each library_call into a `func.call`
    and leaves the kind and params on the callee (`flowc.kernel`,
    `flowc.kernel_params`), where the later steps read them.

    ```mlir
    %y = flowc.library_call softmax @flowc_kernel_3(%x)
        params <rows = 128, channels = 128> : (tensor<128x128xf32>) -> tensor<128x128xf32>
    ```
  }];
  let arguments = (ins
    Flowc_LibraryKernelKind:$kind,
    FlatSymbolRefAttr:$callee,
    DenseI64ArrayAttr:$params,
    Variadic<AnyRankedTensor>:$inputs,
    OptionalAttr<DictArrayAttr>:$arg_attrs,
    OptionalAttr<DictArrayAttr>:$res_attrs
  );
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $kind $callee `(` $inputs `)` `params` custom<KernelParams>(ref($kind), $params)
    attr-dict `:`
    functional-type($inputs, $result)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::OperandRange getArgOperands() { return getInputs(); }
    ::mlir::MutableOperandRange getArgOperandsMutable() {
      return getInputsMutable();
    }
    ::mlir::CallInterfaceCallable getCallableForCallee() {
      return (*this)->getAttrOfType<::mlir::SymbolRefAttr>("callee");
    }
    void setCalleeFromCallable(::mlir::CallInterfaceCallable callee) {
      (*this)->setAttr("callee", ::llvm::cast<::mlir::SymbolRefAttr>(callee));
    }
  }];
}

#endif // FLOWC_OPS_TD
