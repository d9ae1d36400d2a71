// RUN: loom-opt --loom-plan-buffers %s | FileCheck %s

// A pipeline chunk's forward keeps three values for its backward, two of
// them the same storage (a value and a reshape of it): the two storages go
// to the chunk's stash slot, packed from offset 0 in result order (aligned
// to 64 bytes), not into the arena, and the backward reads each at the slot
// offset of its name. What stays in the arena is each function's own
// working set: the forward's first gelu and, after its last read, the
// linear in the same bytes above the argument; the backward's result there
// too.
// CHECK-LABEL: func.func @fwd0(
// CHECK-SAME:    loom.offset = 0 : i64
// CHECK-SAME:    loom.arena_bytes = 128 : i64, {{.*}}loom.stash_bytes = 320 : i64
// CHECK:         loom.gelu %{{.*}} {loom.offsets = array<i64: 64>}
// CHECK:         loom.gelu %{{.*}} {loom.in_stash = array<i1: true>, loom.offsets = array<i64: 0>}
// CHECK:         loom.reshape %{{.*}} {loom.in_stash = array<i1: true>, loom.offsets = array<i64: 0>}
// CHECK:         loom.linear %{{.*}} {loom.offsets = array<i64: 64>}
// CHECK:         loom.concat {{.*}} {loom.in_stash = array<i1: true>, loom.offsets = array<i64: 64>}
// CHECK-LABEL: func.func @bwd0(
// CHECK-SAME:    loom.name = "chunk0.stash0", loom.offset = 0 : i64
// CHECK-SAME:    loom.name = "chunk0.stash1", loom.offset = 0 : i64
// CHECK-SAME:    loom.name = "chunk0.stash2", loom.offset = 64 : i64
// CHECK-SAME:    loom.arena_bytes = 128 : i64
// CHECK-NOT:     loom.stash_bytes
// CHECK:         loom.gelu_grad %{{.*}} {loom.offsets = array<i64: 64>}
func.func @fwd0(%x: tensor<4x4xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> (tensor<4x4xf32> {loom.stash = "chunk0.stash0"},
        tensor<16xf32> {loom.stash = "chunk0.stash1"},
        tensor<4x16xf32> {loom.stash = "chunk0.stash2"})
    attributes {loom.pipeline = {stage = 0 : i64, chunk = 0 : i64},
                loom.train = {phase = "forward"}} {
  %a = loom.gelu %x : tensor<4x4xf32>
  %b = loom.gelu %a : tensor<4x4xf32>
  %v = loom.reshape %b : tensor<4x4xf32> -> tensor<16xf32>
  %w = loom.linear %b, %x : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<4x4xf32>
  %c = loom.concat %w, %w, %w, %w dim 1
      : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x16xf32>
  return %b, %v, %c : tensor<4x4xf32>, tensor<16xf32>, tensor<4x16xf32>
}

func.func @bwd0(%s0: tensor<4x4xf32> {loom.name = "chunk0.stash0", loom.role = #loom.role<stash>},
                %s1: tensor<16xf32> {loom.name = "chunk0.stash1", loom.role = #loom.role<stash>},
                %s2: tensor<4x16xf32> {loom.name = "chunk0.stash2", loom.role = #loom.role<stash>})
    -> tensor<4x4xf32>
    attributes {loom.pipeline = {stage = 0 : i64, chunk = 0 : i64},
                loom.train = {phase = "backward"}} {
  %g = loom.gelu_grad %s0, %s0 : tensor<4x4xf32>
  return %g : tensor<4x4xf32>
}
