// RUN: loom-opt --loom-plan-buffers=in-place=false -split-input-file %s | FileCheck %s

// Collectives in flight: buckets and waits.

// A reduce-scatter bucket (ZeRO-2/3's reduce-scatter of several gradients,
// --loom-schedule-comm) sends from its packed copy: the inputs %g1, %g2 (at
// 320, 384) are free once it starts, and the gelus computed while it is in
// flight reuse their bytes; its scratch (this rank's received blocks, 64
// bytes at 448; the packed inputs, 128 at 192) and results stay allocated
// until the first add reads a result.
// CHECK-LABEL: func.func @bucket
// CHECK: loom.gelu %arg2 {loom.offsets = array<i64: 320>}
// CHECK: loom.gelu %arg2 {loom.offsets = array<i64: 384>}
// CHECK: loom.reduce_scatter {{.*}} dim 0 sum async {loom.offsets = array<i64: 512, 576>, loom.scratch_offsets = array<i64: 448, 192>}
// CHECK: loom.gelu %arg2 {loom.offsets = array<i64: 320>}
// CHECK: loom.gelu {{.*}} {loom.offsets = array<i64: 384>}
// CHECK: loom.add %arg0, {{.*}} {loom.offsets = array<i64: 0>}

loom.mesh @mesh <dp = 2>
func.func @bucket(%acc1: tensor<2x4xf32> {loom.name = "w1", loom.role = #loom.role<grad>},
                  %acc2: tensor<2x4xf32> {loom.name = "w2", loom.role = #loom.role<grad>},
                  %x: tensor<4x4xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> (tensor<2x4xf32> {loom.updates = 0 : i64}, tensor<2x4xf32> {loom.updates = 1 : i64}, tensor<4x4xf32>)
    attributes {loom.train = {phase = "microbatch", microbatches = 2 : i64}} {
  %g1 = loom.gelu %x : tensor<4x4xf32>
  %g2 = loom.gelu %x : tensor<4x4xf32>
  %s:2 = loom.reduce_scatter %g1, %g2 on @mesh [dp] dim 0 sum async : tensor<4x4xf32>, tensor<4x4xf32> -> tensor<2x4xf32>, tensor<2x4xf32>
  %h = loom.gelu %x : tensor<4x4xf32>
  %k = loom.gelu %h : tensor<4x4xf32>
  %a1 = loom.add %acc1, %s#0 : tensor<2x4xf32>, tensor<2x4xf32>
  %a2 = loom.add %acc2, %s#1 : tensor<2x4xf32>, tensor<2x4xf32>
  return %a1, %a2, %k : tensor<2x4xf32>, tensor<2x4xf32>, tensor<4x4xf32>
}

// -----

// An all-gather bucket (ZeRO-3's prefetch of a block's parameters) sends
// this rank's shards packed (64 bytes at 448) and receives every rank's (128
// at 192): both, and the results, stay allocated while the gelus run,
// until the first add reads a result; then the second add reuses the
// gathered shards' bytes.
// CHECK-LABEL: func.func @gather_bucket
// CHECK: loom.all_gather {{.*}} async {loom.offsets = array<i64: 320, 384>, loom.scratch_offsets = array<i64: 448, 192>}
// CHECK: loom.gelu %arg2 {loom.offsets = array<i64: 512>}
// CHECK: loom.gelu {{.*}} {loom.offsets = array<i64: 576>}
// CHECK: loom.add {{.*}} {loom.offsets = array<i64: 512>}
// CHECK: loom.add {{.*}} {loom.offsets = array<i64: 192>}
loom.mesh @mesh <dp = 2>
func.func @gather_bucket(%w: tensor<2x4xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                         %b: tensor<2x4xf32> {loom.name = "b", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                         %x: tensor<4x4xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> tensor<4x4xf32> {
  %g:2 = loom.all_gather %w, %b on @mesh [dp] dim 0 async : tensor<2x4xf32>, tensor<2x4xf32> -> tensor<4x4xf32>, tensor<4x4xf32>
  %h = loom.gelu %x : tensor<4x4xf32>
  %k = loom.gelu %h : tensor<4x4xf32>
  %a = loom.add %k, %g#0 : tensor<4x4xf32>, tensor<4x4xf32>
  %c = loom.add %a, %g#1 : tensor<4x4xf32>, tensor<4x4xf32>
  return %c : tensor<4x4xf32>
}

// -----

// ZeRO-1's in-place reduce-scatter followed by a loom.wait on its result
// (--loom-schedule-comm puts one after the next block): its received-block
// scratch (32 bytes at 192) is free after the wait, and the gelu computed
// after it reuses those bytes; without the wait it would stay allocated to
// the end of the function (loom-plan-buffers-async-scatter.mlir, @in_place).
// CHECK-LABEL: func.func @in_place_waited
// CHECK: loom.reduce_scatter {{.*}} last_microbatch async {loom.offsets = array<i64: 0>, loom.scratch_offsets = array<i64: 192>}
// CHECK: loom.gelu %arg1 {loom.offsets = array<i64: 128>}
// CHECK: loom.wait
// CHECK: loom.gelu {{.*}} {loom.offsets = array<i64: 192>}
loom.mesh @mesh <dp = 2>
func.func @in_place_waited(%acc: tensor<4x4xf32> {loom.name = "w", loom.role = #loom.role<grad>},
                           %x: tensor<4x4xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> (tensor<4x4xf32> {loom.updates = 0 : i64}, tensor<4x4xf32>)
    attributes {loom.train = {phase = "microbatch", microbatches = 2 : i64}} {
  %g = loom.gelu %x : tensor<4x4xf32>
  %a = loom.add %acc, %g : tensor<4x4xf32>, tensor<4x4xf32>
  %r = loom.reduce_scatter %a on @mesh [dp] dim 0 sum last_microbatch async : tensor<4x4xf32> -> tensor<4x4xf32>
  %h = loom.gelu %x : tensor<4x4xf32>
  loom.wait %r : tensor<4x4xf32>
  %k = loom.gelu %h : tensor<4x4xf32>
  %m = loom.gelu %k : tensor<4x4xf32>
  return %r, %m : tensor<4x4xf32>, tensor<4x4xf32>
}
