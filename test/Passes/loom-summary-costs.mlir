// RUN: loom-opt %s --loom-summary -o /dev/null | FileCheck %s

// The cost conventions of every compute op, one model per op, worked out by
// hand (LoomInterfaces.td: a multiply-add is 2 flops; bytes = operands read
// once + results written once; views move nothing). f32 = 4 bytes.

// matmul [2,3,4] x [4,5]: 2*K*|result| = 2*4*30 = 240; bytes (24+20+30)*4 = 296.
// CHECK-LABEL: @matmul
// CHECK: forward flops per step: 240
// CHECK: forward bytes accessed per step: 296
func.func @matmul(%a: tensor<2x3x4xf32>, %b: tensor<4x5xf32>) -> tensor<2x3x5xf32> attributes {loom.model = {}} {
  %0 = loom.matmul %a, %b : tensor<2x3x4xf32>, tensor<4x5xf32> -> tensor<2x3x5xf32>
  return %0 : tensor<2x3x5xf32>
}

// The same product with the rhs stored [N, K] costs the same.
// CHECK-LABEL: @matmul_transposed
// CHECK: forward flops per step: 240
// CHECK: forward bytes accessed per step: 296
func.func @matmul_transposed(%a: tensor<2x3x4xf32>, %b: tensor<5x4xf32>) -> tensor<2x3x5xf32> attributes {loom.model = {}} {
  %0 = loom.matmul %a, %b transpose_rhs : tensor<2x3x4xf32>, tensor<5x4xf32> -> tensor<2x3x5xf32>
  return %0 : tensor<2x3x5xf32>
}

// layer_norm [2,8]: 7 per element = 112; bytes (16+8+8+16)*4 = 192.
// CHECK-LABEL: @layer_norm
// CHECK: forward flops per step: 112
// CHECK: forward bytes accessed per step: 192
func.func @layer_norm(%x: tensor<2x8xf32>, %w: tensor<8xf32>) -> tensor<2x8xf32> attributes {loom.model = {}} {
  %0 = loom.layer_norm %x, %w, %w : tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>
  return %0 : tensor<2x8xf32>
}

// gelu [2,8]: 9 per element = 144; bytes 2*64 = 128.
// CHECK-LABEL: @gelu
// CHECK: forward flops per step: 144
// CHECK: forward bytes accessed per step: 128
func.func @gelu(%x: tensor<2x8xf32>) -> tensor<2x8xf32> attributes {loom.model = {}} {
  %0 = loom.gelu %x : tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// softmax [2,8]: 5 per element = 80; bytes 128.
// CHECK-LABEL: @softmax
// CHECK: forward flops per step: 80
// CHECK: forward bytes accessed per step: 128
func.func @softmax(%x: tensor<2x8xf32>) -> tensor<2x8xf32> attributes {loom.model = {}} {
  %0 = loom.softmax %x : tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// attention B=2, T=4, C=8, 2 heads of 4: causal pairs T(T+1)/2 = 10 per head,
// each 4*hs + 6 = 22: 2*2*10*22 = 880; bytes (2*4*24 + 2*4*8)*4 = 1024.
// CHECK-LABEL: @attention
// CHECK: forward flops per step: 880
// CHECK: forward bytes accessed per step: 1024
func.func @attention(%qkv: tensor<2x4x24xf32>) -> tensor<2x4x8xf32> attributes {loom.model = {}} {
  %0 = loom.attention %qkv {num_heads = 2 : i64} : tensor<2x4x24xf32> -> tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

// cross_entropy logits [2,4,16]: 5*128 + 2*8 = 656; bytes 512 + 32 + 4 = 548.
// CHECK-LABEL: @cross_entropy
// CHECK: forward flops per step: 656
// CHECK: forward bytes accessed per step: 548
func.func @cross_entropy(%l: tensor<2x4x16xf32>, %t: tensor<2x4xi32>) -> tensor<f32> attributes {loom.model = {}} {
  %0 = loom.cross_entropy %l, %t : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %0 : tensor<f32>
}

// add [2,4,8] + [4,8]: one per result element = 64; bytes (64+32+64)*4 = 640.
// CHECK-LABEL: @add
// CHECK: forward flops per step: 64
// CHECK: forward bytes accessed per step: 640
func.func @add(%a: tensor<2x4x8xf32>, %b: tensor<4x8xf32>) -> tensor<2x4x8xf32> attributes {loom.model = {}} {
  %0 = loom.add %a, %b : tensor<2x4x8xf32>, tensor<4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

// embedding: no flops; ids 8*4 + one row read and written per id 2*64*4 = 544.
// CHECK-LABEL: @embedding
// CHECK: forward flops per step: 0
// CHECK: forward bytes accessed per step: 544
func.func @embedding(%t: tensor<16x8xf32>, %ids: tensor<2x4xi32>) -> tensor<2x4x8xf32> attributes {loom.model = {}} {
  %0 = loom.embedding %t, %ids : tensor<16x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

// Shape ops: reshape is a view (0 bytes); transpose reads and writes all
// (2*128); slice and concat move their result twice (2*64, 2*256).
// CHECK-LABEL: @shapes
// CHECK: forward flops per step: 0
// CHECK: forward bytes accessed per step: 896
func.func @shapes(%x: tensor<4x8xf32>) -> tensor<8x8xf32> attributes {loom.model = {}} {
  %r = loom.reshape %x : tensor<4x8xf32> -> tensor<8x4xf32>
  %t = loom.transpose %x [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %s = loom.slice %x dim 0 offset 2 : tensor<4x8xf32> -> tensor<2x8xf32>
  %c = loom.concat %r, %t dim 1 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x8xf32>
  return %c : tensor<8x8xf32>
}

// A block costs the sum of its body (gelu 144 + softmax 80 = 224 flops,
// 128 + 128 bytes), counted once; collectives have no compute cost here.
// CHECK-LABEL: @block
// CHECK: blocks: 1 holding 0 (0 each)
// CHECK: forward flops per step: 224
// CHECK: forward bytes accessed per step: 256
loom.mesh @mesh <dp = 2>
func.func @block(%x: tensor<2x8xf32>) -> tensor<2x8xf32> attributes {loom.model = {}} {
  %0 = loom.block "h.0" (%x) : (tensor<2x8xf32>) -> tensor<2x8xf32> {
  ^bb0(%a: tensor<2x8xf32>):
    %g = loom.gelu %a : tensor<2x8xf32>
    %s = loom.softmax %g : tensor<2x8xf32>
    loom.yield %s : tensor<2x8xf32>
  }
  %1 = loom.all_reduce %0 on @mesh [dp] sum : tensor<2x8xf32>
  return %1 : tensor<2x8xf32>
}
