// RUN: not loom-opt %s -split-input-file 2>&1 | FileCheck %s

// Signatures whose types do not fit: located errors, no crash.

// The operand's declared type differs from its definition.
// CHECK: malformed-wrong-type.mlir:[[@LINE+2]]:18: error: use of value '%x' expects different type than prior uses: 'tensor<4x8xf32>' vs 'tensor<8xf32>'
func.func @f(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = loom.gelu %x : tensor<4x8xf32>
  return %x : tensor<8xf32>
}

// -----

// Too few types in the signature.
// CHECK: malformed-wrong-type.mlir:[[@LINE+2]]:{{[0-9]+}}: error: expected ','
func.func @g(%x: tensor<8x64xf32>, %w: tensor<64x16xf32>) -> tensor<8x16xf32> {
  %0 = loom.linear %x, %w : tensor<8x64xf32> -> tensor<8x16xf32>
  return %0 : tensor<8x16xf32>
}

// -----

// A type that is not a type.
// CHECK: malformed-wrong-type.mlir:[[@LINE+2]]:{{[0-9]+}}: error: expected non-function type
func.func @h(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = loom.softmax %x : loom.tensor
  return %0 : tensor<8xf32>
}

// -----

// A memref where a tensor is required.
// CHECK: malformed-wrong-type.mlir:[[@LINE+2]]:{{[0-9]+}}: error: custom op 'loom.gelu' invalid kind of type specified: expected builtin.tensor, but found 'memref<8xf32>'
func.func @i(%x: memref<8xf32>) {
  %0 = loom.gelu %x : memref<8xf32>
  return
}

// -----

// The function returns something else than the loss type.
// CHECK: malformed-wrong-type.mlir:[[@LINE+4]]:3: error: type of return operand 0 ('tensor<f32>') doesn't match function result type ('tensor<4xf32>') in function @j
func.func @j(%l: tensor<4x16xf32>, %t: tensor<4xi32>) -> tensor<4xf32> {
  %0 = loom.cross_entropy %l, %t : tensor<4x16xf32>, tensor<4xi32> -> tensor<f32>
  // A comment so the return is on the fourth line.
  return %0 : tensor<f32>
}
