// RUN: split-file %s %t
// RUN: not loom-opt --loom-tensor-parallel=sequence-parallel=true %t/seq.mlir 2>&1 | FileCheck %s --check-prefix=SPSEQ
// RUN: not loom-opt --loom-tensor-parallel=sequence-parallel=true %t/vector.mlir 2>&1 | FileCheck %s --check-prefix=SPVEC
// RUN: not loom-opt --loom-tensor-parallel=sequence-parallel=true %t/annotated.mlir 2>&1 | FileCheck %s --check-prefix=SPHAND
// RUN: loom-opt --loom-tensor-parallel=sequence-parallel=true %t/plain.mlir 2>&1 | FileCheck %s --check-prefix=PLAIN
// RUN: not loom-opt --loom-tensor-parallel %t/nomesh.mlir 2>&1 | FileCheck %s --check-prefix=NOMESH
// RUN: not loom-opt --loom-tensor-parallel=vocab-divisible-by=0 %t/plain.mlir 2>&1 | FileCheck %s --check-prefix=DIVISIBLE
// RUN: loom-opt --loom-tensor-parallel %t/plain.mlir 2>&1 | FileCheck %s --check-prefix=PLAIN
// RUN: loom-opt --loom-tensor-parallel %t/one.mlir 2>&1 | FileCheck %s --check-prefix=ONE
// RUN: loom-opt --loom-tensor-parallel %t/packed.mlir 2>&1 | FileCheck %s --check-prefix=PACKED
// Sequence parallelism: a sequence the axis does not divide, a layer norm
// with no sequence, and hand-written shardings (no Megatron layout to put
// the residual stream around) are refused, saying what to change. A model
// with no Megatron role stays replicated with or without it (PLAIN).
// SPSEQ: error: 'loom.layer_norm' op normalizes sequences of 5 tokens (the sequence length: --seq, by default the config's n_positions (n_ctx)), not divisible by tp = 2: sequence parallelism gives every tp rank the same number of tokens; choose --seq divisible by 2 (e.g. 6) or drop sequence-parallel
// SPVEC: error: 'loom.layer_norm' op normalizes a single vector 'tensor<8xf32>': sequence parallelism splits the tokens of the residual stream over tp and this layer norm has none; drop sequence-parallel
// SPHAND: error: loom-tensor-parallel: sequence-parallel splits the residual stream around Megatron's column- and row-parallel linears, but 1 parameter(s) carry hand-written shardings on tp (e.g. "fc1.weight"), which replace Megatron's layout; drop sequence-parallel or the hand-written shardings
// NOMESH: error: loom-tensor-parallel: needs exactly one loom.mesh, found 0
// DIVISIBLE: error: loom-tensor-parallel: vocab-divisible-by = 0 must be >= 1 (128 is Megatron's default; 1 pads to the next multiple of tp)
// A model with no Megatron role and no annotation stays replicated, and the
// pass says so.
// PLAIN: remark: tensor parallelism over tp = 2: no parameter has a Megatron role (attention q|k|v and output linears, linear-gelu-linear MLP, embedding) or a hand-written sharding on tp; the model stays replicated: every tp rank computes the same values
// PLAIN: func.func @plain(%{{.*}}: tensor<2x8xf32>, %{{.*}}: tensor<8x8xf32> {loom.init = #loom.init<zeros>, loom.name = "w", loom.role = #loom.role<param>})
// One rank on tp: nothing to split, nothing said.
// ONE-NOT: remark
// ONE-NOT: loom.sharding
// Packed q|k|v: the heads are not a dimension; that attention stays whole.
// PACKED: remark: takes q|k|v packed as 'tensor<2x4x24xf32>': heads cannot be split as a dimension, so this attention stays replicated over tp (give it [batch, seq, 3, channels], as the GPT importer does)

//--- plain.mlir
loom.mesh @mesh <tp = 2>
func.func @plain(%x: tensor<2x8xf32>,
                 %w: tensor<8x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) {
  %y = loom.linear %x, %w : tensor<2x8xf32>, tensor<8x8xf32> -> tensor<2x8xf32>
  return
}

//--- nomesh.mlir
func.func @f() {
  return
}

//--- one.mlir
loom.mesh @mesh <dp = 2, tp = 1>
func.func @mlp(%x: tensor<2x4x8xf32>,
               %w1: tensor<8x16xf32> {loom.name = "fc1.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
               %w2: tensor<16x8xf32> {loom.name = "fc2.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) {
  %h = loom.linear %x, %w1 : tensor<2x4x8xf32>, tensor<8x16xf32> -> tensor<2x4x16xf32>
  %g = loom.gelu %h : tensor<2x4x16xf32>
  %y = loom.linear %g, %w2 : tensor<2x4x16xf32>, tensor<16x8xf32> -> tensor<2x4x8xf32>
  return
}

//--- packed.mlir
loom.mesh @mesh <tp = 2>
func.func @packed(%qkv: tensor<2x4x24xf32>) {
  %y = loom.attention %qkv {num_heads = 2 : i64} : tensor<2x4x24xf32> -> tensor<2x4x8xf32>
  return
}

//--- seq.mlir
loom.mesh @mesh <tp = 2>
func.func @seq(%x: tensor<2x5x8xf32>,
               %g: tensor<8xf32> {loom.name = "ln.weight", loom.role = #loom.role<param>, loom.init = #loom.init<ones>},
               %b: tensor<8xf32> {loom.name = "ln.bias", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
               %w1: tensor<8x16xf32> {loom.name = "fc1.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
               %w2: tensor<16x8xf32> {loom.name = "fc2.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) {
  %n = loom.layer_norm %x, %g, %b : tensor<2x5x8xf32>, tensor<8xf32>, tensor<8xf32>
  %h = loom.linear %n, %w1 : tensor<2x5x8xf32>, tensor<8x16xf32> -> tensor<2x5x16xf32>
  %a = loom.gelu %h : tensor<2x5x16xf32>
  %y = loom.linear %a, %w2 : tensor<2x5x16xf32>, tensor<16x8xf32> -> tensor<2x5x8xf32>
  return
}

//--- vector.mlir
loom.mesh @mesh <tp = 2>
func.func @vector(%v: tensor<8xf32>, %x: tensor<2x4x8xf32>,
                  %g: tensor<8xf32> {loom.name = "ln.weight", loom.role = #loom.role<param>, loom.init = #loom.init<ones>},
                  %b: tensor<8xf32> {loom.name = "ln.bias", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                  %w1: tensor<8x16xf32> {loom.name = "fc1.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                  %w2: tensor<16x8xf32> {loom.name = "fc2.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) {
  %n = loom.layer_norm %v, %g, %b : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  %h = loom.linear %x, %w1 : tensor<2x4x8xf32>, tensor<8x16xf32> -> tensor<2x4x16xf32>
  %a = loom.gelu %h : tensor<2x4x16xf32>
  %y = loom.linear %a, %w2 : tensor<2x4x16xf32>, tensor<16x8xf32> -> tensor<2x4x8xf32>
  return
}

//--- annotated.mlir
loom.mesh @mesh <tp = 2>
func.func @annotated(%x: tensor<2x4x8xf32>,
                     %w1: tensor<8x16xf32> {loom.name = "fc1.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>, loom.sharding = #loom.sharding<@mesh, [[], [tp]]>},
                     %w2: tensor<16x8xf32> {loom.name = "fc2.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) {
  %h = loom.linear %x, %w1 : tensor<2x4x8xf32>, tensor<8x16xf32> -> tensor<2x4x16xf32>
  %a = loom.gelu %h : tensor<2x4x16xf32>
  %y = loom.linear %a, %w2 : tensor<2x4x16xf32>, tensor<16x8xf32> -> tensor<2x4x8xf32>
  return
}
