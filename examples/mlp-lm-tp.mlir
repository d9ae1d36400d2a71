// examples/mlp-lm.mlir with a hand-written tensor-parallel layout (GSPMD's
// mark_sharding idea): the first weight split column-wise (its output
// features), the second row-wise (its input features). Propagation carries
// the splits everywhere else and the partitioner derives the Megatron MLP:
// each rank computes half of the hidden features, and one all-reduce after
// the second linear (before its bias) sums the halves; the backward
// all-reduces the input gradient of the first linear.
//
//   loom train --model examples/mlp-lm-tp.mlir --mesh tp=2 --data examples/data/tiny_train.bin --steps 50
//
// The mesh declared here must agree with --mesh (dp may be added).
loom.mesh @mesh <tp = 2>
func.func @mlp_lm(
    %wte: tensor<256x64xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
    %w1: tensor<64x256xf32> {loom.name = "mlp.fc1.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>,
                             loom.sharding = #loom.sharding<@mesh, [[], [tp]]>},
    %b1: tensor<256xf32> {loom.name = "mlp.fc1.bias", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
    %w2: tensor<256x64xf32> {loom.name = "mlp.fc2.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>,
                             loom.sharding = #loom.sharding<@mesh, [[tp], []]>},
    %b2: tensor<64xf32> {loom.name = "mlp.fc2.bias", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
    %tokens: tensor<8x32xi32> {loom.name = "tokens", loom.role = #loom.role<input>},
    %targets: tensor<8x32xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32>
    attributes {loom.model = {n_layer = 2 : i64, n_head = 1 : i64, n_embd = 64 : i64,
                              vocab_size = 256 : i64, n_positions = 32 : i64,
                              batch = 8 : i64, seq = 32 : i64}} {
  %x = loom.embedding %wte, %tokens : tensor<256x64xf32>, tensor<8x32xi32> -> tensor<8x32x64xf32> loc("wte")
  %h = loom.linear %x, %w1, %b1 : tensor<8x32x64xf32>, tensor<64x256xf32>, tensor<256xf32> -> tensor<8x32x256xf32> loc("mlp.fc1")
  %g = loom.gelu %h : tensor<8x32x256xf32> loc("mlp.gelu")
  %y = loom.linear %g, %w2, %b2 : tensor<8x32x256xf32>, tensor<256x64xf32>, tensor<64xf32> -> tensor<8x32x64xf32> loc("mlp.fc2")
  %logits = loom.matmul %y, %wte transpose_rhs : tensor<8x32x64xf32>, tensor<256x64xf32> -> tensor<8x32x256xf32> loc("lm_head")
  %loss = loom.cross_entropy %logits, %targets : tensor<8x32x256xf32>, tensor<8x32xi32> -> tensor<f32> loc("loss")
  return %loss : tensor<f32>
}
