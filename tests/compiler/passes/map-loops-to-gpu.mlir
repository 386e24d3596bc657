// RUN: flowc-opt %s --split-input-file --pass-pipeline="builtin.module(func.func(convert-linalg-to-parallel-loops,flowc-map-loops-to-gpu,gpu-map-parallel-loops,convert-parallel-loops-to-gpu),gpu-kernel-outlining,canonicalize)" | FileCheck %s

// An elementwise nest over 2x3x40x5 = 1200 elements: one dimension, blocks
// of 256 threads (5 blocks, the last guarded), neighbouring threads on
// neighbouring elements of the innermost dimension.
// CHECK-LABEL: func.func @elementwise
// CHECK-DAG: %[[C5:.*]] = arith.constant 5 : index
// CHECK-DAG: %[[C256:.*]] = arith.constant 256 : index
// CHECK: gpu.launch_func @elementwise_kernel::@elementwise_kernel blocks in (%[[C5]], %{{.*}}, %{{.*}}) threads in (%[[C256]],
// CHECK: gpu.func @elementwise_kernel
// CHECK: gpu.block_id x
// CHECK: gpu.thread_id x
// CHECK: arith.cmpi
// CHECK: scf.if
// CHECK: math.exp
#id4 = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2, d3)>
func.func @elementwise(%a: memref<2x3x40x5xf32>, %b: memref<2x3x40x5xf32>) {
  linalg.generic {indexing_maps = [#id4, #id4], iterator_types = ["parallel", "parallel", "parallel", "parallel"]}
      ins(%a : memref<2x3x40x5xf32>) outs(%b : memref<2x3x40x5xf32>) {
  ^bb0(%x: f32, %y: f32):
    %e = math.exp %x : f32
    linalg.yield %e : f32
  }
  return
}

// -----

// A row reduction: one thread per row (8 rows: one block of 8 threads),
// the reduced dimension a loop inside each thread.
// CHECK-LABEL: func.func @rows
// CHECK-DAG: %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG: %[[C8:.*]] = arith.constant 8 : index
// CHECK: gpu.launch_func @rows_kernel::@rows_kernel blocks in (%[[C1]], %[[C1]], %[[C1]]) threads in (%[[C8]], %[[C1]], %[[C1]])
// CHECK: gpu.func @rows_kernel
// CHECK: scf.for
// CHECK: arith.addf
#rows = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @rows(%a: memref<8x100xf32>, %s: memref<8xf32>) {
  linalg.generic {indexing_maps = [#rows, #row], iterator_types = ["parallel", "reduction"]}
      ins(%a : memref<8x100xf32>) outs(%s : memref<8xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %r = arith.addf %x, %acc : f32
    linalg.yield %r : f32
  }
  return
}

// -----

// A reduction to one value has no parallel dimension: it runs in a launch
// of one thread, never on the host (which cannot read device memory).
// CHECK-LABEL: func.func @total
// CHECK-NOT: memref.load
// CHECK: gpu.launch_func @total_kernel::@total_kernel blocks in (%[[ONE:[^,]*]], %[[ONE]], %[[ONE]]) threads in (%[[ONE]], %[[ONE]], %[[ONE]])
// CHECK-NOT: memref.load
// CHECK: gpu.func @total_kernel
// CHECK: scf.for
#all = affine_map<(d0) -> (d0)>
#none = affine_map<(d0) -> ()>
func.func @total(%a: memref<100xf32>, %s: memref<f32>) {
  linalg.generic {indexing_maps = [#all, #none], iterator_types = ["reduction"]}
      ins(%a : memref<100xf32>) outs(%s : memref<f32>) {
  ^bb0(%x: f32, %acc: f32):
    %r = arith.addf %x, %acc : f32
    linalg.yield %r : f32
  }
  return
}

// -----

// A 0-d copy lowers to a load and a store, no loop: both go into one
// one-thread launch (the value read never reaches the host).
// CHECK-LABEL: func.func @scalar_copy
// CHECK-NOT: memref.load
// CHECK: gpu.launch_func @scalar_copy_kernel::@scalar_copy_kernel
// CHECK-NOT: memref.store
// CHECK: gpu.func @scalar_copy_kernel
// CHECK: %[[V:.*]] = memref.load
// CHECK: memref.store %[[V]]
func.func @scalar_copy(%a: memref<i64>, %b: memref<i64>) {
  linalg.copy ins(%a : memref<i64>) outs(%b : memref<i64>)
  return
}

// -----

// A constant global a nest reads is read inside the kernel, from the GPU
// module's copy of it: the host's address would be no use to the device.
// CHECK-LABEL: func.func @scaled
// CHECK-NOT: memref.get_global
// CHECK: gpu.launch_func @scaled_kernel::@scaled_kernel
// CHECK: gpu.module @scaled_kernel
// CHECK: gpu.func @scaled_kernel
// CHECK: memref.get_global @scale
// CHECK: memref.global "private" constant @scale
memref.global "private" constant @scale : memref<1xf32> = dense<2.0>
#vector = affine_map<(d0) -> (d0)>
#first = affine_map<(d0) -> (0)>
func.func @scaled(%a: memref<64xf32>, %b: memref<64xf32>) {
  %s = memref.get_global @scale : memref<1xf32>
  linalg.generic {indexing_maps = [#vector, #first, #vector], iterator_types = ["parallel"]}
      ins(%a, %s : memref<64xf32>, memref<1xf32>) outs(%b : memref<64xf32>) {
  ^bb0(%x: f32, %k: f32, %y: f32):
    %m = arith.mulf %x, %k : f32
    linalg.yield %m : f32
  }
  return
}
