// RUN: loom-opt --loom-autodiff --loom-plan-buffers %s | FileCheck %s

// The micro-batch and update functions of a training step share one arena:
// a parameter, its gradient accumulator and its moments sit at the same
// offsets in both; accumulation and AdamW write in place.
// CHECK-LABEL: func.func @lm_train(
// CHECK-SAME: loom.name = "w", loom.offset = [[W:[0-9]+]] : i64, loom.role = #loom.role<param>
// CHECK-SAME: loom.name = "w", loom.offset = [[GW:[0-9]+]] : i64, loom.role = #loom.role<grad>
// CHECK-SAME: loom.arena_bytes = [[ARENA:[0-9]+]] : i64
// CHECK: loom.linear_grad
// CHECK: loom.add %{{.*}}, %{{.*}} {loom.offsets = array<i64: [[GW]]>}
// CHECK-LABEL: func.func @lm_update(
// CHECK-SAME: loom.name = "w", loom.offset = [[W]] : i64, loom.role = #loom.role<param>
// CHECK-SAME: loom.name = "w", loom.offset = [[GW]] : i64, loom.role = #loom.role<grad>
// CHECK-SAME: loom.name = "w", loom.offset = [[M:[0-9]+]] : i64, loom.role = #loom.role<adam_m>
// CHECK-SAME: loom.name = "w", loom.offset = [[V:[0-9]+]] : i64, loom.role = #loom.role<adam_v>
// CHECK-SAME: loom.arena_bytes = [[ARENA]] : i64
// CHECK: loom.adamw {{.*}}loom.offsets = array<i64: [[W]], [[M]], [[V]]>

func.func @lm(%w: tensor<8x16xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
              %x: tensor<4x8xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 1.0>},
              %tgt: tensor<4xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32>
    attributes {loom.model = {batch = 4 : i64}} {
  %l = loom.linear %x, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  %loss = loom.cross_entropy %l, %tgt : tensor<4x16xf32>, tensor<4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
