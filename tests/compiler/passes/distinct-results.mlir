// RUN: flowc-opt %s --flowc-distinct-results | FileCheck %s

// One tensor returned three times: the second and third results get a copy
// each, so each output has a buffer of its own.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
func.func @main(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  // CHECK: %[[E1:.*]] = tensor.empty() : tensor<4xf32>
  // CHECK: %[[C1:.*]] = linalg.copy ins(%[[X]] : tensor<4xf32>) outs(%[[E1]] : tensor<4xf32>)
  // CHECK: %[[E2:.*]] = tensor.empty() : tensor<4xf32>
  // CHECK: %[[C2:.*]] = linalg.copy ins(%[[X]] : tensor<4xf32>) outs(%[[E2]] : tensor<4xf32>)
  // CHECK: return %[[X]], %[[C1]], %[[C2]]
  return %x, %x, %x : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// Distinct results, and a repeated non-tensor one, stay as they are.
// CHECK-LABEL: func.func @distinct
// CHECK-SAME: (%[[A:.*]]: tensor<4xf32>, %[[B:.*]]: tensor<4xf32>, %[[I:.*]]: index)
// CHECK-NOT: linalg.copy
// CHECK: return %[[A]], %[[B]], %[[I]], %[[I]]
func.func @distinct(%a: tensor<4xf32>, %b: tensor<4xf32>, %i: index)
    -> (tensor<4xf32>, tensor<4xf32>, index, index) {
  return %a, %b, %i, %i : tensor<4xf32>, tensor<4xf32>, index, index
}
