// RUN: flowc-opt %s --split-input-file --flowc-parallelize-loops | FileCheck %s

// What linalg-to-parallel-loops makes of an elementwise op on 1x128x768
// (large), one on 4x8 (small), and a row reduction. The elementwise nest
// keeps (1, 128) parallel around a sequential loop over 768 (the one LLVM
// vectorizes); the 4x8 nest runs sequentially; the reduction stays as it
// was. No marker attribute is left behind.
// CHECK-LABEL: func.func @main
// CHECK: scf.parallel (%[[I:.*]], %[[J:.*]]) = (%c0, %c0) to (%c1, %c128) step (%c1, %c1) {
// CHECK-NEXT: scf.for %[[K:.*]] = %c0 to %c768 step %c1 {
// CHECK: arith.addf
// CHECK: scf.reduce
// CHECK-NEXT: }
// CHECK-NOT: flowc.parallel
// CHECK-NEXT: scf.for %{{.*}} = %c0 to %c4 step %c1 {
// CHECK-NEXT: scf.for %{{.*}} = %c0 to %c8 step %c1 {
// CHECK: arith.mulf
// CHECK: scf.parallel (%{{.*}}) = (%c0) to (%c64) step (%c1) {
// CHECK-NEXT: scf.for %{{.*}} = %c0 to %c512 step %c1 {
// CHECK: arith.addf
// CHECK: scf.reduce
// CHECK-NEXT: }
// CHECK-NOT: flowc.parallel
// CHECK: return
func.func @main(%a: memref<1x128x768xf32>, %b: memref<4x8xf32>, %r: memref<64x512xf32>,
                %out: memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %c512 = arith.constant 512 : index
  %c768 = arith.constant 768 : index
  scf.parallel (%i, %j, %k) = (%c0, %c0, %c0) to (%c1, %c128, %c768) step (%c1, %c1, %c1) {
    %v = memref.load %a[%i, %j, %k] : memref<1x128x768xf32>
    %w = arith.addf %v, %v : f32
    memref.store %w, %a[%i, %j, %k] : memref<1x128x768xf32>
    scf.reduce
  }
  scf.parallel (%i, %j) = (%c0, %c0) to (%c4, %c8) step (%c1, %c1) {
    %v = memref.load %b[%i, %j] : memref<4x8xf32>
    %w = arith.mulf %v, %v : f32
    memref.store %w, %b[%i, %j] : memref<4x8xf32>
    scf.reduce
  }
  scf.parallel (%i) = (%c0) to (%c64) step (%c1) {
    scf.for %k = %c0 to %c512 step %c1 {
      %v = memref.load %r[%i, %k] : memref<64x512xf32>
      %acc = memref.load %out[%i] : memref<64xf32>
      %s = arith.addf %v, %acc : f32
      memref.store %s, %out[%i] : memref<64xf32>
    }
    scf.reduce
  }
  return
}

// -----

// A nest inside a parallel nest runs sequentially inside it; a parallel
// nest in a library kernel's body (replaced by a library call later) runs
// sequentially.
// CHECK-LABEL: func.func private @kernel
// CHECK-NOT: scf.parallel
// CHECK: scf.for
// CHECK-NEXT: scf.for
// CHECK-NOT: scf.parallel
// CHECK-LABEL: func.func @main
// CHECK: scf.parallel (%{{.*}}) = (%c0) to (%c256) step (%c1) {
// CHECK-NEXT: scf.for %{{.*}} = %c0 to %c256 step %c1 {
// CHECK-NOT: scf.parallel
// CHECK: call @kernel
func.func private @kernel(%a: memref<256x256xf32>) attributes {flowc.kernel = "softmax", flowc.kernel_params = array<i64: 256, 256>} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c256 = arith.constant 256 : index
  scf.parallel (%i, %j) = (%c0, %c0) to (%c256, %c256) step (%c1, %c1) {
    %v = memref.load %a[%i, %j] : memref<256x256xf32>
    memref.store %v, %a[%j, %i] : memref<256x256xf32>
    scf.reduce
  }
  return
}
func.func @main(%a: memref<256x256xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c256 = arith.constant 256 : index
  scf.parallel (%i) = (%c0) to (%c256) step (%c1) {
    scf.parallel (%j) = (%c0) to (%c256) step (%c1) {
      %v = memref.load %a[%i, %j] : memref<256x256xf32>
      %w = arith.negf %v : f32
      memref.store %w, %a[%i, %j] : memref<256x256xf32>
      scf.reduce
    }
    scf.reduce
  }
  call @kernel(%a) : (memref<256x256xf32>) -> ()
  return
}

// -----

// Bounds only known at run time: no way to tell the work, so one thread.
// CHECK-LABEL: func.func @main
// CHECK-NOT: scf.parallel
// CHECK: scf.for %{{.*}} = %c0 to %dim step %c1 {
// CHECK-NOT: scf.parallel
func.func @main(%a: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?xf32>
  scf.parallel (%i) = (%c0) to (%n) step (%c1) {
    %v = memref.load %a[%i] : memref<?xf32>
    memref.store %v, %a[%i] : memref<?xf32>
    scf.reduce
  }
  return
}
