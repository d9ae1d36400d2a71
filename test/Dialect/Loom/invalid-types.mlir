// RUN: loom-opt %s -split-input-file -verify-diagnostics

// ODS type constraints: static float tensors, i32 token ids, scalar loss.

func.func @dynamic_shape(%x: tensor<?x64xf32>) {
  // expected-error@+1 {{'loom.gelu' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<?x64xf32>'}}
  %0 = loom.gelu %x : tensor<?x64xf32>
  return
}

// -----

func.func @unranked(%x: tensor<*xf32>) {
  // expected-error@+1 {{'loom.softmax' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<*xf32>'}}
  %0 = "loom.softmax"(%x) : (tensor<*xf32>) -> tensor<*xf32>
  return
}

// -----

// The custom form already needs a ranked tensor type.
func.func @unranked_custom(%x: tensor<*xf32>) {
  // expected-error@+1 {{custom op 'loom.softmax' invalid kind of type specified: expected builtin.tensor, but found 'tensor<*xf32>'}}
  %0 = loom.softmax %x : tensor<*xf32>
  return
}

// -----

func.func @integer_tensor(%a: tensor<8xi32>, %b: tensor<8xi32>) {
  // expected-error@+1 {{'loom.add' op operand #0 must be statically shaped tensor of floating-point values, but got 'tensor<8xi32>'}}
  %0 = loom.add %a, %b : tensor<8xi32>, tensor<8xi32>
  return
}

// -----

func.func @not_a_tensor(%a: f32) {
  // expected-error@+1 {{'loom.reshape' op operand #0 must be statically shaped tensor of floating-point values, but got 'f32'}}
  %0 = "loom.reshape"(%a) : (f32) -> tensor<1xf32>
  return
}

// -----

func.func @dynamic_result(%x: tensor<8x64xf32>, %w: tensor<64x16xf32>) {
  // expected-error@+1 {{'loom.linear' op result #0 must be statically shaped tensor of floating-point values, but got 'tensor<?x16xf32>'}}
  %0 = loom.linear %x, %w : tensor<8x64xf32>, tensor<64x16xf32> -> tensor<?x16xf32>
  return
}

// -----

func.func @ids_not_i32(%t: tensor<256x64xf32>, %ids: tensor<4x32xi64>) {
  // expected-error@+1 {{'loom.embedding' op operand #1 must be statically shaped tensor of 32-bit signless integer values, but got 'tensor<4x32xi64>'}}
  %0 = loom.embedding %t, %ids : tensor<256x64xf32>, tensor<4x32xi64> -> tensor<4x32x64xf32>
  return
}

// -----

func.func @float_targets(%l: tensor<4x256xf32>, %t: tensor<4xf32>) {
  // expected-error@+1 {{'loom.cross_entropy' op operand #1 must be statically shaped tensor of 32-bit signless integer values, but got 'tensor<4xf32>'}}
  %0 = loom.cross_entropy %l, %t : tensor<4x256xf32>, tensor<4xf32> -> tensor<f32>
  return
}

// -----

func.func @loss_not_scalar(%l: tensor<4x256xf32>, %t: tensor<4xi32>) {
  // expected-error@+1 {{'loom.cross_entropy' op result #0 must be 0D tensor of floating-point values, but got 'tensor<4xf32>'}}
  %0 = loom.cross_entropy %l, %t : tensor<4x256xf32>, tensor<4xi32> -> tensor<4xf32>
  return
}

// -----

func.func @add_result_type(%a: tensor<8xf32>) {
  // expected-error@+1 {{'loom.add' op failed to verify that all of {lhs, result} have same type}}
  %0 = "loom.add"(%a, %a) : (tensor<8xf32>, tensor<8xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @layer_norm_result_type(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{'loom.layer_norm' op failed to verify that all of {input, result} have same type}}
  %0 = "loom.layer_norm"(%x, %w, %w) : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<8x4xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @collective_dynamic(%x: tensor<?xf32>) {
  // expected-error@+1 {{'loom.all_reduce' op operand #0 must be variadic of statically shaped tensor of floating-point values, but got 'tensor<?xf32>'}}
  %0 = loom.all_reduce %x on @mesh [dp] sum : tensor<?xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @recv_integer() {
  // expected-error@+1 {{'loom.recv' op result #0 must be statically shaped tensor of floating-point values, but got 'tensor<8xi32>'}}
  %0 = loom.recv from @mesh [dp] peer 0 tag 0 : tensor<8xi32>
  return
}

// -----

func.func @attention_heads_type(%qkv: tensor<4x32x192xf32>) {
  // expected-error@+1 {{'loom.attention' op attribute 'num_heads' failed to satisfy constraint: 64-bit signless integer attribute}}
  %0 = loom.attention %qkv {num_heads = 4 : i32} : tensor<4x32x192xf32> -> tensor<4x32x64xf32>
  return
}
