// RUN: loom-opt %s | loom-opt | FileCheck %s

// Round trip of the mesh and the collectives.

// CHECK: loom.mesh @mesh <dp = 2, tp = 4, pp = 2>
loom.mesh @mesh <dp = 2, tp = 4, pp = 2>

// One all_reduce per reduction kind, over one and over two axes; `reason`
// survives the round trip.
// CHECK-LABEL: func.func @all_reduce
// CHECK-SAME: (%[[X:.*]]: tensor<4x64x768xf32>)
// CHECK: %[[S:.*]] = loom.all_reduce %[[X]] on @mesh [tp] sum {reason = "row-parallel c_proj"} : tensor<4x64x768xf32>
// CHECK: %[[MX:.*]] = loom.all_reduce %[[S]] on @mesh [dp, tp] max : tensor<4x64x768xf32>
// CHECK: %[[MN:.*]] = loom.all_reduce %[[MX]] on @mesh [dp] min : tensor<4x64x768xf32>
// CHECK: %[[A:.*]] = loom.all_reduce %[[MN]] on @mesh [pp] avg {reason = "loss mean"} : tensor<4x64x768xf32>
// CHECK: return %[[A]]
func.func @all_reduce(%x: tensor<4x64x768xf32>) -> tensor<4x64x768xf32> {
  %0 = loom.all_reduce %x on @mesh [tp] sum {reason = "row-parallel c_proj"} : tensor<4x64x768xf32>
  %1 = loom.all_reduce %0 on @mesh [dp, tp] max : tensor<4x64x768xf32>
  %2 = loom.all_reduce %1 on @mesh [dp] min : tensor<4x64x768xf32>
  %3 = loom.all_reduce %2 on @mesh [pp] avg {reason = "loss mean"} : tensor<4x64x768xf32>
  return %3 : tensor<4x64x768xf32>
}

// A gradient bucket: several values in one asynchronous all-reduce, each
// result typed like its input.
// CHECK-LABEL: func.func @all_reduce_bucket
// CHECK: %[[R:.*]]:3 = loom.all_reduce %{{.*}}, %{{.*}}, %{{.*}} on @mesh [dp] sum async {reason = "gradient bucket 0"} : tensor<768x3072xf32>, tensor<3072xf32>, tensor<f32>
// CHECK: return %[[R]]#0, %[[R]]#1, %[[R]]#2
func.func @all_reduce_bucket(%w: tensor<768x3072xf32>, %b: tensor<3072xf32>, %l: tensor<f32>) -> (tensor<768x3072xf32>, tensor<3072xf32>, tensor<f32>) {
  %0:3 = loom.all_reduce %w, %b, %l on @mesh [dp] sum async {reason = "gradient bucket 0"} : tensor<768x3072xf32>, tensor<3072xf32>, tensor<f32>
  return %0#0, %0#1, %0#2 : tensor<768x3072xf32>, tensor<3072xf32>, tensor<f32>
}

// DDP's no_sync: a micro-batch function's reduction of the accumulated
// gradients, run in the step's last micro-batch only (and a bucket of them,
// asynchronous).
// CHECK-LABEL: func.func @all_reduce_last_microbatch
// CHECK: %[[S:.*]] = loom.all_reduce %{{.*}} on @mesh [dp] sum last_microbatch {reason = "w: once per step"} : tensor<64xf32>
// CHECK: %{{.*}}:2 = loom.all_reduce %{{.*}}, %{{.*}} on @mesh [dp] sum last_microbatch async : tensor<64xf32>, tensor<8xf32>
func.func @all_reduce_last_microbatch(%acc: tensor<64xf32>, %g: tensor<64xf32>, %b: tensor<8xf32>) -> (tensor<64xf32>, tensor<64xf32>, tensor<8xf32>) attributes {loom.train = {phase = "microbatch", microbatches = 4 : i64}} {
  %sum = loom.add %acc, %g : tensor<64xf32>, tensor<64xf32>
  %0 = loom.all_reduce %sum on @mesh [dp] sum last_microbatch {reason = "w: once per step"} : tensor<64xf32>
  %sum2 = loom.add %acc, %g : tensor<64xf32>, tensor<64xf32>
  %1:2 = loom.all_reduce %sum2, %b on @mesh [dp] sum last_microbatch async : tensor<64xf32>, tensor<8xf32>
  return %0, %1#0, %1#1 : tensor<64xf32>, tensor<64xf32>, tensor<8xf32>
}

// ZeRO-1: the accumulated gradient reduce-scattered in place in the last
// micro-batch (the result keeps the input's type; a non-leading dim too;
// a bucket of them, each member in place).
// CHECK-LABEL: func.func @reduce_scatter_last_microbatch
// CHECK: loom.reduce_scatter %{{.*}} on @mesh [dp] dim 0 sum last_microbatch async {reason = "w: once per step"} : tensor<64x8xf32> -> tensor<64x8xf32>
// CHECK: loom.reduce_scatter %{{.*}} on @mesh [dp, tp] dim 1 sum last_microbatch : tensor<64x8xf32> -> tensor<64x8xf32>
// CHECK: loom.reduce_scatter %{{.*}}, %{{.*}} on @mesh [dp] dims [0, 1] sum last_microbatch async : tensor<64x8xf32>, tensor<3x8xf32> -> tensor<64x8xf32>, tensor<3x8xf32>
func.func @reduce_scatter_last_microbatch(%acc: tensor<64x8xf32>, %g: tensor<64x8xf32>, %b: tensor<3x8xf32>) -> (tensor<64x8xf32>, tensor<64x8xf32>, tensor<64x8xf32>, tensor<3x8xf32>) attributes {loom.train = {phase = "backward"}} {
  %sum = loom.add %acc, %g : tensor<64x8xf32>, tensor<64x8xf32>
  %0 = loom.reduce_scatter %sum on @mesh [dp] dim 0 sum last_microbatch async {reason = "w: once per step"} : tensor<64x8xf32> -> tensor<64x8xf32>
  %sum2 = loom.add %acc, %g : tensor<64x8xf32>, tensor<64x8xf32>
  %1 = loom.reduce_scatter %sum2 on @mesh [dp, tp] dim 1 sum last_microbatch : tensor<64x8xf32> -> tensor<64x8xf32>
  %sum3 = loom.add %acc, %g : tensor<64x8xf32>, tensor<64x8xf32>
  %sum4 = loom.add %b, %b : tensor<3x8xf32>, tensor<3x8xf32>
  %2:2 = loom.reduce_scatter %sum3, %sum4 on @mesh [dp] dims [0, 1] sum last_microbatch async : tensor<64x8xf32>, tensor<3x8xf32> -> tensor<64x8xf32>, tensor<3x8xf32>
  return %0, %1, %2#0, %2#1 : tensor<64x8xf32>, tensor<64x8xf32>, tensor<64x8xf32>, tensor<3x8xf32>
}

// The gathered dimension grows by the group size: 96 * 2 (dp) and 96 * 8 (dp, tp).
// CHECK-LABEL: func.func @all_gather
// CHECK-SAME: (%[[S:.*]]: tensor<96x3072xf32>)
// CHECK: loom.all_gather %[[S]] on @mesh [dp] dim 0 {reason = "zero-3: gather h.0.mlp.c_fc.weight for forward"} : tensor<96x3072xf32> -> tensor<192x3072xf32>
// CHECK: loom.all_gather %[[S]] on @mesh [dp, tp] dim 0 : tensor<96x3072xf32> -> tensor<768x3072xf32>
// CHECK: loom.all_gather %[[S]] on @mesh [tp] dim 1 : tensor<96x3072xf32> -> tensor<96x12288xf32>
func.func @all_gather(%s: tensor<96x3072xf32>) -> (tensor<192x3072xf32>, tensor<768x3072xf32>, tensor<96x12288xf32>) {
  %0 = loom.all_gather %s on @mesh [dp] dim 0 {reason = "zero-3: gather h.0.mlp.c_fc.weight for forward"} : tensor<96x3072xf32> -> tensor<192x3072xf32>
  %1 = loom.all_gather %s on @mesh [dp, tp] dim 0 : tensor<96x3072xf32> -> tensor<768x3072xf32>
  %2 = loom.all_gather %s on @mesh [tp] dim 1 : tensor<96x3072xf32> -> tensor<96x12288xf32>
  return %0, %1, %2 : tensor<192x3072xf32>, tensor<768x3072xf32>, tensor<96x12288xf32>
}

// CHECK-LABEL: func.func @reduce_scatter
// CHECK-SAME: (%[[G:.*]]: tensor<768x3072xf32>)
// CHECK: loom.reduce_scatter %[[G]] on @mesh [dp] dim 0 sum {reason = "zero-2 gradient"} : tensor<768x3072xf32> -> tensor<384x3072xf32>
// CHECK: loom.reduce_scatter %[[G]] on @mesh [dp, tp] dim 1 avg : tensor<768x3072xf32> -> tensor<768x384xf32>
// CHECK: loom.reduce_scatter %[[G]] on @mesh [dp] dim 0 sum async {reason = "in flight"} : tensor<768x3072xf32> -> tensor<384x3072xf32>
func.func @reduce_scatter(%g: tensor<768x3072xf32>) -> (tensor<384x3072xf32>, tensor<768x384xf32>, tensor<384x3072xf32>) {
  %0 = loom.reduce_scatter %g on @mesh [dp] dim 0 sum {reason = "zero-2 gradient"} : tensor<768x3072xf32> -> tensor<384x3072xf32>
  %1 = loom.reduce_scatter %g on @mesh [dp, tp] dim 1 avg : tensor<768x3072xf32> -> tensor<768x384xf32>
  %2 = loom.reduce_scatter %g on @mesh [dp] dim 0 sum async {reason = "in flight"} : tensor<768x3072xf32> -> tensor<384x3072xf32>
  return %0, %1, %2 : tensor<384x3072xf32>, tensor<768x384xf32>, tensor<384x3072xf32>
}

// CHECK-LABEL: func.func @all_gather_bucket
// CHECK-SAME: (%[[W:.*]]: tensor<96x3072xf32>, %[[B:.*]]: tensor<384xf32>)
// CHECK: %{{.*}}:2 = loom.all_gather %[[W]], %[[B]] on @mesh [dp] dim 0 async {reason = "all-gather bucket 0"} : tensor<96x3072xf32>, tensor<384xf32> -> tensor<192x3072xf32>, tensor<768xf32>
func.func @all_gather_bucket(%w: tensor<96x3072xf32>, %b: tensor<384xf32>) -> (tensor<192x3072xf32>, tensor<768xf32>) {
  %0:2 = loom.all_gather %w, %b on @mesh [dp] dim 0 async {reason = "all-gather bucket 0"} : tensor<96x3072xf32>, tensor<384xf32> -> tensor<192x3072xf32>, tensor<768xf32>
  return %0#0, %0#1 : tensor<192x3072xf32>, tensor<768xf32>
}

// A bucket whose members split different dimensions (GPT-2's c_attn.bias,
// [3, C], on dim 1 beside dim-0 weights): `dims`, one per input. Equal
// dims written as a list print as `dim`.
// CHECK-LABEL: func.func @all_gather_bucket_dims
// CHECK-SAME: (%[[W:.*]]: tensor<96x3072xf32>, %[[Q:.*]]: tensor<3x384xf32>)
// CHECK: %{{.*}}:2 = loom.all_gather %[[W]], %[[Q]] on @mesh [dp] dims [0, 1] async : tensor<96x3072xf32>, tensor<3x384xf32> -> tensor<192x3072xf32>, tensor<3x768xf32>
// CHECK: %{{.*}}:2 = loom.all_gather %[[W]], %[[W]] on @mesh [dp] dim 0 : tensor<96x3072xf32>, tensor<96x3072xf32> -> tensor<192x3072xf32>, tensor<192x3072xf32>
// CHECK: %{{.*}}:2 = loom.reduce_scatter %{{.*}}#0, %{{.*}}#1 on @mesh [dp] dims [0, 1] sum : tensor<192x3072xf32>, tensor<3x768xf32> -> tensor<96x3072xf32>, tensor<3x384xf32>
func.func @all_gather_bucket_dims(%w: tensor<96x3072xf32>, %q: tensor<3x384xf32>) -> (tensor<96x3072xf32>, tensor<3x384xf32>) {
  %0:2 = loom.all_gather %w, %q on @mesh [dp] dims [0, 1] async : tensor<96x3072xf32>, tensor<3x384xf32> -> tensor<192x3072xf32>, tensor<3x768xf32>
  %1:2 = loom.all_gather %w, %w on @mesh [dp] dims [0, 0] : tensor<96x3072xf32>, tensor<96x3072xf32> -> tensor<192x3072xf32>, tensor<192x3072xf32>
  %2:2 = loom.reduce_scatter %0#0, %0#1 on @mesh [dp] dims [0, 1] sum : tensor<192x3072xf32>, tensor<3x768xf32> -> tensor<96x3072xf32>, tensor<3x384xf32>
  return %2#0, %2#1 : tensor<96x3072xf32>, tensor<3x384xf32>
}

// CHECK-LABEL: func.func @wait
// CHECK: loom.wait %{{.*}}, %{{.*}} {reason = "complete"} : tensor<8xf32>, tensor<4x4xf32>
func.func @wait(%a: tensor<8xf32>, %b: tensor<4x4xf32>) {
  loom.wait %a, %b {reason = "complete"} : tensor<8xf32>, tensor<4x4xf32>
  return
}

// A bucket: one collective over several values sharing an element type.
// CHECK-LABEL: func.func @reduce_scatter_bucket
// CHECK-SAME: (%[[W:.*]]: tensor<768x3072xf32>, %[[B:.*]]: tensor<3072xf32>)
// CHECK: %{{.*}}:2 = loom.reduce_scatter %[[W]], %[[B]] on @mesh [dp] dim 0 sum async {reason = "reduce-scatter bucket 0"} : tensor<768x3072xf32>, tensor<3072xf32> -> tensor<384x3072xf32>, tensor<1536xf32>
func.func @reduce_scatter_bucket(%w: tensor<768x3072xf32>, %b: tensor<3072xf32>) -> (tensor<384x3072xf32>, tensor<1536xf32>) {
  %0:2 = loom.reduce_scatter %w, %b on @mesh [dp] dim 0 sum async {reason = "reduce-scatter bucket 0"} : tensor<768x3072xf32>, tensor<3072xf32> -> tensor<384x3072xf32>, tensor<1536xf32>
  return %0#0, %0#1 : tensor<384x3072xf32>, tensor<1536xf32>
}

// CHECK-LABEL: func.func @all_to_all
// CHECK-SAME: (%[[X:.*]]: tensor<16x64xf32>)
// CHECK: loom.all_to_all %[[X]] on @mesh [tp] split 1 concat 0 : tensor<16x64xf32> -> tensor<64x16xf32>
// CHECK: loom.all_to_all %[[X]] on @mesh [dp] split 0 concat 0 {reason = "identity shape"} : tensor<16x64xf32> -> tensor<16x64xf32>
func.func @all_to_all(%x: tensor<16x64xf32>) -> (tensor<64x16xf32>, tensor<16x64xf32>) {
  %0 = loom.all_to_all %x on @mesh [tp] split 1 concat 0 : tensor<16x64xf32> -> tensor<64x16xf32>
  %1 = loom.all_to_all %x on @mesh [dp] split 0 concat 0 {reason = "identity shape"} : tensor<16x64xf32> -> tensor<16x64xf32>
  return %0, %1 : tensor<64x16xf32>, tensor<16x64xf32>
}

// CHECK-LABEL: func.func @send_recv
// CHECK-SAME: (%[[ACT:.*]]: tensor<4x64x768xf32>)
// CHECK: loom.send %[[ACT]] to @mesh [pp] peer 1 tag 3 {reason = "stage 0 -> 1"} : tensor<4x64x768xf32>
// CHECK: %[[R:.*]] = loom.recv from @mesh [pp] peer 0 tag 3 : tensor<4x64x768xf32>
// CHECK: return %[[R]]
func.func @send_recv(%act: tensor<4x64x768xf32>) -> tensor<4x64x768xf32> {
  loom.send %act to @mesh [pp] peer 1 tag 3 {reason = "stage 0 -> 1"} : tensor<4x64x768xf32>
  %0 = loom.recv from @mesh [pp] peer 0 tag 3 : tensor<4x64x768xf32>
  return %0 : tensor<4x64x768xf32>
}
