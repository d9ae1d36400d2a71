// RUN: loom-opt --loom-tensor-parallel %s -split-input-file -verify-diagnostics

// Splits the sizes do not allow and what the pass says to change.
// (Module-level errors and remarks: loom-tensor-parallel-errors.mlir.)

loom.mesh @mesh <tp = 2>
func.func @heads(%x: tensor<2x4x6xf32>,
                 %w: tensor<6x3x6xf32> {loom.name = "attn.c_attn.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) {
  %qkv = loom.linear %x, %w : tensor<2x4x6xf32>, tensor<6x3x6xf32> -> tensor<2x4x3x6xf32>
  // expected-error@+1 {{'loom.attention' op has n_head = 3 attention heads, not divisible by tp = 2: tensor parallelism gives every rank whole heads; choose tp dividing 3}}
  %y = loom.attention %qkv {num_heads = 3 : i64} : tensor<2x4x3x6xf32> -> tensor<2x4x6xf32>
  return
}

// -----

loom.mesh @mesh <tp = 4>
func.func @hidden(%x: tensor<2x4x8xf32>,
                  %w1: tensor<8x6xf32> {loom.name = "fc1.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                  %w2: tensor<6x8xf32> {loom.name = "fc2.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) {
  // expected-error@+1 {{'loom.linear' op is the first linear of an MLP whose hidden size 6 is not divisible by tp = 4; choose tp dividing 6}}
  %h = loom.linear %x, %w1 : tensor<2x4x8xf32>, tensor<8x6xf32> -> tensor<2x4x6xf32>
  %g = loom.gelu %h : tensor<2x4x6xf32>
  %y = loom.linear %g, %w2 : tensor<2x4x6xf32>, tensor<6x8xf32> -> tensor<2x4x8xf32>
  return
}

// -----

// A vocabulary tp does not divide is padded (loom-tensor-parallel-padding.test)
// unless an op needs the padded dimension whole: a reshape of the table.
loom.mesh @mesh <tp = 2>
func.func @vocab_whole(%wte: tensor<255x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                       %ids: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>}) {
  %x = loom.embedding %wte, %ids : tensor<255x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  // expected-error@+1 {{'loom.reshape' op needs dimension 0 of operand #0 (loom.reshape) whole, so "wte.weight" cannot be padded from 255 to 256 rows for tensor parallelism; use a vocabulary the tp size divides}}
  %r = loom.reshape %wte : tensor<255x8xf32> -> tensor<2040xf32>
  return
}

// -----

// ... or the table is regrouped for checkpoints.
loom.mesh @mesh <tp = 2>
func.func @vocab_regrouped(%wte: tensor<255x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>, loom.checkpoint_shape = [2040]},
                           %ids: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>}) {
  %x = loom.embedding %wte, %ids : tensor<255x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  return
}
// expected-error@-5 {{'func.func' op argument #0 ("wte.weight") has a loom.checkpoint_shape; a regrouped parameter cannot be padded from 255 to 256 rows}}

// -----

// ... or an op with no sharding rule reads it (nothing says where the
// padded rows go) ...
loom.mesh @mesh <tp = 2>
func.func @vocab_no_rule(%wte: tensor<255x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                         %ids: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>}) {
  %x = loom.embedding %wte, %ids : tensor<255x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  // expected-error@+1 {{'loom.all_reduce' op has no sharding rule to say where the padded dimension of operand #0 goes, so "wte.weight" cannot be padded from 255 to 256 rows for tensor parallelism; use a vocabulary the tp size divides}}
  %r = loom.all_reduce %wte on @mesh [tp] sum : tensor<255x8xf32>
  return
}

// -----

// ... or makes a value tied to the rows that it needs whole (a reshape
// result added to the table) ...
loom.mesh @mesh <tp = 2>
func.func @vocab_whole_result(%wte: tensor<255x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                              %flat: tensor<2040xf32>,
                              %ids: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>}) {
  // expected-error@+1 {{'loom.reshape' op needs dimension 0 of result #0 whole, so "wte.weight" cannot be padded from 255 to 256 rows for tensor parallelism; use a vocabulary the tp size divides}}
  %t = loom.reshape %flat : tensor<2040xf32> -> tensor<255x8xf32>
  %sum = loom.add %wte, %t : tensor<255x8xf32>, tensor<255x8xf32>
  %x = loom.embedding %sum, %ids : tensor<255x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  %y = loom.embedding %wte, %ids : tensor<255x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  return
}

// -----

// ... or makes it with no sharding rule ...
loom.mesh @mesh <tp = 2>
func.func @vocab_no_rule_result(%wte: tensor<255x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                                %other: tensor<255x8xf32>,
                                %ids: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>}) {
  // expected-error@+1 {{'loom.all_reduce' op has no sharding rule to say where the padded dimension of result #0 comes from, so "wte.weight" cannot be padded from 255 to 256 rows for tensor parallelism; use a vocabulary the tp size divides}}
  %t = loom.all_reduce %other on @mesh [tp] sum : tensor<255x8xf32>
  %sum = loom.add %wte, %t : tensor<255x8xf32>, tensor<255x8xf32>
  %y = loom.embedding %wte, %ids : tensor<255x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  return
}

// -----

// ... or its training state does not have its rows.
loom.mesh @mesh <tp = 2>
func.func @vocab_state_rows(%wte: tensor<255x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                            %g: tensor<254x8xf32> {loom.name = "wte.weight", loom.role = #loom.role<grad>},
                            %ids: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>}) {
  %y = loom.embedding %wte, %ids : tensor<255x8xf32>, tensor<2x4xi32> -> tensor<2x4x8xf32>
  return
}
// expected-error@-6 {{'func.func' op ties a dimension of size 254 to the 255 rows of wte.weight, so "wte.weight" cannot be padded from 255 to 256 rows for tensor parallelism; use a vocabulary the tp size divides}}

// -----

// One parameter in two roles that split different dimensions.
loom.mesh @mesh <tp = 2>
func.func @conflict(%x: tensor<2x4x8xf32>,
                    %w: tensor<8x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) {
  %h = loom.linear %x, %w : tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32>
  %g = loom.gelu %h : tensor<2x4x8xf32>
  // expected-error@+1 {{'loom.linear' op is row-parallel loom.linear (MLP output), which splits dimension 0 of "w", but it is also column-parallel loom.linear (MLP input), which splits dimension 1; annotate the parameter by hand (loom.sharding) to choose}}
  %y = loom.linear %g, %w : tensor<2x4x8xf32>, tensor<8x8xf32> -> tensor<2x4x8xf32>
  return
}

// -----

// expected-error@+1 {{'loom.mesh' op has no axis 'tp' for tensor parallelism (axes: dp)}}
loom.mesh @mesh <dp = 2>
