// RUN: flowc-opt %s --flowc-mark-16-bit-buffers | FileCheck %s

// AMP (precision 2, fp16): %a only convolutions read (as source and as
// residual), so it stays in 16 bits; %b is the graph's result, so it stays
// fp32, and so does the residual that shares no type with it.
func.func private @k(tensor<1x4x6x6xf32>, tensor<4x4x1x1xf32>, tensor<4xf32>) -> tensor<1x4x6x6xf32>
func.func private @kr(tensor<1x4x6x6xf32>, tensor<4x4x1x1xf32>, tensor<4xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
// CHECK-LABEL: func.func @main
func.func @main(%x: tensor<1x4x6x6xf32>, %w: tensor<4x4x1x1xf32>, %c: tensor<4xf32>) -> tensor<1x4x6x6xf32> {
  // CHECK: flowc.library_call conv2d @k({{.*}} precision = 2, sixteenBitSource = 0, sixteenBitResidual = 0, sixteenBitDestination = 1>
  %a = flowc.library_call conv2d @k(%x, %w, %c) params <batch = 1, inChannels = 4, inHeight = 6, inWidth = 6, outChannels = 4, kernelHeight = 1, kernelWidth = 1, outHeight = 6, outWidth = 6, strideH = 1, strideW = 1, dilationH = 1, dilationW = 1, padTop = 0, padLeft = 0, padBottom = 0, padRight = 0, groups = 1, sourceLayout = 0, weightLayout = 0, destinationLayout = 0, constantWeights = 1, hasResidual = 0, activation = 0, alpha = 0.0, beta = 0.0, precision = 2, sixteenBitSource = 0, sixteenBitResidual = 0, sixteenBitDestination = 0> : (tensor<1x4x6x6xf32>, tensor<4x4x1x1xf32>, tensor<4xf32>) -> tensor<1x4x6x6xf32>
  // CHECK: flowc.library_call conv2d @kr({{.*}} precision = 2, sixteenBitSource = 1, sixteenBitResidual = 1, sixteenBitDestination = 0>
  %b = flowc.library_call conv2d @kr(%a, %w, %c, %a) params <batch = 1, inChannels = 4, inHeight = 6, inWidth = 6, outChannels = 4, kernelHeight = 1, kernelWidth = 1, outHeight = 6, outWidth = 6, strideH = 1, strideW = 1, dilationH = 1, dilationW = 1, padTop = 0, padLeft = 0, padBottom = 0, padRight = 0, groups = 1, sourceLayout = 0, weightLayout = 0, destinationLayout = 0, constantWeights = 1, hasResidual = 1, activation = 0, alpha = 0.0, beta = 0.0, precision = 2, sixteenBitSource = 0, sixteenBitResidual = 0, sixteenBitDestination = 0> : (tensor<1x4x6x6xf32>, tensor<4x4x1x1xf32>, tensor<4xf32>, tensor<1x4x6x6xf32>) -> tensor<1x4x6x6xf32>
  return %b : tensor<1x4x6x6xf32>
}
