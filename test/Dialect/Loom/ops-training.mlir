// RUN: loom-opt %s | loom-opt | FileCheck %s
// RUN: loom-opt %s --mlir-print-op-generic | loom-opt | FileCheck %s

// Every backward and optimizer op round-trips.
// CHECK-LABEL: func.func @backward
func.func @backward(%dy: tensor<2x4x8xf32>, %x: tensor<2x4x8xf32>, %ids: tensor<2x4xi32>,
                    %w: tensor<8x8xf32>, %c: tensor<8xf32>, %qkv: tensor<2x4x24xf32>,
                    %dl: tensor<f32>, %logits: tensor<2x4x16xf32>, %wte: tensor<16x8xf32>,
                    %pos: tensor<4x8xf32>, %stat: tensor<2x4xf32>) {
  // CHECK: loom.embedding_grad %{{.*}}, %{{.*}} : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<16x8xf32>
  %0 = loom.embedding_grad %dy, %ids : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<16x8xf32>
  // CHECK: loom.reduce_leading %{{.*}} : tensor<2x4x8xf32> -> tensor<4x8xf32>
  %1 = loom.reduce_leading %dy : tensor<2x4x8xf32> -> tensor<4x8xf32>
  // CHECK: loom.linear_grad {{.*}} -> tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>
  %2:3 = loom.linear_grad %dy, %x, %w : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>
  // CHECK: loom.linear_grad {{.*}} -> tensor<2x4x8xf32>, tensor<8x8xf32>{{$}}
  %3:2 = loom.linear_grad %dy, %x, %w : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32>, tensor<8x8xf32>
  // CHECK: loom.matmul_grad {{.*}} transpose_rhs : tensor<2x4x16xf32>
  %4:2 = loom.matmul_grad %logits, %x, %wte transpose_rhs : tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x8xf32>, tensor<16x8xf32>
  // CHECK: loom.layer_norm_grad {{.*}} {epsilon = 1.000000e-03 : f64}
  %5:3 = loom.layer_norm_grad %dy, %x, %c {epsilon = 1.0e-3 : f64} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32> -> tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  // CHECK: loom.gelu_grad %{{.*}}, %{{.*}} : tensor<2x4x8xf32>
  %6 = loom.gelu_grad %dy, %x : tensor<2x4x8xf32>
  // CHECK: loom.attention_grad {{.*}} {num_heads = 2 : i64} : tensor<2x4x8xf32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  %7 = loom.attention_grad %dy, %qkv {num_heads = 2 : i64} : tensor<2x4x8xf32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  // CHECK: loom.attention_grad %{{.*}}, %{{.*}} saved %{{.*}}, %{{.*}} {num_heads = 2 : i64} : tensor<2x4x8xf32>, tensor<2x4x24xf32>, tensor<2x4x8xf32>, tensor<2x2x4xf32> -> tensor<2x4x24xf32>
  %y, %lse = loom.attention %qkv {num_heads = 2 : i64} : tensor<2x4x24xf32> -> tensor<2x4x8xf32>, tensor<2x2x4xf32>
  %saved_grad = loom.attention_grad %dy, %qkv saved %y, %lse {num_heads = 2 : i64} : tensor<2x4x8xf32>, tensor<2x4x24xf32>, tensor<2x4x8xf32>, tensor<2x2x4xf32> -> tensor<2x4x24xf32>
  // CHECK: loom.softmax_grad %{{.*}}, %{{.*}} : tensor<2x4x8xf32>
  %8 = loom.softmax_grad %dy, %x : tensor<2x4x8xf32>
  // CHECK: loom.cross_entropy_grad {{.*}} -> tensor<2x4x16xf32>
  %9 = loom.cross_entropy_grad %dl, %logits, %ids : tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<2x4x16xf32>
  // CHECK: loom.cross_entropy_sums_grad {{.*}} {num_tokens = 16 : i64, vocab_axes = ["tp"]} : tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xi32> -> tensor<2x4x16xf32>
  %12 = loom.cross_entropy_sums_grad %dl, %logits, %stat, %stat, %ids {num_tokens = 16 : i64, vocab_axes = ["tp"]} : tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xi32> -> tensor<2x4x16xf32>
  // CHECK: loom.slice_grad %{{.*}} dim 0 offset 2 : tensor<4x8xf32> -> tensor<8x8xf32>
  %10 = loom.slice_grad %pos dim 0 offset 2 : tensor<4x8xf32> -> tensor<8x8xf32>
  // CHECK: loom.fill 2.500000e-01 : tensor<f32>
  %11 = loom.fill 0.25 : tensor<f32>
  return
}

// CHECK-LABEL: func.func @optimizer
func.func @optimizer(%p: tensor<8x8xf32>, %g: tensor<8x8xf32>, %m: tensor<8x8xf32>, %v: tensor<8x8xf32>,
                     %b: tensor<8xf32>, %lr: tensor<f32>, %step: tensor<f32>) {
  // CHECK: %[[S:.*]] = loom.sum_squares %{{.*}}, %{{.*}} : tensor<8x8xf32>, tensor<8xf32> -> tensor<f32>
  %s = loom.sum_squares %g, %b : tensor<8x8xf32>, tensor<8xf32> -> tensor<f32>
  // CHECK: %[[N:.*]], %[[C:.*]] = loom.clip_coef %[[S]] {max_norm = 1.000000e+00 : f64} : tensor<f32> -> tensor<f32>, tensor<f32>
  %n, %c = loom.clip_coef %s {max_norm = 1.0 : f64} : tensor<f32> -> tensor<f32>, tensor<f32>
  // CHECK: loom.adamw {{.*}}, %[[C]] {beta1 = 9.000000e-01 : f64, beta2 = 0.9499999{{[0-9]*}} : f64, eps = 1.000000e-08 : f64, weight_decay = 1.000000e-01 : f64} : tensor<8x8xf32>, tensor<f32>
  %np, %nm, %nv = loom.adamw %p, %g, %m, %v, %lr, %step, %c {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64} : tensor<8x8xf32>, tensor<f32>
  return
}

// One operand of any float type; max_norm <= 0 (clipping off) is valid.
// CHECK-LABEL: func.func @clip_off
func.func @clip_off(%g: tensor<4x2x3xbf16>) -> (tensor<f32>, tensor<f32>) {
  // CHECK: loom.sum_squares %{{.*}} : tensor<4x2x3xbf16> -> tensor<f32>
  %s = loom.sum_squares %g : tensor<4x2x3xbf16> -> tensor<f32>
  // CHECK: loom.clip_coef %{{.*}} {max_norm = 0.000000e+00 : f64}
  %n, %c = loom.clip_coef %s {max_norm = 0.0 : f64} : tensor<f32> -> tensor<f32>, tensor<f32>
  return %n, %c : tensor<f32>, tensor<f32>
}
