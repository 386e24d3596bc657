// RUN: flowc-opt %s --flowc-approximate-math | FileCheck %s

// exp, erf and tanh become arithmetic; other math ops stay libm calls.
// CHECK-LABEL: func.func @approximated
// CHECK-NOT: math.exp
// CHECK-NOT: math.erf
// CHECK-NOT: math.tanh
// CHECK: math.log %{{.*}} : f32
// CHECK-NOT: math.exp
// CHECK-NOT: math.erf
// CHECK-NOT: math.tanh
// CHECK: return
func.func @approximated(%x: f32) -> (f32, f32, f32, f32) {
  %e = math.exp %x : f32
  %r = math.erf %x : f32
  %t = math.tanh %x : f32
  %l = math.log %x : f32
  return %e, %r, %t, %l : f32, f32, f32, f32
}

