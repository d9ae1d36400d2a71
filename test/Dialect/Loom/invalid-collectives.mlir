// RUN: loom-opt %s -split-input-file -verify-diagnostics

// Verifier errors of loom.mesh and the collectives.

func.func @mesh_in_function() {
  // expected-error@+1 {{'loom.mesh' op expects parent op 'builtin.module'}}
  loom.mesh @mesh <dp = 2>
  return
}

// -----

// expected-note@+1 {{see existing symbol definition here}}
loom.mesh @mesh <dp = 2>
// expected-error@+1 {{redefinition of symbol named 'mesh'}}
loom.mesh @mesh <tp = 2>

// -----

func.func @unknown_mesh(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.all_reduce' op refers to unknown mesh @nope; declare it with `loom.mesh`}}
  %0 = loom.all_reduce %x on @nope [dp] sum : tensor<8xf32>
  return
}

// -----

// A symbol that is not a loom.mesh is no mesh.
func.func private @not_a_mesh()
func.func @symbol_not_a_mesh(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.all_gather' op refers to unknown mesh @not_a_mesh; declare it with `loom.mesh`}}
  %0 = loom.all_gather %x on @not_a_mesh [dp] dim 0 : tensor<8xf32> -> tensor<16xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @no_axes(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.all_reduce' op must name at least one mesh axis}}
  %0 = loom.all_reduce %x on @mesh [] sum : tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2, tp = 4>
func.func @unknown_axis(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.all_reduce' op 'pp' is not an axis of mesh @mesh (axes: dp, tp)}}
  %0 = loom.all_reduce %x on @mesh [pp] sum : tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2, tp = 4>
func.func @axis_twice(%x: tensor<8x8xf32>) {
  // expected-error@+1 {{'loom.reduce_scatter' op names mesh axis 'tp' twice}}
  %0 = loom.reduce_scatter %x on @mesh [tp, dp, tp] dim 0 sum : tensor<8x8xf32> -> tensor<1x8xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @all_reduce_type(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.all_reduce' op result #0 has type 'tensor<8xf16>' but input #0 has type 'tensor<8xf32>'; a reduction keeps each value's type}}
  %0 = "loom.all_reduce"(%x) <{axes = ["dp"], mesh = @mesh, reduction = #loom<reduction sum>}> : (tensor<8xf32>) -> tensor<8xf16>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @unknown_reduction(%x: tensor<8xf32>) {
  // expected-error@+1 {{unknown reduction 'prod' (expected sum, max, min or avg)}}
  %0 = loom.all_reduce %x on @mesh [dp] prod : tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @all_gather_dim(%x: tensor<8x4xf32>) {
  // expected-error@+1 {{'loom.all_gather' op dim 2 is out of range for rank 2}}
  %0 = loom.all_gather %x on @mesh [dp] dim 2 : tensor<8x4xf32> -> tensor<8x4xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2, tp = 4>
func.func @all_gather_result(%x: tensor<8x4xf32>) {
  // expected-error@+1 {{'loom.all_gather' op result shape [16, 4] should be [64, 4]}}
  %0 = loom.all_gather %x on @mesh [dp, tp] dim 0 : tensor<8x4xf32> -> tensor<16x4xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @all_gather_mixed_types(%x: tensor<8x4xf32>) {
  // expected-error@+1 {{'loom.all_gather' op mixes element types 'f32' and 'f16'}}
  %0 = loom.all_gather %x on @mesh [dp] dim 0 : tensor<8x4xf32> -> tensor<16x4xf16>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @reduce_scatter_dim(%x: tensor<8x4xf32>) {
  // expected-error@+1 {{'loom.reduce_scatter' op dim -1 is out of range for rank 2}}
  %0 = loom.reduce_scatter %x on @mesh [dp] dim -1 sum : tensor<8x4xf32> -> tensor<8x4xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2, tp = 3>
func.func @reduce_scatter_divisible(%x: tensor<8x4xf32>) {
  // expected-error@+1 {{'loom.reduce_scatter' op dimension 1 of size 4 is not divisible by the group size 3}}
  %0 = loom.reduce_scatter %x on @mesh [tp] dim 1 sum : tensor<8x4xf32> -> tensor<8x1xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @reduce_scatter_result(%x: tensor<8x4xf32>) {
  // expected-error@+1 {{'loom.reduce_scatter' op result shape [8, 2] should be [4, 4]}}
  %0 = loom.reduce_scatter %x on @mesh [dp] dim 0 sum : tensor<8x4xf32> -> tensor<8x2xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @reduce_scatter_mixed_types(%x: tensor<8x4xf32>) {
  // expected-error@+1 {{'loom.reduce_scatter' op mixes element types 'f32' and 'bf16'}}
  %0 = loom.reduce_scatter %x on @mesh [dp] dim 0 sum : tensor<8x4xf32> -> tensor<4x4xbf16>
  return
}

// -----

func.func @wait_for_nothing() {
  // expected-error@+1 {{'loom.wait' op waits for no value; name the values whose collectives complete here}}
  "loom.wait"() : () -> ()
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @all_gather_bucket_counts(%x: tensor<4x4xf32>, %y: tensor<4xf32>) {
  // expected-error@+1 {{'loom.all_gather' op has 2 inputs but 1 results; each input has its result}}
  %0 = loom.all_gather %x, %y on @mesh [dp] dim 0 : tensor<4x4xf32>, tensor<4xf32> -> tensor<8x4xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @all_gather_empty() {
  // expected-error@+1 {{'loom.all_gather' op needs at least one value to gather}}
  "loom.all_gather"() <{axes = ["dp"], dims = array<i64>, mesh = @mesh}> : () -> ()
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @all_gather_bucket_types(%x: tensor<4x4xf32>, %y: tensor<4xbf16>) {
  // expected-error@+1 {{'loom.all_gather' op mixes element types 'f32' and 'bf16'}}
  %0:2 = loom.all_gather %x, %y on @mesh [dp] dim 0 : tensor<4x4xf32>, tensor<4xbf16> -> tensor<8x4xf32>, tensor<8xbf16>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @all_gather_bucket_dim(%x: tensor<4x4xf32>, %y: tensor<4xf32>) {
  // expected-error@+1 {{'loom.all_gather' op dim 1 is out of range for rank 1}}
  %0:2 = loom.all_gather %x, %y on @mesh [dp] dim 1 : tensor<4x4xf32>, tensor<4xf32> -> tensor<4x8xf32>, tensor<4xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @all_gather_bucket_member_shape(%x: tensor<4x4xf32>, %y: tensor<4xf32>) {
  // expected-error@+1 {{'loom.all_gather' op result shape [4] should be [8]}}
  %0:2 = loom.all_gather %x, %y on @mesh [dp] dim 0 : tensor<4x4xf32>, tensor<4xf32> -> tensor<8x4xf32>, tensor<4xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @reduce_scatter_bucket_counts(%x: tensor<8x4xf32>, %y: tensor<8xf32>) {
  // expected-error@+1 {{'loom.reduce_scatter' op has 2 inputs but 1 results; each input has its result}}
  %0 = loom.reduce_scatter %x, %y on @mesh [dp] dim 0 sum : tensor<8x4xf32>, tensor<8xf32> -> tensor<4x4xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @reduce_scatter_empty() {
  // expected-error@+1 {{'loom.reduce_scatter' op needs at least one value to reduce-scatter}}
  "loom.reduce_scatter"() <{axes = ["dp"], dims = array<i64>, mesh = @mesh, reduction = #loom<reduction sum>}> : () -> ()
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @reduce_scatter_bucket_types(%x: tensor<8x4xf32>, %y: tensor<8xbf16>) {
  // expected-error@+1 {{'loom.reduce_scatter' op mixes element types 'f32' and 'bf16'}}
  %0:2 = loom.reduce_scatter %x, %y on @mesh [dp] dim 0 sum : tensor<8x4xf32>, tensor<8xbf16> -> tensor<4x4xf32>, tensor<4xbf16>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @reduce_scatter_bucket_dim(%x: tensor<8x4xf32>, %y: tensor<8xf32>) {
  // expected-error@+1 {{'loom.reduce_scatter' op dim 1 is out of range for rank 1}}
  %0:2 = loom.reduce_scatter %x, %y on @mesh [dp] dim 1 sum : tensor<8x4xf32>, tensor<8xf32> -> tensor<8x2xf32>, tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @reduce_scatter_bucket_member_shape(%x: tensor<8x4xf32>, %y: tensor<8xf32>) {
  // expected-error@+1 {{'loom.reduce_scatter' op result shape [8] should be [4]}}
  %0:2 = loom.reduce_scatter %x, %y on @mesh [dp] dim 0 sum : tensor<8x4xf32>, tensor<8xf32> -> tensor<4x4xf32>, tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @all_gather_bucket_dims_count(%x: tensor<4x4xf32>, %y: tensor<4xf32>) {
  // expected-error@+1 {{dims lists 1 dimensions for 2 inputs; give one per input (or `dim d` for all)}}
  %0:2 = loom.all_gather %x, %y on @mesh [dp] dims [0] : tensor<4x4xf32>, tensor<4xf32> -> tensor<8x4xf32>, tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @all_gather_generic_dims_count(%x: tensor<4x4xf32>, %y: tensor<4xf32>) {
  // expected-error@+1 {{'loom.all_gather' op has 3 split dimensions for 2 inputs; give one per input}}
  %0:2 = "loom.all_gather"(%x, %y) <{axes = ["dp"], dims = array<i64: 0, 0, 0>, mesh = @mesh}> : (tensor<4x4xf32>, tensor<4xf32>) -> (tensor<8x4xf32>, tensor<8xf32>)
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @all_gather_bucket_member_dim(%x: tensor<4x4xf32>, %y: tensor<4xf32>) {
  // expected-error@+1 {{'loom.all_gather' op dim 1 is out of range for rank 1}}
  %0:2 = loom.all_gather %x, %y on @mesh [dp] dims [0, 1] : tensor<4x4xf32>, tensor<4xf32> -> tensor<8x4xf32>, tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @all_gather_bucket_member_dim_shape(%x: tensor<4x4xf32>, %y: tensor<3x4xf32>) {
  // The second member gathers dim 1: [3, 8], not [6, 4].
  // expected-error@+1 {{'loom.all_gather' op result shape [6, 4] should be [3, 8]}}
  %0:2 = loom.all_gather %x, %y on @mesh [dp] dims [0, 1] : tensor<4x4xf32>, tensor<3x4xf32> -> tensor<8x4xf32>, tensor<6x4xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @reduce_scatter_generic_dims_count(%x: tensor<8x4xf32>) {
  // expected-error@+1 {{'loom.reduce_scatter' op has 2 split dimensions for 1 inputs; give one per input}}
  %0 = "loom.reduce_scatter"(%x) <{axes = ["dp"], dims = array<i64: 0, 1>, mesh = @mesh, reduction = #loom<reduction sum>}> : (tensor<8x4xf32>) -> tensor<4x4xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @reduce_scatter_bucket_member_dim(%x: tensor<8x4xf32>, %y: tensor<3x8xf32>) {
  // The second member's dim 1 (8) is split: [3, 4]; its dim 0 (3) is not
  // divisible by 2.
  // expected-error@+1 {{'loom.reduce_scatter' op result shape [3, 8] should be [3, 4]}}
  %0:2 = loom.reduce_scatter %x, %y on @mesh [dp] dims [0, 1] sum : tensor<8x4xf32>, tensor<3x8xf32> -> tensor<4x4xf32>, tensor<3x8xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @reduce_scatter_bucket_member_dim_divisible(%x: tensor<8x4xf32>, %y: tensor<8x3xf32>) {
  // expected-error@+1 {{'loom.reduce_scatter' op dimension 1 of size 3 is not divisible by the group size 2}}
  %0:2 = loom.reduce_scatter %x, %y on @mesh [dp] dims [0, 1] sum : tensor<8x4xf32>, tensor<8x3xf32> -> tensor<4x4xf32>, tensor<8x1xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @reduce_scatter_bucket_in_place(%x: tensor<8x4xf32>, %y: tensor<8xf32>) attributes {loom.train = {phase = "microbatch", microbatches = 2 : i64}} {
  // A bucket in place: every member keeps its shape.
  // expected-error@+1 {{'loom.reduce_scatter' op is last_microbatch, so it reduces in place and result #1 has input #1's type 'tensor<8xf32>', not 'tensor<4xf32>'; read the block with local_slice}}
  %0:2 = loom.reduce_scatter %x, %y on @mesh [dp] dim 0 sum last_microbatch : tensor<8x4xf32>, tensor<8xf32> -> tensor<8x4xf32>, tensor<4xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @reduce_scatter_bucket_in_place_dims(%x: tensor<8x4xf32>, %y: tensor<3x8xf32>) attributes {loom.train = {phase = "microbatch", microbatches = 2 : i64}} {
  // In place, the blocks still divide each member's dimension.
  // expected-error@+1 {{'loom.reduce_scatter' op dimension 0 of size 3 is not divisible by the group size 2}}
  %0:2 = loom.reduce_scatter %x, %y on @mesh [dp] dim 0 sum last_microbatch : tensor<8x4xf32>, tensor<3x8xf32> -> tensor<8x4xf32>, tensor<3x8xf32>
  return
}

// -----

loom.mesh @mesh <tp = 4>
func.func @all_to_all_split_dim(%x: tensor<16x64xf32>) {
  // expected-error@+1 {{'loom.all_to_all' op split dim 2 is out of range for rank 2}}
  %0 = loom.all_to_all %x on @mesh [tp] split 2 concat 0 : tensor<16x64xf32> -> tensor<64x16xf32>
  return
}

// -----

loom.mesh @mesh <tp = 4>
func.func @all_to_all_concat_dim(%x: tensor<16x64xf32>) {
  // expected-error@+1 {{'loom.all_to_all' op concat dim -1 is out of range for rank 2}}
  %0 = loom.all_to_all %x on @mesh [tp] split 1 concat -1 : tensor<16x64xf32> -> tensor<64x16xf32>
  return
}

// -----

loom.mesh @mesh <tp = 4>
func.func @all_to_all_divisible(%x: tensor<16x6xf32>) {
  // expected-error@+1 {{'loom.all_to_all' op split dimension 1 of size 6 is not divisible by the group size 4}}
  %0 = loom.all_to_all %x on @mesh [tp] split 1 concat 0 : tensor<16x6xf32> -> tensor<64x1xf32>
  return
}

// -----

loom.mesh @mesh <tp = 4>
func.func @all_to_all_result(%x: tensor<16x64xf32>) {
  // expected-error@+1 {{'loom.all_to_all' op result shape [16, 64] should be [64, 16]}}
  %0 = loom.all_to_all %x on @mesh [tp] split 1 concat 0 : tensor<16x64xf32> -> tensor<16x64xf32>
  return
}

// -----

loom.mesh @mesh <tp = 4>
func.func @all_to_all_mixed_types(%x: tensor<16x64xf32>) {
  // expected-error@+1 {{'loom.all_to_all' op mixes element types 'f32' and 'f16'}}
  %0 = loom.all_to_all %x on @mesh [tp] split 1 concat 0 : tensor<16x64xf32> -> tensor<64x16xf16>
  return
}

// -----

loom.mesh @mesh <dp = 2, pp = 4>
func.func @send_two_axes(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.send' op names 2 mesh axes; point-to-point needs exactly one}}
  loom.send %x to @mesh [dp, pp] peer 1 tag 0 : tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <pp = 4>
func.func @recv_no_axes() {
  // expected-error@+1 {{'loom.recv' op names 0 mesh axes; point-to-point needs exactly one}}
  %0 = loom.recv from @mesh [] peer 1 tag 0 : tensor<8xf32>
  return
}

// -----

func.func @send_unknown_mesh(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.send' op refers to unknown mesh @mesh; declare it with `loom.mesh`}}
  loom.send %x to @mesh [pp] peer 1 tag 0 : tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <pp = 4>
func.func @recv_unknown_axis() {
  // expected-error@+1 {{'loom.recv' op 'dp' is not an axis of mesh @mesh (axes: pp)}}
  %0 = loom.recv from @mesh [dp] peer 1 tag 0 : tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <pp = 4>
func.func @send_peer_too_large(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.send' op peer 4 is outside axis 'pp' of size 4}}
  loom.send %x to @mesh [pp] peer 4 tag 0 : tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <pp = 4>
func.func @recv_negative_peer() {
  // expected-error@+1 {{'loom.recv' op peer -1 is outside axis 'pp' of size 4}}
  %0 = loom.recv from @mesh [pp] peer -1 tag 0 : tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <pp = 4>
func.func @send_negative_tag(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.send' op tag must be non-negative, got -3}}
  loom.send %x to @mesh [pp] peer 1 tag -3 : tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <pp = 4>
func.func @recv_negative_tag() {
  // expected-error@+1 {{'loom.recv' op tag must be non-negative, got -1}}
  %0 = loom.recv from @mesh [pp] peer 1 tag -1 : tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @all_reduce_counts(%x: tensor<8xf32>, %y: tensor<4xf32>) {
  // expected-error@+1 {{'loom.all_reduce' op has 2 inputs but 1 results; each input has its result}}
  %0 = "loom.all_reduce"(%x, %y) <{axes = ["dp"], mesh = @mesh, reduction = #loom<reduction sum>}> : (tensor<8xf32>, tensor<4xf32>) -> tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @all_reduce_empty() {
  // expected-error@+1 {{'loom.all_reduce' op needs at least one value to reduce}}
  "loom.all_reduce"() <{axes = ["dp"], mesh = @mesh, reduction = #loom<reduction sum>}> : () -> ()
  return
}

// -----

// "The last micro-batch" exists only in a training step's micro-batch
// function or a pipeline chunk's backward: an update (or any other
// function, a pipeline forward too) runs once per step or per forward.
loom.mesh @mesh <dp = 2>
func.func @last_microbatch_in_update(%x: tensor<8xf32>) -> tensor<8xf32> attributes {loom.train = {phase = "update"}} {
  // expected-error@+1 {{'loom.all_reduce' op is last_microbatch outside a training step's micro-batch function or pipeline backward (loom.train phase "microbatch" or "backward"); reduce there, or drop last_microbatch}}
  %0 = loom.all_reduce %x on @mesh [dp] sum last_microbatch : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

loom.mesh @mesh <dp = 2>
func.func @last_microbatch_outside_training(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error@+1 {{'loom.all_reduce' op is last_microbatch outside a training step's micro-batch function}}
  %0 = loom.all_reduce %x on @mesh [dp] sum last_microbatch : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// An in-place (last_microbatch) reduce-scatter keeps the input's type: the
// update reads the rank's block with local_slice.
loom.mesh @mesh <dp = 2>
func.func @last_microbatch_scatter_shrinks(%x: tensor<8x4xf32>) -> tensor<4x4xf32> attributes {loom.train = {phase = "microbatch"}} {
  // expected-error@+1 {{'loom.reduce_scatter' op is last_microbatch, so it reduces in place and its result has the input's type 'tensor<8x4xf32>', not 'tensor<4x4xf32>'; read the block with local_slice}}
  %0 = loom.reduce_scatter %x on @mesh [dp] dim 0 sum last_microbatch : tensor<8x4xf32> -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

loom.mesh @mesh <dp = 2>
func.func @last_microbatch_scatter_in_update(%x: tensor<8x4xf32>) -> tensor<8x4xf32> attributes {loom.train = {phase = "update"}} {
  // expected-error@+1 {{'loom.reduce_scatter' op is last_microbatch outside a training step's micro-batch function or pipeline backward}}
  %0 = loom.reduce_scatter %x on @mesh [dp] dim 0 sum last_microbatch : tensor<8x4xf32> -> tensor<8x4xf32>
  return %0 : tensor<8x4xf32>
}

// -----

loom.mesh @mesh <dp = 2>
func.func @last_microbatch_scatter_indivisible(%x: tensor<7x4xf32>) -> tensor<7x4xf32> attributes {loom.train = {phase = "microbatch"}} {
  // expected-error@+1 {{'loom.reduce_scatter' op dimension 0 of size 7 is not divisible by the group size 2}}
  %0 = loom.reduce_scatter %x on @mesh [dp] dim 0 sum last_microbatch : tensor<7x4xf32> -> tensor<7x4xf32>
  return %0 : tensor<7x4xf32>
}
