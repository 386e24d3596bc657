// RUN: flowc-opt %s --flowc-outline-library-kernels | FileCheck %s --check-prefix=OUTLINE
// RUN: flowc-opt %s --flowc-outline-library-kernels --flowc-inline-library-calls=kind=integer_conv2d | FileCheck %s --check-prefix=INLINE

// The importer's quantized convolutions (QDQ Conv): TOSA's conv2d of int8
// bytes into int32 sums, with a constant source zero point, weights' zero
// point 0 and a zero bias. The outline pass gives each to the integer
// kernel, absorbing the importer's layout changes as for a float
// convolution: the NCHW source and result, OIHW weights (a weight:
// constantWeights), depthwise weights [C, 1, KH, KW] (a multiplier of 1:
// the importer writes no reshape) read as they are.
// OUTLINE-LABEL: func.func @main
// OUTLINE: flowc.library_call integer_conv2d @flowc_kernel_0(%arg0, %arg1) params <batch = 1, inChannels = 8, inHeight = 6, inWidth = 6, outChannels = 16, kernelHeight = 3, kernelWidth = 3, outHeight = 6, outWidth = 6, strideH = 1, strideW = 1, dilationH = 1, dilationW = 1, padTop = 1, padLeft = 1, padBottom = 1, padRight = 1, groups = 1, sourceLayout = 0, weightLayout = 0, destinationLayout = 0, constantWeights = 1, zeroSource = -3> : (tensor<1x8x6x6xi8>, tensor<16x8x3x3xi8>) -> tensor<1x16x6x6xi32>
// OUTLINE: flowc.library_call integer_conv2d @flowc_kernel_1(%arg0, %arg2) params <batch = 1, inChannels = 8, inHeight = 6, inWidth = 6, outChannels = 8, kernelHeight = 3, kernelWidth = 3, outHeight = 3, outWidth = 3, strideH = 2, strideW = 2, dilationH = 1, dilationW = 1, padTop = 1, padLeft = 1, padBottom = 0, padRight = 0, groups = 8, sourceLayout = 0, weightLayout = 0, destinationLayout = 1, constantWeights = 1, zeroSource = 0> : (tensor<1x8x6x6xi8>, tensor<8x1x3x3xi8>) -> tensor<1x3x3x8xi32>
// A weights' zero point other than 0 is no form of the kernel's, and a
// float pattern does not take bytes: the convolution stays.
// OUTLINE: tosa.conv2d {{.*}} -> tensor<1x6x6x4xi32>
// OUTLINE-NOT: flowc.library_call

// On cuda, whose runtime lacks the kernel, the calls go back to their
// bodies: the quantized convolutions run as loops.
// INLINE-LABEL: func.func @main
// INLINE-NOT: flowc.library_call
// INLINE: tosa.conv2d {{.*}} -> tensor<1x6x6x16xi32>
// INLINE: tosa.depthwise_conv2d {{.*}} -> tensor<1x3x3x8xi32>
func.func @main(%x: tensor<1x8x6x6xi8>, %w: tensor<16x8x3x3xi8> {flowc.weight = "w"}, %d: tensor<8x1x3x3xi8> {flowc.weight = "d"}, %v: tensor<4x3x3x8xi8> {flowc.weight = "v"}) -> (tensor<1x16x6x6xi32>, tensor<1x3x3x8xi32>, tensor<1x6x6x4xi32>) {
  %xn = tosa.transpose %x {perms = array<i32: 0, 2, 3, 1>} : (tensor<1x8x6x6xi8>) -> tensor<1x6x6x8xi8>
  %wn = tosa.transpose %w {perms = array<i32: 0, 2, 3, 1>} : (tensor<16x8x3x3xi8>) -> tensor<16x3x3x8xi8>
  %bias = "tosa.const"() <{values = dense<0> : tensor<16xi32>}> : () -> tensor<16xi32>
  %zx = "tosa.const"() <{values = dense<-3> : tensor<1xi8>}> : () -> tensor<1xi8>
  %zw = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %y = tosa.conv2d %xn, %wn, %bias, %zx, %zw {acc_type = i32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x6x6x8xi8>, tensor<16x3x3x8xi8>, tensor<16xi32>, tensor<1xi8>, tensor<1xi8>) -> tensor<1x6x6x16xi32>
  %yn = tosa.transpose %y {perms = array<i32: 0, 3, 1, 2>} : (tensor<1x6x6x16xi32>) -> tensor<1x16x6x6xi32>

  %dh = tosa.transpose %d {perms = array<i32: 2, 3, 0, 1>} : (tensor<8x1x3x3xi8>) -> tensor<3x3x8x1xi8>
  %dbias = "tosa.const"() <{values = dense<0> : tensor<8xi32>}> : () -> tensor<8xi32>
  %z0 = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %e = tosa.depthwise_conv2d %xn, %dh, %dbias, %z0, %zw {acc_type = i32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 0, 1, 0>, stride = array<i64: 2, 2>} : (tensor<1x6x6x8xi8>, tensor<3x3x8x1xi8>, tensor<8xi32>, tensor<1xi8>, tensor<1xi8>) -> tensor<1x3x3x8xi32>

  %vbias = "tosa.const"() <{values = dense<0> : tensor<4xi32>}> : () -> tensor<4xi32>
  %zv = "tosa.const"() <{values = dense<5> : tensor<1xi8>}> : () -> tensor<1xi8>
  %u = tosa.conv2d %xn, %v, %vbias, %zx, %zv {acc_type = i32, dilation = array<i64: 1, 1>, pad = array<i64: 1, 1, 1, 1>, stride = array<i64: 1, 1>} : (tensor<1x6x6x8xi8>, tensor<4x3x3x8xi8>, tensor<4xi32>, tensor<1xi8>, tensor<1xi8>) -> tensor<1x6x6x4xi32>
  return %yn, %e, %u : tensor<1x16x6x6xi32>, tensor<1x3x3x8xi32>, tensor<1x6x6x4xi32>
}
