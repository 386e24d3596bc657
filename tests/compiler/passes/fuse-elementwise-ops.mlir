// RUN: flowc-opt %s --linalg-fuse-elementwise-ops | FileCheck %s

#id = affine_map<(d0) -> (d0)>

// A chain of two elementwise ops becomes one loop nest.
// CHECK-LABEL: func.func @chain
// CHECK: linalg.generic
// CHECK: arith.mulf
// CHECK: arith.negf
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @chain(%x: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %in : f32
    linalg.yield %m : f32
  } -> tensor<8xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %n = arith.negf %in : f32
    linalg.yield %n : f32
  } -> tensor<8xf32>
  return %b : tensor<8xf32>
}

// A producer with a second use stays a nest of its own.
// CHECK-LABEL: func.func @shared
// CHECK-COUNT-2: linalg.generic
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @shared(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %e = tensor.empty() : tensor<8xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %m = arith.mulf %in, %in : f32
    linalg.yield %m : f32
  } -> tensor<8xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %n = arith.negf %in : f32
    linalg.yield %n : f32
  } -> tensor<8xf32>
  return %a, %b : tensor<8xf32>, tensor<8xf32>
}

// The bound: a fused nest holds at most 64 payload ops (yields included).
// 32 + 32 fuse into one nest of 63 ops (one yield goes)...
// CHECK-LABEL: func.func @within_bound
// CHECK-COUNT-1: linalg.generic
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @within_bound(%x: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %p0 = arith.addf %in, %in : f32
    %p1 = arith.addf %p0, %in : f32
    %p2 = arith.addf %p1, %in : f32
    %p3 = arith.addf %p2, %in : f32
    %p4 = arith.addf %p3, %in : f32
    %p5 = arith.addf %p4, %in : f32
    %p6 = arith.addf %p5, %in : f32
    %p7 = arith.addf %p6, %in : f32
    %p8 = arith.addf %p7, %in : f32
    %p9 = arith.addf %p8, %in : f32
    %p10 = arith.addf %p9, %in : f32
    %p11 = arith.addf %p10, %in : f32
    %p12 = arith.addf %p11, %in : f32
    %p13 = arith.addf %p12, %in : f32
    %p14 = arith.addf %p13, %in : f32
    %p15 = arith.addf %p14, %in : f32
    %p16 = arith.addf %p15, %in : f32
    %p17 = arith.addf %p16, %in : f32
    %p18 = arith.addf %p17, %in : f32
    %p19 = arith.addf %p18, %in : f32
    %p20 = arith.addf %p19, %in : f32
    %p21 = arith.addf %p20, %in : f32
    %p22 = arith.addf %p21, %in : f32
    %p23 = arith.addf %p22, %in : f32
    %p24 = arith.addf %p23, %in : f32
    %p25 = arith.addf %p24, %in : f32
    %p26 = arith.addf %p25, %in : f32
    %p27 = arith.addf %p26, %in : f32
    %p28 = arith.addf %p27, %in : f32
    %p29 = arith.addf %p28, %in : f32
    %p30 = arith.addf %p29, %in : f32
    linalg.yield %p30 : f32
  } -> tensor<8xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c0 = arith.addf %in, %in : f32
    %c1 = arith.addf %c0, %in : f32
    %c2 = arith.addf %c1, %in : f32
    %c3 = arith.addf %c2, %in : f32
    %c4 = arith.addf %c3, %in : f32
    %c5 = arith.addf %c4, %in : f32
    %c6 = arith.addf %c5, %in : f32
    %c7 = arith.addf %c6, %in : f32
    %c8 = arith.addf %c7, %in : f32
    %c9 = arith.addf %c8, %in : f32
    %c10 = arith.addf %c9, %in : f32
    %c11 = arith.addf %c10, %in : f32
    %c12 = arith.addf %c11, %in : f32
    %c13 = arith.addf %c12, %in : f32
    %c14 = arith.addf %c13, %in : f32
    %c15 = arith.addf %c14, %in : f32
    %c16 = arith.addf %c15, %in : f32
    %c17 = arith.addf %c16, %in : f32
    %c18 = arith.addf %c17, %in : f32
    %c19 = arith.addf %c18, %in : f32
    %c20 = arith.addf %c19, %in : f32
    %c21 = arith.addf %c20, %in : f32
    %c22 = arith.addf %c21, %in : f32
    %c23 = arith.addf %c22, %in : f32
    %c24 = arith.addf %c23, %in : f32
    %c25 = arith.addf %c24, %in : f32
    %c26 = arith.addf %c25, %in : f32
    %c27 = arith.addf %c26, %in : f32
    %c28 = arith.addf %c27, %in : f32
    %c29 = arith.addf %c28, %in : f32
    %c30 = arith.addf %c29, %in : f32
    linalg.yield %c30 : f32
  } -> tensor<8xf32>
  return %b : tensor<8xf32>
}

// ...33 + 32 do not.
// CHECK-LABEL: func.func @beyond_bound
// CHECK-COUNT-2: linalg.generic
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @beyond_bound(%x: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %a = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %p0 = arith.addf %in, %in : f32
    %p1 = arith.addf %p0, %in : f32
    %p2 = arith.addf %p1, %in : f32
    %p3 = arith.addf %p2, %in : f32
    %p4 = arith.addf %p3, %in : f32
    %p5 = arith.addf %p4, %in : f32
    %p6 = arith.addf %p5, %in : f32
    %p7 = arith.addf %p6, %in : f32
    %p8 = arith.addf %p7, %in : f32
    %p9 = arith.addf %p8, %in : f32
    %p10 = arith.addf %p9, %in : f32
    %p11 = arith.addf %p10, %in : f32
    %p12 = arith.addf %p11, %in : f32
    %p13 = arith.addf %p12, %in : f32
    %p14 = arith.addf %p13, %in : f32
    %p15 = arith.addf %p14, %in : f32
    %p16 = arith.addf %p15, %in : f32
    %p17 = arith.addf %p16, %in : f32
    %p18 = arith.addf %p17, %in : f32
    %p19 = arith.addf %p18, %in : f32
    %p20 = arith.addf %p19, %in : f32
    %p21 = arith.addf %p20, %in : f32
    %p22 = arith.addf %p21, %in : f32
    %p23 = arith.addf %p22, %in : f32
    %p24 = arith.addf %p23, %in : f32
    %p25 = arith.addf %p24, %in : f32
    %p26 = arith.addf %p25, %in : f32
    %p27 = arith.addf %p26, %in : f32
    %p28 = arith.addf %p27, %in : f32
    %p29 = arith.addf %p28, %in : f32
    %p30 = arith.addf %p29, %in : f32
    %p31 = arith.addf %p30, %in : f32
    linalg.yield %p31 : f32
  } -> tensor<8xf32>
  %b = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel"]}
      ins(%a : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%in: f32, %out: f32):
    %c0 = arith.addf %in, %in : f32
    %c1 = arith.addf %c0, %in : f32
    %c2 = arith.addf %c1, %in : f32
    %c3 = arith.addf %c2, %in : f32
    %c4 = arith.addf %c3, %in : f32
    %c5 = arith.addf %c4, %in : f32
    %c6 = arith.addf %c5, %in : f32
    %c7 = arith.addf %c6, %in : f32
    %c8 = arith.addf %c7, %in : f32
    %c9 = arith.addf %c8, %in : f32
    %c10 = arith.addf %c9, %in : f32
    %c11 = arith.addf %c10, %in : f32
    %c12 = arith.addf %c11, %in : f32
    %c13 = arith.addf %c12, %in : f32
    %c14 = arith.addf %c13, %in : f32
    %c15 = arith.addf %c14, %in : f32
    %c16 = arith.addf %c15, %in : f32
    %c17 = arith.addf %c16, %in : f32
    %c18 = arith.addf %c17, %in : f32
    %c19 = arith.addf %c18, %in : f32
    %c20 = arith.addf %c19, %in : f32
    %c21 = arith.addf %c20, %in : f32
    %c22 = arith.addf %c21, %in : f32
    %c23 = arith.addf %c22, %in : f32
    %c24 = arith.addf %c23, %in : f32
    %c25 = arith.addf %c24, %in : f32
    %c26 = arith.addf %c25, %in : f32
    %c27 = arith.addf %c26, %in : f32
    %c28 = arith.addf %c27, %in : f32
    %c29 = arith.addf %c28, %in : f32
    %c30 = arith.addf %c29, %in : f32
    linalg.yield %c30 : f32
  } -> tensor<8xf32>
  return %b : tensor<8xf32>
}
