// RUN: loom-opt %s --loom-summary -o /dev/null | FileCheck %s

// Regression: a linear whose contracted dimension is 0 made LinearOp's cost
// divide by zero (SIGFPE in --loom-summary). Zero-sized tensors cost nothing.

// CHECK-LABEL: loom model summary: @empty_features
// CHECK: parameters: 0 (0.0 B in fp32)
// CHECK: forward flops per step: 32
// CHECK: forward bytes accessed per step: 160
func.func @empty_features(%x: tensor<4x0xf32>,
                          %w: tensor<0x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                          %b: tensor<8xf32>) -> tensor<4x8xf32>
    attributes {loom.model = {}} {
  // 2*4*0*8 + 4*8 (the bias) = 32 flops; bytes 0 + 0 + 32 + 128 = 160.
  %y = loom.linear %x, %w, %b : tensor<4x0xf32>, tensor<0x8xf32>, tensor<8xf32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
