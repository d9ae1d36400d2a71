// RUN: not loom-opt %s -split-input-file 2>&1 | FileCheck %s

// Regression: a mesh whose device count overflows int64 made the group size
// of a collective (and the split count of a sharding) 0, and loom-opt died
// with SIGFPE in ReduceScatterOp::verifySymbolUses / verifyShardingForType.
// The mesh itself is now rejected.

// CHECK: regression-mesh-overflow.mlir:[[@LINE+1]]:14: error: {{.*}}mesh device count overflows 64 bits at axis 'b'
loom.mesh @m <a = 4294967296, b = 4294967296>
func.func @f(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %y = loom.reduce_scatter %x on @m [a, b] dim 0 sum : tensor<8x4xf32> -> tensor<8x4xf32>
  return %y : tensor<8x4xf32>
}

// -----

// CHECK: regression-mesh-overflow.mlir:[[@LINE+1]]:14: error: {{.*}}mesh device count overflows 64 bits at axis 'c'
loom.mesh @m <a = 65536, b = 65536, c = 4294967296>
func.func @g(%x: tensor<8x4xf32> {loom.sharding = #loom.sharding<@m, [[a, b, c], []]>}) -> tensor<8x4xf32> {
  return %x : tensor<8x4xf32>
}

// -----

// The largest representable mesh is fine.
// CHECK-NOT: error
// CHECK: loom.mesh @big <a = 2147483648, b = 2147483647, c = 2>
loom.mesh @big <a = 2147483648, b = 2147483647, c = 2>
func.func @h(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
  return %x : tensor<8x4xf32>
}
