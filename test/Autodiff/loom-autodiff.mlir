// RUN: loom-opt --loom-autodiff=microbatches=4 %s | FileCheck %s
// RUN: loom-opt --loom-autodiff="max-norm=0.5 weight-decay=0.1 beta2=0.95" %s | FileCheck %s --check-prefix=HYPER

// A tied embedding: wte feeds the embedding and the LM head, so its gradient
// is the sum of both contributions; the micro-batch seed is 1/4.
// CHECK-LABEL: func.func @lm_train(
// CHECK-SAME: %[[WTE:[a-z0-9]+]]: tensor<16x8xf32> {{{.*}}loom.name = "wte.weight", loom.role = #loom.role<param>}
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<8x8xf32>
// CHECK-SAME: %[[B:[a-z0-9]+]]: tensor<8xf32>
// CHECK-SAME: %[[TOK:[a-z0-9]+]]: tensor<2x4xi32>
// CHECK-SAME: %[[TGT:[a-z0-9]+]]: tensor<2x4xi32>
// CHECK-SAME: %[[GWTE:[a-z0-9]+]]: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<grad>}
// CHECK-SAME: %[[GW:[a-z0-9]+]]: tensor<8x8xf32> {loom.name = "w", loom.role = #loom.role<grad>}
// CHECK-SAME: %[[GB:[a-z0-9]+]]: tensor<8xf32> {loom.name = "b", loom.role = #loom.role<grad>}
// CHECK-SAME: -> (tensor<f32>, tensor<16x8xf32> {loom.updates = 5 : i64}, tensor<8x8xf32> {loom.updates = 6 : i64}, tensor<8xf32> {loom.updates = 7 : i64})
// CHECK-SAME: loom.train = {microbatches = 4 : i64, phase = "microbatch"}
// CHECK: %[[X:.*]] = loom.embedding %[[WTE]], %[[TOK]]
// CHECK: %[[H:.*]] = loom.linear %[[X]], %[[W]], %[[B]]
// CHECK: %[[G:.*]] = loom.gelu %[[H]]
// CHECK: %[[L:.*]] = loom.matmul %[[G]], %[[WTE]] transpose_rhs
// CHECK: %[[LOSS:.*]] = loom.cross_entropy %[[L]], %[[TGT]]
// CHECK: %[[SEED:.*]] = loom.fill 2.500000e-01 : tensor<f32>
// CHECK: %[[DL:.*]] = loom.cross_entropy_grad %[[SEED]], %[[L]], %[[TGT]]
// CHECK: %[[DG:.*]], %[[DWTE1:.*]] = loom.matmul_grad %[[DL]], %[[G]], %[[WTE]] transpose_rhs
// CHECK: %[[DH:.*]] = loom.gelu_grad %[[DG]], %[[H]]
// CHECK: %[[DX:.*]], %[[DW:.*]], %[[DB:.*]] = loom.linear_grad %[[DH]], %[[X]], %[[W]]
// CHECK: %[[DWTE2:.*]] = loom.embedding_grad %[[DX]], %[[TOK]]
// CHECK: %[[DWTE:.*]] = loom.add %[[DWTE1]], %[[DWTE2]]
// CHECK: %[[A0:.*]] = loom.add %[[GWTE]], %[[DWTE]]
// CHECK: %[[A1:.*]] = loom.add %[[GW]], %[[DW]]
// CHECK: %[[A2:.*]] = loom.add %[[GB]], %[[DB]]
// CHECK: return %[[LOSS]], %[[A0]], %[[A1]], %[[A2]]

// The update: the global-norm clip (a sum of squares of every gradient,
// then the norm and coefficient), then AdamW per parameter, weight decay
// on rank >= 2 only (wte and w decay, the bias does not).
// CHECK-LABEL: func.func @lm_update(
// CHECK-SAME: loom.role = #loom.role<adam_m>
// CHECK-SAME: loom.role = #loom.role<adam_v>
// CHECK-SAME: loom.role = #loom.role<lr>
// CHECK-SAME: loom.role = #loom.role<step>
// CHECK-SAME: loom.train = {phase = "update"}
// CHECK: %[[SUMSQ:.*]] = loom.sum_squares %{{.*}}, %{{.*}}, %{{.*}} : tensor<16x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<f32>
// CHECK: %[[NORM:.*]], %[[COEF:.*]] = loom.clip_coef %[[SUMSQ]] {max_norm = 1.000000e+00 : f64}
// CHECK: loom.adamw %{{.*}}, %[[COEF]] {beta1 = 9.000000e-01 : f64, beta2 = 0.998999{{[0-9]*}} : f64, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-02
// CHECK: loom.adamw %{{.*}} weight_decay = 1.000000e-02
// CHECK: loom.adamw %{{.*}} weight_decay = 0.000000e+00
// CHECK: return {{.*}}, %[[NORM]] :
// CHECK-NOT: func.func @lm(

// HYPER: loom.train = {microbatches = 1 : i64, phase = "microbatch"}
// HYPER: loom.fill 1.000000e+00
// HYPER: loom.sum_squares
// HYPER: loom.clip_coef {{.*}}max_norm = 5.000000e-01
// HYPER: loom.adamw {{.*}}beta2 = 0.9499999{{[0-9]*}} : f64, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-01

func.func @lm(%wte: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
              %w: tensor<8x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
              %b: tensor<8xf32> {loom.name = "b", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
              %tok: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>},
              %tgt: tensor<2x4xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32>
    attributes {loom.model = {batch = 2 : i64, seq = 4 : i64, vocab_size = 16 : i64}} {
  %x = loom.embedding %wte, %tok : tensor<16x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  %h = loom.linear %x, %w, %b : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>
  %g = loom.gelu %h : tensor<2x4x8xf32>
  %l = loom.matmul %g, %wte transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %loss = loom.cross_entropy %l, %tgt : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
