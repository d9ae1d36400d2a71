// RUN: loom-opt %s -split-input-file -verify-diagnostics

func.func @f(%dy: tensor<2x4x8xf32>, %ids: tensor<2x4xi32>) {
  // expected-error@+1 {{'loom.embedding_grad' op result must be [vocab, width], got [16]}}
  %0 = loom.embedding_grad %dy, %ids : tensor<2x4x8xf32>, tensor<2x4xi32> -> tensor<16xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x4x8xf32>, %ids: tensor<2x3xi32>) {
  // expected-error@+1 {{'loom.embedding_grad' op dout has shape [2, 4, 8] but should be [2, 3, 8]}}
  %0 = loom.embedding_grad %dy, %ids : tensor<2x4x8xf32>, tensor<2x3xi32> -> tensor<16x8xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x4x8xf32>) {
  // expected-error@+1 {{'loom.reduce_leading' op result shape [2, 8] must equal the trailing dimensions of the input shape [2, 4, 8]}}
  %0 = loom.reduce_leading %dy : tensor<2x4x8xf32> -> tensor<2x8xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x8xf32>, %x: tensor<2x4xf32>, %w: tensor<8x8xf32>) {
  // expected-error@+1 {{'loom.linear_grad' op input [2, 4] and weight [8, 8] do not form a linear layer [..., K] x [K, N...]}}
  %0:2 = loom.linear_grad %dy, %x, %w : tensor<2x8xf32>, tensor<2x4xf32>, tensor<8x8xf32> -> tensor<2x4xf32>, tensor<8x8xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x6xf32>, %x: tensor<2x8xf32>, %w: tensor<8x8xf32>) {
  // expected-error@+1 {{'loom.linear_grad' op dout has shape [2, 6] but should be [2, 8]}}
  %0:2 = loom.linear_grad %dy, %x, %w : tensor<2x6xf32>, tensor<2x8xf32>, tensor<8x8xf32> -> tensor<2x8xf32>, tensor<8x8xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x8xf32>, %x: tensor<2x8xf32>, %w: tensor<8x8xf32>) {
  // expected-error@+1 {{'loom.linear_grad' op bias gradient has shape [4] but should be [8]}}
  %0:3 = loom.linear_grad %dy, %x, %w : tensor<2x8xf32>, tensor<2x8xf32>, tensor<8x8xf32> -> tensor<2x8xf32>, tensor<8x8xf32>, tensor<4xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x16xf32>, %x: tensor<2x8xf32>, %w: tensor<16x4xf32>) {
  // expected-error@+1 {{'loom.matmul_grad' op contracting dimensions differ: lhs has 8, rhs has 4}}
  %0:2 = loom.matmul_grad %dy, %x, %w transpose_rhs : tensor<2x16xf32>, tensor<2x8xf32>, tensor<16x4xf32> -> tensor<2x8xf32>, tensor<16x4xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x16xf32>, %x: tensor<8xf32>, %w: tensor<16x8xf32>) {
  // expected-error@+1 {{'loom.matmul_grad' op lhs [8] and rhs [16, 8] are not a matrix product}}
  %0:2 = loom.matmul_grad %dy, %x, %w transpose_rhs : tensor<2x16xf32>, tensor<8xf32>, tensor<16x8xf32> -> tensor<8xf32>, tensor<16x8xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x8xf32>, %x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{'loom.layer_norm_grad' op epsilon must be in (0, 1), got 0}}
  %0:3 = loom.layer_norm_grad %dy, %x, %w {epsilon = 0.0 : f64} : tensor<2x8xf32>, tensor<2x8xf32>, tensor<8xf32> -> tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x8xf32>, %x: tensor<2x8xf32>, %w: tensor<4xf32>) {
  // expected-error@+1 {{'loom.layer_norm_grad' op weight has shape [4] but should be [8]}}
  %0:3 = loom.layer_norm_grad %dy, %x, %w : tensor<2x8xf32>, tensor<2x8xf32>, tensor<4xf32> -> tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @f(%dy: tensor<f32>, %x: tensor<f32>, %w: tensor<1xf32>) {
  // expected-error@+1 {{'loom.layer_norm_grad' op input must have rank >= 1}}
  %0:3 = loom.layer_norm_grad %dy, %x, %w : tensor<f32>, tensor<f32>, tensor<1xf32> -> tensor<f32>, tensor<1xf32>, tensor<1xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x4x8xf32>, %qkv: tensor<2x4x25xf32>) {
  // expected-error@+1 {{'loom.attention_grad' op qkv must be [batch, seq, 3 * channels] or [batch, seq, 3, channels], got [2, 4, 25]}}
  %0 = loom.attention_grad %dy, %qkv {num_heads = 2 : i64} : tensor<2x4x8xf32>, tensor<2x4x25xf32> -> tensor<2x4x25xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x4x8xf32>, %qkv: tensor<2x4x24xf32>) {
  // expected-error@+1 {{'loom.attention_grad' op channels 8 are not divisible by num_heads 3}}
  %0 = loom.attention_grad %dy, %qkv {num_heads = 3 : i64} : tensor<2x4x8xf32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x4x4xf32>, %qkv: tensor<2x4x24xf32>) {
  // expected-error@+1 {{'loom.attention_grad' op dout has shape [2, 4, 4] but should be [2, 4, 8]}}
  %0 = loom.attention_grad %dy, %qkv {num_heads = 2 : i64} : tensor<2x4x4xf32>, tensor<2x4x24xf32> -> tensor<2x4x24xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x4x8xf32>, %qkv: tensor<2x4x24xf32>, %y: tensor<2x4x8xf32>, %lse: tensor<2x4x2xf32>) {
  // expected-error@+1 {{'loom.attention_grad' op saved lse has shape [2, 4, 2] but should be [2, 2, 4]}}
  %0 = loom.attention_grad %dy, %qkv saved %y, %lse {num_heads = 2 : i64} : tensor<2x4x8xf32>, tensor<2x4x24xf32>, tensor<2x4x8xf32>, tensor<2x4x2xf32> -> tensor<2x4x24xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x4x8xf32>, %qkv: tensor<2x4x24xf32>, %y: tensor<2x4x24xf32>, %lse: tensor<2x2x4xf32>) {
  // expected-error@+1 {{'loom.attention_grad' op saved out has shape [2, 4, 24] but should be [2, 4, 8]}}
  %0 = loom.attention_grad %dy, %qkv saved %y, %lse {num_heads = 2 : i64} : tensor<2x4x8xf32>, tensor<2x4x24xf32>, tensor<2x4x24xf32>, tensor<2x2x4xf32> -> tensor<2x4x24xf32>
  return
}

// -----

func.func @f(%dy: tensor<2x4x8xbf16>, %qkv: tensor<2x4x24xbf16>, %y: tensor<2x4x8xbf16>, %lse: tensor<2x2x4xbf16>) {
  // expected-error@+1 {{'loom.attention_grad' op operand #3 must be statically shaped tensor of 32-bit float values, but got 'tensor<2x2x4xbf16>'}}
  %0 = loom.attention_grad %dy, %qkv saved %y, %lse {num_heads = 2 : i64} : tensor<2x4x8xbf16>, tensor<2x4x24xbf16>, tensor<2x4x8xbf16>, tensor<2x2x4xbf16> -> tensor<2x4x24xbf16>
  return
}

// -----

func.func @f(%dy: tensor<2x4x8xbf16>, %qkv: tensor<2x4x24xbf16>, %y: tensor<2x4x8xf32>, %lse: tensor<2x2x4xf32>) {
  // expected-error@+1 {{'loom.attention_grad' op mixes element types 'bf16' and 'f32'; cast explicitly before combining}}
  %0 = loom.attention_grad %dy, %qkv saved %y, %lse {num_heads = 2 : i64} : tensor<2x4x8xbf16>, tensor<2x4x24xbf16>, tensor<2x4x8xf32>, tensor<2x2x4xf32> -> tensor<2x4x24xbf16>
  return
}

// -----

func.func @f(%qkv: tensor<2x4x24xf32>) {
  // expected-error@+1 {{'loom.attention' op lse shape [2, 4, 2] should be [2, 2, 4] ([B, num_heads, T])}}
  %0, %1 = loom.attention %qkv {num_heads = 2 : i64} : tensor<2x4x24xf32> -> tensor<2x4x8xf32>, tensor<2x4x2xf32>
  return
}

// -----

func.func @f(%dy: tensor<f32>, %y: tensor<f32>) {
  // expected-error@+1 {{'loom.softmax_grad' op input must have rank >= 1}}
  %0 = loom.softmax_grad %dy, %y : tensor<f32>
  return
}

// -----

func.func @f(%dl: tensor<f32>, %logits: tensor<2x4x16xf32>, %t: tensor<2x3xi32>) {
  // expected-error@+1 {{'loom.cross_entropy_grad' op targets [2, 3] do not match logits [2, 4, 16] without the vocab dimension}}
  %0 = loom.cross_entropy_grad %dl, %logits, %t : tensor<f32>, tensor<2x4x16xf32>, tensor<2x3xi32> -> tensor<2x4x16xf32>
  return
}

// -----

func.func @f(%dl: tensor<f32>, %logits: tensor<2x4x16xf32>, %t: tensor<2x4xi32>) {
  // expected-error@+1 {{'loom.cross_entropy_grad' op result has shape [2, 4, 8] but should be [2, 4, 16]}}
  %0 = loom.cross_entropy_grad %dl, %logits, %t : tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  return
}

// -----

func.func @f(%dl: tensor<f32>, %logits: tensor<2x4x16xf32>, %t: tensor<2x4xi32>) {
  // expected-error@+1 {{'loom.cross_entropy_grad' op vocab_size = 0 must be in [1, 16] (the logits' columns; from vocab_size on they are padding)}}
  %0 = loom.cross_entropy_grad %dl, %logits, %t {vocab_size = 0 : i64} : tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<2x4x16xf32>
  return
}

// -----

func.func @f(%d: tensor<4x8xf32>) {
  // expected-error@+1 {{'loom.slice_grad' op slice at offset 6 of size 4 does not fit dimension 0 of size 8}}
  %0 = loom.slice_grad %d dim 0 offset 6 : tensor<4x8xf32> -> tensor<8x8xf32>
  return
}

// -----

func.func @f(%d: tensor<4x8xf32>) {
  // expected-error@+1 {{'loom.slice_grad' op dim 2 does not fit dout [4, 8] and result [8, 8]}}
  %0 = loom.slice_grad %d dim 2 offset 0 : tensor<4x8xf32> -> tensor<8x8xf32>
  return
}

// -----

func.func @f(%d: tensor<4x8xf32>) {
  // expected-error@+1 {{'loom.slice_grad' op dout [4, 8] and result [8, 4] differ outside dimension 0}}
  %0 = loom.slice_grad %d dim 0 offset 0 : tensor<4x8xf32> -> tensor<8x4xf32>
  return
}

// -----

func.func @f() {
  // expected-error@+1 {{'loom.sum_squares' op needs at least one operand to sum the squares of}}
  %s = "loom.sum_squares"() : () -> tensor<f32>
  return
}

// -----

func.func @f(%g: tensor<8xf32>) {
  // expected-error@+1 {{'loom.sum_squares' op result #0 must be 0D tensor of 32-bit float values, but got 'tensor<1xf32>'}}
  %s = loom.sum_squares %g : tensor<8xf32> -> tensor<1xf32>
  return
}

// -----

func.func @f(%g: tensor<8xf32>) {
  // expected-error@+1 {{'loom.sum_squares' op result #0 must be 0D tensor of 32-bit float values, but got 'tensor<f64>'}}
  %s = loom.sum_squares %g : tensor<8xf32> -> tensor<f64>
  return
}

// -----

func.func @f(%g: tensor<8xi32>) {
  // expected-error@+1 {{'loom.sum_squares' op operand #0 must be variadic of statically shaped tensor of floating-point values, but got 'tensor<8xi32>'}}
  %s = loom.sum_squares %g : tensor<8xi32> -> tensor<f32>
  return
}

// -----

func.func @f(%s: tensor<2xf32>) {
  // expected-error@+1 {{'loom.clip_coef' op operand #0 must be 0D tensor of 32-bit float values, but got 'tensor<2xf32>'}}
  %n, %c = loom.clip_coef %s {max_norm = 1.0 : f64} : tensor<2xf32> -> tensor<f32>, tensor<f32>
  return
}

// -----

func.func @f(%s: tensor<f32>) {
  // expected-error@+1 {{'loom.clip_coef' op result #0 must be 0D tensor of 32-bit float values, but got 'tensor<bf16>'}}
  %n, %c = loom.clip_coef %s {max_norm = 1.0 : f64} : tensor<f32> -> tensor<bf16>, tensor<f32>
  return
}

// -----

func.func @f(%s: tensor<f32>) {
  // expected-error@+1 {{'loom.clip_coef' op result #1 must be 0D tensor of 32-bit float values, but got 'tensor<1xf32>'}}
  %n, %c = loom.clip_coef %s {max_norm = 1.0 : f64} : tensor<f32> -> tensor<f32>, tensor<1xf32>
  return
}

// -----

func.func @f(%s: tensor<f32>) {
  // expected-error@+1 {{'loom.clip_coef' op max_norm must be finite (<= 0 disables clipping), got nan}}
  %n, %c = loom.clip_coef %s {max_norm = 0x7FF8000000000000 : f64} : tensor<f32> -> tensor<f32>, tensor<f32>
  return
}

// -----

func.func @f(%s: tensor<f32>) {
  // expected-error@+1 {{'loom.clip_coef' op requires attribute 'max_norm'}}
  %n, %c = "loom.clip_coef"(%s) : (tensor<f32>) -> (tensor<f32>, tensor<f32>)
  return
}

// -----

func.func @f(%p: tensor<8xf32>, %s: tensor<f32>) {
  // expected-error@+1 {{'loom.adamw' op betas must be in [0, 1), got (1.000000e+00, 9.990000e-01)}}
  %a, %b, %c = loom.adamw %p, %p, %p, %p, %s, %s, %s {beta1 = 1.0 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : tensor<8xf32>, tensor<f32>
  return
}

// -----

func.func @f(%p: tensor<8xf32>, %s: tensor<f32>) {
  // expected-error@+1 {{'loom.adamw' op eps must be positive, got 0}}
  %a, %b, %c = loom.adamw %p, %p, %p, %p, %s, %s, %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 0.0 : f64, weight_decay = 0.0 : f64} : tensor<8xf32>, tensor<f32>
  return
}

// -----

func.func @f(%p: tensor<8xf32>, %s: tensor<f32>) {
  // expected-error@+1 {{'loom.adamw' op weight_decay must be >= 0, got -1.000000e-01}}
  %a, %b, %c = loom.adamw %p, %p, %p, %p, %s, %s, %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = -0.1 : f64} : tensor<8xf32>, tensor<f32>
  return
}

// -----

// expected-error@+1 {{'func.func' op result #0: loom.updates must name an argument index}}
func.func @f(%p: tensor<8xf32>) -> (tensor<8xf32> {loom.updates = 3 : i64}) {
  return %p : tensor<8xf32>
}

// -----

// expected-error@+1 {{'func.func' op result #0 updates argument #0 in place but their types differ}}
func.func @f(%p: tensor<8xf32>) -> (tensor<4xf32> {loom.updates = 0 : i64}) {
  %0 = loom.slice %p dim 0 offset 0 : tensor<8xf32> -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error@+1 {{'func.func' op unknown loom result attribute 'loom.bogus'}}
func.func @f(%p: tensor<8xf32>) -> (tensor<8xf32> {loom.bogus = 1 : i64}) {
  return %p : tensor<8xf32>
}

// -----

// expected-error@+1 {{'func.func' op loom.train must be a dictionary on a function with phase = "microbatch", "update", "forward" or "backward"}}
func.func @f() attributes {loom.train = {phase = "bogus"}} {
  return
}

// -----

// expected-error@+1 {{'func.func' op loom.train microbatches must be a positive integer}}
func.func @f() attributes {loom.train = {phase = "microbatch", microbatches = 0 : i64}} {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 is grad state; it must be a float tensor named after its parameter (loom.name)}}
func.func @f(%g: tensor<8xf32> {loom.role = #loom.role<grad>}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 is the lr scalar; it must be tensor<f32>, not 'tensor<2xf32>'}}
func.func @f(%lr: tensor<2xf32> {loom.role = #loom.role<lr>}) {
  return
}

// -----

func.func @cross_entropy_sums_grad_stats(%dl: tensor<f32>, %l: tensor<2x4x16xf32>, %m: tensor<2x4xf32>, %s: tensor<2x3xf32>, %t: tensor<2x4xi32>) {
  // expected-error@+1 {{'loom.cross_entropy_sums_grad' op sum_exp has shape [2, 3] but should be [2, 4]}}
  %0 = loom.cross_entropy_sums_grad %dl, %l, %m, %s, %t : tensor<f32>, tensor<2x4x16xf32>, tensor<2x4xf32>, tensor<2x3xf32>, tensor<2x4xi32> -> tensor<2x4x16xf32>
  return
}

// -----

// Only the generic form can give the statistics without the output.
func.func @f(%dy: tensor<2x4x8xf32>, %qkv: tensor<2x4x24xf32>, %lse: tensor<2x2x4xf32>) {
  // expected-error@+1 {{'loom.attention_grad' op has a saved lse without the forward's output; pass both (saved %out, %lse) or neither}}
  %0 = "loom.attention_grad"(%dy, %qkv, %lse) <{num_heads = 2 : i64, operandSegmentSizes = array<i32: 1, 1, 0, 1>}> : (tensor<2x4x8xf32>, tensor<2x4x24xf32>, tensor<2x2x4xf32>) -> tensor<2x4x24xf32>
  return
}
