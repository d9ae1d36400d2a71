// RUN: split-file %s %t
// RUN: not loom-opt --loom-tensor-parallel=sequence-parallel=true %t/plain.mlir 2>&1 | FileCheck %s --check-prefix=SP
// RUN: not loom-opt --loom-tensor-parallel %t/nomesh.mlir 2>&1 | FileCheck %s --check-prefix=NOMESH
// RUN: not loom-opt --loom-tensor-parallel=vocab-divisible-by=0 %t/plain.mlir 2>&1 | FileCheck %s --check-prefix=DIVISIBLE
// RUN: loom-opt --loom-tensor-parallel %t/plain.mlir 2>&1 | FileCheck %s --check-prefix=PLAIN
// RUN: loom-opt --loom-tensor-parallel %t/one.mlir 2>&1 | FileCheck %s --check-prefix=ONE
// RUN: loom-opt --loom-tensor-parallel %t/packed.mlir 2>&1 | FileCheck %s --check-prefix=PACKED
// SP: error: loom-tensor-parallel: sequence parallelism is not implemented yet; drop sequence-parallel (tensor parallelism alone works)
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
