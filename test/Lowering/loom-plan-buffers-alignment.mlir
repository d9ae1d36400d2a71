// RUN: not loom-opt --loom-plan-buffers=alignment=48 %s 2>&1 | FileCheck %s
// CHECK: error: loom-plan-buffers: alignment must be a power of two, got 48
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
