// RUN: loom-opt --split-input-file --loom-fold-accumulation --loom-plan-buffers %s | FileCheck %s

// One micro-batch: the accumulator enters at zero, so acc + g is g. The add
// goes and g is computed straight into the accumulator's bytes: the gelu
// (a gradient computed at the top level) and the linear_grad inside a block
// (its result reaches the return through the block) write GW and GB.
// CHECK-LABEL: func.func @one_microbatch(
// CHECK-SAME: loom.name = "w", loom.offset = [[GW:[0-9]+]] : i64, loom.role = #loom.role<grad>
// CHECK-SAME: loom.name = "b", loom.offset = [[GB:[0-9]+]] : i64, loom.role = #loom.role<grad>
// CHECK-NOT: loom.add
// CHECK: loom.gelu %arg2 {loom.offsets = array<i64: [[GW]]>}
// CHECK: loom.block
// CHECK: loom.linear_grad {{.*}}loom.offsets = array<i64: {{[0-9]+}}, {{[0-9]+}}, [[GB]]>
// CHECK-NOT: loom.add
// CHECK: return
func.func @one_microbatch(%gw: tensor<8x16xf32> {loom.name = "w", loom.role = #loom.role<grad>},
                          %gb: tensor<16xf32> {loom.name = "b", loom.role = #loom.role<grad>},
                          %x: tensor<8x16xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                          %a: tensor<4x8xf32> {loom.name = "a", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                          %dy: tensor<4x16xf32> {loom.name = "dy", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> (tensor<8x16xf32> {loom.updates = 0 : i64}, tensor<16xf32> {loom.updates = 1 : i64})
    attributes {loom.train = {phase = "microbatch", microbatches = 1 : i64}} {
  %g = loom.gelu %x : tensor<8x16xf32>
  %sw = loom.add %gw, %g : tensor<8x16xf32>, tensor<8x16xf32>
  %db = loom.block "grad" (%dy, %a, %x) : (tensor<4x16xf32>, tensor<4x8xf32>, tensor<8x16xf32>) -> (tensor<16xf32>) {
  ^bb0(%bdy: tensor<4x16xf32>, %ba: tensor<4x8xf32>, %bx: tensor<8x16xf32>):
    %d:3 = loom.linear_grad %bdy, %ba, %bx : tensor<4x16xf32>, tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>
    loom.yield %d#2 : tensor<16xf32>
  }
  %sb = loom.add %db, %gb : tensor<16xf32>, tensor<16xf32>
  return %sw, %sb : tensor<8x16xf32>, tensor<16xf32>
}

// -----

// Several micro-batches: the adds are the accumulation and stay.
// CHECK-LABEL: func.func @two_microbatches(
// CHECK-SAME: loom.name = "w", loom.offset = [[GW:[0-9]+]] : i64, loom.role = #loom.role<grad>
// CHECK: loom.gelu
// CHECK: loom.add %arg0, %{{.*}} {loom.offsets = array<i64: [[GW]]>}
func.func @two_microbatches(%gw: tensor<8x16xf32> {loom.name = "w", loom.role = #loom.role<grad>},
                            %x: tensor<8x16xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> (tensor<8x16xf32> {loom.updates = 0 : i64})
    attributes {loom.train = {phase = "microbatch", microbatches = 2 : i64}} {
  %g = loom.gelu %x : tensor<8x16xf32>
  %sw = loom.add %gw, %g : tensor<8x16xf32>, tensor<8x16xf32>
  return %sw : tensor<8x16xf32>
}

// -----

// Where folding is not exact or the planner could not honour it, the add
// stays: the gradient read by another op too (also returned here: its
// storage is not the accumulator's to take), a gradient that is an
// argument, the accumulator read by another op (before the add), and one
// gradient summed into two accumulators.
// CHECK-LABEL: func.func @kept(
// CHECK: %[[G:.*]] = loom.gelu %arg4
// CHECK: loom.add %arg0, %[[G]]
// CHECK: loom.add %arg1, %arg4
// CHECK: loom.gelu %arg2
// CHECK: loom.add %arg2, %arg5
// CHECK: %[[H:.*]] = loom.gelu %arg5
// CHECK: loom.add %arg3, %[[H]]
// CHECK: loom.add %arg6, %[[H]]
func.func @kept(%g0: tensor<8xf32> {loom.name = "g0", loom.role = #loom.role<grad>},
                %g1: tensor<8xf32> {loom.name = "g1", loom.role = #loom.role<grad>},
                %g2: tensor<8xf32> {loom.name = "g2", loom.role = #loom.role<grad>},
                %g3: tensor<8xf32> {loom.name = "g3", loom.role = #loom.role<grad>},
                %x: tensor<8xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                %y: tensor<8xf32> {loom.name = "y", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                %g4: tensor<8xf32> {loom.name = "g4", loom.role = #loom.role<grad>})
    -> (tensor<8xf32> {loom.updates = 0 : i64}, tensor<8xf32> {loom.updates = 1 : i64},
        tensor<8xf32> {loom.updates = 2 : i64}, tensor<8xf32> {loom.updates = 3 : i64},
        tensor<8xf32> {loom.updates = 6 : i64}, tensor<8xf32>, tensor<8xf32>)
    attributes {loom.train = {phase = "microbatch", microbatches = 1 : i64}} {
  %g = loom.gelu %x : tensor<8xf32>
  %s0 = loom.add %g0, %g : tensor<8xf32>, tensor<8xf32>
  %s1 = loom.add %g1, %x : tensor<8xf32>, tensor<8xf32>
  %other = loom.gelu %g2 : tensor<8xf32>
  %s2 = loom.add %g2, %y : tensor<8xf32>, tensor<8xf32>
  %h = loom.gelu %y : tensor<8xf32>
  %s3 = loom.add %g3, %h : tensor<8xf32>, tensor<8xf32>
  %s4 = loom.add %g4, %h : tensor<8xf32>, tensor<8xf32>
  return %s0, %s1, %s2, %s3, %s4, %g, %other : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}
