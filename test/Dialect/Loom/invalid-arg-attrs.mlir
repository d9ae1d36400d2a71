// RUN: loom-opt %s -split-input-file -verify-diagnostics

// Errors in the discardable attributes of function arguments: loom.name,
// loom.role, loom.init, loom.sharding, loom.checkpoint_shape.

// expected-error@+1 {{'func.func' op argument #0: loom.name must be a non-empty string such as "h.0.attn.c_attn.weight"}}
func.func @name_not_string(%x: tensor<8xf32> {loom.name = 3 : i64}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #1: loom.name must be a non-empty string}}
func.func @name_empty(%x: tensor<8xf32>, %y: tensor<8xf32> {loom.name = ""}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0: loom.role must be #loom.role<param|input|target>}}
func.func @role_not_role(%x: tensor<8xf32> {loom.role = "param"}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 has a loom.role but type 'tensor<?x8xf32>'; roles apply to statically shaped tensors}}
func.func @role_dynamic(%x: tensor<?x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 has a loom.role but type 'i32'; roles apply to statically shaped tensors}}
func.func @role_not_tensor(%x: i32 {loom.name = "tokens", loom.role = #loom.role<input>}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 is a param of type 'tensor<8xi32>'; parameters must be float tensors}}
func.func @param_not_float(%x: tensor<8xi32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 is a param without a loom.name}}
func.func @param_without_name(%x: tensor<8xf32> {loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 ("w") is a param without a loom.init initializer}}
func.func @param_without_init(%x: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<param>}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 is an input of type 'tensor<4x32xi64>'; token ids must be i32 tensors}}
func.func @input_not_i32(%x: tensor<4x32xi64> {loom.name = "tokens", loom.role = #loom.role<input>}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 is an target of type 'tensor<4x32xf32>'; token ids must be i32 tensors}}
func.func @target_not_i32(%x: tensor<4x32xf32> {loom.name = "targets", loom.role = #loom.role<target>}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0: loom.init must be a #loom.init}}
func.func @init_not_init(%x: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = "zeros"}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 has an initializer but is not a param}}
func.func @init_without_role(%x: tensor<8xf32> {loom.init = #loom.init<ones>}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 has an initializer but is not a param}}
func.func @init_on_input(%x: tensor<8xi32> {loom.name = "tokens", loom.role = #loom.role<input>, loom.init = #loom.init<zeros>}) {
  return
}

// -----

loom.mesh @mesh <dp = 2>
// expected-error@+1 {{'func.func' op argument #0 sharding must be a #loom.sharding}}
func.func @sharding_not_sharding(%x: tensor<8xf32> {loom.sharding = #loom.mesh<dp = 2>}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 sharding refers to unknown mesh @mesh; declare it with `loom.mesh`}}
func.func @sharding_unknown_mesh(%x: tensor<8xf32> {loom.sharding = #loom.sharding<@mesh, [[dp]]>}) {
  return
}

// -----

loom.mesh @mesh <dp = 2>
// expected-error@+1 {{'func.func' op argument #0 sharding: a sharding can only describe a ranked tensor, not 'i32'}}
func.func @sharding_not_tensor(%x: i32 {loom.sharding = #loom.sharding<@mesh, []>}) {
  return
}

// -----

loom.mesh @mesh <dp = 2>
// expected-error@+1 {{'func.func' op argument #0 sharding: sharding has 1 dimensions but the value 'tensor<8x4xf32>' has rank 2}}
func.func @sharding_rank(%x: tensor<8x4xf32> {loom.sharding = #loom.sharding<@mesh, [[dp]]>}) {
  return
}

// -----

loom.mesh @mesh <dp = 2, tp = 4>
// expected-error@+1 {{'func.func' op argument #0 sharding: 'pp' is not an axis of mesh @mesh (axes: dp, tp)}}
func.func @sharding_unknown_axis(%x: tensor<8x4xf32> {loom.sharding = #loom.sharding<@mesh, [[], [pp]]>}) {
  return
}

// -----

loom.mesh @mesh <dp = 2, tp = 4>
// expected-error@+1 {{'func.func' op argument #0 sharding: 'pp' is not an axis of mesh @mesh (axes: dp, tp)}}
func.func @sharding_unknown_partial_axis(%x: tensor<8x4xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], []], partial = [pp]>}) {
  return
}

// -----

loom.mesh @mesh <dp = 2, tp = 4>
// expected-error@+1 {{'func.func' op argument #0 sharding: dimension 1 of size 6 cannot be split 8 ways; choose axes whose sizes divide it}}
func.func @sharding_not_divisible(%x: tensor<8x6xf32> {loom.sharding = #loom.sharding<@mesh, [[], [dp, tp]]>}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op unknown loom argument attribute 'loom.weight'}}
func.func @unknown_arg_attr(%x: tensor<8xf32> {loom.weight = 1 : i64}) {
  return
}

// -----

// Arguments of a declaration are checked against its signature.
// expected-error@+1 {{'func.func' op argument #1 is a param of type 'tensor<4xi32>'; parameters must be float tensors}}
func.func private @declaration(tensor<8xf32>, tensor<4xi32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})

// -----

// expected-error@+1 {{'func.func' op argument #0: loom.checkpoint_shape must be a list of positive sizes such as [768, 2304]}}
func.func @checkpoint_shape_not_positive(%w: tensor<4x3x4xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>, loom.checkpoint_shape = [4, 0]}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 has a checkpoint shape but is not a param}}
func.func @checkpoint_shape_not_param(%x: tensor<4x3x4xf32> {loom.name = "x", loom.role = #loom.role<grad>, loom.checkpoint_shape = [4, 12]}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 of type 'tensor<4x3x4xf32>' has checkpoint shape [4, 13] of 52 elements; a checkpoint shape only regroups the same row-major elements}}
func.func @checkpoint_shape_elements(%w: tensor<4x3x4xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>, loom.checkpoint_shape = [4, 13]}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0: loom.unpadded_rows must be a positive integer (the real row count of a padded param)}}
func.func @unpadded_rows_not_positive(%w: tensor<256x4xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>, loom.unpadded_rows = 0 : i64}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 has loom.unpadded_rows but is not a param}}
func.func @unpadded_rows_not_param(%g: tensor<256x4xf32> {loom.name = "w", loom.role = #loom.role<grad>, loom.unpadded_rows = 255 : i64}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 has both loom.unpadded_rows and loom.checkpoint_shape; a padded param is saved with its real rows, not regrouped}}
func.func @unpadded_rows_regrouped(%w: tensor<256x4xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>, loom.checkpoint_shape = [1024], loom.unpadded_rows = 255 : i64}) {
  return
}

// -----

// expected-error@+1 {{'func.func' op argument #0 of type 'tensor<256x4xf32>' has loom.unpadded_rows = 300; it must be a tensor with at least that many rows (the padding follows the real rows)}}
func.func @unpadded_rows_too_many(%w: tensor<256x4xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>, loom.unpadded_rows = 300 : i64}) {
  return
}
