// RUN: flowc-opt %s --split-input-file --flowc-outline-library-kernels | FileCheck %s

// Matrix products and their epilogues: the weight's layout, the bias and
// the GELU forms real exports use.

// Gemm with transB=1 and a bias, as the importer writes it: the product
// reads the transposed weight in place and adds the bias.
// CHECK-LABEL: func.func @main
// CHECK-NOT: tosa.transpose
// CHECK: flowc.library_call matmul @flowc_kernel_0(%{{.*}}, %{{.*}}, %{{.*}}) params <batch = 1, m = 4, n = 6, k = 8, transposedB = 1, constantB = 1, hasBias = 1, hasResidual = 0, activation = 0, alpha = 0.000000e+00, beta = 0.000000e+00, precision = 0, scale = 0.000000e+00, hasMask = 0, maskRows = 0, maskColumns = 0>
// CHECK-NOT: tosa.matmul
// CHECK-NOT: tosa.add
// CHECK: return
func.func @main(%x: tensor<1x4x8xf32>, %w: tensor<6x8xf32> {flowc.weight = "w"},
                %b: tensor<1x1x6xf32> {flowc.weight = "b"}) -> tensor<1x4x6xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %shape = tosa.const_shape {values = dense<[1, 8, 6]> : tensor<3xindex>} : () -> !tosa.shape<3>
  %wt = tosa.transpose %w {perms = array<i32: 1, 0>} : (tensor<6x8xf32>) -> tensor<8x6xf32>
  %w3 = tosa.reshape %wt, %shape : (tensor<8x6xf32>, !tosa.shape<3>) -> tensor<1x8x6xf32>
  %y = tosa.matmul %x, %w3, %zp, %zp : (tensor<1x4x8xf32>, tensor<1x8x6xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x6xf32>
  %z = tosa.add %y, %b : (tensor<1x4x6xf32>, tensor<1x1x6xf32>) -> tensor<1x4x6xf32>
  return %z : tensor<1x4x6xf32>
}

// -----

// BERT's feed-forward: x W + b, then PyTorch's erf GELU: one kernel with
// the GELU post-op (activation 6).
// CHECK-LABEL: func.func @main
// CHECK: flowc.library_call matmul @flowc_kernel_0(%{{.*}}, %{{.*}}, %{{.*}}) params <batch = 1, m = 4, n = 6, k = 8, transposedB = 0, constantB = 1, hasBias = 1, hasResidual = 0, activation = 6, alpha = 0.000000e+00, beta = 0.000000e+00, precision = 0, scale = 0.000000e+00, hasMask = 0, maskRows = 0, maskColumns = 0>
// CHECK-NOT: tosa.erf
// CHECK-NOT: tosa.mul
// CHECK: return
func.func @main(%x: tensor<1x4x8xf32>, %w: tensor<1x8x6xf32> {flowc.weight = "w"},
                %b: tensor<1x1x6xf32> {flowc.weight = "b"}) -> tensor<1x4x6xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %sqrt2 = "tosa.const"() <{values = dense<1.41421354> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %one = "tosa.const"() <{values = dense<1.0> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %half = "tosa.const"() <{values = dense<0.5> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %y = tosa.matmul %x, %w, %zp, %zp : (tensor<1x4x8xf32>, tensor<1x8x6xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x6xf32>
  %h = tosa.add %b, %y : (tensor<1x1x6xf32>, tensor<1x4x6xf32>) -> tensor<1x4x6xf32>
  %r = tosa.reciprocal %sqrt2 : (tensor<1x1x1xf32>) -> tensor<1x1x1xf32>
  %s = tosa.mul %h, %r, %shift : (tensor<1x4x6xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %e = tosa.erf %s : (tensor<1x4x6xf32>) -> tensor<1x4x6xf32>
  %a = tosa.add %e, %one : (tensor<1x4x6xf32>, tensor<1x1x1xf32>) -> tensor<1x4x6xf32>
  %p = tosa.mul %h, %a, %shift : (tensor<1x4x6xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %g = tosa.mul %p, %half, %shift : (tensor<1x4x6xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  return %g : tensor<1x4x6xf32>
}

// -----

// A constant other than sqrt(2) is no GELU: the product keeps its bias,
// the rest stays in generated code.
// CHECK-LABEL: func.func @main
// CHECK: flowc.library_call matmul @flowc_kernel_0({{.*}}) {{.*}}hasBias = 1, hasResidual = 0, activation = 0,
// CHECK: tosa.erf
func.func @main(%x: tensor<1x4x8xf32>, %w: tensor<1x8x6xf32> {flowc.weight = "w"},
                %b: tensor<1x1x6xf32> {flowc.weight = "b"}) -> tensor<1x4x6xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %sqrt2 = "tosa.const"() <{values = dense<1.50000000> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %one = "tosa.const"() <{values = dense<1.0> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %half = "tosa.const"() <{values = dense<0.5> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %y = tosa.matmul %x, %w, %zp, %zp : (tensor<1x4x8xf32>, tensor<1x8x6xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x6xf32>
  %h = tosa.add %b, %y : (tensor<1x1x6xf32>, tensor<1x4x6xf32>) -> tensor<1x4x6xf32>
  %r = tosa.reciprocal %sqrt2 : (tensor<1x1x1xf32>) -> tensor<1x1x1xf32>
  %s = tosa.mul %h, %r, %shift : (tensor<1x4x6xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %e = tosa.erf %s : (tensor<1x4x6xf32>) -> tensor<1x4x6xf32>
  %a = tosa.add %e, %one : (tensor<1x4x6xf32>, tensor<1x1x1xf32>) -> tensor<1x4x6xf32>
  %p = tosa.mul %h, %a, %shift : (tensor<1x4x6xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %g = tosa.mul %p, %half, %shift : (tensor<1x4x6xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  return %g : tensor<1x4x6xf32>
}

// -----

// GPT-2's feed-forward: x W + b, then the tanh approximation of GELU
// (Pow by 3 imported as products): activation 7.
// CHECK-LABEL: func.func @main
// CHECK: flowc.library_call matmul @flowc_kernel_0(%{{.*}}, %{{.*}}, %{{.*}}) params <batch = 1, m = 4, n = 6, k = 8, transposedB = 0, constantB = 1, hasBias = 1, hasResidual = 0, activation = 7, alpha = 0.000000e+00, beta = 0.000000e+00, precision = 0, scale = 0.000000e+00, hasMask = 0, maskRows = 0, maskColumns = 0>
// CHECK-NOT: tosa.tanh
// CHECK-NOT: tosa.mul
// CHECK: return
func.func @main(%x: tensor<1x4x8xf32>, %w: tensor<1x8x6xf32> {flowc.weight = "w"},
                %b: tensor<1x1x6xf32> {flowc.weight = "b"}) -> tensor<1x4x6xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %c = "tosa.const"() <{values = dense<0.0447149985> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %k = "tosa.const"() <{values = dense<0.797884583> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %one = "tosa.const"() <{values = dense<1.0> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %half = "tosa.const"() <{values = dense<0.5> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %y = tosa.matmul %x, %w, %zp, %zp : (tensor<1x4x8xf32>, tensor<1x8x6xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x6xf32>
  %h = tosa.add %y, %b : (tensor<1x4x6xf32>, tensor<1x1x6xf32>) -> tensor<1x4x6xf32>
  %hh = tosa.mul %h, %half, %shift : (tensor<1x4x6xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %sq = tosa.mul %h, %h, %shift : (tensor<1x4x6xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %cube = tosa.mul %sq, %h, %shift : (tensor<1x4x6xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %q = tosa.mul %c, %cube, %shift : (tensor<1x1x1xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %r = tosa.add %h, %q : (tensor<1x4x6xf32>, tensor<1x4x6xf32>) -> tensor<1x4x6xf32>
  %s = tosa.mul %k, %r, %shift : (tensor<1x1x1xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %t = tosa.tanh %s : (tensor<1x4x6xf32>) -> tensor<1x4x6xf32>
  %u = tosa.add %one, %t : (tensor<1x1x1xf32>, tensor<1x4x6xf32>) -> tensor<1x4x6xf32>
  %g = tosa.mul %hh, %u, %shift : (tensor<1x4x6xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  return %g : tensor<1x4x6xf32>
}

// -----

// A cube coefficient other than GELU's: left alone.
// CHECK-LABEL: func.func @main
// CHECK: flowc.library_call matmul @flowc_kernel_0({{.*}}) {{.*}}hasBias = 1, hasResidual = 0, activation = 0,
// CHECK: tosa.tanh
func.func @main(%x: tensor<1x4x8xf32>, %w: tensor<1x8x6xf32> {flowc.weight = "w"},
                %b: tensor<1x1x6xf32> {flowc.weight = "b"}) -> tensor<1x4x6xf32> {
  %zp = "tosa.const"() <{values = dense<0.0> : tensor<1xf32>}> : () -> tensor<1xf32>
  %shift = "tosa.const"() <{values = dense<0> : tensor<1xi8>}> : () -> tensor<1xi8>
  %c = "tosa.const"() <{values = dense<0.0500000000> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %k = "tosa.const"() <{values = dense<0.797884583> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %one = "tosa.const"() <{values = dense<1.0> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %half = "tosa.const"() <{values = dense<0.5> : tensor<1x1x1xf32>}> : () -> tensor<1x1x1xf32>
  %y = tosa.matmul %x, %w, %zp, %zp : (tensor<1x4x8xf32>, tensor<1x8x6xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<1x4x6xf32>
  %h = tosa.add %y, %b : (tensor<1x4x6xf32>, tensor<1x1x6xf32>) -> tensor<1x4x6xf32>
  %hh = tosa.mul %h, %half, %shift : (tensor<1x4x6xf32>, tensor<1x1x1xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %sq = tosa.mul %h, %h, %shift : (tensor<1x4x6xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %cube = tosa.mul %sq, %h, %shift : (tensor<1x4x6xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %q = tosa.mul %c, %cube, %shift : (tensor<1x1x1xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %r = tosa.add %h, %q : (tensor<1x4x6xf32>, tensor<1x4x6xf32>) -> tensor<1x4x6xf32>
  %s = tosa.mul %k, %r, %shift : (tensor<1x1x1xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  %t = tosa.tanh %s : (tensor<1x4x6xf32>) -> tensor<1x4x6xf32>
  %u = tosa.add %one, %t : (tensor<1x1x1xf32>, tensor<1x4x6xf32>) -> tensor<1x4x6xf32>
  %g = tosa.mul %hh, %u, %shift : (tensor<1x4x6xf32>, tensor<1x4x6xf32>, tensor<1xi8>) -> tensor<1x4x6xf32>
  return %g : tensor<1x4x6xf32>
}
