// RUN: loom-opt %s -split-input-file -verify-diagnostics

// expected-error@+1 {{'func.func' op argument #0: loom.offset must be a non-negative byte offset}}
func.func @negative_arg_offset(%x: tensor<4xf32> {loom.offset = -1 : i64}) {
  return
}

// -----

func.func @negative_offsets(%x: tensor<4xf32>) {
  // expected-error@+1 {{'loom.gelu' op loom.offsets must be an array of non-negative byte offsets}}
  %y = loom.gelu %x {loom.offsets = array<i64: -64>} : tensor<4xf32>
  return
}

// -----

func.func @offsets_count(%x: tensor<4xf32>) {
  // expected-error@+1 {{'loom.gelu' op loom.offsets has 2 entries for 1 results}}
  %y = loom.gelu %x {loom.offsets = array<i64: 0, 64>} : tensor<4xf32>
  return
}

// -----

func.func @scratch_not_array(%x: tensor<4xf32>) {
  // expected-error@+1 {{'loom.gelu' op loom.scratch_offsets must be an array of non-negative byte offsets}}
  %y = loom.gelu %x {loom.scratch_offsets = "x"} : tensor<4xf32>
  return
}

// -----

// expected-error@+1 {{'func.func' op loom.arena_bytes must be a non-negative integer on a function}}
func.func @negative_arena() attributes {loom.arena_bytes = -1 : i64} {
  return
}

// -----

func.func @arena_on_op(%x: tensor<4xf32>) {
  // expected-error@+1 {{'loom.gelu' op loom.arena_bytes must be a non-negative integer on a function}}
  %y = loom.gelu %x {loom.arena_bytes = 64 : i64} : tensor<4xf32>
  return
}

// -----

// expected-error@+1 {{'func.func' op loom.stash_bytes must be a non-negative integer on a function}}
func.func @negative_stash_bytes() attributes {loom.stash_bytes = -64 : i64} {
  return
}

// -----

func.func @in_stash_count(%x: tensor<4xf32>) {
  // expected-error@+1 {{'loom.gelu' op loom.in_stash must be an array<i1> of one flag per result (1)}}
  %y = loom.gelu %x {loom.in_stash = array<i1: true, false>} : tensor<4xf32>
  return
}

// -----

func.func @in_stash_not_flags(%x: tensor<4xf32>) {
  // expected-error@+1 {{'loom.gelu' op loom.in_stash must be an array<i1> of one flag per result (1)}}
  %y = loom.gelu %x {loom.in_stash = array<i64: 1>} : tensor<4xf32>
  return
}
