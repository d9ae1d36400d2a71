// RUN: loom-opt --loom-plan-buffers %s | FileCheck %s

// DDP's no_sync: a last-micro-batch all-reduce (a bucket of two
// accumulators) reduces in place, so the runtime may skip it in the first
// micro-batches: the accumulations write the gradient accumulators' own
// bytes, the reduction's results are those bytes again, and only the packed
// bucket is scratch of its own.
// CHECK-LABEL: func.func @step(
// CHECK-SAME: loom.name = "w", loom.offset = [[GW:[0-9]+]] : i64, loom.role = #loom.role<grad>
// CHECK-SAME: loom.name = "b", loom.offset = [[GB:[0-9]+]] : i64, loom.role = #loom.role<grad>
// CHECK: loom.add %arg0, %arg2 {loom.offsets = array<i64: [[GW]]>}
// CHECK: loom.add %arg1, %arg3 {loom.offsets = array<i64: [[GB]]>}
// CHECK: loom.all_reduce {{.*}} last_microbatch async {loom.offsets = array<i64: [[GW]], [[GB]]>, loom.scratch_offsets = array<i64: [[SCR:[0-9]+]]>

loom.mesh @mesh <dp = 2>
func.func @step(%gw: tensor<8x16xf32> {loom.name = "w", loom.role = #loom.role<grad>},
                %gb: tensor<16xf32> {loom.name = "b", loom.role = #loom.role<grad>},
                %dw: tensor<8x16xf32> {loom.name = "dw", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                %db: tensor<16xf32> {loom.name = "db", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> (tensor<8x16xf32> {loom.updates = 0 : i64}, tensor<16xf32> {loom.updates = 1 : i64})
    attributes {loom.train = {phase = "microbatch", microbatches = 4 : i64}} {
  %sw = loom.add %gw, %dw : tensor<8x16xf32>, tensor<8x16xf32>
  %sb = loom.add %gb, %db : tensor<16xf32>, tensor<16xf32>
  %r:2 = loom.all_reduce %sw, %sb on @mesh [dp] sum last_microbatch async {reason = "bucket"} : tensor<8x16xf32>, tensor<16xf32>
  return %r#0, %r#1 : tensor<8x16xf32>, tensor<16xf32>
}
