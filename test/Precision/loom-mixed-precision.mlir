// RUN: loom-opt --loom-autodiff --loom-mixed-precision %s | FileCheck %s
// RUN: loom-opt --loom-mixed-precision %s | FileCheck %s --check-prefix=EVAL
// RUN: loom-opt --loom-compile-pipeline="train=true precision=bf16 vocab-divisible-by=1" %s | FileCheck %s --check-prefix=PIPE

// The training step in bf16 mixed precision: every f32 tensor of rank >= 1
// of the micro-batch function is bf16 (parameters, activations, block
// arguments and results, gradients, accumulators); the loss and its seed
// stay f32 scalars.
// CHECK-LABEL: func.func @lm_train(
// CHECK-SAME: %[[WTE:[a-z0-9]+]]: tensor<16x8xbf16> {{{.*}}loom.name = "wte.weight", loom.role = #loom.role<param>}
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<8x8xbf16>
// CHECK-SAME: %[[B:[a-z0-9]+]]: tensor<8xbf16>
// CHECK-SAME: tensor<2x4xi32>
// CHECK-SAME: tensor<2x4xi32>
// CHECK-SAME: %[[GWTE:[a-z0-9]+]]: tensor<16x8xbf16> {loom.name = "wte.weight", loom.role = #loom.role<grad>}
// CHECK-SAME: -> (tensor<f32>, tensor<16x8xbf16> {loom.updates = 5 : i64}, tensor<8x8xbf16> {loom.updates = 6 : i64}, tensor<8xbf16> {loom.updates = 7 : i64})
// CHECK: loom.embedding %[[WTE]], {{.*}} -> tensor<2x4x8xbf16>
// CHECK: loom.block "h.0"{{.*}} : (tensor<2x4x8xbf16>, tensor<8x8xbf16>, tensor<8xbf16>) -> (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>)
// CHECK-NEXT: ^bb0(%{{.*}}: tensor<2x4x8xbf16>, %{{.*}}: tensor<8x8xbf16>, %{{.*}}: tensor<8xbf16>):
// CHECK: loom.gelu %{{.*}} : tensor<2x4x8xbf16>
// CHECK: %[[LOSS:.*]] = loom.cross_entropy {{.*}} : tensor<2x4x16xbf16>, tensor<2x4xi32> -> tensor<f32>
// CHECK: %[[SEED:.*]] = loom.fill 1.000000e+00 : tensor<f32>
// CHECK: loom.cross_entropy_grad %[[SEED]], {{.*}} : tensor<f32>, tensor<2x4x16xbf16>, tensor<2x4xi32> -> tensor<2x4x16xbf16>
// CHECK: loom.block "h.0.grad"
// CHECK: %[[ACC:.*]] = loom.add %[[GWTE]], %{{.*}} : tensor<16x8xbf16>, tensor<16x8xbf16>
// CHECK: return %[[LOSS]], %[[ACC]], {{.*}} : tensor<f32>, tensor<16x8xbf16>, tensor<8x8xbf16>, tensor<8xbf16>

// The update: bf16 parameters and gradients, f32 moments, and the fp32
// master weights appended (after lr and step) and returned updated in
// place; AdamW updates the master from the bf16 gradient, and the cast of
// the new master is the new parameter.
// CHECK-LABEL: func.func @lm_update(
// CHECK-SAME: %[[P0:[a-z0-9]+]]: tensor<16x8xbf16> {{{.*}}loom.role = #loom.role<param>}
// CHECK-SAME: %[[G0:[a-z0-9]+]]: tensor<16x8xbf16> {loom.name = "wte.weight", loom.role = #loom.role<grad>}
// CHECK-SAME: %[[M0:[a-z0-9]+]]: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<adam_m>}
// CHECK-SAME: %[[V0:[a-z0-9]+]]: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<adam_v>}
// CHECK-SAME: %[[LR:[a-z0-9]+]]: tensor<f32> {loom.name = "lr", loom.role = #loom.role<lr>}
// CHECK-SAME: %[[STEP:[a-z0-9]+]]: tensor<f32> {loom.name = "step", loom.role = #loom.role<step>}
// CHECK-SAME: %[[MASTER0:[a-z0-9]+]]: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<master>}
// CHECK-SAME: %{{[a-z0-9]+}}: tensor<8x8xf32> {loom.name = "w", loom.role = #loom.role<master>}
// CHECK-SAME: %{{[a-z0-9]+}}: tensor<8xf32> {loom.name = "b", loom.role = #loom.role<master>})
// CHECK-SAME: -> (tensor<16x8xbf16> {loom.updates = 0 : i64}
// CHECK-SAME: tensor<f32>, tensor<16x8xf32> {loom.updates = 14 : i64}, tensor<8x8xf32> {loom.updates = 15 : i64}, tensor<8xf32> {loom.updates = 16 : i64})
// CHECK: %[[SUMSQ:.*]] = loom.sum_squares %[[G0]], {{.*}} : tensor<16x8xbf16>, tensor<8x8xbf16>, tensor<8xbf16> -> tensor<f32>
// CHECK: %[[NORM:.*]], %[[COEF:.*]] = loom.clip_coef %[[SUMSQ]]
// CHECK: %[[NEW:.*]], %[[NEWM:.*]], %[[NEWV:.*]] = loom.adamw %[[MASTER0]], %[[G0]], %[[M0]], %[[V0]], %[[LR]], %[[STEP]], %[[COEF]] {{.*}} : tensor<16x8xf32>, tensor<16x8xbf16>, tensor<f32>
// CHECK-NEXT: %[[CAST:.*]] = loom.cast %[[NEW]] : tensor<16x8xf32> -> tensor<16x8xbf16>
// CHECK: return %[[CAST]], {{.*}}, %[[NEWM]], {{.*}}, %[[NEWV]], {{.*}}, %[[NORM]], %[[NEW]], {{.*}} :
// CHECK-NOT: %[[P0]]

// Evaluation: the forward-only model computes in bf16 (the runtime rounds
// the parameters at init and load); no master, no update.
// EVAL-LABEL: func.func @lm(
// EVAL-SAME: tensor<16x8xbf16>
// EVAL-SAME: -> tensor<f32>
// EVAL: loom.matmul {{.*}} -> tensor<2x4x16xbf16>
// EVAL: loom.cross_entropy {{.*}} -> tensor<f32>
// EVAL-NOT: master
// EVAL-NOT: loom.cast

// `precision=bf16` runs the pass between autodiff and buffer planning.
// PIPE-LABEL: func.func @lm_train(
// PIPE-SAME: tensor<16x8xbf16>
// PIPE-LABEL: func.func @lm_update(
// PIPE-SAME: loom.role = #loom.role<master>
// PIPE: loom.cast {{.*}} -> tensor<16x8xbf16>

func.func @lm(%wte: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
              %w: tensor<8x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
              %b: tensor<8xf32> {loom.name = "b", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
              %tok: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>},
              %tgt: tensor<2x4xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32>
    attributes {loom.model = {batch = 2 : i64, seq = 4 : i64, vocab_size = 16 : i64}} {
  %x = loom.embedding %wte, %tok : tensor<16x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  %y = loom.block "h.0" (%x, %w, %b) : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%bx: tensor<2x4x8xf32>, %bw: tensor<8x8xf32>, %bb: tensor<8xf32>):
    %h = loom.linear %bx, %bw, %bb : tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>
    %g = loom.gelu %h : tensor<2x4x8xf32>
    loom.yield %g : tensor<2x4x8xf32>
  }
  %l = loom.matmul %y, %wte transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %loss = loom.cross_entropy %l, %tgt : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
