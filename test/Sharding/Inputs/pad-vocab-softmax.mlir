// Input of loom-pad-vocab.test: logits that a softmax reads whole.
func.func @lm(%wte: tensor<255x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
              %tok: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>}) -> tensor<2x4x255xf32>
    attributes {loom.model = {batch = 2 : i64, seq = 4 : i64, vocab_size = 255 : i64}} {
  %x = loom.embedding %wte, %tok : tensor<255x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  %l = loom.matmul %x, %wte transpose_rhs : tensor<2x4x8xf32>, tensor<255x8xf32> -> tensor<2x4x255xf32>
  %p = loom.softmax %l : tensor<2x4x255xf32> loc("probs")
  return %p : tensor<2x4x255xf32>
}
