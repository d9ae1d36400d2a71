// RUN: loom-opt --loom-plan-buffers --mlir-print-debuginfo %s | loom-translate --loom-to-program | loom-translate --loom-program-dump | FileCheck %s

// The program holds the buffer plan, the parameter table and the
// instruction stream; names come from the ops' locations.
// CHECK: loom program v6 by loom-translate
// CHECK: model: n_layer=1 n_head=2 n_embd=8 vocab_size=16 n_positions=4 batch=2 seq=4
// CHECK: mesh: dp=2 tp=1
// CHECK: stage 0: arena {{[0-9]+}} bytes, {{[0-9]+}} buffers, 2 params, 5 instructions
// CHECK: tokens %2 targets %3 loss %[[LOSS:[0-9]+]]
// What --loom-report predicts for a rank: the two parameters (512 + 256
// bytes) and one ring all-reduce of 256 bytes over 2 ranks, 2·(2-1)/2·256.
// CHECK-NEXT: predicted: model state 768 bytes; sent per step all_reduce 256, all_gather 0, reduce_scatter 0, all_to_all 0, send 0 bytes
// CHECK: buffer %0 @0 F32 [16, 8] wte.weight
// CHECK: buffer %1 @512 F32 [8, 8] w
// CHECK: buffer %2 @768 I32 [2, 4] tokens
// CHECK: buffer %3 @832 I32 [2, 4] targets
// CHECK: param wte.weight [16, 8] slice [0, 0] %0 Normal(std=0.02) decay
// CHECK: param w [8, 8] slice [0, 0] %1 Zeros decay
// CHECK: 0: Embedding [%0, %2] -> [%4] embed
// CHECK: 1: Linear [%4, %1] -> [%5] proj
// CHECK: 2: AllReduce [%5] -> [%6] sync reason="row-parallel proj"
// CHECK: 3: Matmul [%6, %0] -> [%7] head
// CHECK: 4: CrossEntropy [%7, %3] -> [%[[LOSS]]] loss

loom.mesh @mesh <dp = 2, tp = 1>
func.func @m(%wte: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
             %w: tensor<8x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
             %tok: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>},
             %tgt: tensor<2x4xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32>
    attributes {loom.model = {n_layer = 1 : i64, n_head = 2 : i64, n_embd = 8 : i64, vocab_size = 16 : i64, n_positions = 4 : i64, batch = 2 : i64, seq = 4 : i64}} {
  %x = loom.embedding %wte, %tok : tensor<16x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32> loc("embed")
  %p = loom.linear %x, %w : tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32> loc("proj")
  %s = loom.all_reduce %p on @mesh [dp] sum {reason = "row-parallel proj"} : tensor<2x4x8xf32> loc("sync")
  %l = loom.matmul %s, %wte transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32> loc("head")
  %loss = loom.cross_entropy %l, %tgt : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32> loc("loss")
  return %loss : tensor<f32>
}
