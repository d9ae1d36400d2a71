// RUN: loom-opt --loom-plan-buffers=in-place=false -split-input-file %s | FileCheck %s

// A collective of one value split on a non-leading dimension moves its
// blocks rank by rank through a buffer the plan holds, so the arena is all
// the memory a step takes (no runtime temporary on top): GPT-2's wte under
// ZeRO-3 on a data-parallel size that does not divide its 50257 rows is
// gathered on its columns.

// A synchronous all-gather of dim 1 receives every rank's [4, 2] block
// (2 x 32 bytes) into scratch (at 128; the shard is at 0, the result at
// 64), then unpacks them into its [4, 4] result: the scratch lives for the
// gather alone, so the add after it reuses its bytes. A gather of dim 0
// (blocks contiguous in the result) takes none.
// CHECK-LABEL: func.func @gather_columns
// CHECK: loom.all_gather %arg0 on @mesh [dp] dim 1 {loom.offsets = array<i64: 64>, loom.scratch_offsets = array<i64: 128>}
// CHECK: loom.add {{.*}} {loom.offsets = array<i64: 128>}
// CHECK-LABEL: func.func @gather_rows
// CHECK: loom.all_gather %arg0 on @mesh [dp] dim 0 {loom.offsets = array<i64: 64>} :
loom.mesh @mesh <dp = 2>
func.func @gather_columns(%w: tensor<4x2xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> tensor<4x4xf32> {
  %g = loom.all_gather %w on @mesh [dp] dim 1 : tensor<4x2xf32> -> tensor<4x4xf32>
  %a = loom.add %g, %g : tensor<4x4xf32>, tensor<4x4xf32>
  return %a : tensor<4x4xf32>
}
func.func @gather_rows(%w: tensor<2x4xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> tensor<4x4xf32> {
  %g = loom.all_gather %w on @mesh [dp] dim 0 : tensor<2x4xf32> -> tensor<4x4xf32>
  %a = loom.add %g, %g : tensor<4x4xf32>, tensor<4x4xf32>
  return %a : tensor<4x4xf32>
}

// -----

// In flight (ZeRO-3's prefetch), the blocks arrive while the gelus run and
// are unpacked when the gather completes, before the add reads its result:
// the scratch (64 bytes at 192) stays allocated until then, apart from the
// gelus' results (256, 320) and the add's (384); a synchronous gather's
// would be free for the gelus.
// CHECK-LABEL: func.func @gather_in_flight
// CHECK: loom.all_gather %arg0 on @mesh [dp] dim 1 async {loom.offsets = array<i64: 128>, loom.scratch_offsets = array<i64: 192>}
// CHECK: loom.gelu %arg1 {loom.offsets = array<i64: 256>}
// CHECK: loom.gelu {{.*}} {loom.offsets = array<i64: 320>}
// CHECK: loom.add {{.*}} {loom.offsets = array<i64: 384>}
loom.mesh @mesh <dp = 2>
func.func @gather_in_flight(%w: tensor<4x2xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                            %x: tensor<4x4xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %g = loom.all_gather %w on @mesh [dp] dim 1 async : tensor<4x2xf32> -> tensor<4x4xf32>
  %h = loom.gelu %x : tensor<4x4xf32>
  %k = loom.gelu %h : tensor<4x4xf32>
  %a = loom.add %g, %k : tensor<4x4xf32>, tensor<4x4xf32>
  return %a, %h : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// An all-to-all packs the blocks of a non-leading split dim and, when the
// concat dim is not leading in a block, receives the blocks before
// unpacking them (each the input's size): two scratch buffers, one, or
// none.
// CHECK-LABEL: func.func @all_to_all_both
// CHECK: loom.all_to_all {{.*}} split 2 concat 1 {loom.offsets = array<i64: {{[0-9]+}}>, loom.scratch_offsets = array<i64: {{[0-9]+}}, {{[0-9]+}}>}
// CHECK-LABEL: func.func @all_to_all_packed
// CHECK: loom.all_to_all {{.*}} split 1 concat 0 {loom.offsets = array<i64: {{[0-9]+}}>, loom.scratch_offsets = array<i64: {{[0-9]+}}>}
// CHECK-LABEL: func.func @all_to_all_received
// CHECK: loom.all_to_all {{.*}} split 0 concat 1 {loom.offsets = array<i64: {{[0-9]+}}>, loom.scratch_offsets = array<i64: {{[0-9]+}}>}
// CHECK-LABEL: func.func @all_to_all_none
// CHECK: loom.all_to_all {{.*}} split 0 concat 0 {loom.offsets = array<i64: {{[0-9]+}}>} :
loom.mesh @mesh <dp = 2>
func.func @all_to_all_both(%x: tensor<2x2x8xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> tensor<2x4x4xf32> {
  %g = loom.gelu %x : tensor<2x2x8xf32>
  %t = loom.all_to_all %g on @mesh [dp] split 2 concat 1 : tensor<2x2x8xf32> -> tensor<2x4x4xf32>
  return %t : tensor<2x4x4xf32>
}
func.func @all_to_all_packed(%x: tensor<2x8xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> tensor<4x4xf32> {
  %g = loom.gelu %x : tensor<2x8xf32>
  %t = loom.all_to_all %g on @mesh [dp] split 1 concat 0 : tensor<2x8xf32> -> tensor<4x4xf32>
  return %t : tensor<4x4xf32>
}
func.func @all_to_all_received(%x: tensor<8x2xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> tensor<4x4xf32> {
  %g = loom.gelu %x : tensor<8x2xf32>
  %t = loom.all_to_all %g on @mesh [dp] split 0 concat 1 : tensor<8x2xf32> -> tensor<4x4xf32>
  return %t : tensor<4x4xf32>
}
func.func @all_to_all_none(%x: tensor<8x2xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> tensor<8x2xf32> {
  %g = loom.gelu %x : tensor<8x2xf32>
  %t = loom.all_to_all %g on @mesh [dp] split 0 concat 0 : tensor<8x2xf32> -> tensor<8x2xf32>
  return %t : tensor<8x2xf32>
}
