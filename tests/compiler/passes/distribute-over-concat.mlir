// RUN: flowc-opt %s --split-input-file --flowc-distribute-over-concat | FileCheck %s

// BatchNorm + ReLU after a concatenation that only it reads: each input
// gets its own scale, shift and clamp, with the per-channel weights sliced
// at its channels; the concatenation moves to the end.
// CHECK-LABEL: func.func @dense_layer
// CHECK-SAME: (%[[A:[^:]*]]: tensor<1x8x8x16xf32>, %[[B:[^:]*]]: tensor<1x8x8x8xf32>, %[[S:[^:]*]]: tensor<1x1x1x24xf32>, %[[K:[^:]*]]: tensor<1x1x1x1xf32>)
// CHECK-DAG: %[[SA:.*]] = tosa.slice %[[S]], %{{.*}}, %{{.*}} : (tensor<1x1x1x24xf32>, !tosa.shape<4>, !tosa.shape<4>) -> tensor<1x1x1x16xf32>
// CHECK-DAG: %[[SB:.*]] = tosa.slice %[[S]], %{{.*}}, %{{.*}} : (tensor<1x1x1x24xf32>, !tosa.shape<4>, !tosa.shape<4>) -> tensor<1x1x1x8xf32>
// CHECK-DAG: %[[MA:.*]] = tosa.mul %[[A]], %[[SA]]
// CHECK-DAG: %[[MB:.*]] = tosa.mul %[[B]], %[[SB]]
// CHECK-DAG: %[[DA:.*]] = tosa.add %[[MA]], %[[K]]
// CHECK-DAG: %[[DB:.*]] = tosa.add %[[MB]], %[[K]]
// CHECK-DAG: %[[RA:.*]] = tosa.clamp %[[DA]]
// CHECK-DAG: %[[RB:.*]] = tosa.clamp %[[DB]]
// CHECK: %[[C:.*]] = tosa.concat %[[RA]], %[[RB]] {axis = 3 : i32}
// CHECK-NOT: tosa.concat
// CHECK: return %[[C]]
func.func @dense_layer(%a: tensor<1x8x8x16xf32>, %b: tensor<1x8x8x8xf32>,
                       %s: tensor<1x1x1x24xf32>, %k: tensor<1x1x1x1xf32>) -> tensor<1x8x8x24xf32> {
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %c = tosa.concat %a, %b {axis = 3 : i32} : (tensor<1x8x8x16xf32>, tensor<1x8x8x8xf32>) -> tensor<1x8x8x24xf32>
  %m = tosa.mul %c, %s, %shift : (tensor<1x8x8x24xf32>, tensor<1x1x1x24xf32>, tensor<1xi8>) -> tensor<1x8x8x24xf32>
  %d = tosa.add %m, %k : (tensor<1x8x8x24xf32>, tensor<1x1x1x1xf32>) -> tensor<1x8x8x24xf32>
  %r = tosa.clamp %d {max_val = 0x7F800000 : f32, min_val = 0.000000e+00 : f32} : (tensor<1x8x8x24xf32>) -> tensor<1x8x8x24xf32>
  return %r : tensor<1x8x8x24xf32>
}

// -----

// A concatenation that something else reads too stays whole: distributing
// would compute the op per input and still copy every input.
// CHECK-LABEL: func.func @shared_concat
// CHECK: %[[C:.*]] = tosa.concat
// CHECK: tosa.clamp %[[C]]
// CHECK: return
func.func @shared_concat(%a: tensor<1x2x2x4xf32>, %b: tensor<1x2x2x4xf32>) -> (tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>) {
  %c = tosa.concat %a, %b {axis = 3 : i32} : (tensor<1x2x2x4xf32>, tensor<1x2x2x4xf32>) -> tensor<1x2x2x8xf32>
  %r = tosa.clamp %c {max_val = 0x7F800000 : f32, min_val = 0.000000e+00 : f32} : (tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32>
  return %c, %r : tensor<1x2x2x8xf32>, tensor<1x2x2x8xf32>
}

// -----

// A concatenation broadcast by the op (a [1, 1, 1, 8] row added to a full
// tensor) stays whole.
// CHECK-LABEL: func.func @broadcast_concat
// CHECK: %[[C:.*]] = tosa.concat
// CHECK: tosa.add %{{.*}}, %[[C]]
func.func @broadcast_concat(%a: tensor<1x1x1x4xf32>, %b: tensor<1x1x1x4xf32>, %x: tensor<1x2x2x8xf32>) -> tensor<1x2x2x8xf32> {
  %c = tosa.concat %a, %b {axis = 3 : i32} : (tensor<1x1x1x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x1x1x8xf32>
  %r = tosa.add %x, %c : (tensor<1x2x2x8xf32>, tensor<1x1x1x8xf32>) -> tensor<1x2x2x8xf32>
  return %r : tensor<1x2x2x8xf32>
}
