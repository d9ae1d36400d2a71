// RUN: loom-opt %s -split-input-file -verify-diagnostics

// Verifier errors of the compute ops.

func.func @embedding_table_rank(%t: tensor<256xf32>, %ids: tensor<4xi32>) {
  // expected-error@+1 {{'loom.embedding' op table must be [vocab, width], got [256]}}
  %0 = loom.embedding %t, %ids : tensor<256xf32>, tensor<4xi32> -> tensor<4x1xf32>
  return
}

// -----

func.func @embedding_result_shape(%t: tensor<256x64xf32>, %ids: tensor<4x32xi32>) {
  // expected-error@+1 {{'loom.embedding' op result shape [4, 32, 32] should be the ids shape [4, 32] followed by the table width 64}}
  %0 = loom.embedding %t, %ids : tensor<256x64xf32>, tensor<4x32xi32> -> tensor<4x32x32xf32>
  return
}

// -----

func.func @embedding_mixed_types(%t: tensor<256x64xf32>, %ids: tensor<4xi32>) {
  // expected-error@+1 {{'loom.embedding' op mixes element types 'f32' and 'f16'; cast explicitly before combining}}
  %0 = loom.embedding %t, %ids : tensor<256x64xf32>, tensor<4xi32> -> tensor<4x64xf16>
  return
}

// -----

func.func @add_rhs_not_trailing(%a: tensor<4x32x64xf32>, %b: tensor<4x64xf32>) {
  // expected-error@+1 {{'loom.add' op rhs shape [4, 64] must equal the trailing dimensions of the lhs shape [4, 32, 64]}}
  %0 = loom.add %a, %b : tensor<4x32x64xf32>, tensor<4x64xf32>
  return
}

// -----

func.func @add_rhs_higher_rank(%a: tensor<64xf32>, %b: tensor<2x64xf32>) {
  // expected-error@+1 {{'loom.add' op rhs shape [2, 64] must equal the trailing dimensions of the lhs shape [64]}}
  %0 = loom.add %a, %b : tensor<64xf32>, tensor<2x64xf32>
  return
}

// -----

func.func @add_mixed_types(%a: tensor<4x64xf32>, %b: tensor<64xbf16>) {
  // expected-error@+1 {{'loom.add' op mixes element types 'f32' and 'bf16'}}
  %0 = loom.add %a, %b : tensor<4x64xf32>, tensor<64xbf16>
  return
}

// -----

func.func @linear_scalar_input(%x: tensor<f32>, %w: tensor<1x4xf32>) {
  // expected-error@+1 {{'loom.linear' op input must have rank >= 1}}
  %0 = loom.linear %x, %w : tensor<f32>, tensor<1x4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @linear_weight_rank(%x: tensor<8x64xf32>, %w: tensor<64xf32>) {
  // expected-error@+1 {{'loom.linear' op weight must be [in, out...], got [64]}}
  %0 = loom.linear %x, %w : tensor<8x64xf32>, tensor<64xf32> -> tensor<8xf32>
  return
}

// -----

// A weight laid out [out, in] (torch.nn.Linear) instead of [in, out].
func.func @linear_features(%x: tensor<8x64xf32>, %w: tensor<256x64xf32>) {
  // expected-error@+1 {{'loom.linear' op input features 64 do not match the weight's input dimension 256 (weight is [in, out] as in HF Conv1D)}}
  %0 = loom.linear %x, %w : tensor<8x64xf32>, tensor<256x64xf32> -> tensor<8x64xf32>
  return
}

// -----

func.func @linear_bias_shape(%x: tensor<8x64xf32>, %w: tensor<64x256xf32>, %b: tensor<64xf32>) {
  // expected-error@+1 {{'loom.linear' op bias shape [64] should be [256]}}
  %0 = loom.linear %x, %w, %b : tensor<8x64xf32>, tensor<64x256xf32>, tensor<64xf32> -> tensor<8x256xf32>
  return
}

// -----

// With several output dimensions the bias has all of them.
func.func @linear_bias_output_dims(%x: tensor<8x64xf32>, %w: tensor<64x3x64xf32>, %b: tensor<192xf32>) {
  // expected-error@+1 {{'loom.linear' op bias shape [192] should be [3, 64]}}
  %0 = loom.linear %x, %w, %b : tensor<8x64xf32>, tensor<64x3x64xf32>, tensor<192xf32> -> tensor<8x3x64xf32>
  return
}

// -----

func.func @linear_result_shape(%x: tensor<4x8x64xf32>, %w: tensor<64x256xf32>) {
  // expected-error@+1 {{'loom.linear' op result shape [32, 256] should be [4, 8, 256]}}
  %0 = loom.linear %x, %w : tensor<4x8x64xf32>, tensor<64x256xf32> -> tensor<32x256xf32>
  return
}

// -----

func.func @linear_mixed_types(%x: tensor<8x64xf32>, %w: tensor<64x16xf16>) {
  // expected-error@+1 {{'loom.linear' op mixes element types 'f32' and 'f16'}}
  %0 = loom.linear %x, %w : tensor<8x64xf32>, tensor<64x16xf16> -> tensor<8x16xf32>
  return
}

// -----

func.func @matmul_lhs_rank(%a: tensor<64xf32>, %b: tensor<64x16xf32>) {
  // expected-error@+1 {{'loom.matmul' op lhs must be [..., M, K], got [64]}}
  %0 = loom.matmul %a, %b : tensor<64xf32>, tensor<64x16xf32> -> tensor<16xf32>
  return
}

// -----

func.func @matmul_rhs_rank(%a: tensor<8x64xf32>, %b: tensor<2x64x16xf32>) {
  // expected-error@+1 {{'loom.matmul' op rhs must be a matrix, got [2, 64, 16]}}
  %0 = loom.matmul %a, %b : tensor<8x64xf32>, tensor<2x64x16xf32> -> tensor<8x16xf32>
  return
}

// -----

func.func @matmul_contracting(%a: tensor<8x64xf32>, %b: tensor<32x16xf32>) {
  // expected-error@+1 {{'loom.matmul' op contracting dimensions differ: lhs [8, 64] has K = 64, rhs [32, 16] has K = 32}}
  %0 = loom.matmul %a, %b : tensor<8x64xf32>, tensor<32x16xf32> -> tensor<8x16xf32>
  return
}

// -----

// Forgetting transpose_rhs on the tied LM head.
func.func @matmul_contracting_transposed(%h: tensor<8x64xf32>, %wte: tensor<64x256xf32>) {
  // expected-error@+1 {{'loom.matmul' op contracting dimensions differ: lhs [8, 64] has K = 64, rhs [64, 256] has K = 256 (rhs transposed)}}
  %0 = loom.matmul %h, %wte transpose_rhs : tensor<8x64xf32>, tensor<64x256xf32> -> tensor<8x64xf32>
  return
}

// -----

func.func @matmul_result_shape(%h: tensor<4x8x64xf32>, %wte: tensor<256x64xf32>) {
  // expected-error@+1 {{'loom.matmul' op result shape [4, 8, 64] should be [4, 8, 256]}}
  %0 = loom.matmul %h, %wte transpose_rhs : tensor<4x8x64xf32>, tensor<256x64xf32> -> tensor<4x8x64xf32>
  return
}

// -----

func.func @matmul_mixed_types(%a: tensor<8x64xbf16>, %b: tensor<64x16xbf16>) {
  // expected-error@+1 {{'loom.matmul' op mixes element types 'bf16' and 'f32'}}
  %0 = loom.matmul %a, %b : tensor<8x64xbf16>, tensor<64x16xbf16> -> tensor<8x16xf32>
  return
}

// -----

func.func @layer_norm_scalar(%x: tensor<f32>, %w: tensor<1xf32>) {
  // expected-error@+1 {{'loom.layer_norm' op input must have rank >= 1}}
  %0 = loom.layer_norm %x, %w, %w : tensor<f32>, tensor<1xf32>, tensor<1xf32>
  return
}

// -----

func.func @layer_norm_weight_shape(%x: tensor<4x64xf32>, %w: tensor<4xf32>, %b: tensor<64xf32>) {
  // expected-error@+1 {{'loom.layer_norm' op weight and bias must be [64] (the normalized dimension), got [4]}}
  %0 = loom.layer_norm %x, %w, %b : tensor<4x64xf32>, tensor<4xf32>, tensor<64xf32>
  return
}

// -----

func.func @layer_norm_bias_shape(%x: tensor<4x64xf32>, %w: tensor<64xf32>, %b: tensor<1x64xf32>) {
  // expected-error@+1 {{'loom.layer_norm' op weight and bias must be [64] (the normalized dimension), got [1, 64]}}
  %0 = loom.layer_norm %x, %w, %b : tensor<4x64xf32>, tensor<64xf32>, tensor<1x64xf32>
  return
}

// -----

func.func @layer_norm_epsilon_zero(%x: tensor<4x64xf32>, %w: tensor<64xf32>) {
  // expected-error@+1 {{'loom.layer_norm' op epsilon must be in (0, 1), got 0}}
  %0 = loom.layer_norm %x, %w, %w {epsilon = 0.0 : f64} : tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32>
  return
}

// -----

func.func @layer_norm_epsilon_one(%x: tensor<4x64xf32>, %w: tensor<64xf32>) {
  // expected-error@+1 {{'loom.layer_norm' op epsilon must be in (0, 1), got 1}}
  %0 = loom.layer_norm %x, %w, %w {epsilon = 1.0 : f64} : tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32>
  return
}

// -----

func.func @layer_norm_epsilon_negative(%x: tensor<4x64xf32>, %w: tensor<64xf32>) {
  // expected-error@+1 {{'loom.layer_norm' op epsilon must be in (0, 1), got -1.000000e-05}}
  %0 = loom.layer_norm %x, %w, %w {epsilon = -1.0e-05 : f64} : tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32>
  return
}

// -----

func.func @layer_norm_epsilon_type(%x: tensor<4x64xf32>, %w: tensor<64xf32>) {
  // expected-error@+1 {{'loom.layer_norm' op attribute 'epsilon' failed to satisfy constraint: 64-bit float attribute}}
  %0 = loom.layer_norm %x, %w, %w {epsilon = 1.0e-05 : f32} : tensor<4x64xf32>, tensor<64xf32>, tensor<64xf32>
  return
}

// -----

func.func @layer_norm_mixed_types(%x: tensor<4x64xf32>, %w: tensor<64xf16>) {
  // expected-error@+1 {{'loom.layer_norm' op mixes element types 'f32' and 'f16'}}
  %0 = loom.layer_norm %x, %w, %w : tensor<4x64xf32>, tensor<64xf16>, tensor<64xf16>
  return
}

// -----

func.func @gelu_result_type(%x: tensor<4x64xf32>) {
  // expected-error@+1 {{'loom.gelu' op requires the same type for all operands and results}}
  %0 = "loom.gelu"(%x) : (tensor<4x64xf32>) -> tensor<4x64xf16>
  return
}

// -----

func.func @softmax_scalar(%x: tensor<f32>) {
  // expected-error@+1 {{'loom.softmax' op input must have rank >= 1}}
  %0 = loom.softmax %x : tensor<f32>
  return
}

// -----

func.func @softmax_result_type(%x: tensor<4x64xf32>) {
  // expected-error@+1 {{'loom.softmax' op requires the same type for all operands and results}}
  %0 = "loom.softmax"(%x) : (tensor<4x64xf32>) -> tensor<64x4xf32>
  return
}

// -----

func.func @attention_rank(%qkv: tensor<32x192xf32>) {
  // expected-error@+1 {{'loom.attention' op qkv must be [batch, seq, 3 * channels] or [batch, seq, 3, channels], got [32, 192]}}
  %0 = loom.attention %qkv {num_heads = 4 : i64} : tensor<32x192xf32> -> tensor<32x64xf32>
  return
}

// -----

func.func @attention_not_packed(%qkv: tensor<4x32x64xf32>) {
  // expected-error@+1 {{'loom.attention' op qkv must be [batch, seq, 3 * channels] or [batch, seq, 3, channels], got [4, 32, 64]}}
  %0 = loom.attention %qkv {num_heads = 4 : i64} : tensor<4x32x64xf32> -> tensor<4x32x64xf32>
  return
}

// -----

func.func @attention_qkv_dim_not_three(%qkv: tensor<4x32x2x64xf32>) {
  // expected-error@+1 {{'loom.attention' op qkv must be [batch, seq, 3 * channels] or [batch, seq, 3, channels], got [4, 32, 2, 64]}}
  %0 = loom.attention %qkv {num_heads = 4 : i64} : tensor<4x32x2x64xf32> -> tensor<4x32x64xf32>
  return
}

// -----

func.func @attention_zero_heads(%qkv: tensor<4x32x192xf32>) {
  // expected-error@+1 {{'loom.attention' op num_heads must be positive, got 0}}
  %0 = loom.attention %qkv {num_heads = 0 : i64} : tensor<4x32x192xf32> -> tensor<4x32x64xf32>
  return
}

// -----

func.func @attention_negative_heads(%qkv: tensor<4x32x192xf32>) {
  // expected-error@+1 {{'loom.attention' op num_heads must be positive, got -4}}
  %0 = loom.attention %qkv {num_heads = -4 : i64} : tensor<4x32x192xf32> -> tensor<4x32x64xf32>
  return
}

// -----

func.func @attention_heads_divide(%qkv: tensor<4x32x192xf32>) {
  // expected-error@+1 {{'loom.attention' op channels 64 are not divisible by num_heads 12}}
  %0 = loom.attention %qkv {num_heads = 12 : i64} : tensor<4x32x192xf32> -> tensor<4x32x64xf32>
  return
}

// -----

func.func @attention_result_shape(%qkv: tensor<4x32x192xf32>) {
  // expected-error@+1 {{'loom.attention' op result shape [4, 32, 192] should be [4, 32, 64]}}
  %0 = loom.attention %qkv {num_heads = 4 : i64} : tensor<4x32x192xf32> -> tensor<4x32x192xf32>
  return
}

// -----

func.func @attention_mixed_types(%qkv: tensor<4x32x192xf32>) {
  // expected-error@+1 {{'loom.attention' op mixes element types 'f32' and 'bf16'}}
  %0 = loom.attention %qkv {num_heads = 4 : i64} : tensor<4x32x192xf32> -> tensor<4x32x64xbf16>
  return
}

// -----

func.func @attention_missing_heads(%qkv: tensor<4x32x192xf32>) {
  // expected-error@+1 {{'loom.attention' op requires attribute 'num_heads'}}
  %0 = loom.attention %qkv : tensor<4x32x192xf32> -> tensor<4x32x64xf32>
  return
}

// -----

func.func @cross_entropy_logits_rank(%l: tensor<256xf32>, %t: tensor<i32>) {
  // expected-error@+1 {{'loom.cross_entropy' op logits must be [..., vocab], got [256]}}
  %0 = loom.cross_entropy %l, %t : tensor<256xf32>, tensor<i32> -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_targets(%l: tensor<4x32x256xf32>, %t: tensor<4x16xi32>) {
  // expected-error@+1 {{'loom.cross_entropy' op targets shape [4, 16] should be the logits shape without the vocab dimension [4, 32]}}
  %0 = loom.cross_entropy %l, %t : tensor<4x32x256xf32>, tensor<4x16xi32> -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_mixed_types(%l: tensor<4x256xf32>, %t: tensor<4xi32>) {
  // expected-error@+1 {{'loom.cross_entropy' op mixes element types 'f32' and 'f16'}}
  %0 = loom.cross_entropy %l, %t : tensor<4x256xf32>, tensor<4xi32> -> tensor<f16>
  return
}

// -----

func.func @row_max_shape(%x: tensor<4x32x128xf32>) {
  // expected-error@+1 {{'loom.row_max' op result shape [4, 128] should be the per-token shape [4, 32]}}
  %0 = loom.row_max %x : tensor<4x32x128xf32> -> tensor<4x128xf32>
  return
}

// -----

func.func @cross_entropy_sums_targets(%l: tensor<4x32x128xf32>, %m: tensor<4x32xf32>, %t: tensor<4x31xi32>) {
  // expected-error@+1 {{'loom.cross_entropy_sums' op targets shape [4, 31] should be the per-token shape [4, 32]}}
  %0:2 = loom.cross_entropy_sums %l, %m, %t : tensor<4x32x128xf32>, tensor<4x32xf32>, tensor<4x31xi32> -> tensor<4x32xf32>, tensor<4x32xf32>
  return
}

// -----

// Vocabulary padding: the real columns are at least one and, while the
// columns are whole, no more than there are.
func.func @row_max_vocab_size(%x: tensor<4x32x128xf32>) {
  // expected-error@+1 {{'loom.row_max' op vocab_size = 200 must be in [1, 128] (the logits' columns; from vocab_size on they are padding)}}
  %0 = loom.row_max %x {vocab_size = 200 : i64} : tensor<4x32x128xf32> -> tensor<4x32xf32>
  return
}

// -----

// The whole-vocabulary loss too (--loom-pad-vocab sets it).
func.func @cross_entropy_vocab_size(%l: tensor<4x32x128xf32>, %t: tensor<4x32xi32>) {
  // expected-error@+1 {{'loom.cross_entropy' op vocab_size = 129 must be in [1, 128] (the logits' columns; from vocab_size on they are padding)}}
  %0 = loom.cross_entropy %l, %t {vocab_size = 129 : i64} : tensor<4x32x128xf32>, tensor<4x32xi32> -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_from_sums_tokens(%m: tensor<4x32xf32>, %s: tensor<4x32xf32>) {
  // expected-error@+1 {{'loom.cross_entropy_from_sums' op num_tokens 100 is less than this rank's 128 tokens}}
  %0 = loom.cross_entropy_from_sums %m, %s, %s {num_tokens = 100 : i64} : tensor<4x32xf32>, tensor<4x32xf32>, tensor<4x32xf32> -> tensor<f32>
  return
}
