// RUN: flowc-opt %s --flowc-parallelize-loops="parallel-dims=1" | FileCheck %s
// RUN: flowc-opt %s --flowc-parallelize-loops="parallel-dims=0" | FileCheck %s --check-prefix=SEQ

// A search candidate's count of parallel dimensions holds for every nest,
// whatever its size: with 1, the large nest keeps only its outermost
// dimension parallel and the 4x8 nest, too small for the default, runs its
// rows on threads; with 0, both are sequential.
// CHECK-LABEL: func.func @main
// CHECK: scf.parallel (%{{.*}}) = (%c0) to (%c2) step (%c1) {
// CHECK-NEXT: scf.for %{{.*}} = %c0 to %c128 step %c1 {
// CHECK-NEXT: scf.for %{{.*}} = %c0 to %c768 step %c1 {
// CHECK: arith.addf
// CHECK: scf.parallel (%{{.*}}) = (%c0) to (%c4) step (%c1) {
// CHECK-NEXT: scf.for %{{.*}} = %c0 to %c8 step %c1 {
// CHECK: arith.mulf
// CHECK-NOT: flowc.parallel
// SEQ-LABEL: func.func @main
// SEQ-NOT: scf.parallel
// SEQ: return
func.func @main(%a: memref<2x128x768xf32>, %b: memref<4x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c128 = arith.constant 128 : index
  %c768 = arith.constant 768 : index
  scf.parallel (%i, %j, %k) = (%c0, %c0, %c0) to (%c2, %c128, %c768) step (%c1, %c1, %c1) {
    %v = memref.load %a[%i, %j, %k] : memref<2x128x768xf32>
    %w = arith.addf %v, %v : f32
    memref.store %w, %a[%i, %j, %k] : memref<2x128x768xf32>
    scf.reduce
  }
  scf.parallel (%i, %j) = (%c0, %c0) to (%c4, %c8) step (%c1, %c1) {
    %v = memref.load %b[%i, %j] : memref<4x8xf32>
    %w = arith.mulf %v, %v : f32
    memref.store %w, %b[%i, %j] : memref<4x8xf32>
    scf.reduce
  }
  return
}
