// RUN: loom-opt %s --mlir-print-op-generic | FileCheck %s --check-prefix=GENERIC
// RUN: loom-opt %s --mlir-print-op-generic | loom-opt | FileCheck %s

// The generic form of every kind of op parses back to the same IR.

// GENERIC: "loom.mesh"() <{shape = #loom.mesh<dp = 2, tp = 2>, sym_name = "mesh"}>
// CHECK: loom.mesh @mesh <dp = 2, tp = 2>
loom.mesh @mesh <dp = 2, tp = 2>

// GENERIC-LABEL: sym_name = "graph"
// GENERIC: "loom.embedding"(%{{.*}}, %{{.*}}) : (tensor<16x8xf32>, tensor<2x4xi32>) -> tensor<2x4x8xf32>
// GENERIC: "loom.slice"(%{{.*}}) <{dim = 0 : i64, offset = 0 : i64}> : (tensor<8x8xf32>) -> tensor<4x8xf32>
// GENERIC: "loom.add"(%{{.*}}, %{{.*}}) : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
// GENERIC: "loom.block"(%{{.*}}, %{{.*}}, %{{.*}}) <{label = "h.0"}> ({
// GENERIC: "loom.layer_norm"(%{{.*}}, %{{.*}}, %{{.*}}) <{epsilon = 1.000000e-05 : f64}>
// GENERIC: "loom.linear"(%{{.*}}, %{{.*}}, %{{.*}}) {loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp], [], [tp]]>]} : (tensor<2x4x8xf32>, tensor<8x24xf32>, tensor<24xf32>) -> tensor<2x4x24xf32>
// GENERIC: "loom.attention"(%{{.*}}) <{num_heads = 2 : i64}>
// GENERIC: "loom.yield"(%{{.*}}) : (tensor<2x4x8xf32>) -> ()
// GENERIC: "loom.matmul"(%{{.*}}, %{{.*}}) <{transpose_rhs}>
// GENERIC: "loom.cross_entropy"
// GENERIC: "loom.all_reduce"(%{{.*}}) <{axes = ["dp"], mesh = @mesh, reason = "loss", reduction = #loom<reduction avg>}> : (tensor<f32>) -> tensor<f32>

// CHECK-LABEL: func.func @graph
// CHECK-SAME: loom.init = #loom.init<normal, std = 2.000000e-02>, loom.name = "wte.weight", loom.role = #loom.role<param>, loom.sharding = #loom.sharding<@mesh, {{\[}}[], [tp]]>
// CHECK: %[[E:.*]] = loom.embedding
// CHECK: %[[P:.*]] = loom.slice %{{.*}} dim 0 offset 0 : tensor<8x8xf32> -> tensor<4x8xf32>
// CHECK: %[[X:.*]] = loom.add %[[E]], %[[P]] : tensor<2x4x8xf32>, tensor<4x8xf32>
// CHECK: %[[H:.*]] = loom.block "h.0"(%[[X]], %{{.*}}, %{{.*}}) : (tensor<2x4x8xf32>, tensor<8x24xf32>, tensor<24xf32>) -> tensor<2x4x8xf32> {
// CHECK: loom.layer_norm
// CHECK: loom.linear %{{.*}}, %{{.*}}, %{{.*}} {loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp], [], [tp]]>]}
// CHECK: loom.attention %{{.*}} {num_heads = 2 : i64}
// CHECK: loom.yield
// CHECK: loom.matmul %{{.*}}, %{{.*}} transpose_rhs
// CHECK: %[[L:.*]] = loom.cross_entropy
// CHECK: loom.all_reduce %[[L]] on @mesh [dp] avg {reason = "loss"} : tensor<f32>
func.func @graph(%wte: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>, loom.sharding = #loom.sharding<@mesh, [[], [tp]]>},
                 %wpe: tensor<8x8xf32>, %w: tensor<8x24xf32>, %b: tensor<24xf32>,
                 %ids: tensor<2x4xi32>, %tgt: tensor<2x4xi32>) -> tensor<f32> attributes {loom.model = {n_layer = 1 : i64}} {
  %e = loom.embedding %wte, %ids : tensor<16x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  %p = loom.slice %wpe dim 0 offset 0 : tensor<8x8xf32> -> tensor<4x8xf32>
  %x = loom.add %e, %p : tensor<2x4x8xf32>, tensor<4x8xf32>
  %h = loom.block "h.0" (%x, %w, %b) : (tensor<2x4x8xf32>, tensor<8x24xf32>, tensor<24xf32>) -> tensor<2x4x8xf32> {
  ^bb0(%ax: tensor<2x4x8xf32>, %aw: tensor<8x24xf32>, %ab: tensor<24xf32>):
    %g = loom.slice %ab dim 0 offset 16 : tensor<24xf32> -> tensor<8xf32>
    %n = loom.layer_norm %ax, %g, %g : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %qkv = loom.linear %n, %aw, %ab {loom.shardings = [#loom.sharding<@mesh, [[dp], [], [tp]]>]} : tensor<2x4x8xf32>, tensor<8x24xf32>, tensor<24xf32> -> tensor<2x4x24xf32>
    %a = loom.attention %qkv {num_heads = 2 : i64} : tensor<2x4x24xf32> -> tensor<2x4x8xf32>
    loom.yield %a : tensor<2x4x8xf32>
  }
  %logits = loom.matmul %h, %wte transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  %loss = loom.cross_entropy %logits, %tgt : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  %mean = loom.all_reduce %loss on @mesh [dp] avg {reason = "loss"} : tensor<f32>
  return %mean : tensor<f32>
}

// GENERIC-LABEL: sym_name = "rest"
// GENERIC: "loom.reshape"
// GENERIC: "loom.transpose"(%{{.*}}) <{permutation = array<i64: 1, 0>}>
// GENERIC: "loom.concat"(%{{.*}}, %{{.*}}) <{dim = 0 : i64}>
// GENERIC: "loom.gelu"
// GENERIC: "loom.softmax"
// GENERIC: "loom.all_gather"(%{{.*}}) <{axes = ["tp"], dims = array<i64: 1>, mesh = @mesh}>
// GENERIC: "loom.reduce_scatter"(%{{.*}}) <{axes = ["dp", "tp"], dims = array<i64: 0>, mesh = @mesh, reduction = #loom<reduction max>}>
// GENERIC: "loom.all_to_all"(%{{.*}}) <{axes = ["tp"], concat_dim = 0 : i64, mesh = @mesh, split_dim = 1 : i64}>
// GENERIC: "loom.send"(%{{.*}}) <{axes = ["dp"], mesh = @mesh, peer = 1 : i64, tag = 7 : i64}> : (tensor<8x4xf32>) -> ()
// GENERIC: "loom.recv"() <{axes = ["dp"], mesh = @mesh, peer = 0 : i64, tag = 7 : i64}> : () -> tensor<8x4xf32>

// CHECK-LABEL: func.func @rest
// CHECK: loom.reshape %{{.*}} : tensor<4x8xf32> -> tensor<8x4xf32>
// CHECK: loom.transpose %{{.*}} [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
// CHECK: loom.concat %{{.*}}, %{{.*}} dim 0 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
// CHECK: loom.gelu %{{.*}} : tensor<16x4xf32>
// CHECK: loom.softmax %{{.*}} : tensor<16x4xf32>
// CHECK: loom.all_gather %{{.*}} on @mesh [tp] dim 1 : tensor<16x4xf32> -> tensor<16x8xf32>
// CHECK: loom.reduce_scatter %{{.*}} on @mesh [dp, tp] dim 0 max : tensor<16x8xf32> -> tensor<4x8xf32>
// CHECK: loom.all_to_all %{{.*}} on @mesh [tp] split 1 concat 0 : tensor<4x8xf32> -> tensor<8x4xf32>
// CHECK: loom.send %{{.*}} to @mesh [dp] peer 1 tag 7 : tensor<8x4xf32>
// CHECK: loom.recv from @mesh [dp] peer 0 tag 7 : tensor<8x4xf32>
func.func @rest(%x: tensor<4x8xf32>) -> tensor<8x4xf32> {
  %r = loom.reshape %x : tensor<4x8xf32> -> tensor<8x4xf32>
  %t = loom.transpose %x [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %c = loom.concat %r, %t dim 0 : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
  %g = loom.gelu %c : tensor<16x4xf32>
  %s = loom.softmax %g : tensor<16x4xf32>
  %ag = loom.all_gather %s on @mesh [tp] dim 1 : tensor<16x4xf32> -> tensor<16x8xf32>
  %rs = loom.reduce_scatter %ag on @mesh [dp, tp] dim 0 max : tensor<16x8xf32> -> tensor<4x8xf32>
  %a2a = loom.all_to_all %rs on @mesh [tp] split 1 concat 0 : tensor<4x8xf32> -> tensor<8x4xf32>
  loom.send %a2a to @mesh [dp] peer 1 tag 7 : tensor<8x4xf32>
  %v = loom.recv from @mesh [dp] peer 0 tag 7 : tensor<8x4xf32>
  return %v : tensor<8x4xf32>
}
