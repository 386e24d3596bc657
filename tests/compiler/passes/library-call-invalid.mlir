// RUN: flowc-opt %s --split-input-file --verify-diagnostics

// The verifier of flowc.library_call: the params are the kind's ABI
// struct, the inputs are the ones those params ask for, and the callee is
// a function of the call's type.

func.func private @k(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  return %x : tensor<1x8xf32>
}
func.func @main(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{'flowc.library_call' op params have 3 words, but a softmax kernel's parameters are 2}}
  %y = flowc.library_call softmax @k(%x) params [1, 8, 0] : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

// A layer norm with a scale (hasScale = 1) but no scale input.
func.func private @k(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  return %x : tensor<1x8xf32>
}
func.func @main(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{'flowc.library_call' op has 1 inputs, but its layernorm params ask for 2}}
  %y = flowc.library_call layernorm @k(%x) params [1, 8, 0, 1, 0] : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

func.func private @k(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  return %x : tensor<1x8xf32>
}
func.func @main(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{'flowc.library_call' op input 0 of a pool2d kernel must have rank 4, got 'tensor<1x8xf32>'}}
  %y = flowc.library_call pool2d @k(%x) params [1, 8, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0] : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

func.func @main(%x: tensor<1x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{'flowc.library_call' op calls @missing, which is no function}}
  %y = flowc.library_call softmax @missing(%x) params [1, 8] : (tensor<1x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}
