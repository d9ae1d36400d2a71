// RUN: not loom-opt %s 2>&1 | FileCheck %s

// A model cut in the middle of an op: a located parse error, no crash.

// CHECK: malformed-truncated.mlir:[[@LINE+9]]:{{[0-9]+}}: error: expected ':'
// CHECK-NOT: PLEASE submit a bug report
// CHECK-NOT: Stack dump
loom.mesh @mesh <dp = 2>
func.func @gpt2(%wte: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
                %ids: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>}) -> tensor<2x4x8xf32> {
  %e = loom.embedding %wte, %ids : tensor<16x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  %h = loom.block "h.0" (%e) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%x: tensor<2x4x8xf32>):
    %g = loom.gelu %x
