// RUN: split-file %s %t
// RUN: loom-opt --loom-schedule-comm %t/buckets.mlir | FileCheck %s --check-prefix=BIG
// RUN: loom-opt --loom-schedule-comm=bucket-mb=0.0003 %t/buckets.mlir | FileCheck %s --check-prefix=SMALL
// RUN: loom-opt --loom-schedule-comm=bucket-mb=0 %t/buckets.mlir | FileCheck %s --check-prefix=NONE
// RUN: loom-opt --loom-schedule-comm=overlap=false %t/buckets.mlir | FileCheck %s --check-prefix=SYNC
// RUN: loom-opt --loom-schedule-comm %t/needed.mlir | FileCheck %s --check-prefix=NEEDED
// RUN: loom-opt --loom-schedule-comm %t/update.mlir | FileCheck %s --check-prefix=ONCE
// RUN: loom-opt --loom-schedule-comm %t/last.mlir | FileCheck %s --check-prefix=LAST
// RUN: loom-opt --loom-schedule-comm %t/scatter.mlir | FileCheck %s --check-prefix=SCATTER
// RUN: loom-opt --loom-schedule-comm=overlap=false %t/scatter.mlir | FileCheck %s --check-prefix=SCATTER-SYNC
// RUN: loom-opt --loom-schedule-comm %t/scatter-bucket.mlir | FileCheck %s --check-prefix=SBUCKET
// RUN: loom-opt --loom-schedule-comm=bucket-mb=0.0001 %t/scatter-bucket.mlir | FileCheck %s --check-prefix=SBUCKET-SMALL
// RUN: loom-opt --loom-schedule-comm=bucket-mb=0 %t/scatter-bucket.mlir | FileCheck %s --check-prefix=SBUCKET-NONE
// RUN: loom-opt --loom-schedule-comm=overlap=false %t/scatter-bucket.mlir | FileCheck %s --check-prefix=SBUCKET-SYNC
// RUN: loom-opt --loom-schedule-comm=overlap=false %t/scatter-bucket.mlir | loom-opt --loom-schedule-comm=overlap=false | FileCheck %s --check-prefix=SBUCKET-SYNC
// RUN: loom-opt --loom-schedule-comm %t/gather-bucket.mlir | FileCheck %s --check-prefix=GBUCKET
// RUN: loom-opt --loom-schedule-comm=bucket-mb=0 %t/gather-bucket.mlir | FileCheck %s --check-prefix=GBUCKET-NONE
// RUN: loom-opt --loom-schedule-comm=prefetch=false %t/gather-bucket.mlir | FileCheck %s --check-prefix=GBUCKET-NOPREFETCH
// RUN: loom-opt --loom-schedule-comm %t/zero1.mlir | FileCheck %s --check-prefix=ZERO1
// RUN: loom-opt --loom-schedule-comm=overlap=false %t/zero1.mlir | FileCheck %s --check-prefix=ZERO1-SYNC
// RUN: loom-opt --loom-schedule-comm=bucket-mb=0 %t/zero1.mlir | FileCheck %s --check-prefix=ZERO1-NONE
// RUN: loom-opt --loom-schedule-comm=bucket-mb=0.0003 %t/param-gathers.mlir | FileCheck %s --check-prefix=PARAMS
// RUN: loom-opt --loom-schedule-comm=bucket-mb=0 %t/param-gathers.mlir | FileCheck %s --check-prefix=PARAMS-NONE
// RUN: loom-opt --loom-schedule-comm="bucket-mb=0.0003 overlap=false" %t/param-gathers.mlir | FileCheck %s --check-prefix=PARAMS-SYNC
// RUN: not loom-opt --loom-schedule-comm=bucket-mb=-1 %t/buckets.mlir 2>&1 | FileCheck %s --check-prefix=NEG

// Three 128-byte values ready one after another, reduced (sum) only at the
// end, plus a max-reduction that cannot share their collective.
// BIG-LABEL: func.func @f
// BIG: %[[A:.*]] = loom.gelu %arg0
// BIG: %[[B:.*]] = loom.gelu %[[A]]
// BIG: %[[C:.*]] = loom.gelu %[[B]]
// BIG-NEXT: loom.all_reduce %[[C]] on @mesh [dp] max async {reason = "max, launched after c"}
// BIG-NEXT: %[[R:.*]]:3 = loom.all_reduce %[[A]], %[[B]], %[[C]] on @mesh [dp] sum async {reason = "gradient bucket 0: 3 tensors, 384 bytes, launched after c"}
// BIG: return %[[R]]#0, %[[R]]#1, %[[R]]#2

// 0.0003 MiB = 314 bytes: two values per bucket, the first bucket launched
// as soon as its second value exists, before the third is computed.
// SMALL: %[[A:.*]] = loom.gelu %arg0
// SMALL: %[[B:.*]] = loom.gelu %[[A]]
// SMALL-NEXT: loom.all_reduce %[[A]], %[[B]] on @mesh [dp] sum async {reason = "gradient bucket 0: 2 tensors, 256 bytes, launched after b"}
// SMALL-NEXT: %[[C:.*]] = loom.gelu %[[B]]
// SMALL: loom.all_reduce %[[C]] on @mesh [dp] sum async {reason = "rc, launched after c"}

// No coalescing: every all-reduce right after its value's producer.
// NONE: %[[A:.*]] = loom.gelu %arg0
// NONE-NEXT: loom.all_reduce %[[A]] on @mesh [dp] sum async {reason = "ra, launched after a"}
// NONE-NEXT: %[[B:.*]] = loom.gelu %[[A]]
// NONE-NEXT: loom.all_reduce %[[B]] on @mesh [dp] sum async {reason = "rb, launched after b"}

// SYNC-NOT: async
// SYNC: loom.all_reduce {{.*}} on @mesh [dp] sum {reason = "gradient bucket 0: 3 tensors, 384 bytes, launched after c"}

// NEG: error: loom-schedule-comm: bucket-mb must be >= 0 (0 keeps one all-reduce per value), got -1

//--- buckets.mlir
loom.mesh @mesh <dp = 2>
func.func @f(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %a = loom.gelu %x : tensor<4x8xf32> loc("a")
  %b = loom.gelu %a : tensor<4x8xf32> loc("b")
  %c = loom.gelu %b : tensor<4x8xf32> loc("c")
  %ra = loom.all_reduce %a on @mesh [dp] sum {reason = "ra"} : tensor<4x8xf32>
  %rb = loom.all_reduce %b on @mesh [dp] sum {reason = "rb"} : tensor<4x8xf32>
  %rc = loom.all_reduce %c on @mesh [dp] sum {reason = "rc"} : tensor<4x8xf32>
  %m = loom.all_reduce %c on @mesh [dp] max {reason = "max"} : tensor<4x8xf32>
  return %ra, %rb, %rc, %m : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

//--- needed.mlir
// %ra is read before %c exists: a bucket holding both would come too late
// for that reader, so the bucket closes and %c gets its own.
// NEEDED-LABEL: func.func @g
// NEEDED: loom.all_reduce %{{.*}}, %{{.*}} on @mesh [dp] sum async {reason = "gradient bucket 0: 2 tensors, 256 bytes, launched after b"}
// NEEDED: loom.add
// NEEDED: %[[C:.*]] = loom.gelu
// NEEDED-NEXT: loom.all_reduce %[[C]] on @mesh [dp] sum async {reason = "rc, launched after c"}
loom.mesh @mesh <dp = 2>
func.func @g(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %a = loom.gelu %x : tensor<4x8xf32> loc("a")
  %b = loom.gelu %a : tensor<4x8xf32> loc("b")
  %ra = loom.all_reduce %a on @mesh [dp] sum {reason = "ra"} : tensor<4x8xf32>
  %rb = loom.all_reduce %b on @mesh [dp] sum {reason = "rb"} : tensor<4x8xf32>
  %s = loom.add %ra, %rb : tensor<4x8xf32>, tensor<4x8xf32> loc("use")
  %c = loom.gelu %s : tensor<4x8xf32> loc("c")
  %rc = loom.all_reduce %c on @mesh [dp] sum {reason = "rc"} : tensor<4x8xf32>
  return %rc, %s : tensor<4x8xf32>, tensor<4x8xf32>
}

//--- update.mlir
// An optimizer update of M micro-batches' accumulated gradients (DDP,
// --loom-partition's once-per-step reductions): every input is an
// argument, ready before the first instruction, so the all-reduces go out
// as one asynchronous bucket at the top of the update and each AdamW waits
// only for it; a reduce-scatter (ZeRO-1's) goes out at the top too,
// asynchronous, in flight while the all-reduced updates compute.
// ONCE-LABEL: func.func @update
// ONCE-NEXT: loom.reduce_scatter %arg2 on @mesh [dp] dim 0 sum async {reason = "g2 block once per step, launched at the start"}
// ONCE-NEXT: %[[R:.*]]:2 = loom.all_reduce %arg0, %arg1 on @mesh [dp] sum async {reason = "gradient bucket 0: 2 tensors, 256 bytes"}
// ONCE: loom.gelu %[[R]]#0
// ONCE: loom.gelu %[[R]]#1
loom.mesh @mesh <dp = 2>
func.func @update(%g0: tensor<4x8xf32>, %g1: tensor<4x8xf32>, %g2: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<2x8xf32>) {
  %r0 = loom.all_reduce %g0 on @mesh [dp] sum {reason = "g0 once per step"} : tensor<4x8xf32>
  %r1 = loom.all_reduce %g1 on @mesh [dp] sum {reason = "g1 once per step"} : tensor<4x8xf32>
  %s2 = loom.reduce_scatter %g2 on @mesh [dp] dim 0 sum {reason = "g2 block once per step"} : tensor<4x8xf32> -> tensor<2x8xf32>
  %u0 = loom.gelu %r0 : tensor<4x8xf32>
  %u1 = loom.gelu %r1 : tensor<4x8xf32>
  return %u0, %u1, %s2 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<2x8xf32>
}

//--- last.mlir
// A DDP step's last-micro-batch reductions form buckets of their own (a
// per-micro-batch all-reduce in the same bucket would run in one
// micro-batch only), launched right after their values exist; the bucket
// keeps last_microbatch.
// LAST-LABEL: func.func @step
// LAST: %[[A:.*]] = loom.add %arg0, %{{.*}}
// LAST: %[[B:.*]] = loom.add %arg1, %{{.*}}
// LAST-NEXT: %[[R:.*]]:2 = loom.all_reduce %[[A]], %[[B]] on @mesh [dp] sum last_microbatch async {reason = "gradient bucket 1: 2 tensors, 256 bytes, in the last micro-batch, launched after gb"}
// LAST-NEXT: %[[L:.*]] = loom.gelu
// LAST: loom.all_reduce %{{.*}} on @mesh [dp] sum async {reason = "loss, launched after l"}
// LAST: return %[[R]]#0, %[[R]]#1
loom.mesh @mesh <dp = 2>
func.func @step(%ga: tensor<4x8xf32>, %gb: tensor<4x8xf32>, %x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>)
    attributes {loom.train = {phase = "microbatch", microbatches = 2 : i64}} {
  %a = loom.add %ga, %x : tensor<4x8xf32>, tensor<4x8xf32> loc("ga")
  %b = loom.add %gb, %x : tensor<4x8xf32>, tensor<4x8xf32> loc("gb")
  %l = loom.gelu %x : tensor<4x8xf32> loc("l")
  %rl = loom.all_reduce %l on @mesh [dp] sum {reason = "loss"} : tensor<4x8xf32>
  %ra = loom.all_reduce %a on @mesh [dp] sum last_microbatch {reason = "ra"} : tensor<4x8xf32>
  %rb = loom.all_reduce %b on @mesh [dp] sum last_microbatch {reason = "rb"} : tensor<4x8xf32>
  return %ra, %rb, %rl : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

//--- scatter.mlir
// ZeRO-2/3 (FSDP): each block's gradient is reduce-scattered into a sharded
// accumulator. The partitioner leaves the reduce-scatters and accumulations
// after the last block, every whole gradient alive until then; here each
// reduce-scatter goes out right after its block, asynchronous, and its
// accumulation follows the next block, while which it travels.
// SCATTER-LABEL: func.func @backward
// SCATTER: %[[G1:.*]] = loom.block "h.1.grad"
// SCATTER: %[[S1:.*]] = loom.reduce_scatter %[[G1]] on @mesh [dp] dim 0 sum async {reason = "h.1 gradient, launched after h.1.grad"} : tensor<4x8xf32> -> tensor<2x8xf32>
// SCATTER-NEXT: %[[G0:.*]] = loom.block "h.0.grad"
// SCATTER: %[[S0:.*]] = loom.reduce_scatter %[[G0]] on @mesh [dp] dim 1 sum async {reason = "h.0 gradient, launched after h.0.grad"} : tensor<4x8xf32> -> tensor<4x4xf32>
// SCATTER-NEXT: %[[A1:.*]] = loom.add %arg1, %[[S1]]
// SCATTER-NEXT: %[[A0:.*]] = loom.add %arg0, %[[S0]]
// SCATTER-NEXT: return %[[A0]], %[[A1]]
// Without overlap: placed the same, synchronous.
// SCATTER-SYNC-NOT: async
// SCATTER-SYNC: loom.reduce_scatter %{{.*}} on @mesh [dp] dim 0 sum {reason = "h.1 gradient"}
// SCATTER-SYNC-NEXT: loom.block "h.0.grad"
loom.mesh @mesh <dp = 2>
func.func @backward(%acc0: tensor<4x4xf32>, %acc1: tensor<2x8xf32>, %x: tensor<4x8xf32>) -> (tensor<4x4xf32>, tensor<2x8xf32>)
    attributes {loom.train = {phase = "microbatch", microbatches = 2 : i64}} {
  %g1 = loom.block "h.1.grad"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %y = loom.gelu %a : tensor<4x8xf32>
    loom.yield %y : tensor<4x8xf32>
  }
  %g0 = loom.block "h.0.grad"(%g1) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %y = loom.gelu %a : tensor<4x8xf32>
    loom.yield %y : tensor<4x8xf32>
  }
  %s0 = loom.reduce_scatter %g0 on @mesh [dp] dim 1 sum {reason = "h.0 gradient"} : tensor<4x8xf32> -> tensor<4x4xf32>
  %a0 = loom.add %acc0, %s0 : tensor<4x4xf32>, tensor<4x4xf32>
  %s1 = loom.reduce_scatter %g1 on @mesh [dp] dim 0 sum {reason = "h.1 gradient"} : tensor<4x8xf32> -> tensor<2x8xf32>
  %a1 = loom.add %acc1, %s1 : tensor<2x8xf32>, tensor<2x8xf32>
  return %a0, %a1 : tensor<4x4xf32>, tensor<2x8xf32>
}

//--- scatter-bucket.mlir
// ZeRO-2/3 buckets (FSDP reduce-scatters a block's flat gradient at once):
// the reduce-scatters launched behind one block with the same axes,
// reduction and element type become one collective, each member split on
// its own dimension (here w and b on dim 0, w2 on dim 1, as GPT-2's
// c_attn.bias is: dims [0, 0, 1], 288 bytes); w3, a bf16 gradient, goes
// alone. Each accumulation reads its own result behind the next block.
// bucket-mb bounds a bucket's input bytes (0.0001 MiB = 104 bytes: each
// alone); 0 keeps one per value.
// SBUCKET-LABEL: func.func @backward
// SBUCKET: %[[G:.*]]:4 = loom.block "h.1.grad"
// SBUCKET: %[[S:.*]]:3 = loom.reduce_scatter %[[G]]#0, %[[G]]#1, %[[G]]#2 on @mesh [dp] dims [0, 0, 1] sum async {reason = "reduce-scatter bucket 0: 3 gradients, 288 bytes, launched after h.1.grad"} : tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32> -> tensor<2x8xf32>, tensor<4xf32>, tensor<4x4xf32>
// SBUCKET-NEXT: %[[S3:.*]] = loom.reduce_scatter %[[G]]#3 on @mesh [dp] dim 1 sum async {reason = "w3 gradient, launched after h.1.grad"}
// SBUCKET-NEXT: loom.block "h.0.grad"
// SBUCKET: loom.add %arg0, %[[S]]#0
// SBUCKET-NEXT: loom.add %arg1, %[[S]]#1
// SBUCKET-NEXT: loom.add %arg2, %[[S]]#2
// SBUCKET-NEXT: loom.add %arg3, %[[S3]]
// SBUCKET-SMALL-COUNT-4: loom.reduce_scatter %{{[^,]*}} on
// SBUCKET-SMALL-NOT: reduce_scatter
// SBUCKET-NONE-COUNT-4: loom.reduce_scatter %{{[^,]*}} on
// SBUCKET-NONE-NOT: reduce_scatter
// Without overlap: the same bucket, blocking; a second run leaves it.
// SBUCKET-SYNC: loom.reduce_scatter %{{.*}}#0, %{{.*}}#1, %{{.*}}#2 on @mesh [dp] dims [0, 0, 1] sum {reason = "reduce-scatter bucket 0: 3 gradients, 288 bytes, launched after h.1.grad"}
// SBUCKET-SYNC-NOT: reduce-scatter bucket 1
loom.mesh @mesh <dp = 2>
func.func @backward(%accw: tensor<2x8xf32>, %accb: tensor<4xf32>, %accw2: tensor<4x4xf32>, %accw3: tensor<4x4xbf16>, %x: tensor<4x8xf32>) -> (tensor<2x8xf32>, tensor<4xf32>, tensor<4x4xf32>, tensor<4x4xbf16>, tensor<4x8xf32>)
    attributes {loom.train = {phase = "microbatch", microbatches = 2 : i64}} {
  %g:4 = loom.block "h.1.grad"(%x) : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xbf16>) {
  ^bb0(%a: tensor<4x8xf32>):
    %y = loom.gelu %a : tensor<4x8xf32>
    %c = loom.fill 1.0 : tensor<8xf32>
    %h = loom.cast %y : tensor<4x8xf32> -> tensor<4x8xbf16>
    loom.yield %y, %c, %y, %h : tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>, tensor<4x8xbf16>
  }
  %h = loom.block "h.0.grad"(%g#0) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %y = loom.gelu %a : tensor<4x8xf32>
    loom.yield %y : tensor<4x8xf32>
  }
  %sw = loom.reduce_scatter %g#0 on @mesh [dp] dim 0 sum {reason = "w gradient"} : tensor<4x8xf32> -> tensor<2x8xf32>
  %aw = loom.add %accw, %sw : tensor<2x8xf32>, tensor<2x8xf32>
  %sb = loom.reduce_scatter %g#1 on @mesh [dp] dim 0 sum {reason = "b gradient"} : tensor<8xf32> -> tensor<4xf32>
  %ab = loom.add %accb, %sb : tensor<4xf32>, tensor<4xf32>
  %sw2 = loom.reduce_scatter %g#2 on @mesh [dp] dim 1 sum {reason = "w2 gradient"} : tensor<4x8xf32> -> tensor<4x4xf32>
  %aw2 = loom.add %accw2, %sw2 : tensor<4x4xf32>, tensor<4x4xf32>
  %sw3 = loom.reduce_scatter %g#3 on @mesh [dp] dim 1 sum {reason = "w3 gradient"} : tensor<4x8xbf16> -> tensor<4x4xbf16>
  %aw3 = loom.add %accw3, %sw3 : tensor<4x4xbf16>, tensor<4x4xbf16>
  return %aw, %ab, %aw2, %aw3, %h : tensor<2x8xf32>, tensor<4xf32>, tensor<4x4xf32>, tensor<4x4xbf16>, tensor<4x8xf32>
}

//--- gather-bucket.mlir
// ZeRO-3 prefetch buckets (FSDP gathers a block's flat parameter at once):
// h.1's gathers of its parameters move before h.0, asynchronous, and those
// with the same axes and element type become one collective, each along
// its own dimension (w and b on dim 0, w2 on dim 1: dims [0, 0, 1], 160
// gathered bytes). With bucket-mb 0 each goes alone; without prefetch they
// stay in h.1, bucketed the same at its start (blocking: its first ops
// need them).
// GBUCKET-LABEL: func.func @forward
// GBUCKET: %[[G:.*]]:3 = loom.all_gather %arg0, %arg1, %arg2 on @mesh [dp] dims [0, 0, 1] async {reason = "all-gather bucket 0: 3 parameters, 160 bytes, prefetched during h.0"} : tensor<2x4xf32>, tensor<4xf32>, tensor<4x2xf32> -> tensor<4x4xf32>, tensor<8xf32>, tensor<4x4xf32>
// GBUCKET-NEXT: loom.block "h.0"
// GBUCKET: loom.block "h.1"({{.*}}%[[G]]#0, %[[G]]#1, %[[G]]#2)
// GBUCKET-NOT: loom.all_gather
// GBUCKET-NONE-COUNT-3: loom.all_gather %{{[^,]*}} on
// GBUCKET-NONE-NEXT: loom.block "h.0"
// GBUCKET-NONE-NOT: loom.all_gather
// GBUCKET-NOPREFETCH: loom.block "h.0"
// GBUCKET-NOPREFETCH: loom.block "h.1"
// GBUCKET-NOPREFETCH-NEXT: ^bb0
// GBUCKET-NOPREFETCH-NEXT: loom.all_gather %{{.*}}, %{{.*}}, %{{.*}} on @mesh [dp] dims [0, 0, 1] {reason = "all-gather bucket 0: 3 parameters, 160 bytes, at the start of h.1"}
// GBUCKET-NOPREFETCH-NEXT: loom.add
loom.mesh @mesh <dp = 2>
func.func @forward(%w: tensor<2x4xf32>, %b: tensor<4xf32>, %w2: tensor<4x2xf32>, %x: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<8xf32>) {
  %h0 = loom.block "h.0"(%x) : (tensor<4x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<4x4xf32>):
    %y = loom.gelu %a : tensor<4x4xf32>
    loom.yield %y : tensor<4x4xf32>
  }
  %h1:2 = loom.block "h.1"(%h0, %w, %b, %w2) : (tensor<4x4xf32>, tensor<2x4xf32>, tensor<4xf32>, tensor<4x2xf32>) -> (tensor<4x4xf32>, tensor<8xf32>) {
  ^bb0(%a: tensor<4x4xf32>, %sw: tensor<2x4xf32>, %sb: tensor<4xf32>, %sw2: tensor<4x2xf32>):
    %fw = loom.all_gather %sw on @mesh [dp] dim 0 {reason = "w"} : tensor<2x4xf32> -> tensor<4x4xf32>
    %fb = loom.all_gather %sb on @mesh [dp] dim 0 {reason = "b"} : tensor<4xf32> -> tensor<8xf32>
    %fw2 = loom.all_gather %sw2 on @mesh [dp] dim 1 {reason = "w2"} : tensor<4x2xf32> -> tensor<4x4xf32>
    %y = loom.add %a, %fw : tensor<4x4xf32>, tensor<4x4xf32>
    %z = loom.add %y, %fw2 : tensor<4x4xf32>, tensor<4x4xf32>
    loom.yield %z, %fb : tensor<4x4xf32>, tensor<8xf32>
  }
  return %h1#0, %h1#1 : tensor<4x4xf32>, tensor<8xf32>
}

//--- zero1.mlir
// ZeRO-1: the partitioner puts each accumulated gradient's in-place
// last-micro-batch reduce-scatter right behind its accumulation. Those
// completing after the same block share a bucket (Megatron's distributed
// optimizer reduce-scatters its gradient buffer a bucket at a time; here
// h.1's two, split on dims 1 and 0), in its last member's place, reducing
// each member in place; it is launched asynchronously, so the next block's
// backward runs while it travels, and a loom.wait after that block
// completes it there (its scratch free from then on, not kept to the end
// of the backward). The last one, with no block after it, completes at
// the end. bucket-mb 0 keeps one per gradient.
// ZERO1-LABEL: func.func @backward
// ZERO1: %[[G1:.*]]:2 = loom.block "h.1.grad"
// ZERO1: %[[A1:.*]] = loom.add %arg1, %[[G1]]#0
// ZERO1-NEXT: %[[B1:.*]] = loom.add %arg2, %[[G1]]#1
// ZERO1-NEXT: %[[R1:.*]]:2 = loom.reduce_scatter %[[A1]], %[[B1]] on @mesh [dp] dims [1, 0] sum last_microbatch async {reason = "reduce-scatter bucket 0: 2 gradients, 160 bytes, in place in the last micro-batch, launched after loom.add"} : tensor<4x8xf32>, tensor<8xf32> -> tensor<4x8xf32>, tensor<8xf32>
// ZERO1-NEXT: loom.block "h.0.grad"
// ZERO1: loom.yield
// ZERO1-NEXT: }
// ZERO1-NEXT: loom.wait %[[R1]]#0, %[[R1]]#1 {reason = "2 gradients reduce-scattered in place, complete after h.0.grad"} : tensor<4x8xf32>, tensor<8xf32>
// ZERO1: loom.reduce_scatter %{{.*}} on @mesh [dp] dim 1 sum last_microbatch async {reason = "h.0 gradient, launched after its accumulation"}
// ZERO1-NOT: loom.wait
// ZERO1: return %{{.*}}, %[[R1]]#0, %[[R1]]#1
// Without overlap: the same bucket, synchronous (complete where it
// starts: no wait).
// ZERO1-SYNC: loom.reduce_scatter %{{.*}}, %{{.*}} on @mesh [dp] dims [1, 0] sum last_microbatch {reason = "reduce-scatter bucket 0: 2 gradients
// ZERO1-SYNC-NOT: async
// ZERO1-SYNC-NOT: loom.wait
// ZERO1-NONE-COUNT-3: loom.reduce_scatter %{{[^,]*}} on @mesh [dp] dim {{[01]}} sum last_microbatch async {reason = "h.
loom.mesh @mesh <dp = 2>
func.func @backward(%acc0: tensor<4x8xf32>, %acc1: tensor<4x8xf32>, %acc1b: tensor<8xf32>, %x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>)
    attributes {loom.train = {phase = "microbatch", microbatches = 2 : i64}} {
  %g1:2 = loom.block "h.1.grad"(%x) : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>) {
  ^bb0(%a: tensor<4x8xf32>):
    %y = loom.gelu %a : tensor<4x8xf32>
    %c = loom.fill 1.0 : tensor<8xf32>
    loom.yield %y, %c : tensor<4x8xf32>, tensor<8xf32>
  }
  %a1 = loom.add %acc1, %g1#0 : tensor<4x8xf32>, tensor<4x8xf32>
  %r1 = loom.reduce_scatter %a1 on @mesh [dp] dim 1 sum last_microbatch {reason = "h.1 gradient"} : tensor<4x8xf32> -> tensor<4x8xf32>
  %b1 = loom.add %acc1b, %g1#1 : tensor<8xf32>, tensor<8xf32>
  %r1b = loom.reduce_scatter %b1 on @mesh [dp] dim 0 sum last_microbatch {reason = "h.1 bias gradient"} : tensor<8xf32> -> tensor<8xf32>
  %g0 = loom.block "h.0.grad"(%g1#0) : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %y = loom.gelu %a : tensor<4x8xf32>
    loom.yield %y : tensor<4x8xf32>
  }
  %a0 = loom.add %acc0, %g0 : tensor<4x8xf32>, tensor<4x8xf32>
  %r0 = loom.reduce_scatter %a0 on @mesh [dp] dim 1 sum last_microbatch {reason = "h.0 gradient"} : tensor<4x8xf32> -> tensor<4x8xf32>
  return %r0, %r1, %r1b : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>
}

//--- param-gathers.mlir
// ZeRO-1/2's update: each rank steps its shard of every parameter, and the
// partitioner gathers the updated shards before the return, one blocking
// collective each. Those whose result updates an argument in place
// (loom.updates: the parameter's storage) move right behind their shard's
// producer, async, and share buckets (bucket-mb 0.0003 MiB = 314 bytes:
// two 128-byte parameters each, p2 along dim 1 beside p1 along dim 0),
// each launched behind its last member; a loom.wait behind the second
// bucket completes the first (at most two in flight); the last completes
// at the end. %g4 updates nothing in place and stays where it was.
// PARAMS-LABEL: func.func @update
// PARAMS: loom.local_slice %arg1
// PARAMS-NEXT: %[[N1:.*]] = loom.gelu
// PARAMS-NEXT: %[[B0:.*]]:2 = loom.all_gather %{{.*}}, %[[N1]] on @mesh [dp] dim 0 async {reason = "all-gather bucket 0: 2 parameters, 256 bytes, updated, launched after loom.gelu"} : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<4x8xf32>, tensor<4x8xf32>
// PARAMS: loom.local_slice %arg3
// PARAMS-NEXT: %[[N3:.*]] = loom.gelu
// PARAMS-NEXT: %[[B1:.*]]:2 = loom.all_gather %{{.*}}, %[[N3]] on @mesh [dp] dims [1, 0] async {reason = "all-gather bucket 1: 2 parameters, 256 bytes, updated, launched after loom.gelu"} : tensor<8x2xf32>, tensor<2x8xf32> -> tensor<8x4xf32>, tensor<4x8xf32>
// PARAMS-NEXT: loom.wait %[[B0]]#0, %[[B0]]#1 {reason = "updated parameters gathered by the previous bucket, complete after the next is launched"}
// PARAMS-NEXT: loom.local_slice %arg4
// PARAMS-NEXT: loom.gelu
// PARAMS-NEXT: %[[G4:.*]] = loom.all_gather %{{.*}} on @mesh [dp] dim 0 {reason = "p4"}
// PARAMS-NEXT: return %[[B0]]#0, %[[B0]]#1, %[[B1]]#0, %[[B1]]#1, %[[G4]]
// With bucket-mb 0: each moved behind its producer, async, alone; no wait.
// PARAMS-NONE-LABEL: func.func @update
// PARAMS-NONE: loom.local_slice %arg0
// PARAMS-NONE-NEXT: loom.gelu
// PARAMS-NONE-NEXT: loom.all_gather %{{.*}} on @mesh [dp] dim 0 async {reason = "p0, launched after loom.gelu"}
// PARAMS-NONE-NEXT: loom.local_slice %arg1
// PARAMS-NONE-COUNT-3: loom.all_gather %{{[^,]*}} on @mesh [dp] dim{{.*}} async
// PARAMS-NONE-NOT: loom.wait
// PARAMS-NONE: loom.all_gather %{{.*}} {reason = "p4"}
// Without overlap: the same buckets, blocking, nothing to wait for.
// PARAMS-SYNC: loom.all_gather %{{.*}}, %{{.*}} on @mesh [dp] dim 0 {reason = "all-gather bucket 0: 2 parameters
// PARAMS-SYNC: loom.all_gather %{{.*}}, %{{.*}} on @mesh [dp] dims [1, 0] {reason = "all-gather bucket 1: 2 parameters
// PARAMS-SYNC-NOT: loom.wait
loom.mesh @mesh <dp = 2>
func.func @update(%p0: tensor<4x8xf32>, %p1: tensor<4x8xf32>, %p2: tensor<8x4xf32>, %p3: tensor<4x8xf32>, %p4: tensor<4x8xf32>)
    -> (tensor<4x8xf32> {loom.updates = 0 : i64}, tensor<4x8xf32> {loom.updates = 1 : i64}, tensor<8x4xf32> {loom.updates = 2 : i64}, tensor<4x8xf32> {loom.updates = 3 : i64}, tensor<4x8xf32>)
    attributes {loom.train = {phase = "update"}} {
  %s0 = loom.local_slice %p0 on @mesh [dp] dim 0 : tensor<4x8xf32> -> tensor<2x8xf32>
  %n0 = loom.gelu %s0 : tensor<2x8xf32>
  %s1 = loom.local_slice %p1 on @mesh [dp] dim 0 : tensor<4x8xf32> -> tensor<2x8xf32>
  %n1 = loom.gelu %s1 : tensor<2x8xf32>
  %s2 = loom.local_slice %p2 on @mesh [dp] dim 1 : tensor<8x4xf32> -> tensor<8x2xf32>
  %n2 = loom.gelu %s2 : tensor<8x2xf32>
  %s3 = loom.local_slice %p3 on @mesh [dp] dim 0 : tensor<4x8xf32> -> tensor<2x8xf32>
  %n3 = loom.gelu %s3 : tensor<2x8xf32>
  %s4 = loom.local_slice %p4 on @mesh [dp] dim 0 : tensor<4x8xf32> -> tensor<2x8xf32>
  %n4 = loom.gelu %s4 : tensor<2x8xf32>
  %g0 = loom.all_gather %n0 on @mesh [dp] dim 0 {reason = "p0"} : tensor<2x8xf32> -> tensor<4x8xf32>
  %g1 = loom.all_gather %n1 on @mesh [dp] dim 0 {reason = "p1"} : tensor<2x8xf32> -> tensor<4x8xf32>
  %g2 = loom.all_gather %n2 on @mesh [dp] dim 1 {reason = "p2"} : tensor<8x2xf32> -> tensor<8x4xf32>
  %g3 = loom.all_gather %n3 on @mesh [dp] dim 0 {reason = "p3"} : tensor<2x8xf32> -> tensor<4x8xf32>
  %g4 = loom.all_gather %n4 on @mesh [dp] dim 0 {reason = "p4"} : tensor<2x8xf32> -> tensor<4x8xf32>
  return %g0, %g1, %g2, %g3, %g4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
