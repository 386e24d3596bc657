// RUN: flowc-opt %s --flowc-plan-activation-memory --split-input-file --verify-diagnostics

// Planned already: a second arena argument would shift the ABI the runtime
// binds.
// expected-error @+1 {{'func.func' op already has an activation arena (flowc.arena_bytes); the memory plan runs once}}
func.func @main(%x: memref<4xf32>, %out: memref<4xf32>, %arena: memref<64xi8>)
    attributes {flowc.arena_bytes = 64 : i64} {
  %a = memref.alloc() : memref<4xf32>
  linalg.copy ins(%x : memref<4xf32>) outs(%a : memref<4xf32>)
  linalg.copy ins(%a : memref<4xf32>) outs(%out : memref<4xf32>)
  return
}
