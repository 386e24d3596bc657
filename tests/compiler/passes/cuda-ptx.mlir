// REQUIRES: cuda
// RUN: flowc-opt %s --pass-pipeline="builtin.module(func.func(convert-linalg-to-parallel-loops,flowc-map-loops-to-gpu,gpu-map-parallel-loops,convert-parallel-loops-to-gpu),gpu-kernel-outlining,lower-affine,canonicalize,nvvm-attach-target{chip=sm_80 O=3},gpu.module(convert-scf-to-cf,expand-strided-metadata,convert-gpu-to-nvvm{index-bitwidth=64},reconcile-unrealized-casts),gpu-module-to-binary{format=isa toolkit=%cuda_toolkit})" | FileCheck %s

// The device half of a cuda kernel's lowering (Pipelines.cpp), down to the
// PTX LLVM's NVPTX backend writes (compiler_test assembles such PTX with
// ptxas): a row sum of exp(x) is one kernel entry for sm_80 whose threads
// (block x thread) each own a row, read their row from global memory and
// accumulate into their output in a loop; exp comes from libdevice, linked
// from the toolkit, as the hardware's ex2.
// CHECK: gpu.binary @rowsum_exp_kernel
// CHECK-SAME: #nvvm.target<O = 3, chip = "sm_80">
// CHECK-SAME: .target sm_80
// CHECK-SAME: .visible .entry rowsum_exp_kernel(
// CHECK-SAME: %ctaid.x
// CHECK-SAME: %tid.x
// CHECK-SAME: ld.global
// CHECK-SAME: ex2.approx
// CHECK-SAME: st.global
// CHECK-SAME: bra
#id = affine_map<(d0, d1) -> (d0, d1)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @rowsum_exp(%a: memref<8x100xf32>, %s: memref<8xf32>) {
  linalg.generic {indexing_maps = [#id, #row], iterator_types = ["parallel", "reduction"]}
      ins(%a : memref<8x100xf32>) outs(%s : memref<8xf32>) {
  ^bb0(%x: f32, %acc: f32):
    %e = math.exp %x : f32
    %r = arith.addf %e, %acc : f32
    linalg.yield %r : f32
  }
  return
}
