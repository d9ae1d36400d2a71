// RUN: loom-opt %s -split-input-file -verify-diagnostics

// The diagnostics of loom.cast, of AdamW's gradient type and of the
// master-weights role (bf16 mixed precision).

func.func @f(%x: tensor<4x8xf32>) {
  // expected-error@+1 {{'loom.cast' op changes the shape from [4, 8] to [32]; a cast keeps the shape (reshape separately)}}
  %0 = loom.cast %x : tensor<4x8xf32> -> tensor<32xbf16>
  return
}

// -----

func.func @f(%x: tensor<4x8xf32>) {
  // expected-error@+1 {{'loom.cast' op casts 'f32' to 'f16'; only f32 -> bf16 and bf16 -> f32 are supported}}
  %0 = loom.cast %x : tensor<4x8xf32> -> tensor<4x8xf16>
  return
}

// -----

func.func @f(%x: tensor<4x8xf32>) {
  // expected-error@+1 {{'loom.cast' op casts 'f32' to 'f32'; only f32 -> bf16 and bf16 -> f32 are supported}}
  %0 = loom.cast %x : tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @f(%p: tensor<8xf32>, %g: tensor<4xbf16>, %s: tensor<f32>) {
  // expected-error@+1 {{'loom.adamw' op grad has shape [4] but should be [8]}}
  %a, %b, %c = loom.adamw %p, %g, %p, %p, %s, %s, %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : tensor<8xf32>, tensor<4xbf16>, tensor<f32>
  return
}

// -----

func.func @f(%p: tensor<8xbf16>, %g: tensor<8xf32>, %s: tensor<f32>) {
  // expected-error@+1 {{'loom.adamw' op grad element type 'f32' does not fit parameter element type 'bf16'; it must be the parameter's, or bf16 for f32 master weights (mixed precision)}}
  %a, %b, %c = loom.adamw %p, %g, %p, %p, %s, %s, %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : tensor<8xbf16>, tensor<8xf32>, tensor<f32>
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 holds master weights; they must be an f32 tensor named after their parameter (loom.name), not 'tensor<8xbf16>'}}
func.func @f(%w: tensor<8xbf16> {loom.name = "w", loom.role = #loom.role<master>}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 holds master weights; they must be an f32 tensor named after their parameter (loom.name), not 'tensor<8xf32>'}}
func.func @f(%w: tensor<8xf32> {loom.role = #loom.role<master>}) {
  return
}

// -----

// Rank-0 scalars may differ (the f32 loss of bf16 logits); tensors may not.
func.func @f(%a: tensor<4xbf16>, %b: tensor<4xf32>) {
  // expected-error@+1 {{'loom.add' op mixes element types 'bf16' and 'f32'; cast explicitly before combining}}
  %0 = loom.add %a, %b : tensor<4xbf16>, tensor<4xf32>
  return
}

// -----

// Vocab-parallel loss statistics: the logits' type or f32, all alike.
func.func @f(%l: tensor<4x16xbf16>) {
  // expected-error@+1 {{'loom.row_max' op has per-token statistics of element type 'f16' next to 'bf16' logits; they must all be the logits' type or f32}}
  %0 = loom.row_max %l : tensor<4x16xbf16> -> tensor<4xf16>
  return
}

// -----

func.func @f(%d: tensor<f32>, %l: tensor<4x16xbf16>, %m: tensor<4xf32>, %s: tensor<4xf32>, %t: tensor<4xi32>) {
  // expected-error@+1 {{'loom.cross_entropy_sums_grad' op mixes element types 'bf16' and 'f32' in its logits; cast explicitly before combining}}
  %0 = loom.cross_entropy_sums_grad %d, %l, %m, %s, %t : tensor<f32>, tensor<4x16xbf16>, tensor<4xf32>, tensor<4xf32>, tensor<4xi32> -> tensor<4x16xf32>
  return
}
