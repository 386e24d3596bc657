// RUN: flowc-opt %s --flowc-inline-library-calls=kind=integer_matmul | FileCheck %s --check-prefix=INLINE
// RUN: flowc-opt %s --flowc-outline-library-kernels | FileCheck %s --check-prefix=OUTLINE

// The importer's integer products (MatMulInteger). On cuda, whose runtime
// lacks the kernel, only they go back to their bodies; TopK's call stays.
// INLINE-LABEL: func.func @main
// INLINE: tosa.cast %arg0 : (tensor<2x4xi8>) -> tensor<2x4xf32>
// INLINE-NOT: flowc.library_call integer_matmul
// INLINE: flowc.library_call topk
// INLINE-NOT: flowc.library_call integer_matmul

// The outline pass marks a product whose B is a weight (through a
// reshape too) constant, and leaves one of a run-time B as it is.
// OUTLINE-LABEL: func.func @main
// OUTLINE: flowc.library_call integer_matmul @flowc_integer_matmul_0(%arg0, %arg1) params <m = 2, n = 3, k = 4, transposedB = 0, constantB = 1,
// OUTLINE: flowc.library_call integer_matmul @flowc_integer_matmul_0(%arg0, %arg3) params <m = 2, n = 3, k = 4, transposedB = 0, constantB = 0,
// OUTLINE: flowc.library_call integer_matmul @flowc_integer_matmul_0(%arg0, %{{[0-9]+}}) params <m = 2, n = 3, k = 4, transposedB = 0, constantB = 1,
func.func private @flowc_integer_matmul_0(%a: tensor<2x4xi8> {bufferization.writable = false}, %b: tensor<4x3xi8> {bufferization.writable = false}) -> tensor<2x3xi32> {
  %wa = tosa.cast %a : (tensor<2x4xi8>) -> tensor<2x4xf32>
  %wb = tosa.cast %b : (tensor<4x3xi8>) -> tensor<4x3xf32>
  %s3 = tosa.const_shape {values = dense<[1, 2, 4]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %a3 = tosa.reshape %wa, %s3 : (tensor<2x4xf32>, !tosa.shape<3>) -> tensor<1x2x4xf32>
  %t3 = tosa.const_shape {values = dense<[1, 4, 3]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %b3 = tosa.reshape %wb, %t3 : (tensor<4x3xf32>, !tosa.shape<3>) -> tensor<1x4x3xf32>
  %z = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %p = tosa.matmul %a3, %b3, %z, %z : (tensor<1x2x4xf32>, tensor<1x4x3xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x2x3xf32>
  %s2 = tosa.const_shape {values = dense<[2, 3]> : tensor<2xindex>} : () -> !tosa.shape<2>
  %p2 = tosa.reshape %p, %s2 : (tensor<1x2x3xf32>, !tosa.shape<2>) -> tensor<2x3xf32>
  %r = tosa.cast %p2 : (tensor<2x3xf32>) -> tensor<2x3xi32>
  return %r : tensor<2x3xi32>
}
func.func private @flowc_topk_0(%x: tensor<2x8xf32> {bufferization.writable = false}) -> tensor<2x1xi32> {
  %m = tosa.argmax %x {axis = 1 : i32} : (tensor<2x8xf32>) -> tensor<2xi32>
  %s = tosa.const_shape {values = dense<[2, 1]> : tensor<2xindex>} : () -> !tosa.shape<2>
  %r = tosa.reshape %m, %s : (tensor<2xi32>, !tosa.shape<2>) -> tensor<2x1xi32>
  return %r : tensor<2x1xi32>
}
func.func @main(%a: tensor<2x4xi8>, %w: tensor<4x3xi8> {flowc.weight = "w"}, %x: tensor<2x8xf32>, %b: tensor<4x3xi8>, %v: tensor<12xi8> {flowc.weight = "v"}) -> (tensor<2x3xi32>, tensor<2x3xi32>, tensor<2x3xi32>, tensor<2x1xi32>) {
  %y = flowc.library_call integer_matmul @flowc_integer_matmul_0(%a, %w) params <m = 2, n = 3, k = 4, transposedB = 0, constantB = 0, unsignedA = 1, unsignedB = 0, hasZeroA = 0, zerosB = 0> : (tensor<2x4xi8>, tensor<4x3xi8>) -> tensor<2x3xi32>
  %u = flowc.library_call integer_matmul @flowc_integer_matmul_0(%a, %b) params <m = 2, n = 3, k = 4, transposedB = 0, constantB = 0, unsignedA = 1, unsignedB = 0, hasZeroA = 0, zerosB = 0> : (tensor<2x4xi8>, tensor<4x3xi8>) -> tensor<2x3xi32>
  %s = tosa.const_shape {values = dense<[4, 3]> : tensor<2xindex>} : () -> !tosa.shape<2>
  %vr = tosa.reshape %v, %s : (tensor<12xi8>, !tosa.shape<2>) -> tensor<4x3xi8>
  %q = flowc.library_call integer_matmul @flowc_integer_matmul_0(%a, %vr) params <m = 2, n = 3, k = 4, transposedB = 0, constantB = 0, unsignedA = 1, unsignedB = 0, hasZeroA = 0, zerosB = 0> : (tensor<2x4xi8>, tensor<4x3xi8>) -> tensor<2x3xi32>
  %t = flowc.library_call topk @flowc_topk_0(%x) params <rows = 2, n = 8, k = 1, largest = 1, keyType = 0> : (tensor<2x8xf32>) -> tensor<2x1xi32>
  return %y, %u, %q, %t : tensor<2x3xi32>, tensor<2x3xi32>, tensor<2x3xi32>, tensor<2x1xi32>
}
