// RUN: loom-opt --loom-propagate -split-input-file -verify-diagnostics %s | FileCheck %s

// Two seeds disagree on one factor: the split with more axes wins, and a
// remark says so. Seeds themselves are never overwritten.
loom.mesh @mesh <dp = 2, tp = 2>
// CHECK-LABEL: func.func @conflict(
func.func @conflict(%a: tensor<4x8xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], []]>},
                    %b: tensor<4x8xf32> {loom.sharding = #loom.sharding<@mesh, [[dp, tp], []]>}) -> tensor<4x8xf32> {
  // expected-remark@+2 {{sharding conflict on dimension 0 of operand #1: [dp] vs [dp, tp]; kept [dp, tp] (more axes win, then the earlier operand)}}
  // CHECK: loom.add {{.*}}loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp, tp], []]>]
  %c = loom.add %a, %b : tensor<4x8xf32>, tensor<4x8xf32>
  return %c : tensor<4x8xf32>
}

// -----

// One axis cannot split two dimensions of a tensor: the later factor stays
// whole, with a remark.
loom.mesh @mesh <dp = 2>
// CHECK-LABEL: func.func @axis_twice(
func.func @axis_twice(%a: tensor<4x8xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], []]>},
                      %b: tensor<4x8xf32> {loom.sharding = #loom.sharding<@mesh, [[], [dp]]>}) -> tensor<4x8xf32> {
  // expected-remark@+2 {{cannot split a dimension of size 8 by [dp]: an axis already splits another dimension; it stays whole}}
  // CHECK: loom.add {{.*}}loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp], []]>]
  %c = loom.add %a, %b : tensor<4x8xf32>, tensor<4x8xf32>
  return %c : tensor<4x8xf32>
}
