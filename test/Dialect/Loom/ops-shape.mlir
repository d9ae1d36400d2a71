// RUN: loom-opt %s | loom-opt | FileCheck %s

// Round trip of the shape ops.

// CHECK-LABEL: func.func @reshape
// CHECK-SAME: (%[[X:.*]]: tensor<4x32x64xf32>)
// CHECK: %[[F:.*]] = loom.reshape %[[X]] : tensor<4x32x64xf32> -> tensor<128x64xf32>
// CHECK: %[[S:.*]] = loom.reshape %[[F]] : tensor<128x64xf32> -> tensor<4x32x4x16xf32>
// CHECK: return %[[S]]
func.func @reshape(%x: tensor<4x32x64xf32>) -> tensor<4x32x4x16xf32> {
  %0 = loom.reshape %x : tensor<4x32x64xf32> -> tensor<128x64xf32>
  %1 = loom.reshape %0 : tensor<128x64xf32> -> tensor<4x32x4x16xf32>
  return %1 : tensor<4x32x4x16xf32>
}

// CHECK-LABEL: func.func @transpose
// CHECK-SAME: (%[[X:.*]]: tensor<64x256xf32>, %[[Y:.*]]: tensor<2x3x5xf32>)
// CHECK: loom.transpose %[[X]] [1, 0] : tensor<64x256xf32> -> tensor<256x64xf32>
// CHECK: loom.transpose %[[Y]] [2, 0, 1] : tensor<2x3x5xf32> -> tensor<5x2x3xf32>
func.func @transpose(%x: tensor<64x256xf32>, %y: tensor<2x3x5xf32>) -> (tensor<256x64xf32>, tensor<5x2x3xf32>) {
  %0 = loom.transpose %x [1, 0] : tensor<64x256xf32> -> tensor<256x64xf32>
  %1 = loom.transpose %y [2, 0, 1] : tensor<2x3x5xf32> -> tensor<5x2x3xf32>
  return %0, %1 : tensor<256x64xf32>, tensor<5x2x3xf32>
}

// CHECK-LABEL: func.func @slice
// CHECK-SAME: (%[[WPE:.*]]: tensor<64x64xf32>)
// CHECK: loom.slice %[[WPE]] dim 0 offset 0 : tensor<64x64xf32> -> tensor<32x64xf32>
// CHECK: loom.slice %[[WPE]] dim 1 offset 48 : tensor<64x64xf32> -> tensor<64x16xf32>
func.func @slice(%wpe: tensor<64x64xf32>) -> (tensor<32x64xf32>, tensor<64x16xf32>) {
  %0 = loom.slice %wpe dim 0 offset 0 : tensor<64x64xf32> -> tensor<32x64xf32>
  // The last 16 columns: the slice may end exactly at the dimension's end.
  %1 = loom.slice %wpe dim 1 offset 48 : tensor<64x64xf32> -> tensor<64x16xf32>
  return %0, %1 : tensor<32x64xf32>, tensor<64x16xf32>
}

// CHECK-LABEL: func.func @concat
// CHECK-SAME: (%[[A:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<4x8xf32>, %[[C:.*]]: tensor<4x16xf32>)
// CHECK: loom.concat %[[A]], %[[B]], %[[C]] dim 1 : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<4x32xf32>
// CHECK: loom.concat %[[A]] dim 0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
func.func @concat(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %c: tensor<4x16xf32>) -> (tensor<4x32xf32>, tensor<4x8xf32>) {
  %0 = loom.concat %a, %b, %c dim 1 : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<4x32xf32>
  %1 = loom.concat %a dim 0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0, %1 : tensor<4x32xf32>, tensor<4x8xf32>
}
