// RUN: loom-opt --loom-autodiff "--loom-mixed-precision=grad-precision=fp32" %s | FileCheck %s
// RUN: loom-opt --loom-autodiff "--loom-mixed-precision=grad-precision=fp32" %s | sed -e '1a loom.mesh @mesh <dp = 2>' | loom-opt --loom-zero=stage=0 --loom-propagate --loom-partition | FileCheck %s --check-prefix=DDP

// A position table read through a slice: its gradient is the seq rows
// padded into zeros of the table (slice_grad). With fp32 gradients the
// widening cast goes below the pad (a pad commutes with it), so the pad is
// f32 and the data-parallel reduction, which the partitioner places before
// the pad, moves f32 too.
// CHECK-LABEL: func.func @pos_train(
// CHECK-SAME: %[[GWPE:[a-z0-9]+]]: tensor<8x8xf32> {loom.name = "wpe.weight", loom.role = #loom.role<grad>}
// CHECK: %[[ROWS:.*]] = loom.reduce_leading %{{.*}} : tensor<2x4x8xbf16> -> tensor<4x8xbf16>
// CHECK-NEXT: %[[WIDE:.*]] = loom.cast %[[ROWS]] : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK-NEXT: %[[PAD:.*]] = loom.slice_grad %[[WIDE]] dim 0 offset 0 : tensor<4x8xf32> -> tensor<8x8xf32>
// CHECK: loom.add %[[GWPE]], %[[PAD]] : tensor<8x8xf32>, tensor<8x8xf32>

// DDP-LABEL: func.func @pos_train(
// DDP: %[[WIDE:.*]] = loom.cast %{{.*}} : tensor<4x8xbf16> -> tensor<4x8xf32>
// DDP-NEXT: %[[R:.*]] = loom.all_reduce %[[WIDE]] {{.*}} : tensor<4x8xf32>
// DDP-NEXT: loom.slice_grad %[[R]] dim 0 offset 0 : tensor<4x8xf32> -> tensor<8x8xf32>

func.func @pos(%wte: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
               %wpe: tensor<8x8xf32> {loom.name = "wpe.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
               %tok: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>},
               %tgt: tensor<2x4xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32>
    attributes {loom.model = {batch = 2 : i64, seq = 4 : i64, vocab_size = 16 : i64}} {
  %x = loom.embedding %wte, %tok : tensor<16x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  %p = loom.slice %wpe dim 0 offset 0 : tensor<8x8xf32> -> tensor<4x8xf32>
  %h = loom.add %x, %p : tensor<2x4x8xf32>, tensor<4x8xf32>
  %y = loom.block "h.0" (%h) : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%bx: tensor<2x4x8xf32>):
    %g = loom.gelu %bx : tensor<2x4x8xf32>
    loom.yield %g : tensor<2x4x8xf32>
  }
  %l = loom.matmul %y, %wte transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %loss = loom.cross_entropy %l, %tgt : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
