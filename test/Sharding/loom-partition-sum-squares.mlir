// RUN: loom-opt --loom-propagate --loom-partition -split-input-file %s | FileCheck %s

// Gradients split over mesh axes (ZeRO-2/3, tensor parallelism): each rank
// sums the squares of its pieces and one scalar all-reduce over those axes
// makes the sum global. No gradient is all-gathered.
loom.mesh @mesh <dp = 2, tp = 2>
// CHECK-LABEL: func.func @split_grad(
// CHECK-SAME: tensor<4x3xf32>
// CHECK-NOT: loom.all_gather
// CHECK: %[[LOCAL:.*]] = loom.sum_squares %{{.*}} : tensor<4x3xf32> -> tensor<f32>
// CHECK: %[[GLOBAL:.*]] = loom.all_reduce %[[LOCAL]] on @mesh [dp, tp] sum {reason = "partial sum over [dp, tp] of grad_sum_squares, reduced for clip_coef"} : tensor<f32>
// CHECK: loom.clip_coef %[[GLOBAL]]
func.func @split_grad(%g: tensor<8x6xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], [tp]]>})
    -> (tensor<f32>, tensor<f32>) {
  %s = loom.sum_squares %g : tensor<8x6xf32> -> tensor<f32> loc("grad_sum_squares")
  %n, %c = loom.clip_coef %s {max_norm = 1.0 : f64} : tensor<f32> -> tensor<f32>, tensor<f32> loc("clip_coef")
  return %n, %c : tensor<f32>, tensor<f32>
}

// -----

// Every gradient split over dp (in whichever dimension): still one scalar
// all-reduce over dp.
loom.mesh @mesh <dp = 2>
// CHECK-LABEL: func.func @zero2(
// CHECK-NOT: loom.all_gather
// CHECK: %[[LOCAL:.*]] = loom.sum_squares %{{.*}}, %{{.*}} : tensor<4x4xf32>, tensor<6x2xf32> -> tensor<f32>
// CHECK: %[[GLOBAL:.*]] = loom.all_reduce %[[LOCAL]] on @mesh [dp] sum
// CHECK: loom.clip_coef %[[GLOBAL]]
func.func @zero2(%g0: tensor<8x4xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], []]>},
                 %g1: tensor<6x4xf32> {loom.sharding = #loom.sharding<@mesh, [[], [dp]]>})
    -> (tensor<f32>, tensor<f32>) {
  %s = loom.sum_squares %g0, %g1 : tensor<8x4xf32>, tensor<6x4xf32> -> tensor<f32>
  %n, %c = loom.clip_coef %s {max_norm = 1.0 : f64} : tensor<f32> -> tensor<f32>, tensor<f32>
  return %n, %c : tensor<f32>, tensor<f32>
}

// -----

// Replicated gradients (DDP, ZeRO-1): every rank sums all of them; nothing
// to reduce.
loom.mesh @mesh <dp = 2>
// CHECK-LABEL: func.func @replicated(
// CHECK-NOT: loom.all_reduce
// CHECK: loom.sum_squares %{{.*}}, %{{.*}} : tensor<8x4xf32>, tensor<6xf32> -> tensor<f32>
// CHECK-NOT: loom.all_reduce
// CHECK: return
func.func @replicated(%g0: tensor<8x4xf32> {loom.sharding = #loom.sharding<@mesh, [[], []]>},
                      %g1: tensor<6xf32>) -> (tensor<f32>, tensor<f32>) {
  %s = loom.sum_squares %g0, %g1 : tensor<8x4xf32>, tensor<6xf32> -> tensor<f32>
  %n, %c = loom.clip_coef %s {max_norm = 1.0 : f64} : tensor<f32> -> tensor<f32>, tensor<f32>
  return %n, %c : tensor<f32>, tensor<f32>
}

// -----

// Mixed: a gradient split over dp next to whole ones. The whole [8x4] one
// contributes only this rank's rows (a local slice, no traffic), so the
// one scalar all-reduce counts it once; the [3] one no dimension of which
// dp divides is summed apart on every rank and added after the reduction.
loom.mesh @mesh <dp = 2>
// CHECK-LABEL: func.func @mixed(
// CHECK-NOT: loom.all_gather
// CHECK: %[[ROWS:.*]] = loom.local_slice %{{.*}} on @mesh [dp] dim 0 {{.*}} : tensor<8x4xf32> -> tensor<4x4xf32>
// CHECK: %[[ODD:.*]] = loom.sum_squares %{{.*}} : tensor<3xf32> -> tensor<f32>
// CHECK: %[[LOCAL:.*]] = loom.sum_squares %{{.*}}, %[[ROWS]] : tensor<2x4xf32>, tensor<4x4xf32> -> tensor<f32>
// CHECK: %[[GLOBAL:.*]] = loom.all_reduce %[[LOCAL]] on @mesh [dp] sum
// CHECK: %[[TOTAL:.*]] = loom.add %[[GLOBAL]], %[[ODD]]
// CHECK: loom.clip_coef %[[TOTAL]]
func.func @mixed(%g0: tensor<4x4xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], []]>},
                 %g1: tensor<8x4xf32> {loom.sharding = #loom.sharding<@mesh, [[], []]>},
                 %g2: tensor<3xf32> {loom.sharding = #loom.sharding<@mesh, [[]]>})
    -> (tensor<f32>, tensor<f32>) {
  %s = loom.sum_squares %g0, %g1, %g2 : tensor<4x4xf32>, tensor<8x4xf32>, tensor<3xf32> -> tensor<f32>
  %n, %c = loom.clip_coef %s {max_norm = 1.0 : f64} : tensor<f32> -> tensor<f32>, tensor<f32>
  return %n, %c : tensor<f32>, tensor<f32>
}

// -----

// Tensor parallelism with ZeRO-2: a gradient split over tp and dp, one split
// over dp only (a layer norm's, whole over tp) that no dimension lets tp
// split further, one split over tp only. Each piece is counted once: the
// dp-only one is summed apart and reduced over dp alone, then added.
loom.mesh @mesh <dp = 2, tp = 2>
// CHECK-LABEL: func.func @tp_and_zero(
// CHECK: %[[DPONLY:.*]] = loom.sum_squares %{{.*}} : tensor<3xf32> -> tensor<f32>
// CHECK: %[[LOCAL:.*]] = loom.sum_squares %{{.*}}, %{{.*}} : tensor<2x2xf32>, tensor<2x2xf32> -> tensor<f32>
// CHECK: %[[GLOBAL:.*]] = loom.all_reduce %[[LOCAL]] on @mesh [dp, tp] sum
// CHECK: %[[DP:.*]] = loom.all_reduce %[[DPONLY]] on @mesh [dp] sum
// CHECK: %[[TOTAL:.*]] = loom.add %[[GLOBAL]], %[[DP]]
// CHECK: loom.clip_coef %[[TOTAL]]
func.func @tp_and_zero(%g0: tensor<4x4xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], [tp]]>},
                       %g1: tensor<6xf32> {loom.sharding = #loom.sharding<@mesh, [[dp]]>},
                       %g2: tensor<4x4xf32> {loom.sharding = #loom.sharding<@mesh, [[], [tp]]>})
    -> (tensor<f32>, tensor<f32>) {
  %s = loom.sum_squares %g0, %g1, %g2 : tensor<4x4xf32>, tensor<6xf32>, tensor<4x4xf32> -> tensor<f32>
  %n, %c = loom.clip_coef %s {max_norm = 1.0 : f64} : tensor<f32> -> tensor<f32>, tensor<f32>
  return %n, %c : tensor<f32>, tensor<f32>
}
