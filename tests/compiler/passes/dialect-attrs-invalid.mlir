// RUN: flowc-opt %s --split-input-file --verify-diagnostics

// The flowc dialect's verifier of its discardable attributes. The kernel
// tests load the dialect through a flowc.library_call; the others through
// the test's own use of the dialect in @uses_dialect.

func.func private @k(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  return %x : tensor<1x8xf32>
}
func.func @uses_dialect(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  %y = flowc.library_call softmax @k(%x) params <rows = 1, channels = 8> : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}
// expected-error @+1 {{'func.func' op argument 0 of region 0: attribute 'flowc.weight' must be a non-empty string, got 3 : i64}}
func.func @main(%x: tensor<2xf32> {flowc.weight = 3 : i64}) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}

// -----

func.func private @k(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  return %x : tensor<1x8xf32>
}
func.func @uses_dialect(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  %y = flowc.library_call softmax @k(%x) params <rows = 1, channels = 8> : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}
// expected-error @+1 {{attribute 'flowc.recipe_inputs' must be an array of weight keys (strings), got [1]}}
func.func @main(%x: tensor<2xf32> {flowc.weight = "flowc.derived/0", flowc.recipe = "m", flowc.recipe_inputs = [1]}) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}

// -----

// expected-error @+1 {{'func.func' op attribute 'flowc.kernel' names no library kernel: "conv3d" (kinds: conv2d, matmul, pool2d, softmax, layernorm, topk, scatter, integer_matmul, integer_conv2d)}}
func.func private @k(tensor<2xf32>) -> tensor<2xf32> attributes {flowc.kernel = "conv3d", flowc.kernel_params = array<i64: 1, 2>}
func.func private @l(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  return %x : tensor<1x8xf32>
}
func.func @uses_dialect(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  %y = flowc.library_call softmax @l(%x) params <rows = 1, channels = 8> : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

// expected-error @+1 {{'func.func' op attribute 'flowc.kernel_params' has 3 words, but a matmul kernel's parameters are 16}}
func.func private @k(tensor<2xf32>) -> tensor<2xf32> attributes {flowc.kernel = "matmul", flowc.kernel_params = array<i64: 1, 2, 3>}
func.func private @l(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  return %x : tensor<1x8xf32>
}
func.func @uses_dialect(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  %y = flowc.library_call softmax @l(%x) params <rows = 1, channels = 8> : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

// expected-error @+1 {{'func.func' op has attribute 'flowc.kernel' but no 'flowc.kernel_params'}}
func.func private @k(tensor<2xf32>) -> tensor<2xf32> attributes {flowc.kernel = "softmax"}
func.func private @l(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  return %x : tensor<1x8xf32>
}
func.func @uses_dialect(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  %y = flowc.library_call softmax @l(%x) params <rows = 1, channels = 8> : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

// expected-error @+1 {{'func.func' op has unknown flowc attribute 'flowc.arena'}}
func.func @main() attributes {flowc.arena = 64 : i64} {
  return
}
func.func private @l(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  return %x : tensor<1x8xf32>
}
func.func @uses_dialect(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  %y = flowc.library_call softmax @l(%x) params <rows = 1, channels = 8> : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

func.func private @k(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  return %x : tensor<1x8xf32>
}
func.func @uses_dialect(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  %y = flowc.library_call softmax @k(%x) params <rows = 1, channels = 8> : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}
// expected-error @+1 {{'func.func' op attribute 'flowc.checks' must be an array of strings, got ["index out of range", 7]}}
func.func @main(%x: tensor<2xf32>, %c: tensor<1xi1>) -> (tensor<2xf32>, tensor<1xi1>) attributes {flowc.checks = ["index out of range", 7 : i64]} {
  return %x, %c : tensor<2xf32>, tensor<1xi1>
}
