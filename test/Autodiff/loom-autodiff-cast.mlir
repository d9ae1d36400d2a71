// RUN: loom-opt --loom-autodiff %s | FileCheck %s

// loom.cast's gradient rule: the gradient is cast back to the operand's
// type. A hand-written model computing its hidden layer in bf16 (an f32
// activation cast down, the result cast up for the loss) gets a backward
// in the same precisions: f32 -> bf16 in the forward is bf16 -> f32 in the
// backward, and the other way round.
// CHECK-LABEL: func.func @lm_train(
// CHECK: %[[X:.*]] = loom.embedding {{.*}} -> tensor<2x4x8xf32>
// CHECK: %[[XB:.*]] = loom.cast %[[X]] : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
// CHECK: %[[HB:.*]] = loom.linear %[[XB]], %{{.*}} -> tensor<2x4x8xbf16>
// CHECK: %[[H:.*]] = loom.cast %[[HB]] : tensor<2x4x8xbf16> -> tensor<2x4x8xf32>
// CHECK: %[[DL:.*]] = loom.cross_entropy_grad
// CHECK: %[[DH:.*]], %{{.*}} = loom.matmul_grad %[[DL]], %[[H]]
// CHECK: %[[DHB:.*]] = loom.cast %[[DH]] : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
// CHECK: %[[DXB:.*]], %[[DW:.*]] = loom.linear_grad %[[DHB]], %[[XB]], %{{.*}} : tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<8x8xbf16> -> tensor<2x4x8xbf16>, tensor<8x8xbf16>
// CHECK: %[[DX:.*]] = loom.cast %[[DXB]] : tensor<2x4x8xbf16> -> tensor<2x4x8xf32>
// CHECK: loom.embedding_grad %[[DX]]

func.func @lm(%wte: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
              %w: tensor<8x8xbf16> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
              %tok: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>},
              %tgt: tensor<2x4xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32>
    attributes {loom.model = {batch = 2 : i64, seq = 4 : i64, vocab_size = 16 : i64}} {
  %x = loom.embedding %wte, %tok : tensor<16x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  %xb = loom.cast %x : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
  %hb = loom.linear %xb, %w : tensor<2x4x8xbf16>, tensor<8x8xbf16> -> tensor<2x4x8xbf16>
  %h = loom.cast %hb : tensor<2x4x8xbf16> -> tensor<2x4x8xf32>
  %l = loom.matmul %h, %wte transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %loss = loom.cross_entropy %l, %tgt : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
