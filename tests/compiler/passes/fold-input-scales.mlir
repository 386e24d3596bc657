// RUN: flowc-opt %s --split-input-file --flowc-fold-input-scales | FileCheck %s

// A squeeze-and-excitation gate [1, 1, 1, C] on a convolution's input
// scales its weights instead: the convolution reads x itself.
// CHECK-LABEL: func.func @gate
// CHECK-SAME: (%[[X:[^:]*]]: tensor<2x5x5x8xf32>, %[[G:[^:]*]]: tensor<1x1x1x8xf32>, %[[W:[^:]*]]: tensor<4x1x1x8xf32>
// CHECK: %[[WG:.*]] = tosa.mul %[[W]], %[[G]], %{{.*}} : (tensor<4x1x1x8xf32>, tensor<1x1x1x8xf32>, tensor<1xi8>) -> tensor<4x1x1x8xf32>
// CHECK: tosa.conv2d %[[X]], %[[WG]]
// CHECK-NOT: tosa.mul
func.func @gate(%x: tensor<2x5x5x8xf32>, %g: tensor<1x1x1x8xf32>, %w: tensor<4x1x1x8xf32>, %b: tensor<4xf32>) -> tensor<2x5x5x4xf32> {
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %s = tosa.mul %g, %x, %shift : (tensor<1x1x1x8xf32>, tensor<2x5x5x8xf32>, tensor<1xi8>) -> tensor<2x5x5x8xf32>
  %c = tosa.conv2d %s, %w, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 1, 1>} : (tensor<2x5x5x8xf32>, tensor<4x1x1x8xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x5x5x4xf32>
  return %c : tensor<2x5x5x4xf32>
}

// -----

// A gate per example ([2, 1, 1, C]) differs across the batch, and a scaled
// input that something else reads is computed anyway: both stay.
// CHECK-LABEL: func.func @stays
// CHECK: %[[S:.*]] = tosa.mul
// CHECK: tosa.conv2d %[[S]]
// CHECK: %[[T:.*]] = tosa.mul
// CHECK: tosa.conv2d %[[T]]
func.func @stays(%x: tensor<2x5x5x8xf32>, %g: tensor<2x1x1x8xf32>, %h: tensor<1x1x1x8xf32>, %w: tensor<4x1x1x8xf32>, %b: tensor<4xf32>) -> (tensor<2x5x5x4xf32>, tensor<2x5x5x4xf32>, tensor<2x5x5x8xf32>) {
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %s = tosa.mul %x, %g, %shift : (tensor<2x5x5x8xf32>, tensor<2x1x1x8xf32>, tensor<1xi8>) -> tensor<2x5x5x8xf32>
  %c = tosa.conv2d %s, %w, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 1, 1>} : (tensor<2x5x5x8xf32>, tensor<4x1x1x8xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x5x5x4xf32>
  %t = tosa.mul %x, %h, %shift : (tensor<2x5x5x8xf32>, tensor<1x1x1x8xf32>, tensor<1xi8>) -> tensor<2x5x5x8xf32>
  %d = tosa.conv2d %t, %w, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 1, 1>} : (tensor<2x5x5x8xf32>, tensor<4x1x1x8xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<2x5x5x4xf32>
  return %c, %d, %t : tensor<2x5x5x4xf32>, tensor<2x5x5x4xf32>, tensor<2x5x5x8xf32>
}

// -----

// Weights with more values per channel than the input has (8 outputs of a
// 1x1 convolution on 2x2 pixels): scaling the input touches less, so it
// stays.
// CHECK-LABEL: func.func @small_image
// CHECK: %[[S:.*]] = tosa.mul
// CHECK: tosa.conv2d %[[S]]
func.func @small_image(%x: tensor<1x2x2x8xf32>, %g: tensor<1x1x1x8xf32>, %w: tensor<8x1x1x8xf32>, %b: tensor<8xf32>) -> tensor<1x2x2x8xf32> {
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %s = tosa.mul %x, %g, %shift : (tensor<1x2x2x8xf32>, tensor<1x1x1x8xf32>, tensor<1xi8>) -> tensor<1x2x2x8xf32>
  %c = tosa.conv2d %s, %w, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 1, 1>} : (tensor<1x2x2x8xf32>, tensor<8x1x1x8xf32>, tensor<8xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x2x2x8xf32>
  return %c : tensor<1x2x2x8xf32>
}
