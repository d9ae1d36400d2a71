// RUN: not loom-opt %s -split-input-file 2>&1 | FileCheck %s

// Ops the dialect does not have.

// CHECK: malformed-unknown-op.mlir:[[@LINE+2]]:8: error: custom op 'loom.foo' is unknown
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = loom.foo %x : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// CHECK: malformed-unknown-op.mlir:[[@LINE+2]]:8: error: unregistered operation 'loom.foo' found in dialect ('loom') that does not allow unknown operations
func.func @g(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = "loom.foo"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// CHECK: malformed-unknown-op.mlir:[[@LINE+1]]:1: error: custom op 'loom.meshes' is unknown
loom.meshes @m <dp = 2>
