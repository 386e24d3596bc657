// RUN: flowc-opt %s --split-input-file --flowc-write-outputs-in-place | FileCheck %s

// A kernel's [rows, n] result returned as a 4-D output: the kernel writes
// into a view of the output buffer, and the copy at the end goes.
// CHECK-LABEL: func.func @kernel_result
// CHECK-SAME: (%[[IN:.*]]: memref<1x2x4x8xf32>, %[[OUT:.*]]: memref<1x2x4x8xf32>)
// CHECK-NOT: memref.alloc
// CHECK: %[[FLAT:.*]] = memref.collapse_shape %[[OUT]] {{\[\[}}0, 1, 2, 3]] : memref<1x2x4x8xf32> into memref<64xf32>
// CHECK: %[[ROWS:.*]] = memref.expand_shape %[[FLAT]] {{\[\[}}0, 1]] output_shape [8, 8] : memref<64xf32> into memref<8x8xf32>
// CHECK: call @kernel(%{{.*}}, %[[ROWS]])
// CHECK-NOT: memref.copy
// CHECK: return
func.func private @kernel(memref<8x8xf32>, memref<8x8xf32>)
func.func @kernel_result(%in: memref<1x2x4x8xf32>, %out: memref<1x2x4x8xf32>) {
  %rows = memref.collapse_shape %in [[0, 1, 2], [3]] : memref<1x2x4x8xf32> into memref<8x8xf32>
  %result = memref.alloc() {alignment = 64 : i64} : memref<8x8xf32>
  call @kernel(%rows, %result) : (memref<8x8xf32>, memref<8x8xf32>) -> ()
  %shaped = memref.expand_shape %result [[0, 1, 2], [3]] output_shape [1, 2, 4, 8] : memref<8x8xf32> into memref<1x2x4x8xf32>
  memref.copy %shaped, %out : memref<1x2x4x8xf32> to memref<1x2x4x8xf32>
  return
}

// -----

// Two outputs viewing one buffer: the last copy's output holds it, and the
// first output is copied from there.
// CHECK-LABEL: func.func @two_views
// CHECK-SAME: (%[[A:.*]]: memref<4x2xf32>, %[[B:.*]]: memref<8xf32>)
// CHECK: %[[V:.*]] = memref.expand_shape %[[B]] {{\[\[}}0, 1]] output_shape [2, 4] : memref<8xf32> into memref<2x4xf32>
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[V]] : memref<2x4xf32>)
// CHECK: %[[C:.*]] = memref.collapse_shape %[[V]]
// CHECK: %[[E:.*]] = memref.expand_shape %[[C]]
// CHECK: memref.copy %[[E]], %[[A]]
// CHECK-NOT: memref.copy
func.func @two_views(%a: memref<4x2xf32>, %b: memref<8xf32>) {
  %one = arith.constant 1.0 : f32
  %buffer = memref.alloc() : memref<2x4xf32>
  linalg.fill ins(%one : f32) outs(%buffer : memref<2x4xf32>)
  %flat = memref.collapse_shape %buffer [[0, 1]] : memref<2x4xf32> into memref<8xf32>
  %first = memref.expand_shape %flat [[0, 1]] output_shape [4, 2] : memref<8xf32> into memref<4x2xf32>
  memref.copy %first, %a : memref<4x2xf32> to memref<4x2xf32>
  %second = memref.collapse_shape %buffer [[0, 1]] : memref<2x4xf32> into memref<8xf32>
  memref.copy %second, %b : memref<8xf32> to memref<8xf32>
  return
}

// -----

// Left alone: the buffer is written after the copy (the output took its
// value before); a copy from an input (nothing to compute in place); an
// output read elsewhere; a strided view in the chain.
// CHECK-LABEL: func.func @left_alone
// CHECK: %[[LATE:.*]] = memref.alloc()
// CHECK: memref.copy %{{.*}}, %arg1
// CHECK: linalg.fill ins(%{{.*}} : f32) outs(%[[LATE]] : memref<8xf32>)
// CHECK: memref.copy %{{.*}}, %arg2
// CHECK: memref.alloc()
// CHECK: memref.copy %{{.*}}, %arg3
// CHECK: memref.alloc()
// CHECK: memref.alloc()
// CHECK: memref.copy %{{.*}}, %arg4
func.func @left_alone(%in: memref<8xf32>, %o1: memref<2x4xf32>, %o2: memref<2x4xf32>,
                      %o3: memref<8xf32>, %o4: memref<4xf32>) {
  %one = arith.constant 1.0 : f32
  %late = memref.alloc() : memref<8xf32>
  linalg.fill ins(%one : f32) outs(%late : memref<8xf32>)
  %late2 = memref.expand_shape %late [[0, 1]] output_shape [2, 4] : memref<8xf32> into memref<2x4xf32>
  memref.copy %late2, %o1 : memref<2x4xf32> to memref<2x4xf32>
  linalg.fill ins(%one : f32) outs(%late : memref<8xf32>)
  %input2 = memref.expand_shape %in [[0, 1]] output_shape [2, 4] : memref<8xf32> into memref<2x4xf32>
  memref.copy %input2, %o2 : memref<2x4xf32> to memref<2x4xf32>
  %read = memref.alloc() : memref<8xf32>
  linalg.fill ins(%one : f32) outs(%read : memref<8xf32>)
  memref.copy %read, %o3 : memref<8xf32> to memref<8xf32>
  %sum = memref.alloc() : memref<8xf32>
  linalg.copy ins(%o3 : memref<8xf32>) outs(%sum : memref<8xf32>)
  %strided = memref.alloc() : memref<8xf32>
  linalg.fill ins(%one : f32) outs(%strided : memref<8xf32>)
  %half = memref.subview %strided[0] [4] [2] : memref<8xf32> to memref<4xf32, strided<[2]>>
  memref.copy %half, %o4 : memref<4xf32, strided<[2]>> to memref<4xf32>
  return
}
