// Seed for the mutation test: a mesh, shardings and every collective,
// buckets (one whose members split different dims) and a wait included.
loom.mesh @mesh <dp = 2, tp = 2, pp = 2>
func.func @step(%w: tensor<8x16xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>, loom.sharding = #loom.sharding<@mesh, [[dp], [tp]]>},
                %x: tensor<4x8x16xf32>) -> tensor<4x8x16xf32> {
  %g = loom.all_gather %w on @mesh [dp] dim 0 {reason = "zero-3: gather w"} : tensor<8x16xf32> -> tensor<16x16xf32>
  %y = loom.all_reduce %x on @mesh [tp] sum : tensor<4x8x16xf32>
  %s = loom.reduce_scatter %y on @mesh [dp, tp] dim 1 sum : tensor<4x8x16xf32> -> tensor<4x2x16xf32>
  %a = loom.all_to_all %s on @mesh [tp] split 2 concat 1 {loom.shardings = [#loom.sharding<@mesh, [[], [], [dp]]>]} : tensor<4x2x16xf32> -> tensor<4x4x8xf32>
  loom.send %a to @mesh [pp] peer 1 tag 0 : tensor<4x4x8xf32>
  %r = loom.recv from @mesh [pp] peer 1 tag 1 : tensor<4x8x16xf32>
  %gb:2 = loom.all_gather %w, %w on @mesh [dp] dim 0 async {reason = "all-gather bucket 0"} : tensor<8x16xf32>, tensor<8x16xf32> -> tensor<16x16xf32>, tensor<16x16xf32>
  %sb:2 = loom.reduce_scatter %y, %x on @mesh [dp] dims [0, 2] sum async {reason = "reduce-scatter bucket 0"} : tensor<4x8x16xf32>, tensor<4x8x16xf32> -> tensor<2x8x16xf32>, tensor<4x8x8xf32>
  loom.wait %sb#0, %gb#1 {reason = "complete"} : tensor<2x8x16xf32>, tensor<16x16xf32>
  %z = loom.add %r, %y : tensor<4x8x16xf32>, tensor<4x8x16xf32>
  return %z : tensor<4x8x16xf32>
}
