// RUN: loom-opt %s | loom-opt | FileCheck %s

// Round trip of the compute ops of the training graph.

// CHECK-LABEL: func.func @embedding
// CHECK-SAME: (%[[TABLE:.*]]: tensor<256x64xf32>, %[[IDS:.*]]: tensor<4x32xi32>)
// CHECK: %[[E:.*]] = loom.embedding %[[TABLE]], %[[IDS]] : tensor<256x64xf32>, tensor<4x32xi32> -> tensor<4x32x64xf32>
// CHECK: return %[[E]]
func.func @embedding(%table: tensor<256x64xf32>, %ids: tensor<4x32xi32>) -> tensor<4x32x64xf32> {
  %0 = loom.embedding %table, %ids : tensor<256x64xf32>, tensor<4x32xi32> -> tensor<4x32x64xf32>
  return %0 : tensor<4x32x64xf32>
}

// A vocab-parallel shard of the table: this rank's rows of it.
// CHECK-LABEL: func.func @embedding_rows
// CHECK: loom.embedding %{{.*}}, %{{.*}} {row_axes = ["tp"]} : tensor<128x64xf32>, tensor<4x32xi32> -> tensor<4x32x64xf32>
func.func @embedding_rows(%table: tensor<128x64xf32>, %ids: tensor<4x32xi32>) -> tensor<4x32x64xf32> {
  %0 = loom.embedding %table, %ids {row_axes = ["tp"]} : tensor<128x64xf32>, tensor<4x32xi32> -> tensor<4x32x64xf32>
  return %0 : tensor<4x32x64xf32>
}

// CHECK-LABEL: func.func @add_same_shape
// CHECK-SAME: (%[[A:.*]]: tensor<4x32x64xf32>, %[[B:.*]]: tensor<4x32x64xf32>)
// CHECK: loom.add %[[A]], %[[B]] : tensor<4x32x64xf32>, tensor<4x32x64xf32>
func.func @add_same_shape(%a: tensor<4x32x64xf32>, %b: tensor<4x32x64xf32>) -> tensor<4x32x64xf32> {
  %0 = loom.add %a, %b : tensor<4x32x64xf32>, tensor<4x32x64xf32>
  return %0 : tensor<4x32x64xf32>
}

// The rhs may be a trailing part of the lhs shape (position embeddings).
// CHECK-LABEL: func.func @add_trailing_broadcast
// CHECK-SAME: (%[[A:.*]]: tensor<4x32x64xf32>, %[[P:.*]]: tensor<32x64xf32>, %[[V:.*]]: tensor<64xf32>)
// CHECK: %[[X:.*]] = loom.add %[[A]], %[[P]] : tensor<4x32x64xf32>, tensor<32x64xf32>
// CHECK: %[[Y:.*]] = loom.add %[[X]], %[[V]] : tensor<4x32x64xf32>, tensor<64xf32>
// CHECK: return %[[Y]]
func.func @add_trailing_broadcast(%a: tensor<4x32x64xf32>, %p: tensor<32x64xf32>, %v: tensor<64xf32>) -> tensor<4x32x64xf32> {
  %0 = loom.add %a, %p : tensor<4x32x64xf32>, tensor<32x64xf32>
  %1 = loom.add %0, %v : tensor<4x32x64xf32>, tensor<64xf32>
  return %1 : tensor<4x32x64xf32>
}

// CHECK-LABEL: func.func @linear_with_bias
// CHECK-SAME: (%[[X:.*]]: tensor<4x32x64xf32>, %[[W:.*]]: tensor<64x192xf32>, %[[B:.*]]: tensor<192xf32>)
// CHECK: loom.linear %[[X]], %[[W]], %[[B]] : tensor<4x32x64xf32>, tensor<64x192xf32>, tensor<192xf32> -> tensor<4x32x192xf32>
func.func @linear_with_bias(%x: tensor<4x32x64xf32>, %w: tensor<64x192xf32>, %b: tensor<192xf32>) -> tensor<4x32x192xf32> {
  %0 = loom.linear %x, %w, %b : tensor<4x32x64xf32>, tensor<64x192xf32>, tensor<192xf32> -> tensor<4x32x192xf32>
  return %0 : tensor<4x32x192xf32>
}

// A weight with several output dimensions: GPT-2's c_attn as [C, 3, C].
// CHECK-LABEL: func.func @linear_output_dims
// CHECK: loom.linear %{{.*}}, %{{.*}}, %{{.*}} : tensor<4x32x64xf32>, tensor<64x3x64xf32>, tensor<3x64xf32> -> tensor<4x32x3x64xf32>
func.func @linear_output_dims(%x: tensor<4x32x64xf32>, %w: tensor<64x3x64xf32>, %b: tensor<3x64xf32>) -> tensor<4x32x3x64xf32> {
  %0 = loom.linear %x, %w, %b : tensor<4x32x64xf32>, tensor<64x3x64xf32>, tensor<3x64xf32> -> tensor<4x32x3x64xf32>
  return %0 : tensor<4x32x3x64xf32>
}

// CHECK-LABEL: func.func @linear_without_bias
// CHECK-SAME: (%[[X:.*]]: tensor<8x64xf32>, %[[W:.*]]: tensor<64x16xf32>)
// CHECK: loom.linear %[[X]], %[[W]] : tensor<8x64xf32>, tensor<64x16xf32> -> tensor<8x16xf32>
func.func @linear_without_bias(%x: tensor<8x64xf32>, %w: tensor<64x16xf32>) -> tensor<8x16xf32> {
  %0 = loom.linear %x, %w : tensor<8x64xf32>, tensor<64x16xf32> -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// CHECK-LABEL: func.func @matmul
// CHECK-SAME: (%[[A:.*]]: tensor<4x32x64xf32>, %[[B:.*]]: tensor<64x16xf32>)
// CHECK: loom.matmul %[[A]], %[[B]] : tensor<4x32x64xf32>, tensor<64x16xf32> -> tensor<4x32x16xf32>
// CHECK-NOT: transpose_rhs
// CHECK: return
func.func @matmul(%a: tensor<4x32x64xf32>, %b: tensor<64x16xf32>) -> tensor<4x32x16xf32> {
  %0 = loom.matmul %a, %b : tensor<4x32x64xf32>, tensor<64x16xf32> -> tensor<4x32x16xf32>
  return %0 : tensor<4x32x16xf32>
}

// The tied LM head: rhs is [N, K].
// CHECK-LABEL: func.func @matmul_transpose_rhs
// CHECK-SAME: (%[[H:.*]]: tensor<4x32x64xf32>, %[[WTE:.*]]: tensor<256x64xf32>)
// CHECK: loom.matmul %[[H]], %[[WTE]] transpose_rhs : tensor<4x32x64xf32>, tensor<256x64xf32> -> tensor<4x32x256xf32>
func.func @matmul_transpose_rhs(%h: tensor<4x32x64xf32>, %wte: tensor<256x64xf32>) -> tensor<4x32x256xf32> {
  %0 = loom.matmul %h, %wte transpose_rhs : tensor<4x32x64xf32>, tensor<256x64xf32> -> tensor<4x32x256xf32>
  return %0 : tensor<4x32x256xf32>
}

// The default epsilon (1e-5) is not printed; another one is.
// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: (%[[X:.*]]: tensor<4x32x64xf32>, %[[W:.*]]: tensor<64xf32>, %[[B:.*]]: tensor<64xf32>)
// CHECK: %[[D:.*]] = loom.layer_norm %[[X]], %[[W]], %[[B]] : tensor<4x32x64xf32>, tensor<64xf32>, tensor<64xf32>
// CHECK: %[[E:.*]] = loom.layer_norm %[[X]], %[[W]], %[[B]] : tensor<4x32x64xf32>, tensor<64xf32>, tensor<64xf32>
// CHECK: %[[C:.*]] = loom.layer_norm %[[X]], %[[W]], %[[B]] {epsilon = 1.000000e-03 : f64} : tensor<4x32x64xf32>, tensor<64xf32>, tensor<64xf32>
// CHECK: return %[[D]], %[[E]], %[[C]]
func.func @layer_norm(%x: tensor<4x32x64xf32>, %w: tensor<64xf32>, %b: tensor<64xf32>) -> (tensor<4x32x64xf32>, tensor<4x32x64xf32>, tensor<4x32x64xf32>) {
  %0 = loom.layer_norm %x, %w, %b : tensor<4x32x64xf32>, tensor<64xf32>, tensor<64xf32>
  %1 = loom.layer_norm %x, %w, %b {epsilon = 1.0e-05 : f64} : tensor<4x32x64xf32>, tensor<64xf32>, tensor<64xf32>
  %2 = loom.layer_norm %x, %w, %b {epsilon = 1.0e-03 : f64} : tensor<4x32x64xf32>, tensor<64xf32>, tensor<64xf32>
  return %0, %1, %2 : tensor<4x32x64xf32>, tensor<4x32x64xf32>, tensor<4x32x64xf32>
}

// CHECK-LABEL: func.func @gelu
// CHECK-SAME: (%[[X:.*]]: tensor<4x32x256xf32>)
// CHECK: loom.gelu %[[X]] : tensor<4x32x256xf32>
func.func @gelu(%x: tensor<4x32x256xf32>) -> tensor<4x32x256xf32> {
  %0 = loom.gelu %x : tensor<4x32x256xf32>
  return %0 : tensor<4x32x256xf32>
}

// CHECK-LABEL: func.func @attention
// CHECK-SAME: (%[[QKV:.*]]: tensor<4x32x192xf32>)
// CHECK: loom.attention %[[QKV]] {num_heads = 4 : i64} : tensor<4x32x192xf32> -> tensor<4x32x64xf32>
func.func @attention(%qkv: tensor<4x32x192xf32>) -> tensor<4x32x64xf32> {
  %0 = loom.attention %qkv {num_heads = 4 : i64} : tensor<4x32x192xf32> -> tensor<4x32x64xf32>
  return %0 : tensor<4x32x64xf32>
}

// q, k and v as a dimension of their own.
// CHECK-LABEL: func.func @attention_lse
// CHECK: %{{.*}}, %{{.*}} = loom.attention %{{.*}} {num_heads = 4 : i64} : tensor<4x32x3x64xbf16> -> tensor<4x32x64xbf16>, tensor<4x4x32xf32>
func.func @attention_lse(%qkv: tensor<4x32x3x64xbf16>) -> tensor<4x4x32xf32> {
  %0, %1 = loom.attention %qkv {num_heads = 4 : i64} : tensor<4x32x3x64xbf16> -> tensor<4x32x64xbf16>, tensor<4x4x32xf32>
  return %1 : tensor<4x4x32xf32>
}

// CHECK-LABEL: func.func @attention_qkv_dim
// CHECK: loom.attention %{{.*}} {num_heads = 4 : i64} : tensor<4x32x3x64xf32> -> tensor<4x32x64xf32>
func.func @attention_qkv_dim(%qkv: tensor<4x32x3x64xf32>) -> tensor<4x32x64xf32> {
  %0 = loom.attention %qkv {num_heads = 4 : i64} : tensor<4x32x3x64xf32> -> tensor<4x32x64xf32>
  return %0 : tensor<4x32x64xf32>
}

// Megatron's vocab-parallel cross-entropy, step by step.
// CHECK-LABEL: func.func @vocab_parallel_loss
// CHECK: %[[M:.*]] = loom.row_max %{{.*}} : tensor<4x32x128xf32> -> tensor<4x32xf32>
// CHECK: %[[S:.*]], %[[T:.*]] = loom.cross_entropy_sums %{{.*}}, %[[M]], %{{.*}} {vocab_axes = ["tp"]} : tensor<4x32x128xf32>, tensor<4x32xf32>, tensor<4x32xi32> -> tensor<4x32xf32>, tensor<4x32xf32>
// CHECK: loom.cross_entropy_from_sums %[[M]], %[[S]], %[[T]] {num_tokens = 256 : i64} : tensor<4x32xf32>, tensor<4x32xf32>, tensor<4x32xf32> -> tensor<f32>
func.func @vocab_parallel_loss(%logits: tensor<4x32x128xf32>, %targets: tensor<4x32xi32>) -> tensor<f32> {
  %m = loom.row_max %logits : tensor<4x32x128xf32> -> tensor<4x32xf32>
  %s, %t = loom.cross_entropy_sums %logits, %m, %targets {vocab_axes = ["tp"]} : tensor<4x32x128xf32>, tensor<4x32xf32>, tensor<4x32xi32> -> tensor<4x32xf32>, tensor<4x32xf32>
  %l = loom.cross_entropy_from_sums %m, %s, %t {num_tokens = 256 : i64} : tensor<4x32xf32>, tensor<4x32xf32>, tensor<4x32xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// CHECK-LABEL: func.func @softmax
// CHECK-SAME: (%[[X:.*]]: tensor<4x32x256xf16>)
// CHECK: loom.softmax %[[X]] : tensor<4x32x256xf16>
func.func @softmax(%x: tensor<4x32x256xf16>) -> tensor<4x32x256xf16> {
  %0 = loom.softmax %x : tensor<4x32x256xf16>
  return %0 : tensor<4x32x256xf16>
}

// CHECK-LABEL: func.func @cross_entropy
// CHECK-SAME: (%[[L:.*]]: tensor<4x32x256xf32>, %[[T:.*]]: tensor<4x32xi32>) -> tensor<f32>
// CHECK: loom.cross_entropy %[[L]], %[[T]] : tensor<4x32x256xf32>, tensor<4x32xi32> -> tensor<f32>
func.func @cross_entropy(%logits: tensor<4x32x256xf32>, %targets: tensor<4x32xi32>) -> tensor<f32> {
  %0 = loom.cross_entropy %logits, %targets : tensor<4x32x256xf32>, tensor<4x32xi32> -> tensor<f32>
  return %0 : tensor<f32>
}

// Other float element types are accepted when used consistently.
// CHECK-LABEL: func.func @bf16_linear
// CHECK: loom.linear %{{.*}}, %{{.*}} : tensor<8x64xbf16>, tensor<64x16xbf16> -> tensor<8x16xbf16>
func.func @bf16_linear(%x: tensor<8x64xbf16>, %w: tensor<64x16xbf16>) -> tensor<8x16xbf16> {
  %0 = loom.linear %x, %w : tensor<8x64xbf16>, tensor<64x16xbf16> -> tensor<8x16xbf16>
  return %0 : tensor<8x16xbf16>
}
