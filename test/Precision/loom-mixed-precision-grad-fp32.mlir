// RUN: loom-opt --loom-autodiff=microbatches=2 "--loom-mixed-precision=grad-precision=fp32" %s | FileCheck %s
// RUN: loom-opt --loom-compile-pipeline="train=true precision=bf16 grad-precision=fp32 vocab-divisible-by=1" %s | FileCheck %s --check-prefix=PIPE
// RUN: loom-opt --loom-autodiff "--loom-mixed-precision=grad-precision=fp32" %s | sed -e '1a loom.mesh @mesh <dp = 2>' | loom-opt --loom-zero=stage=0 --loom-propagate --loom-partition | FileCheck %s --check-prefix=DDP
// RUN: loom-opt --loom-autodiff "--loom-mixed-precision=grad-precision=fp32" %s | sed -e '1a loom.mesh @mesh <dp = 2>' | loom-opt --loom-zero=stage=2 --loom-propagate --loom-partition | FileCheck %s --check-prefix=ZERO2

// fp32 gradients under bf16 compute (Megatron's
// --accumulate-allreduce-grads-in-fp32): the forward and backward are bf16
// as with bf16 gradients, but every gradient accumulator stays f32, and the
// micro-batch's bf16 gradient (the tied wte's two contributions summed) is
// widened by an exact loom.cast before the f32 accumulation.
// CHECK-LABEL: func.func @lm_train(
// CHECK-SAME: %[[WTE:[a-z0-9]+]]: tensor<16x8xbf16> {{{.*}}loom.name = "wte.weight", loom.role = #loom.role<param>}
// CHECK-SAME: %[[GWTE:[a-z0-9]+]]: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<grad>}
// CHECK-SAME: %[[GW:[a-z0-9]+]]: tensor<8x8xf32> {loom.name = "w", loom.role = #loom.role<grad>}
// CHECK-SAME: %[[GB:[a-z0-9]+]]: tensor<8xf32> {loom.name = "b", loom.role = #loom.role<grad>}
// CHECK-SAME: -> (tensor<f32>, tensor<16x8xf32> {loom.updates = 5 : i64}, tensor<8x8xf32> {loom.updates = 6 : i64}, tensor<8xf32> {loom.updates = 7 : i64})
// CHECK: loom.block "h.0"{{.*}} : (tensor<2x4x8xbf16>, tensor<8x8xbf16>, tensor<8xbf16>) -> (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>)
// CHECK: loom.block "h.0.grad"{{.*}} -> (tensor<2x4x8xbf16>, tensor<8x8xbf16>, tensor<8xbf16>)
// CHECK: %[[TIED:.*]] = loom.add %{{.*}}, %{{.*}} : tensor<16x8xbf16>, tensor<16x8xbf16>
// CHECK: %[[WIDE:.*]] = loom.cast %[[TIED]] : tensor<16x8xbf16> -> tensor<16x8xf32>
// CHECK-NEXT: %[[ACC:.*]] = loom.add %[[GWTE]], %[[WIDE]] : tensor<16x8xf32>, tensor<16x8xf32>
// CHECK: loom.cast %{{.*}} : tensor<8x8xbf16> -> tensor<8x8xf32>
// CHECK-NEXT: loom.add %[[GW]], %{{.*}} : tensor<8x8xf32>, tensor<8x8xf32>
// CHECK: loom.cast %{{.*}} : tensor<8xbf16> -> tensor<8xf32>
// CHECK-NEXT: loom.add %[[GB]], %{{.*}} : tensor<8xf32>, tensor<8xf32>
// CHECK: return %{{.*}}, %[[ACC]], {{.*}} : tensor<f32>, tensor<16x8xf32>, tensor<8x8xf32>, tensor<8xf32>

// The update reads f32 gradients: the norm is summed and AdamW updates the
// fp32 master from them; parameters stay bf16, cast from the new master.
// CHECK-LABEL: func.func @lm_update(
// CHECK-SAME: tensor<16x8xbf16> {{{.*}}loom.role = #loom.role<param>}
// CHECK-SAME: %[[G0:[a-z0-9]+]]: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<grad>}
// CHECK: loom.sum_squares %[[G0]], {{.*}} : tensor<16x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<f32>
// CHECK: %[[NEW:.*]], %{{.*}}, %{{.*}} = loom.adamw %{{.*}}, %[[G0]], {{.*}} : tensor<16x8xf32>, tensor<f32>
// CHECK-NEXT: loom.cast %[[NEW]] : tensor<16x8xf32> -> tensor<16x8xbf16>

// Through the compile pipeline's grad-precision option.
// PIPE-LABEL: func.func @lm_train(
// PIPE-SAME: tensor<16x8xbf16>
// PIPE-SAME: tensor<16x8xf32> {loom.name = "wte.weight", {{.*}}loom.role = #loom.role<grad>}
// PIPE-LABEL: func.func @lm_update(
// PIPE-SAME: tensor<16x8xf32> {loom.name = "wte.weight", {{.*}}loom.role = #loom.role<grad>}

// A widening cast passes partial sums through (it is exact, so it commutes
// with the sum): DDP all-reduces each gradient in f32, after the cast.
// DDP-LABEL: func.func @lm_train(
// DDP: %[[W:.*]] = loom.cast %{{.*}} : tensor<8x8xbf16> -> tensor<8x8xf32>
// DDP-NEXT: %[[R:.*]] = loom.all_reduce %[[W]] {{.*}} : tensor<8x8xf32>
// DDP-NEXT: loom.add %{{.*}}, %[[R]] : tensor<8x8xf32>, tensor<8x8xf32>
// DDP-NOT: loom.all_reduce {{.*}}bf16

// ZeRO-2: the sharded f32 accumulator is fed by a reduce-scatter of the
// widened gradient, in f32.
// ZERO2-LABEL: func.func @lm_train(
// ZERO2: %[[W:.*]] = loom.cast %{{.*}} : tensor<8x8xbf16> -> tensor<8x8xf32>
// ZERO2-NEXT: %[[R:.*]] = loom.reduce_scatter %[[W]] {{.*}} : tensor<8x8xf32> -> tensor<4x8xf32>
// ZERO2-NEXT: loom.add %{{.*}}, %[[R]] : tensor<4x8xf32>, tensor<4x8xf32>

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
