// RUN: loom-opt --loom-propagate -split-input-file %s | FileCheck %s

// Data parallel: token ids split on dp split every activation's batch
// dimension, through the ops' factor rules; the loss (a mean over the split
// tokens) holds partial sums; the replicated weights stay unannotated.
loom.mesh @mesh <dp = 2, tp = 2>
// CHECK-LABEL: func.func @data_parallel(
// CHECK-SAME: loom.name = "targets", loom.role = #loom.role<target>, loom.sharding = #loom.sharding<@mesh, {{\[}}[dp], []]>
func.func @data_parallel(%wte: tensor<16x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
              %w: tensor<8x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
              %tok: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>, loom.sharding = #loom.sharding<@mesh, [[dp], []]>},
              %tgt: tensor<2x4xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32> {
  // CHECK: loom.embedding {{.*}}loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp], [], []]>]
  %x = loom.embedding %wte, %tok : tensor<16x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  // CHECK: loom.linear {{.*}}loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp], [], []]>]
  %h = loom.linear %x, %w : tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32>
  // CHECK: loom.matmul {{.*}}loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp], [], []]>]
  %l = loom.matmul %h, %wte transpose_rhs : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
  // CHECK: loom.cross_entropy {{.*}}loom.shardings = [#loom.sharding<@mesh, [], partial = [dp]>]
  %loss = loom.cross_entropy %l, %tgt : tensor<2x4x16xf32>, tensor<2x4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// GSPMD-style hand annotations: the first MLP weight split by columns and
// the second by rows give the Megatron MLP: the hidden activation is split
// on tp, and the second matmul's output holds partial sums over tp.
loom.mesh @mesh <tp = 4>
// CHECK-LABEL: func.func @megatron_mlp(
func.func @megatron_mlp(%x: tensor<2x8x16xf32>,
    %w1: tensor<16x64xf32> {loom.sharding = #loom.sharding<@mesh, [[], [tp]]>},
    %b1: tensor<64xf32>,
    %w2: tensor<64x16xf32> {loom.sharding = #loom.sharding<@mesh, [[tp], []]>}) -> tensor<2x8x16xf32> {
  // CHECK: loom.linear {{.*}}loom.shardings = [#loom.sharding<@mesh, {{\[}}[], [], [tp]]>]
  %h = loom.linear %x, %w1, %b1 : tensor<2x8x16xf32>, tensor<16x64xf32>, tensor<64xf32> -> tensor<2x8x64xf32>
  // CHECK: loom.gelu {{.*}}loom.shardings = [#loom.sharding<@mesh, {{\[}}[], [], [tp]]>]
  %g = loom.gelu %h : tensor<2x8x64xf32>
  // CHECK: loom.linear {{.*}}loom.shardings = [#loom.sharding<@mesh, {{\[}}[], [], []], partial = [tp]>]
  %y = loom.linear %g, %w2 : tensor<2x8x64xf32>, tensor<64x16xf32> -> tensor<2x8x16xf32>
  return %y : tensor<2x8x16xf32>
}

// -----

// Shardings cross transformer-block boundaries in both directions.
loom.mesh @mesh <dp = 2>
// CHECK-LABEL: func.func @through_block(
func.func @through_block(%x: tensor<4x8xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], []]>},
                         %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  // CHECK: loom.block "h.0"
  %y = loom.block "h.0"(%x, %w, %b) : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>, %aw: tensor<8xf32>, %ab: tensor<8xf32>):
    // CHECK: loom.layer_norm {{.*}}loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp], []]>]
    %n = loom.layer_norm %a, %aw, %ab : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>
    loom.yield %n : tensor<4x8xf32>
  }
  // CHECK: loom.gelu {{.*}}loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp], []]>]
  %z = loom.gelu %y : tensor<4x8xf32>
  return %z : tensor<4x8xf32>
}

// -----

// Backward propagation: a sharded result seeds its operands.
loom.mesh @mesh <dp = 2>
// CHECK-LABEL: func.func @backward(
// CHECK-SAME: %{{.*}}: tensor<4x8xf32> {loom.sharding = #loom.sharding<@mesh, {{\[}}[dp], []]>}
func.func @backward(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %g = loom.gelu %x {loom.shardings = [#loom.sharding<@mesh, [[dp], []]>]} : tensor<4x8xf32>
  return %g : tensor<4x8xf32>
}

// -----

// A seed on an op's result fixes the axes it names and stays open on its
// other dimensions: the batch split on dp the op propagates joins the
// sequence split on tp a pass seeded before dp was decided.
loom.mesh @mesh <dp = 2, tp = 2>
// CHECK-LABEL: func.func @open_seed(
func.func @open_seed(%x: tensor<4x8x16xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], [], []]>},
                     %g: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<4x8x16xf32> {
  // CHECK: loom.layer_norm {{.*}}loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp], [tp], []]>]
  %n = loom.layer_norm %x, %g, %b {loom.shardings = [#loom.sharding<@mesh, [[], [tp], []]>]} : tensor<4x8x16xf32>, tensor<16xf32>, tensor<16xf32>
  return %n : tensor<4x8x16xf32>
}

// -----

// Megatron's column-parallel linear under sequence parallelism: the input
// is split on the sequence and the weight on its columns, both over tp.
// The seeded result keeps the column split (the input will be gathered),
// without a remark; its batch takes dp.
loom.mesh @mesh <dp = 2, tp = 2>
// CHECK-LABEL: func.func @decided_result(
func.func @decided_result(%x: tensor<4x8x16xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], [tp], []]>},
                          %w: tensor<16x32xf32> {loom.sharding = #loom.sharding<@mesh, [[], [tp]]>}) -> tensor<4x8x32xf32> {
  // CHECK: loom.linear {{.*}}loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp], [], [tp]]>]
  %y = loom.linear %x, %w {loom.shardings = [#loom.sharding<@mesh, [[], [], [tp]]>]} : tensor<4x8x16xf32>, tensor<16x32xf32> -> tensor<4x8x32xf32>
  // CHECK: loom.gelu {{.*}}loom.shardings = [#loom.sharding<@mesh, {{\[}}[dp], [], [tp]]>]
  %z = loom.gelu %y : tensor<4x8x32xf32>
  return %z : tensor<4x8x32xf32>
}
