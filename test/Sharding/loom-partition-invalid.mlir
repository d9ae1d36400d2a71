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
