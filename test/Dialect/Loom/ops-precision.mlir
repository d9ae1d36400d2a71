// RUN: loom-opt %s | loom-opt | FileCheck %s

// Round trip of what bf16 mixed precision (--loom-mixed-precision) writes:
// loom.cast both ways, AdamW of f32 master weights from a bf16 gradient,
// the master-weights role, and f32 scalars next to bf16 tensors.

// CHECK-LABEL: func.func @cast
func.func @cast(%x: tensor<4x8xf32>, %y: tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xf32>) {
  // CHECK: loom.cast %{{.*}} : tensor<4x8xf32> -> tensor<4x8xbf16>
  %0 = loom.cast %x : tensor<4x8xf32> -> tensor<4x8xbf16>
  // CHECK: loom.cast %{{.*}} : tensor<4x8xbf16> -> tensor<4x8xf32>
  %1 = loom.cast %y : tensor<4x8xbf16> -> tensor<4x8xf32>
  return %0, %1 : tensor<4x8xbf16>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @master_update
// CHECK-SAME: loom.role = #loom.role<master>
func.func @master_update(%w: tensor<8x8xf32> {loom.name = "w", loom.role = #loom.role<master>},
                         %g: tensor<8x8xbf16>, %m: tensor<8x8xf32>, %v: tensor<8x8xf32>,
                         %lr: tensor<f32>, %step: tensor<f32>, %c: tensor<f32>) -> tensor<8x8xbf16> {
  // The gradient's type is printed only where it differs from the
  // parameter's.
  // CHECK: loom.adamw {{.*}} : tensor<8x8xf32>, tensor<8x8xbf16>, tensor<f32>
  %np, %nm, %nv = loom.adamw %w, %g, %m, %v, %lr, %step, %c {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64} : tensor<8x8xf32>, tensor<8x8xbf16>, tensor<f32>
  // CHECK: loom.adamw {{.*}} : tensor<8x8xf32>, tensor<f32>
  %p2, %m2, %v2 = loom.adamw %w, %m, %m, %v, %lr, %step, %c {beta1 = 0.9 : f64, beta2 = 0.95 : f64, eps = 1.0e-8 : f64, weight_decay = 0.1 : f64} : tensor<8x8xf32>, tensor<f32>
  %p = loom.cast %np : tensor<8x8xf32> -> tensor<8x8xbf16>
  return %p : tensor<8x8xbf16>
}

// CHECK-LABEL: func.func @bf16_loss
func.func @bf16_loss(%logits: tensor<2x4x16xbf16>, %t: tensor<2x4xi32>, %g: tensor<8xbf16>) -> (tensor<f32>, tensor<2x4x16xbf16>, tensor<f32>) {
  // CHECK: loom.cross_entropy %{{.*}} : tensor<2x4x16xbf16>, tensor<2x4xi32> -> tensor<f32>
  %loss = loom.cross_entropy %logits, %t : tensor<2x4x16xbf16>, tensor<2x4xi32> -> tensor<f32>
  %seed = loom.fill 1.0 : tensor<f32>
  // CHECK: loom.cross_entropy_grad {{.*}} : tensor<f32>, tensor<2x4x16xbf16>, tensor<2x4xi32> -> tensor<2x4x16xbf16>
  %d = loom.cross_entropy_grad %seed, %logits, %t : tensor<f32>, tensor<2x4x16xbf16>, tensor<2x4xi32> -> tensor<2x4x16xbf16>
  // CHECK: loom.sum_squares %{{.*}} : tensor<8xbf16> -> tensor<f32>
  %s = loom.sum_squares %g : tensor<8xbf16> -> tensor<f32>
  return %loss, %d, %s : tensor<f32>, tensor<2x4x16xbf16>, tensor<f32>
}

// bf16 logits with f32 per-token statistics (the vocab-parallel loss under
// mixed precision).
// CHECK-LABEL: func.func @vocab_parallel_loss
func.func @vocab_parallel_loss(%d: tensor<f32>, %l: tensor<4x16xbf16>, %t: tensor<4xi32>) -> (tensor<f32>, tensor<4x16xbf16>) {
  // CHECK: loom.row_max %{{.*}} : tensor<4x16xbf16> -> tensor<4xf32>
  %m = loom.row_max %l : tensor<4x16xbf16> -> tensor<4xf32>
  // CHECK: loom.cross_entropy_sums {{.*}} : tensor<4x16xbf16>, tensor<4xf32>, tensor<4xi32> -> tensor<4xf32>, tensor<4xf32>
  %s, %tl = loom.cross_entropy_sums %l, %m, %t : tensor<4x16xbf16>, tensor<4xf32>, tensor<4xi32> -> tensor<4xf32>, tensor<4xf32>
  %loss = loom.cross_entropy_from_sums %m, %s, %tl : tensor<4xf32>, tensor<4xf32>, tensor<4xf32> -> tensor<f32>
  // CHECK: loom.cross_entropy_sums_grad {{.*}} -> tensor<4x16xbf16>
  %g = loom.cross_entropy_sums_grad %d, %l, %m, %s, %t : tensor<f32>, tensor<4x16xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32> -> tensor<4x16xbf16>
  return %loss, %g : tensor<f32>, tensor<4x16xbf16>
}
