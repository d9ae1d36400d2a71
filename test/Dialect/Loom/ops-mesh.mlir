// RUN: loom-opt %s | loom-opt | FileCheck %s

// loom.mesh symbols: one axis, several axes, size-1 axes, quoted names; and
// collectives that name quoted axes.

// CHECK: loom.mesh @single <x = 8>
// CHECK: loom.mesh @grid <dp = 2, tp = 4, pp = 2>
// CHECK: loom.mesh @trivial <dp = 1>
// CHECK: loom.mesh @quoted <"data parallel" = 2, "tp-2" = 2>
// CHECK: loom.mesh @"odd mesh" <a = 4>
loom.mesh @single <x = 8>
loom.mesh @grid <dp = 2, tp = 4, pp = 2>
loom.mesh @trivial <dp = 1>
loom.mesh @quoted <"data parallel" = 2, "tp-2" = 2>
loom.mesh @"odd mesh" <a = 4>

// CHECK-LABEL: func.func @quoted_axes
// CHECK: loom.all_reduce %{{.*}} on @quoted ["data parallel", "tp-2"] sum : tensor<8xf32>
// CHECK: loom.all_gather %{{.*}} on @"odd mesh" [a] dim 0 : tensor<8xf32> -> tensor<32xf32>
// CHECK: loom.all_reduce %{{.*}} on @trivial [dp] sum : tensor<8xf32>
func.func @quoted_axes(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<32xf32>, tensor<8xf32>) {
  %0 = loom.all_reduce %x on @quoted ["data parallel", "tp-2"] sum : tensor<8xf32>
  %1 = loom.all_gather %x on @"odd mesh" [a] dim 0 : tensor<8xf32> -> tensor<32xf32>
  %2 = loom.all_reduce %x on @trivial [dp] sum : tensor<8xf32>
  return %0, %1, %2 : tensor<8xf32>, tensor<32xf32>, tensor<8xf32>
}
