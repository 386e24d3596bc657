// RUN: flowc-opt %s --split-input-file --flowc-outline-library-kernels | FileCheck %s
// RUN: flowc-opt %s --split-input-file --flowc-outline-library-kernels=precision=bf16 | FileCheck %s --check-prefix=BF16

// The outlined IR: a private function with the exact TOSA the kernel
// replaces, and a flowc.library_call in @main with the kind's params struct
// by field name. tests/compiler/PassTest.cpp checks more patterns' params.

// ResNet's block tail: NCHW input transposed for TOSA, OIHW weights
// transposed, the result transposed back, a residual add and a Relu. The
// kernel absorbs all of it: @main keeps only the call.
// CHECK-LABEL: func.func private @flowc_kernel_0
// CHECK-SAME: (%{{.*}}: tensor<1x8x6x6xf32> {bufferization.writable = false}, %{{.*}}: tensor<4x8x3x3xf32> {bufferization.writable = false}, %{{.*}}: tensor<4xf32> {bufferization.writable = false}, %{{.*}}: tensor<1x4x6x6xf32> {bufferization.writable = false}) -> tensor<1x4x6x6xf32> {
// The body keeps the exact TOSA semantics, so it bufferizes like any other.
// CHECK: tosa.transpose
// CHECK: tosa.transpose
// CHECK: tosa.conv2d
// CHECK: tosa.transpose
// CHECK: tosa.add
// CHECK: tosa.clamp
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[X:[^:]*]]: tensor<1x8x6x6xf32>, %[[R:[^:]*]]: tensor<1x4x6x6xf32>, %[[W:[^:]*]]: tensor<4x8x3x3xf32> {flowc.weight = "w"}, %[[B:[^:]*]]: tensor<4xf32> {flowc.weight = "b"})
// CHECK-NOT: tosa.transpose
// CHECK-NOT: tosa.conv2d
// The source and the result stay NCHW (layout 0) for the kernel, the
// weights are graph weights (constant), the residual and the Relu (clamp
// 0..+inf, activation 1) are its epilogue.
// CHECK: %[[Y:.*]] = flowc.library_call conv2d @flowc_kernel_0(%[[X]], %[[W]], %[[B]], %[[R]]) params <batch = 1, inChannels = 8, inHeight = 6, inWidth = 6, outChannels = 4, kernelHeight = 3, kernelWidth = 3, outHeight = 6, outWidth = 6, strideH = 1, strideW = 1, dilationH = 1, dilationW = 1, padTop = 1, padLeft = 1, padBottom = 1, padRight = 1, groups = 1, sourceLayout = 0, weightLayout = 0, destinationLayout = 0, constantWeights = 1, hasResidual = 1, activation = 1, alpha = 0.000000e+00, beta = 0x7F800000, precision = 0, sixteenBitSource = 0, sixteenBitResidual = 0, sixteenBitDestination = 0>
// BF16-LABEL: func.func @main
// BF16: flowc.library_call conv2d {{.*}} precision = 1, sixteenBitSource = 0, sixteenBitResidual = 0, sixteenBitDestination = 0>
// CHECK-NOT: tosa.add
// CHECK-NOT: tosa.clamp
// CHECK: return %[[Y]]
func.func @main(%x: tensor<1x8x6x6xf32>, %r: tensor<1x4x6x6xf32>,
                %w: tensor<4x8x3x3xf32> {flowc.weight = "w"},
                %b: tensor<4xf32> {flowc.weight = "b"}) -> tensor<1x4x6x6xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %xt = tosa.transpose %x {perms = array<i32: 0, 2, 3, 1>} : (tensor<1x8x6x6xf32>) -> tensor<1x6x6x8xf32>
  %wt = tosa.transpose %w {perms = array<i32: 0, 2, 3, 1>} : (tensor<4x8x3x3xf32>) -> tensor<4x3x3x8xf32>
  %c = tosa.conv2d %xt, %wt, %b, %zp, %zp {acc_type = f32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x6x6x8xf32>, tensor<4x3x3x8xf32>, tensor<4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x6x6x4xf32>
  %ct = tosa.transpose %c {perms = array<i32: 0, 3, 1, 2>} : (tensor<1x6x6x4xf32>) -> tensor<1x4x6x6xf32>
  %s = tosa.add %r, %ct : (tensor<1x4x6x6xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  %y = tosa.clamp %s {max_val = 0x7F800000 : f32, min_val = 0.0 : f32} : (tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  return %y : tensor<1x4x6x6xf32>
}

// -----

// Max and average pooling, each a kernel with the layout changes around it.
// CHECK-LABEL: func.func private @flowc_kernel_0
// CHECK: tosa.max_pool2d
// CHECK-LABEL: func.func private @flowc_kernel_1
// CHECK: tosa.avg_pool2d
// CHECK-LABEL: func.func @main
// The max pool reads NCHW (its transpose absorbed) and writes NHWC, which
// the average pool reads; padding never counts in the average (algorithm 1).
// CHECK: %[[P:.*]] = flowc.library_call pool2d @flowc_kernel_0(%{{.*}}) params <batch = 1, channels = 4, inHeight = 8, inWidth = 8, outHeight = 4, outWidth = 4, kernelHeight = 3, kernelWidth = 3, strideH = 2, strideW = 2, padTop = 1, padLeft = 1, padBottom = 0, padRight = 0, algorithm = 0, sourceLayout = 0, destinationLayout = 1>
// CHECK: flowc.library_call pool2d @flowc_kernel_1(%[[P]]) params <{{.*}}algorithm = 1, sourceLayout = 1, destinationLayout = 1>
// BF16-LABEL: func.func @main
// BF16-NOT: precision
// CHECK-NOT: tosa.max_pool2d
// CHECK-NOT: tosa.avg_pool2d
// CHECK: return
func.func @main(%x: tensor<1x4x8x8xf32>) -> (tensor<1x4x4x4xf32>, tensor<1x2x2x4xf32>) {
  %xt = tosa.transpose %x {perms = array<i32: 0, 2, 3, 1>} : (tensor<1x4x8x8xf32>) -> tensor<1x8x8x4xf32>
  %m = tosa.max_pool2d %xt {kernel = array<i64: 3, 3>, pad = array<i64: 1, 0, 1, 0>, stride = array<i64: 2, 2>} : (tensor<1x8x8x4xf32>) -> tensor<1x4x4x4xf32>
  %mt = tosa.transpose %m {perms = array<i32: 0, 3, 1, 2>} : (tensor<1x4x4x4xf32>) -> tensor<1x4x4x4xf32>
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %a = tosa.avg_pool2d %m, %zp, %zp {acc_type = f32, kernel = array<i64: 2, 2>, pad = array<i64: 0, 0, 0, 0>, stride = array<i64: 2, 2>} : (tensor<1x4x4x4xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x2x2x4xf32>
  return %mt, %a : tensor<1x4x4x4xf32>, tensor<1x2x2x4xf32>
}

// -----

// Global average pooling as the importer writes it (a sum over H, a sum
// over W, times 1/(H*W)), on NHWC data: one pooling kernel with a 6 x 5
// window. On NCHW data (axes 2 and 3) likewise. A mean whose factor is not
// 1/(H*W) stays generated code.
// CHECK-LABEL: func.func private @flowc_kernel_0
// CHECK: tosa.reduce_sum
// CHECK-LABEL: func.func @main
// CHECK: flowc.library_call pool2d @flowc_kernel_0(%{{.*}}) params <batch = 2, channels = 4, inHeight = 6, inWidth = 5, outHeight = 1, outWidth = 1, kernelHeight = 6, kernelWidth = 5, strideH = 1, strideW = 1, padTop = 0, padLeft = 0, padBottom = 0, padRight = 0, algorithm = 1, sourceLayout = 1, destinationLayout = 1>
// CHECK: flowc.library_call pool2d @flowc_kernel_1(%{{.*}}) params <batch = 1, channels = 3, inHeight = 4, inWidth = 4, {{.*}}kernelHeight = 4, kernelWidth = 4, {{.*}}sourceLayout = 0, destinationLayout = 0>
// CHECK: %[[S1:.*]] = tosa.reduce_sum
// CHECK: %[[S2:.*]] = tosa.reduce_sum %[[S1]]
// CHECK: tosa.mul %[[S2]]
func.func @main(%x: tensor<2x6x5x4xf32>, %y: tensor<1x3x4x4xf32>)
    -> (tensor<2x1x1x4xf32>, tensor<1x3x1x1xf32>, tensor<1x3x1x1xf32>) {
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %k30 = "tosa.const"() <{values = dense<0.0333333351> : tensor<1x1x1x1xf32>}> : () -> tensor<1x1x1x1xf32>
  %k16 = "tosa.const"() <{values = dense<0.0625> : tensor<1x1x1x1xf32>}> : () -> tensor<1x1x1x1xf32>
  %h = tosa.reduce_sum %x {axis = 1 : i32} : (tensor<2x6x5x4xf32>) -> tensor<2x1x5x4xf32>
  %w = tosa.reduce_sum %h {axis = 2 : i32} : (tensor<2x1x5x4xf32>) -> tensor<2x1x1x4xf32>
  %m = tosa.mul %w, %k30, %shift : (tensor<2x1x1x4xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<2x1x1x4xf32>
  %yh = tosa.reduce_sum %y {axis = 2 : i32} : (tensor<1x3x4x4xf32>) -> tensor<1x3x1x4xf32>
  %yw = tosa.reduce_sum %yh {axis = 3 : i32} : (tensor<1x3x1x4xf32>) -> tensor<1x3x1x1xf32>
  %ym = tosa.mul %yw, %k16, %shift : (tensor<1x3x1x1xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x3x1x1xf32>
  // Twice the mean: not an average.
  %zh = tosa.reduce_sum %y {axis = 2 : i32} : (tensor<1x3x4x4xf32>) -> tensor<1x3x1x4xf32>
  %zw = tosa.reduce_sum %zh {axis = 3 : i32} : (tensor<1x3x1x4xf32>) -> tensor<1x3x1x1xf32>
  %zm = tosa.mul %zw, %k30, %shift : (tensor<1x3x1x1xf32>, tensor<1x1x1x1xf32>, tensor<1xi8>) -> tensor<1x3x1x1xf32>
  return %m, %ym, %zm : tensor<2x1x1x4xf32>, tensor<1x3x1x1xf32>, tensor<1x3x1x1xf32>
}
