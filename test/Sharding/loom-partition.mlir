// RUN: loom-opt --loom-autodiff --loom-zero --loom-propagate --loom-partition %s | FileCheck %s

// Data parallelism on dp = 2, derived: token rows split, every activation
// local, each weight gradient (a sum over split tokens) all-reduced before
// it is accumulated, the loss all-reduced before it is returned, and the
// cross-entropy ops told the global token count.
loom.mesh @mesh <dp = 2>
// CHECK-LABEL: func.func @lm_train(
// CHECK-SAME: tensor<16x8xf32>
// CHECK-SAME: %[[TOK:[a-z0-9]+]]: tensor<1x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>, loom.sharding = #loom.sharding<@mesh, {{\[}}[dp], []]>}
// CHECK-SAME: %[[TGT:[a-z0-9]+]]: tensor<1x4xi32> {loom.name = "targets", loom.role = #loom.role<target>, loom.sharding = #loom.sharding<@mesh, {{\[}}[dp], []]>}
// CHECK-SAME: loom.partitioned
// CHECK: loom.embedding {{.*}} -> tensor<1x4x8xf32>
// CHECK: %[[LOSS:.*]] = loom.cross_entropy %{{.*}}, %[[TGT]] {num_tokens = 8 : i64} : tensor<1x4x16xf32>
// CHECK: loom.cross_entropy_grad {{.*}} {num_tokens = 8 : i64}
// The tied embedding's two partial gradients are added first (addition is
// linear) and reduced once.
// CHECK: %[[DH:.*]], %[[DWTE:.*]] = loom.matmul_grad
// CHECK: loom.linear_grad
// CHECK: %[[EMB:.*]] = loom.embedding_grad
// CHECK: %[[SUM:.*]] = loom.add %[[DWTE]], %[[EMB]]
// CHECK: loom.all_reduce %[[SUM]] on @mesh [dp] sum {reason = "partial sum over [dp] of wte.grad.sum, reduced for wte.weight.grad_accumulate"} : tensor<16x8xf32>
// CHECK: loom.all_reduce {{.*}} on @mesh [dp] sum {reason = "partial sum over [dp] of proj.grad, reduced for w.grad_accumulate"} : tensor<8x8xf32>
// CHECK: %[[GLOBAL:.*]] = loom.all_reduce %[[LOSS]] on @mesh [dp] sum {reason = "partial sum over [dp] of loss, reduced for func.return"} : tensor<f32>
// CHECK: return %[[GLOBAL]],
// The optimizer sees whole, replicated gradients: no collective there.
// CHECK-LABEL: func.func @lm_update(
// CHECK-NOT: loom.all_reduce
// CHECK: return
func.func @lm(%wte: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
              %w: tensor<8x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
              %tok: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>},
              %tgt: tensor<2x4xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32>
    attributes {loom.model = {batch = 2 : i64, seq = 4 : i64, vocab_size = 16 : i64}} {
  %x = loom.embedding %wte, %tok : tensor<16x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32> loc("wte")
  %h = loom.linear %x, %w : tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32> loc("proj")
  %l = loom.matmul %h, %wte transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32> loc("lm_head")
  %loss = loom.cross_entropy %l, %tgt : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32> loc("loss")
  return %loss : tensor<f32>
}
