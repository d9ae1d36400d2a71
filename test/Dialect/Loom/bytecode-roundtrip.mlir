// RUN: loom-opt --emit-bytecode %s | loom-opt | FileCheck %s
// RUN: loom-opt --emit-bytecode %s | loom-opt --emit-bytecode | loom-opt | FileCheck %s

// Ops, attributes and discardable attributes survive MLIR bytecode.

// CHECK: loom.mesh @mesh <dp = 2, "t p" = 2>
loom.mesh @mesh <dp = 2, "t p" = 2>

// CHECK-LABEL: func.func @model
// CHECK-SAME: %{{[^:]*}}: tensor<16x8xf32> {loom.init = #loom.init<normal, std = 2.000000e-02>, loom.name = "wte.weight", loom.role = #loom.role<param>, loom.sharding = #loom.sharding<@mesh, {{\[}}[], ["t p"]]>}
// CHECK-SAME: %{{[^:]*}}: tensor<8xf32> {loom.init = #loom.init<ones>, loom.name = "ln.weight", loom.role = #loom.role<param>}
// CHECK-SAME: %{{[^:]*}}: tensor<8xf32> {loom.init = #loom.init<zeros>, loom.name = "ln.bias", loom.role = #loom.role<param>}
// CHECK-SAME: %{{[^:]*}}: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>}
// CHECK-SAME: %{{[^:]*}}: tensor<2x4xi32> {loom.name = "targets", loom.role = #loom.role<target>}
// CHECK-SAME: attributes {loom.model = {batch = 2 : i64, layer_norm_epsilon = 1.000000e-05 : f64, n_layer = 1 : i64}}
// CHECK: %[[E:.*]] = loom.embedding
// CHECK: %[[H:.*]] = loom.block "h.0"(%[[E]], %{{.*}}, %{{.*}}) {loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp], [], []], partial = ["t p"]>]}
// CHECK: loom.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 1.000000e-03 : f64}
// CHECK: loom.gelu
// CHECK: loom.yield
// CHECK: %[[R:.*]] = loom.all_reduce %[[H]] on @mesh ["t p"] sum {reason = "row-parallel"} : tensor<2x4x8xf32>
// CHECK: loom.matmul %[[R]], %{{.*}} transpose_rhs
// CHECK: loom.cross_entropy
func.func @model(%wte: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>, loom.sharding = #loom.sharding<@mesh, [[], ["t p"]]>},
                 %lnw: tensor<8xf32> {loom.name = "ln.weight", loom.role = #loom.role<param>, loom.init = #loom.init<ones>},
                 %lnb: tensor<8xf32> {loom.name = "ln.bias", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                 %ids: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>},
                 %tgt: tensor<2x4xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32>
    attributes {loom.model = {n_layer = 1 : i64, batch = 2 : i64, layer_norm_epsilon = 1.0e-05 : f64}} {
  %e = loom.embedding %wte, %ids : tensor<16x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  %h = loom.block "h.0" (%e, %lnw, %lnb) {loom.shardings = [#loom.sharding<@mesh, [[dp], [], []], partial = ["t p"]>]} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>):
    %n = loom.layer_norm %x, %w, %b {epsilon = 1.0e-03 : f64} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %g = loom.gelu %n : tensor<2x4x8xf32>
    loom.yield %g : tensor<2x4x8xf32>
  }
  %r = loom.all_reduce %h on @mesh ["t p"] sum {reason = "row-parallel"} : tensor<2x4x8xf32>
  %logits = loom.matmul %r, %wte transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %loss = loom.cross_entropy %logits, %tgt : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
