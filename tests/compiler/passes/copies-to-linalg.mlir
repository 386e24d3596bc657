// RUN: flowc-opt %s --flowc-copies-to-linalg | FileCheck %s

// A copy into a padded buffer's interior (what bufferizing tensor.pad
// makes): linalg.copy lowers to plain loops, memref.copy to a runtime call.
// CHECK-LABEL: func.func @pad
// CHECK-SAME: (%[[SRC:.*]]: memref<4x4xf32>, %[[DST:.*]]: memref<6x6xf32>)
func.func @pad(%src: memref<4x4xf32>, %dst: memref<6x6xf32>) {
  // CHECK: %[[VIEW:.*]] = memref.subview %[[DST]]
  %view = memref.subview %dst[1, 1] [4, 4] [1, 1]
      : memref<6x6xf32> to memref<4x4xf32, strided<[6, 1], offset: 7>>
  // CHECK-NOT: memref.copy
  // CHECK: linalg.copy ins(%[[SRC]] : memref<4x4xf32>) outs(%[[VIEW]] : memref<4x4xf32, strided<[6, 1], offset: 7>>)
  // CHECK-NOT: memref.copy
  // CHECK: return
  memref.copy %src, %view : memref<4x4xf32> to memref<4x4xf32, strided<[6, 1], offset: 7>>
  return
}
