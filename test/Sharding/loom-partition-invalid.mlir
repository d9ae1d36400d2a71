// RUN: loom-opt --loom-partition -split-input-file -verify-diagnostics %s

loom.mesh @mesh <dp = 2, tp = 2>
func.func @resplit(%x: tensor<4x4xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], []]>}) -> tensor<4x4xf32> {
  // expected-error@+1 {{'loom.gelu' op needs operand #0 split on [tp] along dimension 0 but it is split on [dp]; the partitioner cannot re-split a value yet}}
  %g = loom.gelu %x {loom.shardings = [#loom.sharding<@mesh, [[tp], []]>]} : tensor<4x4xf32>
  return %g : tensor<4x4xf32>
}

// -----

loom.mesh @a <dp = 2>
// expected-error@+1 {{'loom.mesh' op is a second mesh; a program is partitioned over exactly one mesh}}
loom.mesh @b <tp = 2>

// -----

// A hand-written split of attention channels that is not a whole number of
// heads per rank.
loom.mesh @mesh <tp = 2>
func.func @heads(%qkv: tensor<2x4x3x6xf32> {loom.sharding = #loom.sharding<@mesh, [[], [], [], [tp]]>}) -> tensor<2x4x6xf32> {
  // expected-error@+1 {{'loom.attention' op splits the channels of its 3 heads over [tp] (2 ways), which does not give every rank whole heads; n_head must be divisible by 2}}
  %y = loom.attention %qkv {num_heads = 3 : i64, loom.shardings = [#loom.sharding<@mesh, [[], [], [tp]]>]} : tensor<2x4x3x6xf32> -> tensor<2x4x6xf32>
  return %y : tensor<2x4x6xf32>
}
