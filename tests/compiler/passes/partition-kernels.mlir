// RUN: flowc-opt %s --split-input-file --flowc-partition-kernels | FileCheck %s

// Two identical scalings on different buffers, one with another constant, a
// copy through a strided view, and a fill of a buffer of dynamic size. The
// scalings by 2 share one kernel; by 3 and the copy have their own; the
// strided views are passed as they are (their layout is part of the
// kernel's type); the dynamically sized fill stays in @main.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%[[A:[^:]*]]: memref<64x64xf32>, %[[B:[^:]*]]: memref<64x64xf32>, %[[C:[^:]*]]: memref<64x64xf32>, %[[D:[^:]*]]: memref<?x64xf32>)
// CHECK-NOT: linalg.generic
// CHECK: call @[[BY2:flowc_loops_[0-9a-f]+]](%[[A]], %[[B]])
// CHECK-NEXT: call @[[BY2]](%[[B]], %[[C]])
// CHECK-NEXT: call @[[BY3:flowc_loops_[0-9a-f]+]](%[[C]], %[[A]])
// CHECK: %[[HALF:.*]] = memref.subview %[[A]]
// CHECK: %[[TOP:.*]] = memref.subview %[[B]]
// CHECK: call @[[COPY:flowc_loops_[0-9a-f]+]](%[[HALF]], %[[TOP]]) : (memref<32x64xf32, strided<[64, 1], offset: 2048>>, memref<32x64xf32, strided<[64, 1]>>) -> ()
// CHECK-NEXT: linalg.fill ins(%{{.*}} : f32) outs(%[[D]] : memref<?x64xf32>)
// CHECK-NOT: linalg.generic
// CHECK-NOT: linalg.copy
// CHECK: return

// Constants travel inside the kernel.
// CHECK: func.func private @[[BY2]](%{{.*}}: memref<64x64xf32>, %{{.*}}: memref<64x64xf32>) attributes {flowc.loop_kernel}
// CHECK-NEXT: arith.constant 2.000000e+00 : f32
// CHECK-NEXT: linalg.generic
// CHECK: func.func private @[[BY3]](
// CHECK-SAME: attributes {flowc.loop_kernel}
// CHECK-NEXT: arith.constant 3.000000e+00 : f32
// CHECK-NEXT: linalg.generic
// CHECK: func.func private @[[COPY]](
// CHECK-SAME: attributes {flowc.loop_kernel}
// CHECK-NEXT: linalg.copy
// CHECK-NOT: func.func private @flowc_loops
#id = affine_map<(i, j) -> (i, j)>
func.func @main(%a: memref<64x64xf32>, %b: memref<64x64xf32>, %c: memref<64x64xf32>,
                %d: memref<?x64xf32>) {
  %two = arith.constant 2.0 : f32
  %three = arith.constant 3.0 : f32
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%a : memref<64x64xf32>) outs(%b : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %two : f32
    linalg.yield %m : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%b : memref<64x64xf32>) outs(%c : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %two : f32
    linalg.yield %m : f32
  }
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c : memref<64x64xf32>) outs(%a : memref<64x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %three : f32
    linalg.yield %m : f32
  }
  %half = memref.subview %a[32, 0] [32, 64] [1, 1]
      : memref<64x64xf32> to memref<32x64xf32, strided<[64, 1], offset: 2048>>
  %top = memref.subview %b[0, 0] [32, 64] [1, 1]
      : memref<64x64xf32> to memref<32x64xf32, strided<[64, 1]>>
  linalg.copy ins(%half : memref<32x64xf32, strided<[64, 1], offset: 2048>>)
              outs(%top : memref<32x64xf32, strided<[64, 1]>>)
  linalg.fill ins(%two : f32) outs(%d : memref<?x64xf32>)
  return
}

// -----

// A kernel's name depends on its IR only: the scaling by 3 in another
// graph, on other buffers, gets the same name.
// CHECK-LABEL: func.func @main
// CHECK: call @[[BY3]](
// CHECK: func.func private @[[BY3]](
#id = affine_map<(i, j) -> (i, j)>
func.func @main(%x: memref<64x64xf32>, %y: memref<64x64xf32>) {
  %c = arith.constant 3.0 : f32
  linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%y : memref<64x64xf32>) outs(%x : memref<64x64xf32>) {
  ^bb0(%v: f32, %w: f32):
    %m = arith.mulf %v, %c : f32
    linalg.yield %m : f32
  }
  return
}
