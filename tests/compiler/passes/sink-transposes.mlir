// RUN: flowc-opt %s --split-input-file --flowc-sink-transposes | FileCheck %s

// DenseNet's pattern: two NHWC results viewed as NCHW, concatenated along
// channels, scaled and shifted per channel by graph weights (BatchNorm),
// clamped (ReLU), and viewed as NHWC again for the next convolution. The
// NCHW views move below the concatenation (now along axis 3), the
// arithmetic (its weights read through reshapes) and the clamp, where they
// meet the NHWC view and cancel: no transpose is left.
// CHECK-LABEL: func.func @dense_layer
// CHECK-SAME: (%[[A:[^:]*]]: tensor<1x8x8x16xf32>, %[[B:[^:]*]]: tensor<1x8x8x8xf32>, %[[S:[^:]*]]: tensor<1x24x1x1xf32>, %[[T:[^:]*]]: tensor<1x24x1x1xf32>)
// CHECK-NOT: tosa.transpose
// CHECK: %[[C:.*]] = tosa.concat %[[A]], %[[B]] {axis = 3 : i32} : (tensor<1x8x8x16xf32>, tensor<1x8x8x8xf32>) -> tensor<1x8x8x24xf32>
// CHECK: %[[S2:.*]] = tosa.reshape %[[S]], %{{.*}} -> tensor<1x1x1x24xf32>
// CHECK: %[[M:.*]] = tosa.mul %[[C]], %[[S2]], %{{.*}} -> tensor<1x8x8x24xf32>
// CHECK: %[[T2:.*]] = tosa.reshape %[[T]], %{{.*}} -> tensor<1x1x1x24xf32>
// CHECK: %[[D:.*]] = tosa.add %[[M]], %[[T2]]
// CHECK: %[[R:.*]] = tosa.clamp %[[D]]
// CHECK-NOT: tosa.transpose
// CHECK: return %[[R]] : tensor<1x8x8x24xf32>
func.func @dense_layer(%a: tensor<1x8x8x16xf32>, %b: tensor<1x8x8x8xf32>,
                       %s: tensor<1x24x1x1xf32>, %t: tensor<1x24x1x1xf32>) -> tensor<1x8x8x24xf32> {
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %an = tosa.transpose %a {perms = array<i32: 0, 3, 1, 2>} : (tensor<1x8x8x16xf32>) -> tensor<1x16x8x8xf32>
  %bn = tosa.transpose %b {perms = array<i32: 0, 3, 1, 2>} : (tensor<1x8x8x8xf32>) -> tensor<1x8x8x8xf32>
  %c = tosa.concat %an, %bn {axis = 1 : i32} : (tensor<1x16x8x8xf32>, tensor<1x8x8x8xf32>) -> tensor<1x24x8x8xf32>
  %m = tosa.mul %c, %s, %shift : (tensor<1x24x8x8xf32>, tensor<1x24x1x1xf32>, tensor<1xi8>) -> tensor<1x24x8x8xf32>
  %d = tosa.add %m, %t : (tensor<1x24x8x8xf32>, tensor<1x24x1x1xf32>) -> tensor<1x24x8x8xf32>
  %r = tosa.clamp %d {max_val = 0x7F800000 : f32, min_val = 0.000000e+00 : f32} : (tensor<1x24x8x8xf32>) -> tensor<1x24x8x8xf32>
  %rn = tosa.transpose %r {perms = array<i32: 0, 2, 3, 1>} : (tensor<1x24x8x8xf32>) -> tensor<1x8x8x24xf32>
  return %rn : tensor<1x8x8x24xf32>
}

// -----

// A global average pool over H and W: the reduction moves above the NCHW
// view (now over axes 1 and 2), which is left on a [1, 1, 1, C] tensor: a
// reshape, no copy.
// CHECK-LABEL: func.func @pool_tail
// CHECK-SAME: (%[[X:[^:]*]]: tensor<1x4x4x32xf32>)
// CHECK: %[[R1:.*]] = tosa.reduce_sum %[[X]] {axis = 1 : i32} : (tensor<1x4x4x32xf32>) -> tensor<1x1x4x32xf32>
// CHECK: %[[R2:.*]] = tosa.reduce_sum %[[R1]] {axis = 2 : i32} : (tensor<1x1x4x32xf32>) -> tensor<1x1x1x32xf32>
// CHECK-NOT: tosa.transpose
// CHECK: tosa.reshape %[[R2]], %{{.*}} -> tensor<1x32x1x1xf32>
func.func @pool_tail(%x: tensor<1x4x4x32xf32>) -> tensor<1x32x1x1xf32> {
  %xn = tosa.transpose %x {perms = array<i32: 0, 3, 1, 2>} : (tensor<1x4x4x32xf32>) -> tensor<1x32x4x4xf32>
  %r1 = tosa.reduce_sum %xn {axis = 2 : i32} : (tensor<1x32x4x4xf32>) -> tensor<1x32x1x4xf32>
  %r2 = tosa.reduce_sum %r1 {axis = 3 : i32} : (tensor<1x32x1x4xf32>) -> tensor<1x32x1x1xf32>
  return %r2 : tensor<1x32x1x1xf32>
}

// -----

// An operand that would need a transpose of its own (a full NCHW tensor of
// the graph's) keeps the op in NCHW: nothing moves.
// CHECK-LABEL: func.func @full_operand
// CHECK: %[[XN:.*]] = tosa.transpose
// CHECK: tosa.add %[[XN]], %{{.*}} : (tensor<1x4x2x2xf32>, tensor<1x4x2x2xf32>)
func.func @full_operand(%x: tensor<1x2x2x4xf32>, %y: tensor<1x4x2x2xf32>) -> tensor<1x4x2x2xf32> {
  %xn = tosa.transpose %x {perms = array<i32: 0, 3, 1, 2>} : (tensor<1x2x2x4xf32>) -> tensor<1x4x2x2xf32>
  %z = tosa.add %xn, %y : (tensor<1x4x2x2xf32>, tensor<1x4x2x2xf32>) -> tensor<1x4x2x2xf32>
  return %z : tensor<1x4x2x2xf32>
}

// -----

// A concatenation with one input that is not an NCHW view stays in NCHW.
// CHECK-LABEL: func.func @mixed_concat
// CHECK: tosa.concat %{{.*}}, %{{.*}} {axis = 1 : i32}
func.func @mixed_concat(%x: tensor<1x2x2x4xf32>, %y: tensor<1x4x2x2xf32>) -> tensor<1x8x2x2xf32> {
  %xn = tosa.transpose %x {perms = array<i32: 0, 3, 1, 2>} : (tensor<1x2x2x4xf32>) -> tensor<1x4x2x2xf32>
  %c = tosa.concat %xn, %y {axis = 1 : i32} : (tensor<1x4x2x2xf32>, tensor<1x4x2x2xf32>) -> tensor<1x8x2x2xf32>
  return %c : tensor<1x8x2x2xf32>
}

// -----

// A per-example squeeze-and-excitation gate [N, C, 1, 1] (a transpose of
// [N, 1, 1, C] that canonicalization made a reshape) holds the same bytes
// as its NHWC form: the product moves to NHWC, reading it through a
// reshape.
// CHECK-LABEL: func.func @batched_gate
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x4x4x8xf32>, %[[G:[^:]*]]: tensor<2x8x1x1xf32>)
// CHECK: %[[G2:.*]] = tosa.reshape %[[G]], %{{.*}} -> tensor<2x1x1x8xf32>
// CHECK: %[[M:.*]] = tosa.mul %[[X]], %[[G2]], %{{.*}} -> tensor<2x4x4x8xf32>
// CHECK-NOT: tosa.transpose
// CHECK: return %[[M]]
func.func @batched_gate(%x: tensor<2x4x4x8xf32>, %g: tensor<2x8x1x1xf32>) -> tensor<2x4x4x8xf32> {
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %xn = tosa.transpose %x {perms = array<i32: 0, 3, 1, 2>} : (tensor<2x4x4x8xf32>) -> tensor<2x8x4x4xf32>
  %m = tosa.mul %xn, %g, %shift : (tensor<2x8x4x4xf32>, tensor<2x8x1x1xf32>, tensor<1xi8>) -> tensor<2x8x4x4xf32>
  %mt = tosa.transpose %m {perms = array<i32: 0, 2, 3, 1>} : (tensor<2x8x4x4xf32>) -> tensor<2x4x4x8xf32>
  return %mt : tensor<2x4x4x8xf32>
}
