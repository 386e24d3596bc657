// RUN: flowc-opt %s --flowc-copy-wide-concats="max-in-place=2" | FileCheck %s
// RUN: flowc-opt %s --flowc-copy-wide-concats="max-in-place=2" --tosa-to-tensor --one-shot-bufferize="bufferize-function-boundaries" | FileCheck %s --check-prefix=BUFFERS

// Three inputs, past the limit of two: one tensor.concat, which bufferizes
// to one buffer and a copy of each input into its slice.
// CHECK-LABEL: func.func @wide
// CHECK-SAME: (%[[A:.*]]: tensor<1x4xf32>, %[[B:.*]]: tensor<2x4xf32>, %[[C:.*]]: tensor<1x4xf32>)
// CHECK-NOT: tosa.concat
// CHECK: %[[J:.*]] = tensor.concat dim(0) %[[A]], %[[B]], %[[C]] : (tensor<1x4xf32>, tensor<2x4xf32>, tensor<1x4xf32>) -> tensor<4x4xf32>
// CHECK: return %[[J]]
// BUFFERS-LABEL: func.func @wide
// BUFFERS: memref.alloc() {{.*}} : memref<4x4xf32>
// BUFFERS-COUNT-3: memref.copy
func.func @wide(%a: tensor<1x4xf32>, %b: tensor<2x4xf32>, %c: tensor<1x4xf32>) -> tensor<4x4xf32> {
  %0 = tosa.concat %a, %b, %c {axis = 0 : i32} : (tensor<1x4xf32>, tensor<2x4xf32>, tensor<1x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// Two inputs along the last axis: within the limit, left to be joined in
// place.
// CHECK-LABEL: func.func @narrow
// CHECK: tosa.concat %{{.*}}, %{{.*}} {axis = 1 : i32}
// CHECK-NOT: tensor.concat
func.func @narrow(%a: tensor<2x3xf32>, %b: tensor<2x5xf32>) -> tensor<2x8xf32> {
  %0 = tosa.concat %a, %b {axis = 1 : i32} : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}
