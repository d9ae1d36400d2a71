// RUN: loom-opt --loom-propagate --loom-partition -split-input-file %s | FileCheck %s

// A whole value meets an op whose result is split: the partitioner takes
// this rank's block (no traffic) and shrinks the shapes.
loom.mesh @mesh <dp = 2>
// CHECK-LABEL: func.func @slice_for_shards(
// CHECK-SAME: %[[X:.*]]: tensor<8x4xf32>
func.func @slice_for_shards(%x: tensor<8x4xf32> {loom.sharding = #loom.sharding<@mesh, [[], []]>}) -> tensor<8x4xf32> {
  // CHECK: %[[S:.*]] = loom.local_slice %[[X]] on @mesh [dp] dim 0 {reason = "this rank's block of argument #0 for loom.gelu"} : tensor<8x4xf32> -> tensor<4x4xf32>
  // CHECK: %[[G:.*]] = loom.gelu %[[S]] : tensor<4x4xf32>
  %g = loom.gelu %x {loom.shardings = [#loom.sharding<@mesh, [[dp], []]>]} : tensor<8x4xf32>
  // The result is returned whole: gathered back.
  // CHECK: %[[W:.*]] = loom.all_gather %[[G]] on @mesh [dp] dim 0 {reason = "gather dimension 0 of loom.gelu for func.return"} : tensor<4x4xf32> -> tensor<8x4xf32>
  // CHECK: return %[[W]] : tensor<8x4xf32>
  return %g : tensor<8x4xf32>
}

// -----

// Partial sums meeting a consumer split over the same axes are reduced and
// split in one reduce-scatter (ZeRO-2's gradient path).
loom.mesh @mesh <dp = 2>
// CHECK-LABEL: func.func @reduce_scatter(
func.func @reduce_scatter(%dy: tensor<4x8xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], []]>},
                          %x: tensor<4x6xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], []]>},
                          %w: tensor<6x8xf32>,
                          %acc: tensor<6x8xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], []]>}) -> tensor<6x8xf32> {
  // CHECK: %{{.*}}, %[[DW:.*]] = loom.linear_grad {{.*}} -> tensor<2x6xf32>, tensor<6x8xf32>
  %dx, %dw = loom.linear_grad %dy, %x, %w : tensor<4x8xf32>, tensor<4x6xf32>, tensor<6x8xf32> -> tensor<4x6xf32>, tensor<6x8xf32>
  // CHECK: %[[RS:.*]] = loom.reduce_scatter %[[DW]] on @mesh [dp] dim 0 sum {reason = "partial sum over [dp] of loom.linear_grad, reduced and split for loom.add"} : tensor<6x8xf32> -> tensor<3x8xf32>
  // CHECK: loom.add %{{.*}}, %[[RS]] : tensor<3x8xf32>, tensor<3x8xf32>
  %sum = loom.add %acc, %dw : tensor<6x8xf32>, tensor<6x8xf32>
  return %sum : tensor<6x8xf32>
}

// -----

// Partial sums over [dp, tp] into a shard on dp (a sequence-parallel layer
// norm's gradient into its ZeRO-2 accumulator): reduce-scattered over dp,
// then the smaller shard all-reduced over tp.
loom.mesh @mesh <dp = 2, tp = 2>
// CHECK-LABEL: func.func @reduce_scatter_some(
func.func @reduce_scatter_some(%dy: tensor<4x8x6xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], [tp], []]>},
                               %x: tensor<4x8x6xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], [tp], []]>},
                               %g: tensor<6xf32>,
                               %acc: tensor<6xf32> {loom.sharding = #loom.sharding<@mesh, [[dp]]>}) -> tensor<6xf32> {
  // CHECK: %{{.*}}, %[[DG:.*]], %{{.*}} = loom.layer_norm_grad {{.*}} -> tensor<2x4x6xf32>, tensor<6xf32>, tensor<6xf32>
  %dx, %dg, %db = loom.layer_norm_grad %dy, %x, %g : tensor<4x8x6xf32>, tensor<4x8x6xf32>, tensor<6xf32> -> tensor<4x8x6xf32>, tensor<6xf32>, tensor<6xf32>
  // CHECK: %[[RS:.*]] = loom.reduce_scatter %[[DG]] on @mesh [dp] dim 0 sum {reason = "partial sum over [dp] of loom.layer_norm_grad, reduced and split for loom.add"} : tensor<6xf32> -> tensor<3xf32>
  // CHECK: %[[AR:.*]] = loom.all_reduce %[[RS]] on @mesh [tp] sum {reason = "partial sum over [tp] of loom.reduce_scatter, reduced for loom.add"} : tensor<3xf32>
  // CHECK: loom.add %{{.*}}, %[[AR]] : tensor<3xf32>, tensor<3xf32>
  %sum = loom.add %acc, %dg : tensor<6xf32>, tensor<6xf32>
  return %sum : tensor<6xf32>
}

// -----

// Partial sums over dp meeting a consumer split over tp: this rank's block
// is taken first (no traffic), and only it is all-reduced.
loom.mesh @mesh <dp = 2, tp = 2>
// CHECK-LABEL: func.func @slice_before_reduce(
func.func @slice_before_reduce(%dy: tensor<4x8xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], []]>},
                               %x: tensor<4x6xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], []]>},
                               %w: tensor<6x8xf32>,
                               %acc: tensor<6x8xf32> {loom.sharding = #loom.sharding<@mesh, [[tp], []]>}) -> tensor<6x8xf32> {
  // CHECK: %{{.*}}, %[[DW:.*]] = loom.linear_grad {{.*}} -> tensor<2x6xf32>, tensor<6x8xf32>
  %dx, %dw = loom.linear_grad %dy, %x, %w : tensor<4x8xf32>, tensor<4x6xf32>, tensor<6x8xf32> -> tensor<4x6xf32>, tensor<6x8xf32>
  // CHECK: %[[S:.*]] = loom.local_slice %[[DW]] on @mesh [tp] dim 0 {reason = "this rank's block of loom.linear_grad for loom.add, before reducing it"} : tensor<6x8xf32> -> tensor<3x8xf32>
  // CHECK: %[[AR:.*]] = loom.all_reduce %[[S]] on @mesh [dp] sum {{.*}} : tensor<3x8xf32>
  // CHECK: loom.add %{{.*}}, %[[AR]] : tensor<3x8xf32>, tensor<3x8xf32>
  %sum = loom.add %acc, %dw : tensor<6x8xf32>, tensor<6x8xf32>
  return %sum : tensor<6x8xf32>
}

// -----

// A sum of two partial sums over dp, one whole along dimension 0 and one
// split there over tp (the tied wte's embedding and LM-head gradients with
// tensor parallelism): the whole one's tp block is taken (no traffic), the
// blocks are added, and their sum is all-reduced once.
loom.mesh @mesh <dp = 2, tp = 2>
// CHECK-LABEL: func.func @sum_before_reduce(
func.func @sum_before_reduce(%dy: tensor<4x8xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], []]>},
                             %x: tensor<4x6xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], []]>},
                             %w: tensor<6x8xf32>,
                             %xs: tensor<4x6xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], [tp]]>},
                             %ws: tensor<6x8xf32> {loom.sharding = #loom.sharding<@mesh, [[tp], []]>},
                             %acc: tensor<6x8xf32> {loom.sharding = #loom.sharding<@mesh, [[tp], []]>}) -> tensor<6x8xf32> {
  // CHECK: %{{.*}}, %[[WHOLE:.*]] = loom.linear_grad {{.*}} -> tensor<2x6xf32>, tensor<6x8xf32>
  // CHECK: %{{.*}}, %[[BLOCK:.*]] = loom.linear_grad {{.*}} -> tensor<2x3xf32>, tensor<3x8xf32>
  // CHECK-NOT: loom.all_reduce
  // CHECK: %[[S:.*]] = loom.local_slice %[[WHOLE]] on @mesh [tp] dim 0 {reason = "this rank's block of loom.linear_grad for loom.add, before reducing their sum"} : tensor<6x8xf32> -> tensor<3x8xf32>
  // CHECK-NEXT: %[[SUM:.*]] = loom.add %[[S]], %[[BLOCK]] : tensor<3x8xf32>
  // CHECK-NEXT: %[[AR:.*]] = loom.all_reduce %[[SUM]] on @mesh [dp] sum {reason = "partial sum over [dp] of loom.add, reduced for loom.add"} : tensor<3x8xf32>
  // CHECK-NEXT: loom.add %{{.*}}, %[[AR]] : tensor<3x8xf32>, tensor<3x8xf32>
  // CHECK-NOT: loom.all_reduce
  %dx, %dw = loom.linear_grad %dy, %x, %w : tensor<4x8xf32>, tensor<4x6xf32>, tensor<6x8xf32> -> tensor<4x6xf32>, tensor<6x8xf32>
  %dxs, %dws = loom.linear_grad %dy, %xs, %ws : tensor<4x8xf32>, tensor<4x6xf32>, tensor<6x8xf32> -> tensor<4x6xf32>, tensor<6x8xf32>
  %g = loom.add %dw, %dws : tensor<6x8xf32>, tensor<6x8xf32>
  %sum = loom.add %acc, %g : tensor<6x8xf32>, tensor<6x8xf32>
  return %sum : tensor<6x8xf32>
}

// -----

// A contracted factor one operand holds split (over the result's partial
// axes) and another whole: the whole one is read as this rank's block, so
// both cover the same tokens (an embedding gradient of sequence-split rows
// with whole token ids).
loom.mesh @mesh <tp = 2>
// CHECK-LABEL: func.func @contracted_slice(
// CHECK-SAME: %[[D:[^:]*]]: tensor<2x4x8xf32>
// CHECK-SAME: %[[IDS:[^:]*]]: tensor<2x8xi32>
func.func @contracted_slice(%dout: tensor<2x8x8xf32> {loom.sharding = #loom.sharding<@mesh, [[], [tp], []]>},
                            %ids: tensor<2x8xi32> {loom.sharding = #loom.sharding<@mesh, [[], []]>}) -> tensor<16x8xf32> {
  // CHECK: %[[S:.*]] = loom.local_slice %[[IDS]] on @mesh [tp] dim 1 {reason = "this rank's block of argument #1 for loom.embedding_grad"} : tensor<2x8xi32> -> tensor<2x4xi32>
  // CHECK: %[[T:.*]] = loom.embedding_grad %[[D]], %[[S]] : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<16x8xf32>
  // CHECK: loom.all_reduce %[[T]] on @mesh [tp] sum
  %t = loom.embedding_grad %dout, %ids : tensor<2x8x8xf32>, tensor<2x8xi32> -> tensor<16x8xf32>
  return %t : tensor<16x8xf32>
}

// -----

// A value split over dp on one dimension meets a consumer that wants it
// split over dp on another: gathered first, then sliced (slicing first
// would pair this rank's rows with the other rank's columns).
loom.mesh @mesh <dp = 2>
// CHECK-LABEL: func.func @gather_then_slice(
// CHECK-SAME: %[[X:[^:]*]]: tensor<4x3xf32>
func.func @gather_then_slice(%x: tensor<4x6xf32> {loom.sharding = #loom.sharding<@mesh, [[], [dp]]>}) -> tensor<4x6xf32> {
  // CHECK: %[[G:.*]] = loom.all_gather %[[X]] on @mesh [dp] dim 1 {{.*}} : tensor<4x3xf32> -> tensor<4x6xf32>
  // CHECK-NEXT: %[[S:.*]] = loom.local_slice %[[G]] on @mesh [dp] dim 0 {{.*}} : tensor<4x6xf32> -> tensor<2x6xf32>
  // CHECK-NEXT: loom.gelu %[[S]] : tensor<2x6xf32>
  %g = loom.gelu %x {loom.shardings = [#loom.sharding<@mesh, [[dp], []]>]} : tensor<4x6xf32>
  return %g : tensor<4x6xf32>
}

// -----

// A result marked partial over an axis no operand reads split (nothing
// contracted is split): every rank computes the whole sum, so it is not
// reduced (which would count it once per rank).
loom.mesh @mesh <dp = 2>
// CHECK-LABEL: func.func @partial_not_produced(
func.func @partial_not_produced(%x: tensor<4x6xf32> {loom.sharding = #loom.sharding<@mesh, [[], []]>},
                                %w: tensor<6x8xf32> {loom.sharding = #loom.sharding<@mesh, [[], []]>}) -> tensor<4x8xf32> {
  // CHECK: %[[Y:.*]] = loom.linear {{.*}} : tensor<4x6xf32>, tensor<6x8xf32> -> tensor<4x8xf32>
  // CHECK-NOT: loom.all_reduce
  // CHECK: return %[[Y]]
  %y = loom.linear %x, %w {loom.shardings = [#loom.sharding<@mesh, [[], []], partial = [dp]>]} : tensor<4x6xf32>, tensor<6x8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
