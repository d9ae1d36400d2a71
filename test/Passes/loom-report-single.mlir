// RUN: loom-opt --loom-autodiff --loom-report %s -o /dev/null | FileCheck %s
// A single-rank training step: model state 16 bytes per parameter, no
// traffic, and no plan yet.
// CHECK: loom report: single rank (1 rank), per rank:
// CHECK-NEXT: model state: 1024 bytes (16.00 bytes per local parameter)
// CHECK: predicted peak: not planned (run --loom-plan-buffers first)
// CHECK-NEXT: sent per step: 0 bytes
func.func @f(%w: tensor<8x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
             %x: tensor<4x8xf32>,
             %t: tensor<4xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32>
    attributes {loom.model = {}} {
  %l = loom.linear %x, %w : tensor<4x8xf32>, tensor<8x8xf32> -> tensor<4x8xf32>
  %loss = loom.cross_entropy %l, %t : tensor<4x8xf32>, tensor<4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
