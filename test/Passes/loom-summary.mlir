// RUN: loom-opt %s --loom-summary -o /dev/null | FileCheck %s

// A hand-written model whose figures are worked out by hand: one linear
// layer y = x·W + b with x [M=4, K=8], W [8, N=16], b [16].
//   parameters: 8*16 + 16 = 144 (576 B in fp32)
//   flops:      2*M*K*N + M*N = 2*4*8*16 + 4*16 = 1024 + 64 = 1088
//   bytes:      x 128 + W 512 + b 64 + y 256 = 960
//   tokens:     the input ids, 4 per step; 1088 / 4 = 272 flops per token
//   train:      3 * 1088 = 3264

// CHECK-LABEL: loom model summary: @one_linear
// CHECK-NEXT:   config: n_layer=0 note="hand-written"
// CHECK-NEXT:   parameters: 144 (576.0 B in fp32)
// CHECK-NEXT:     w: 128
// CHECK-NEXT:     b: 16
// CHECK-NEXT:   tokens per step: 4
// CHECK-NEXT:   forward flops per step: 1088
// CHECK-NEXT:   forward flops per token: 272 (2*params = 288)
// CHECK-NEXT:   train flops per step (3x forward): 3264
// CHECK-NEXT:   forward bytes accessed per step: 960 (960.0 B)
func.func @one_linear(%x: tensor<4x8xf32>,
                      %w: tensor<8x16xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
                      %b: tensor<16xf32> {loom.name = "b", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                      %ids: tensor<4xi32> {loom.name = "tokens", loom.role = #loom.role<input>}) -> tensor<4x16xf32>
    attributes {loom.model = {n_layer = 0 : i64, note = "hand-written"}} {
  %y = loom.linear %x, %w, %b : tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}

// Without a bias: 2*M*K*N = 2*(2*3)*8*5 = 480 (the leading dims 2x3 are
// the rows); bytes x 192 + W 160 + y 120 = 472.
// Without an input argument there are no per-token figures.
// CHECK-LABEL: loom model summary: @no_bias
// CHECK-NEXT:   config:{{$}}
// CHECK-NEXT:   parameters: 40 (160.0 B in fp32)
// CHECK-NEXT:     w: 40
// CHECK-NEXT:   tokens per step: 0
// CHECK-NEXT:   forward flops per step: 480
// CHECK-NEXT:   forward bytes accessed per step: 472 (472.0 B)
func.func @no_bias(%x: tensor<2x3x8xf32>,
                   %w: tensor<8x5xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<ones>}) -> tensor<2x3x5xf32>
    attributes {loom.model = {}} {
  %y = loom.linear %x, %w : tensor<2x3x8xf32>, tensor<8x5xf32> -> tensor<2x3x5xf32>
  return %y : tensor<2x3x5xf32>
}

// A function without loom.model is not a model: nothing is printed for it.
// CHECK-NOT: @not_a_model
func.func @not_a_model(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>) -> tensor<4x16xf32> {
  %y = loom.linear %x, %w : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}
