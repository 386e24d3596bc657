// RUN: flowc-opt %s --split-input-file --verify-diagnostics

// flowc.library_call's parser and verifier: the params are the kind's ABI
// struct, every field by name and in order; the inputs are the ones those
// params ask for; the callee is a function of the call's type.

func.func private @k(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  return %x : tensor<1x8xf32>
}
func.func @main(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{a softmax kernel has 2 params; 'epsilon' is one too many}}
  %y = flowc.library_call softmax @k(%x) params <rows = 1, channels = 8, epsilon = 0> : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

func.func private @k(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  return %x : tensor<1x8xf32>
}
func.func @main(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{expected param 'rows' of a softmax kernel, got 'channels'}}
  %y = flowc.library_call softmax @k(%x) params <channels = 8, rows = 1> : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

func.func private @k(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  return %x : tensor<1x8xf32>
}
func.func @main(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{a softmax kernel has 2 params, got 1}}
  %y = flowc.library_call softmax @k(%x) params <rows = 1> : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

// A layer norm with a scale (hasScale = 1) but no scale input.
func.func private @k(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  return %x : tensor<1x8xf32>
}
func.func @main(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{'flowc.library_call' op has 1 inputs, but its layernorm params ask for 2}}
  %y = flowc.library_call layernorm @k(%x) params <rows = 1, channels = 8, epsilon = 1.0e-05, hasScale = 1, hasShift = 0> : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

func.func private @k(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  return %x : tensor<1x8xf32>
}
func.func @main(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{'flowc.library_call' op input 0 of a pool2d kernel must have rank 4, got 'tensor<1x8xf32>'}}
  %y = flowc.library_call pool2d @k(%x) params <batch = 1, channels = 8, inHeight = 1, inWidth = 1, outHeight = 1, outWidth = 1, kernelHeight = 1, kernelWidth = 1, strideH = 1, strideW = 1, padTop = 0, padLeft = 0, padBottom = 0, padRight = 0, algorithm = 0, sourceLayout = 0, destinationLayout = 0> : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

func.func @main(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{'flowc.library_call' op calls @missing, which is no function}}
  %y = flowc.library_call softmax @missing(%x) params <rows = 1, channels = 8> : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

// TopK's keys must be of the params' key type (0: f32).
func.func private @k(%x: tensor<2x8xi32>) -> tensor<2x3xi32> {
  %c = "tosa.const"() <{values = dense<0> : tensor<2x3xi32>}> : () -> tensor<2x3xi32>
  return %c : tensor<2x3xi32>
}
func.func @main(%x: tensor<2x8xi32>) -> tensor<2x3xi32> {
  // expected-error @+1 {{'flowc.library_call' op keys 'tensor<2x8xi32>' do not have the params' key type 0}}
  %y = flowc.library_call topk @k(%x) params <rows = 2, n = 8, k = 3, largest = 1, keyType = 0> : (tensor<2x8xi32>) -> tensor<2x3xi32>
  return %y : tensor<2x3xi32>
}

// -----

// TopK's indices are [rows, k] of i32: the kernel writes exactly that.
func.func private @k(%x: tensor<2x8xf32>) -> tensor<2x4xi32> {
  %c = "tosa.const"() <{values = dense<0> : tensor<2x4xi32>}> : () -> tensor<2x4xi32>
  return %c : tensor<2x4xi32>
}
func.func @main(%x: tensor<2x8xf32>) -> tensor<2x4xi32> {
  // expected-error @+1 {{'flowc.library_call' op a topk of k = 3 over [2, 8] maps keys of that shape to i32 indices [2, k], 1 <= k <= n; got 'tensor<2x8xf32>' -> 'tensor<2x4xi32>'}}
  %y = flowc.library_call topk @k(%x) params <rows = 2, n = 8, k = 3, largest = 1, keyType = 0> : (tensor<2x8xf32>) -> tensor<2x4xi32>
  return %y : tensor<2x4xi32>
}

// -----

// A scatter's targets are i32 [1, count]: the kernel reads them as such.
func.func private @k(%d: tensor<4x2xf32>, %u: tensor<3x2xf32>, %t: tensor<1x3xi64>) -> tensor<4x2xf32> {
  return %d : tensor<4x2xf32>
}
func.func @main(%d: tensor<4x2xf32>, %u: tensor<3x2xf32>, %t: tensor<1x3xi64>) -> tensor<4x2xf32> {
  // expected-error @+1 {{'flowc.library_call' op a scatter of 3 rows of 2 into 4 (type 0, reduction 1) takes data [rows, width], updates [count, width] of the same type and i32 targets [1, count], and gives the data's type; got 'tensor<4x2xf32>', 'tensor<3x2xf32>', 'tensor<1x3xi64>' -> 'tensor<4x2xf32>'}}
  %y = flowc.library_call scatter @k(%d, %u, %t) params <rows = 4, width = 2, count = 3, reduction = 1, type = 0> : (tensor<4x2xf32>, tensor<3x2xf32>, tensor<1x3xi64>) -> tensor<4x2xf32>
  return %y : tensor<4x2xf32>
}

// -----

// An integer product's B zero points are one, or one per column (n = 3).
func.func private @k(%a: tensor<2x4xi8>, %b: tensor<4x3xi8>, %z: tensor<2xi8>) -> tensor<2x3xi32> {
  %c = arith.constant dense<0> : tensor<2x3xi32>
  return %c : tensor<2x3xi32>
}
func.func @main(%a: tensor<2x4xi8>, %b: tensor<4x3xi8>, %z: tensor<2xi8>) -> tensor<2x3xi32> {
  // expected-error @+1 {{'flowc.library_call' op an integer matmul of [2, 4] x [4, 3] takes i8 matrices of those shapes (B [n, k] when transposed), i8 zero points [1] and [1] or [n], and gives i32 [m, n]; got 'tensor<2x4xi8>', 'tensor<4x3xi8>', 'tensor<2xi8>' -> 'tensor<2x3xi32>'}}
  %y = flowc.library_call integer_matmul @k(%a, %b, %z) params <m = 2, n = 3, k = 4, transposedB = 0, constantB = 0, unsignedA = 1, unsignedB = 0, hasZeroA = 0, zerosB = 2> : (tensor<2x4xi8>, tensor<4x3xi8>, tensor<2xi8>) -> tensor<2x3xi32>
  return %y : tensor<2x3xi32>
}

// -----

// Its result is int32.
func.func private @k(%a: tensor<2x4xi8>, %b: tensor<4x3xi8>) -> tensor<2x3xf32> {
  %c = arith.constant dense<0.0> : tensor<2x3xf32>
  return %c : tensor<2x3xf32>
}
func.func @main(%a: tensor<2x4xi8>, %b: tensor<4x3xi8>) -> tensor<2x3xf32> {
  // expected-error @+1 {{'flowc.library_call' op an integer matmul of [2, 4] x [4, 3] takes i8 matrices of those shapes (B [n, k] when transposed), i8 zero points [1] and [1] or [n], and gives i32 [m, n]; got 'tensor<2x4xi8>', 'tensor<4x3xi8>' -> 'tensor<2x3xf32>'}}
  %y = flowc.library_call integer_matmul @k(%a, %b) params <m = 2, n = 3, k = 4, transposedB = 0, constantB = 0, unsignedA = 1, unsignedB = 0, hasZeroA = 0, zerosB = 0> : (tensor<2x4xi8>, tensor<4x3xi8>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

// An integer convolution reads its source in the params' layout: NHWC
// [1, 6, 6, 8] here, not NCHW.
func.func private @k(%x: tensor<1x8x6x6xi8>, %w: tensor<16x8x3x3xi8>) -> tensor<1x6x6x16xi32> {
  %c = arith.constant dense<0> : tensor<1x6x6x16xi32>
  return %c : tensor<1x6x6x16xi32>
}
func.func @main(%x: tensor<1x8x6x6xi8>, %w: tensor<16x8x3x3xi8>) -> tensor<1x6x6x16xi32> {
  // expected-error @+1 {{'flowc.library_call' op an integer conv2d of 8 to 16 channels (groups 1, zero point 0) takes an i8 source and i8 weights of the params' extents in their layouts, groups 1 or one per channel, and gives i32; got 'tensor<1x8x6x6xi8>', 'tensor<16x8x3x3xi8>' -> 'tensor<1x6x6x16xi32>'}}
  %y = flowc.library_call integer_conv2d @k(%x, %w) params <batch = 1, inChannels = 8, inHeight = 6, inWidth = 6, outChannels = 16, kernelHeight = 3, kernelWidth = 3, outHeight = 6, outWidth = 6, strideH = 1, strideW = 1, dilationH = 1, dilationW = 1, padTop = 1, padLeft = 1, padBottom = 1, padRight = 1, groups = 1, sourceLayout = 1, weightLayout = 0, destinationLayout = 1, constantWeights = 1, zeroSource = 0> : (tensor<1x8x6x6xi8>, tensor<16x8x3x3xi8>) -> tensor<1x6x6x16xi32>
  return %y : tensor<1x6x6x16xi32>
}

// -----

// Groups other than 1 or one per channel, and a zero point past a byte.
func.func private @k(%x: tensor<1x8x6x6xi8>, %w: tensor<16x4x3x3xi8>) -> tensor<1x16x6x6xi32> {
  %c = arith.constant dense<0> : tensor<1x16x6x6xi32>
  return %c : tensor<1x16x6x6xi32>
}
func.func @main(%x: tensor<1x8x6x6xi8>, %w: tensor<16x4x3x3xi8>) -> tensor<1x16x6x6xi32> {
  // expected-error @+1 {{'flowc.library_call' op an integer conv2d of 8 to 16 channels (groups 2, zero point 300) takes}}
  %y = flowc.library_call integer_conv2d @k(%x, %w) params <batch = 1, inChannels = 8, inHeight = 6, inWidth = 6, outChannels = 16, kernelHeight = 3, kernelWidth = 3, outHeight = 6, outWidth = 6, strideH = 1, strideW = 1, dilationH = 1, dilationW = 1, padTop = 1, padLeft = 1, padBottom = 1, padRight = 1, groups = 2, sourceLayout = 0, weightLayout = 0, destinationLayout = 0, constantWeights = 1, zeroSource = 300> : (tensor<1x8x6x6xi8>, tensor<16x4x3x3xi8>) -> tensor<1x16x6x6xi32>
  return %y : tensor<1x16x6x6xi32>
}
