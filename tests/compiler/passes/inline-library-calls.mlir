// RUN: flowc-opt %s --flowc-inline-library-calls | FileCheck %s

// Where the outline pass does not run (-O0), the importer's library calls
// (TopK's selection) go back to their TOSA bodies: the code is generated
// loops throughout, and the callee goes once nothing calls it.
// CHECK-NOT: flowc_topk_0
// CHECK-LABEL: func.func @main
// CHECK-NOT: flowc.library_call
// CHECK: %[[M:.*]] = tosa.argmax %arg0 {axis = 1 : i32} : (tensor<2x8xf32>) -> tensor<2xi32>
// CHECK: %[[S:.*]] = tosa.const_shape
// CHECK: %[[R:.*]] = tosa.reshape %[[M]], %[[S]]
// CHECK: return %[[R]]
func.func private @flowc_topk_0(%x: tensor<2x8xf32> {bufferization.writable = false}) -> tensor<2x1xi32> {
  %m = tosa.argmax %x {axis = 1 : i32} : (tensor<2x8xf32>) -> tensor<2xi32>
  %s = tosa.const_shape {values = dense<[2, 1]> : tensor<2xindex>} : () -> !tosa.shape<2>
  %r = tosa.reshape %m, %s : (tensor<2xi32>, !tosa.shape<2>) -> tensor<2x1xi32>
  return %r : tensor<2x1xi32>
}
func.func @main(%x: tensor<2x8xf32>) -> tensor<2x1xi32> {
  %y = flowc.library_call topk @flowc_topk_0(%x) params <rows = 2, n = 8, k = 1, largest = 1, keyType = 0> : (tensor<2x8xf32>) -> tensor<2x1xi32>
  return %y : tensor<2x1xi32>
}
