// RUN: loom-opt --loom-plan-buffers %s | FileCheck %s

// An asynchronous reduce-scatter sends from its input (and, for a
// non-leading split, from its packed copy in scratch) until it completes,
// before the first reader of its shard: the planner keeps both allocated
// until then, so nothing computed in between (the next block's backward)
// lands on their bytes. %g (64 bytes at 128) and the pack (64 at 192) stay
// apart from %h, which the gelu writes while the scatter is in flight (at
// 256); in a synchronous one the pack (at 192) lives for the scatter alone
// and %h reuses %g's bytes.
// CHECK-LABEL: func.func @in_flight
// CHECK: loom.gelu %arg1 {loom.offsets = array<i64: 128>}
// CHECK: loom.reduce_scatter {{.*}} dim 1 sum async {loom.offsets = array<i64: 320>, loom.scratch_offsets = array<i64: 192>}
// CHECK: loom.gelu %arg1 {loom.offsets = array<i64: 256>}
// CHECK: loom.add %arg0, {{.*}} {loom.offsets = array<i64: 0>}
// CHECK-LABEL: func.func @synchronous
// CHECK: loom.gelu %arg1 {loom.offsets = array<i64: 128>}
// CHECK: loom.reduce_scatter {{.*}} dim 1 sum {loom.offsets = array<i64: 256>, loom.scratch_offsets = array<i64: 192>}
// CHECK: loom.gelu %arg1 {loom.offsets = array<i64: 128>}

// ZeRO-1's in-place last-micro-batch reduce-scatter of an accumulation: its
// result is the accumulator's storage (offset 0, as the add's), and its two
// scratch buffers (the received block, 32 bytes at 320; the packed input of
// dim 1, 64 at 128, over the dead %g) stay allocated to the end of the
// function (nothing reads the result there; the runtime completes it at the
// end of the list), apart from what the gelus write while it is in flight
// (192, 256).
// CHECK-LABEL: func.func @in_place
// CHECK: loom.add %arg0, {{.*}} {loom.offsets = array<i64: 0>}
// CHECK: loom.reduce_scatter {{.*}} last_microbatch async {loom.offsets = array<i64: 0>, loom.scratch_offsets = array<i64: 320, 128>}
// CHECK: loom.gelu %arg1 {loom.offsets = array<i64: 192>}
// CHECK: loom.gelu {{.*}} {loom.offsets = array<i64: 256>}

loom.mesh @mesh <dp = 2>
func.func @in_flight(%acc: tensor<4x2xf32> {loom.name = "w", loom.role = #loom.role<grad>},
                     %x: tensor<4x4xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> (tensor<4x2xf32> {loom.updates = 0 : i64}, tensor<4x4xf32>)
    attributes {loom.train = {phase = "microbatch", microbatches = 2 : i64}} {
  %g = loom.gelu %x : tensor<4x4xf32>
  %s = loom.reduce_scatter %g on @mesh [dp] dim 1 sum async : tensor<4x4xf32> -> tensor<4x2xf32>
  %h = loom.gelu %x : tensor<4x4xf32>
  %a = loom.add %acc, %s : tensor<4x2xf32>, tensor<4x2xf32>
  return %a, %h : tensor<4x2xf32>, tensor<4x4xf32>
}

func.func @synchronous(%acc: tensor<4x2xf32> {loom.name = "w", loom.role = #loom.role<grad>},
                       %x: tensor<4x4xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> (tensor<4x2xf32> {loom.updates = 0 : i64}, tensor<4x4xf32>)
    attributes {loom.train = {phase = "microbatch", microbatches = 2 : i64}} {
  %g = loom.gelu %x : tensor<4x4xf32>
  %s = loom.reduce_scatter %g on @mesh [dp] dim 1 sum : tensor<4x4xf32> -> tensor<4x2xf32>
  %h = loom.gelu %x : tensor<4x4xf32>
  %a = loom.add %acc, %s : tensor<4x2xf32>, tensor<4x2xf32>
  return %a, %h : tensor<4x2xf32>, tensor<4x4xf32>
}

func.func @in_place(%acc: tensor<4x4xf32> {loom.name = "w", loom.role = #loom.role<grad>},
                    %x: tensor<4x4xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> (tensor<4x4xf32> {loom.updates = 0 : i64}, tensor<4x4xf32>)
    attributes {loom.train = {phase = "microbatch", microbatches = 2 : i64}} {
  %g = loom.gelu %x : tensor<4x4xf32>
  %a = loom.add %acc, %g : tensor<4x4xf32>, tensor<4x4xf32>
  %r = loom.reduce_scatter %a on @mesh [dp] dim 1 sum last_microbatch async : tensor<4x4xf32> -> tensor<4x4xf32>
  %h = loom.gelu %x : tensor<4x4xf32>
  %k = loom.gelu %h : tensor<4x4xf32>
  return %r, %k : tensor<4x4xf32>, tensor<4x4xf32>
}
