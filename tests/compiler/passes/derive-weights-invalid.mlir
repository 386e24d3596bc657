// RUN: flowc-opt %s --flowc-derive-weights --split-input-file --verify-diagnostics

// A weight key that is no string: recipes could not name it as an input.
// expected-error @+1 {{'func.func' op argument 1: flowc.weight is 7 : i64; expected a string (the weight's key)}}
func.func @main(%x: tensor<4xf32>, %w: tensor<4xf32> {flowc.weight = 7 : i64}) -> tensor<4xf32> {
  %y = tosa.add %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
