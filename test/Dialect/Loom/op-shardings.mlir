// RUN: loom-opt %s | loom-opt | FileCheck %s

// loom.shardings on ops: one #loom.sharding per result.

loom.mesh @mesh <dp = 2, tp = 4>

// CHECK-LABEL: func.func @shardings
// CHECK: loom.linear %{{.*}}, %{{.*}} {loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp], [], [tp]]>]} : tensor<4x32x64xf32>, tensor<64x256xf32> -> tensor<4x32x256xf32>
// CHECK: loom.linear %{{.*}}, %{{.*}} {loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp], [], []], partial = [tp]>]} : tensor<4x32x256xf32>, tensor<256x64xf32> -> tensor<4x32x64xf32>
// CHECK: loom.block "b"(%{{.*}}) {loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp], [], []]>, #loom.sharding<@mesh, {{\[}}[dp], [], [tp]]>]}
// CHECK: loom.send %{{.*}} to @mesh [dp] peer 1 tag 0 {loom.shardings = []} : tensor<4x32x64xf32>
func.func @shardings(%x: tensor<4x32x64xf32>, %w1: tensor<64x256xf32>, %w2: tensor<256x64xf32>) -> tensor<4x32x64xf32> {
  %h = loom.linear %x, %w1 {loom.shardings = [#loom.sharding<@mesh, [[dp], [], [tp]]>]} : tensor<4x32x64xf32>, tensor<64x256xf32> -> tensor<4x32x256xf32>
  %y = loom.linear %h, %w2 {loom.shardings = [#loom.sharding<@mesh, [[dp], [], []], partial = [tp]>]} : tensor<4x32x256xf32>, tensor<256x64xf32> -> tensor<4x32x64xf32>
  %r:2 = loom.block "b" (%y) {loom.shardings = [#loom.sharding<@mesh, [[dp], [], []]>, #loom.sharding<@mesh, [[dp], [], [tp]]>]} : (tensor<4x32x64xf32>) -> (tensor<4x32x64xf32>, tensor<4x32x64xf32>) {
  ^bb0(%a: tensor<4x32x64xf32>):
    loom.yield %a, %a : tensor<4x32x64xf32>, tensor<4x32x64xf32>
  }
  loom.send %r#1 to @mesh [dp] peer 1 tag 0 {loom.shardings = []} : tensor<4x32x64xf32>
  return %r#0 : tensor<4x32x64xf32>
}

// Ops of other dialects may carry loom.shardings too.
// CHECK-LABEL: func.func @foreign_op
// CHECK: arith.addf %{{.*}}, %{{.*}} {loom.shardings = [#loom.sharding<@mesh, {{\[}}[tp]]>]} : tensor<8xf32>
func.func @foreign_op(%a: tensor<8xf32>) -> tensor<8xf32> {
  %0 = arith.addf %a, %a {loom.shardings = [#loom.sharding<@mesh, [[tp]]>]} : tensor<8xf32>
  return %0 : tensor<8xf32>
}
