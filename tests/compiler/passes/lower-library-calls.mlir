// RUN: flowc-opt %s --flowc-lower-library-calls | FileCheck %s

// Right before bufferization each flowc.library_call becomes a func.call
// (One-Shot Bufferize models func.call only); its kind and params go onto
// the callee, where the memory plan, the kernel weights and the LLVM thunks
// read them.
// CHECK-LABEL: func.func private @flowc_kernel_0
// CHECK-SAME: attributes {flowc.kernel = "layernorm", flowc.kernel_params = array<i64: 4, 8, 925353388, 1, 0>}
// CHECK-LABEL: func.func @main
// CHECK-NOT: flowc.library_call
// CHECK: %[[Y:.*]] = call @flowc_kernel_0(%{{.*}}, %{{.*}}) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK: return %[[Y]]
func.func private @flowc_kernel_0(%x: tensor<4x8xf32>, %scale: tensor<8xf32>) -> tensor<4x8xf32> {
  return %x : tensor<4x8xf32>
}
func.func @main(%x: tensor<4x8xf32>, %scale: tensor<8xf32> {flowc.weight = "scale"}) -> tensor<4x8xf32> {
  %y = flowc.library_call layernorm @flowc_kernel_0(%x, %scale) params <rows = 4, channels = 8, epsilon = 9.99999974E-6, hasScale = 1, hasShift = 0> : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
