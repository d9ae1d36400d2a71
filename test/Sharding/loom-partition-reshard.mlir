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
