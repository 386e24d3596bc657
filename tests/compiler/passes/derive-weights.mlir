// RUN: flowc-opt %s --split-input-file --flowc-derive-weights | FileCheck %s

// A convolution whose result is also returned before its per-channel
// affine: the affine cannot fold, but its factor s * 2 (read twice) becomes
// one derived weight; the convolution's transposed weight alone does not
// (kernels read it in place). `s` and the unused weight are dropped.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[X:[^:]*]]: tensor<1x6x6x8xf32>,
// CHECK-SAME: %[[W:[^:]*]]: tensor<4x8x3x3xf32> {flowc.weight = "w"},
// CHECK-SAME: %[[B:[^:]*]]: tensor<4xf32> {flowc.weight = "b"},
// CHECK-SAME: %[[F:[^:]*]]: tensor<1x1x1x4xf32> {flowc.recipe = "{{[^"]*}}", flowc.recipe_inputs = ["s"], flowc.weight = "flowc.derived/0"})
// CHECK-SAME: -> (tensor<1x6x6x4xf32>, tensor<1x6x6x4xf32>)
// CHECK: %[[WT:.*]] = tosa.transpose %[[W]]
// CHECK: %[[C:.*]] = tosa.conv2d %[[X]], %[[WT]], %[[B]]
// CHECK-NOT: tosa.mul %arg
// CHECK: %[[Y:.*]] = tosa.mul %[[C]], %[[F]]
// CHECK: %[[Z:.*]] = tosa.add %[[Y]], %[[F]]
// CHECK: return %[[C]], %[[Z]]
func.func @main(%x: tensor<1x6x6x8xf32>, %w: tensor<4x8x3x3xf32> {flowc.weight = "w"},
                %b: tensor<4xf32> {flowc.weight = "b"},
                %s: tensor<1x1x1x4xf32> {flowc.weight = "s"},
                %unused: tensor<4xf32> {flowc.weight = "unused"})
    -> (tensor<1x6x6x4xf32>, tensor<1x6x6x4xf32>) {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %two = "tosa.const"() <{values = dense<2.0> : tensor<1x1x1x1xf32>}> : () -> tensor<1x1x1x1xf32>
  %wt = tosa.transpose %w {perms = array<i32: 0, 2, 3, 1>} : (tensor<4x8x3x3xf32>) -> tensor<4x3x3x8xf32>
  %c = tosa.conv2d %x, %wt, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x6x6x8xf32>, tensor<4x3x3x8xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x6x6x4xf32>
  %f = tosa.mul %s, %two, %shift : (tensor<1x1x1x4xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x1x1x4xf32>
  %y = tosa.mul %c, %f, %shift : (tensor<1x6x6x4xf32>, tensor<1x1x1x4xf32>, tensor<1xi8>) -> tensor<1x6x6x4xf32>
  %z = tosa.add %y, %f : (tensor<1x6x6x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x6x6x4xf32>
  return %c, %z : tensor<1x6x6x4xf32>, tensor<1x6x6x4xf32>
}

// -----

// The convolution's result now feeds only the affine: it folds into the
// weights (w * s * 2, transposed) and the bias (b * s * 2 + s * 2), both
// derived; nothing of the affine is left in the graph.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[X:[^:]*]]: tensor<1x6x6x8xf32>,
// CHECK-SAME: %[[W:[^:]*]]: tensor<4x3x3x8xf32> {flowc.recipe = "{{[^"]*}}", flowc.recipe_inputs = ["w", "s"], flowc.weight = "flowc.derived/0"},
// CHECK-SAME: %[[B:[^:]*]]: tensor<4xf32> {flowc.recipe = "{{[^"]*}}", flowc.recipe_inputs = ["b", "s"], flowc.weight = "flowc.derived/1"})
// CHECK-NOT: tosa.transpose
// CHECK: %[[C:.*]] = tosa.conv2d %[[X]], %[[W]], %[[B]]
// CHECK-NOT: tosa.mul
// CHECK-NOT: tosa.add
// CHECK: return %[[C]], %[[C]]
func.func @main(%x: tensor<1x6x6x8xf32>, %w: tensor<4x8x3x3xf32> {flowc.weight = "w"},
                %b: tensor<4xf32> {flowc.weight = "b"},
                %s: tensor<1x1x1x4xf32> {flowc.weight = "s"},
                %unused: tensor<4xf32> {flowc.weight = "unused"})
    -> (tensor<1x6x6x4xf32>, tensor<1x6x6x4xf32>) {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %two = "tosa.const"() <{values = dense<2.0> : tensor<1x1x1x1xf32>}> : () -> tensor<1x1x1x1xf32>
  %wt = tosa.transpose %w {perms = array<i32: 0, 2, 3, 1>} : (tensor<4x8x3x3xf32>) -> tensor<4x3x3x8xf32>
  %c = tosa.conv2d %x, %wt, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x6x6x8xf32>, tensor<4x3x3x8xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x6x6x4xf32>
  %f = tosa.mul %s, %two, %shift : (tensor<1x1x1x4xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x1x1x4xf32>
  %y = tosa.mul %c, %f, %shift : (tensor<1x6x6x4xf32>, tensor<1x1x1x4xf32>, tensor<1xi8>) -> tensor<1x6x6x4xf32>
  %z = tosa.add %y, %f : (tensor<1x6x6x4xf32>, tensor<1x1x1x4xf32>) -> tensor<1x6x6x4xf32>
  return %z, %z : tensor<1x6x6x4xf32>, tensor<1x6x6x4xf32>
}


// -----

// A ConvTranspose's kernel, flipped along both spatial axes: a reversed
// weight is no layout a library reads in place, so the flip becomes one
// derived weight and the convolution reads it directly.
// CHECK-LABEL: func.func @main
// CHECK-SAME: %[[F:[^:]*]]: tensor<2x3x3x1xf32> {flowc.recipe = "{{[^"]*}}", flowc.recipe_inputs = ["w"], flowc.weight = "flowc.derived/0"}
// CHECK-NOT: tosa.reverse
// CHECK: tosa.conv2d %{{[^,]*}}, %[[F]]
func.func @main(%x: tensor<1x4x4x1xf32>, %w: tensor<2x3x3x1xf32> {flowc.weight = "w"},
                %b: tensor<2xf32> {flowc.weight = "b"}) -> tensor<1x4x4x2xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %r1 = tosa.reverse %w {axis = 1 : i32} : (tensor<2x3x3x1xf32>) -> tensor<2x3x3x1xf32>
  %r2 = tosa.reverse %r1 {axis = 2 : i32} : (tensor<2x3x3x1xf32>) -> tensor<2x3x3x1xf32>
  %c = tosa.conv2d %x, %r2, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x4x4x1xf32>, tensor<2x3x3x1xf32>, tensor<2xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x4x2xf32>
  return %c : tensor<1x4x4x2xf32>
}

// -----

// A float16 model's weights: each widening is a derived weight of its own,
// and the transpose after it stays in the graph (a library reads it into
// its layout as it does a float32 weight). A widening that feeds arithmetic
// belongs to that arithmetic's recipe instead; nothing widens `s` alone.
// The half sources are dropped from @main.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[X:[^:]*]]: tensor<1x6x6x8xf32>,
// CHECK-SAME: %[[S:[^:]*]]: tensor<1x1x1x4xf32> {flowc.recipe = "{{[^"]*}}tosa.cast{{[^"]*}}tosa.mul{{[^"]*}}", flowc.recipe_inputs = ["s"], flowc.weight = "flowc.derived/0"},
// CHECK-SAME: %[[W:[^:]*]]: tensor<4x8x3x3xf32> {flowc.recipe = "{{[^"]*}}tosa.cast{{[^"]*}}", flowc.recipe_inputs = ["w"], flowc.weight = "flowc.derived/1"},
// CHECK-SAME: %[[B:[^:]*]]: tensor<4xf32> {flowc.recipe = "{{[^"]*}}", flowc.recipe_inputs = ["b"], flowc.weight = "flowc.derived/2"})
// CHECK-NOT: f16
// CHECK: %[[WT:.*]] = tosa.transpose %[[W]]
// CHECK: %[[C:.*]] = tosa.conv2d %[[X]], %[[WT]], %[[B]]
// CHECK: tosa.mul %[[C]], %[[S]]
func.func @main(%x: tensor<1x6x6x8xf32>, %w: tensor<4x8x3x3xf16> {flowc.weight = "w"},
                %b: tensor<4xbf16> {flowc.weight = "b"},
                %s: tensor<1x1x1x4xf16> {flowc.weight = "s"}) -> tensor<1x6x6x4xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %two = "tosa.const"() <{values = dense<2.0> : tensor<1x1x1x1xf32>}> : () -> tensor<1x1x1x1xf32>
  %w32 = tosa.cast %w : (tensor<4x8x3x3xf16>) -> tensor<4x8x3x3xf32>
  %b32 = tosa.cast %b : (tensor<4xbf16>) -> tensor<4xf32>
  %s32 = tosa.cast %s : (tensor<1x1x1x4xf16>) -> tensor<1x1x1x4xf32>
  %wt = tosa.transpose %w32 {perms = array<i32: 0, 2, 3, 1>} : (tensor<4x8x3x3xf32>) -> tensor<4x3x3x8xf32>
  %c = tosa.conv2d %x, %wt, %b32, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x6x6x8xf32>, tensor<4x3x3x8xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x6x6x4xf32>
  %f = tosa.mul %s32, %two, %shift : (tensor<1x1x1x4xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x1x1x4xf32>
  %y = tosa.mul %c, %f, %shift : (tensor<1x6x6x4xf32>, tensor<1x1x1x4xf32>, tensor<1xi8>) -> tensor<1x6x6x4xf32>
  return %y : tensor<1x6x6x4xf32>
}

// -----

// A quantized model's weight: an int8 weight dequantized per output channel
// ((q - zero point) * scale), then moved into the convolution's layout. The
// dequantization is a derived weight of its own and the transpose after it
// stays in the graph, as for a float32 weight; the int8 source is dropped.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[X:[^:]*]]: tensor<1x6x6x8xf32>,
// CHECK-SAME: %[[W:[^:]*]]: tensor<4x8x3x3xf32> {flowc.recipe = "{{[^"]*}}tosa.cast{{[^"]*}}tosa.sub{{[^"]*}}tosa.mul{{[^"]*}}", flowc.recipe_inputs = ["w"], flowc.weight = "flowc.derived/0"}
// CHECK-NOT: xi8> {flowc.weight
// CHECK: %[[WT:.*]] = tosa.transpose %[[W]]
// CHECK: tosa.conv2d %[[X]], %[[WT]]
func.func @main(%x: tensor<1x6x6x8xf32>, %w: tensor<4x8x3x3xi8> {flowc.weight = "w"},
                %b: tensor<4xf32> {flowc.weight = "b"}) -> tensor<1x6x6x4xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %wzp = "tosa.const"() <{values = dense<3.0> : tensor<1x1x1x1xf32>}> : () -> tensor<1x1x1x1xf32>
  %scale = "tosa.const"() <{values = dense<[[[[0.5]]], [[[0.25]]], [[[0.125]]], [[[1.0]]]]> : tensor<4x1x1x1xf32>}> : () -> tensor<4x1x1x1xf32>
  %w32 = tosa.cast %w : (tensor<4x8x3x3xi8>) -> tensor<4x8x3x3xf32>
  %centered = tosa.sub %w32, %wzp : (tensor<4x8x3x3xf32>, tensor<1x1x1x1xf32>) -> tensor<4x8x3x3xf32>
  %dq = tosa.mul %centered, %scale, %shift : (tensor<4x8x3x3xf32>, tensor<4x1x1x1xf32>, tensor<1xi8>) -> tensor<4x8x3x3xf32>
  %wt = tosa.transpose %dq {perms = array<i32: 0, 2, 3, 1>} : (tensor<4x8x3x3xf32>) -> tensor<4x3x3x8xf32>
  %c = tosa.conv2d %x, %wt, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x6x6x8xf32>, tensor<4x3x3x8xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x6x6x4xf32>
  return %c : tensor<1x6x6x4xf32>
}
