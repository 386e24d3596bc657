// RUN: flowc-opt %s --split-input-file --flowc-plan-activation-memory | FileCheck %s

// a -> b -> c -> out: a is dead when c is made, so they share bytes; the
// arena (two 64-byte slots) is a new last argument.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%{{.*}}: memref<4xf32>, %[[OUT:[^:]*]]: memref<4xf32>, %[[ARENA:[^:]*]]: memref<128xi8>)
// CHECK-SAME: attributes {flowc.arena_bytes = 128 : i64}
// CHECK-NOT: memref.alloc
// CHECK: %[[OA:.*]] = arith.constant 0 : index
// CHECK: %[[A:.*]] = memref.view %[[ARENA]][%[[OA]]][] : memref<128xi8> to memref<4xf32>
// CHECK: %[[OB:.*]] = arith.constant 64 : index
// CHECK: %[[B:.*]] = memref.view %[[ARENA]][%[[OB]]][] : memref<128xi8> to memref<4xf32>
// CHECK: linalg.copy ins(%[[A]] : memref<4xf32>) outs(%[[B]] : memref<4xf32>)
// CHECK: %[[OC:.*]] = arith.constant 0 : index
// CHECK: %[[C:.*]] = memref.view %[[ARENA]][%[[OC]]][] : memref<128xi8> to memref<4xf32>
// CHECK: linalg.copy ins(%[[C]] : memref<4xf32>) outs(%[[OUT]] : memref<4xf32>)
// CHECK-NOT: memref.alloc
func.func @main(%x: memref<4xf32>, %out: memref<4xf32>) {
  %a = memref.alloc() : memref<4xf32>
  linalg.copy ins(%x : memref<4xf32>) outs(%a : memref<4xf32>)
  %b = memref.alloc() : memref<4xf32>
  linalg.copy ins(%a : memref<4xf32>) outs(%b : memref<4xf32>)
  %c = memref.alloc() : memref<4xf32>
  linalg.copy ins(%b : memref<4xf32>) outs(%c : memref<4xf32>)
  linalg.copy ins(%c : memref<4xf32>) outs(%out : memref<4xf32>)
  return
}

// -----

// A product adding a residual: where the residual dies at the call, the
// output takes its bytes (add-to-output): y over r. Not where it is read
// later (z may not take y's), nor where it is also the product's source:
// z dies at u's call, but u takes r/y's bytes instead, dead by then.
// CHECK-LABEL: func.func @main
// CHECK-SAME: %[[ARENA:[^:]*]]: memref<128xi8>) attributes {flowc.arena_bytes = 128 : i64}
// CHECK: %[[OR:.*]] = arith.constant 0 : index
// CHECK: %[[R:.*]] = memref.view %[[ARENA]][%[[OR]]]
// CHECK: %[[OY:.*]] = arith.constant 0 : index
// CHECK: %[[Y:.*]] = memref.view %[[ARENA]][%[[OY]]]
// CHECK: call @mm(%{{.*}}, %{{.*}}, %[[R]], %[[Y]])
// CHECK: %[[OZ:.*]] = arith.constant 64 : index
// CHECK: %[[Z:.*]] = memref.view %[[ARENA]][%[[OZ]]]
// CHECK: call @mm(%{{.*}}, %{{.*}}, %[[Y]], %[[Z]])
// CHECK: %[[OU:.*]] = arith.constant 0 : index
// CHECK: %[[U:.*]] = memref.view %[[ARENA]][%[[OU]]]
// CHECK: call @mm(%[[Z]], %{{.*}}, %[[Z]], %[[U]])
func.func private @mm(memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>,
                      memref<1x4x4xf32>)
    attributes {flowc.kernel = "matmul",
                flowc.kernel_params = array<i64: 1, 4, 4, 4, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0>}
func.func @main(%x: memref<1x4x4xf32>, %w: memref<1x4x4xf32>, %out: memref<1x4x4xf32>) {
  %r = memref.alloc() : memref<1x4x4xf32>
  linalg.copy ins(%x : memref<1x4x4xf32>) outs(%r : memref<1x4x4xf32>)
  %y = memref.alloc() : memref<1x4x4xf32>
  call @mm(%x, %w, %r, %y) : (memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>) -> ()
  %z = memref.alloc() : memref<1x4x4xf32>
  call @mm(%x, %w, %y, %z) : (memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>) -> ()
  linalg.copy ins(%y : memref<1x4x4xf32>) outs(%out : memref<1x4x4xf32>)
  %u = memref.alloc() : memref<1x4x4xf32>
  call @mm(%z, %w, %z, %u) : (memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>) -> ()
  linalg.copy ins(%u : memref<1x4x4xf32>) outs(%out : memref<1x4x4xf32>)
  return
}

// -----

// The same graph with the residual flag off: nothing is shared, and r is
// dead when z is made, so z reuses its bytes the usual way.
// CHECK-LABEL: func.func @main
// CHECK: %[[OR:.*]] = arith.constant 0 : index
// CHECK: %[[R:.*]] = memref.view %{{.*}}[%[[OR]]]
// CHECK: %[[OY:.*]] = arith.constant 64 : index
// CHECK: %[[Y:.*]] = memref.view %{{.*}}[%[[OY]]]
// CHECK: call @mm(%{{.*}}, %{{.*}}, %[[R]], %[[Y]])
// CHECK: %[[OZ:.*]] = arith.constant 0 : index
// CHECK: %[[Z:.*]] = memref.view %{{.*}}[%[[OZ]]]
// CHECK: call @mm(%{{.*}}, %{{.*}}, %[[Y]], %[[Z]])
func.func private @mm(memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>,
                      memref<1x4x4xf32>)
    attributes {flowc.kernel = "matmul",
                flowc.kernel_params = array<i64: 1, 4, 4, 4, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0>}
func.func @main(%x: memref<1x4x4xf32>, %w: memref<1x4x4xf32>, %out: memref<1x4x4xf32>) {
  %r = memref.alloc() : memref<1x4x4xf32>
  linalg.copy ins(%x : memref<1x4x4xf32>) outs(%r : memref<1x4x4xf32>)
  %y = memref.alloc() : memref<1x4x4xf32>
  call @mm(%x, %w, %r, %y) : (memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>) -> ()
  %z = memref.alloc() : memref<1x4x4xf32>
  call @mm(%x, %w, %y, %z) : (memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>) -> ()
  linalg.copy ins(%y : memref<1x4x4xf32>) outs(%out : memref<1x4x4xf32>)
  %u = memref.alloc() : memref<1x4x4xf32>
  call @mm(%z, %w, %z, %u) : (memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>, memref<1x4x4xf32>) -> ()
  linalg.copy ins(%u : memref<1x4x4xf32>) outs(%out : memref<1x4x4xf32>)
  return
}

// -----

// A dynamically sized buffer stays an allocation, and with nothing to plan
// @main gets no arena.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%{{.*}}: memref<?xf32>, %{{.*}}: index) {
// CHECK: memref.alloc(%{{.*}}) : memref<?xf32>
// CHECK-NOT: memref.view
func.func @main(%x: memref<?xf32>, %n: index) {
  %a = memref.alloc(%n) : memref<?xf32>
  linalg.copy ins(%x : memref<?xf32>) outs(%a : memref<?xf32>)
  memref.dealloc %a : memref<?xf32>
  return
}
