// RUN: loom-opt %s -split-input-file -verify-diagnostics

// Errors in the discardable attributes of operations: loom.model,
// loom.shardings, and unknown loom.* attributes.

// expected-error@+1 {{'func.func' op loom.model must be a dictionary of the model configuration}}
func.func @model_not_dict() attributes {loom.model = "gpt2"} {
  return
}

// -----

// expected-error@+1 {{'builtin.module' op loom.model belongs on a function}}
module attributes {loom.model = {n_layer = 2 : i64}} {
}

// -----

// expected-error@+1 {{'func.func' op arguments #0 and #2 have the same loom.name "h.0.ln_1.weight"}}
func.func @duplicate_names(%a: tensor<8xf32> {loom.name = "h.0.ln_1.weight"},
                           %b: tensor<8xf32> {loom.name = "h.0.ln_1.bias"},
                           %c: tensor<8xf32> {loom.name = "h.0.ln_1.weight"}) attributes {loom.model = {}} {
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @shardings_not_array(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.gelu' op loom.shardings must list one #loom.sharding per result (1)}}
  %0 = loom.gelu %x {loom.shardings = #loom.sharding<@mesh, [[dp]]>} : tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @shardings_count(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.gelu' op loom.shardings must list one #loom.sharding per result (1)}}
  %0 = loom.gelu %x {loom.shardings = [#loom.sharding<@mesh, [[dp]]>, #loom.sharding<@mesh, [[dp]]>]} : tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <pp = 2>
func.func @shardings_on_no_results(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.send' op loom.shardings must list one #loom.sharding per result (0)}}
  loom.send %x to @mesh [pp] peer 1 tag 0 {loom.shardings = [#loom.sharding<@mesh, [[]]>]} : tensor<8xf32>
  return
}

// -----

func.func @shardings_element(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.gelu' op result #0 must be a #loom.sharding}}
  %0 = loom.gelu %x {loom.shardings = ["dp"]} : tensor<8xf32>
  return
}

// -----

func.func @shardings_unknown_mesh(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.gelu' op result #0 refers to unknown mesh @mesh; declare it with `loom.mesh`}}
  %0 = loom.gelu %x {loom.shardings = [#loom.sharding<@mesh, [[dp]]>]} : tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @shardings_rank(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.gelu' op result #0: sharding has 2 dimensions but the value 'tensor<8xf32>' has rank 1}}
  %0 = loom.gelu %x {loom.shardings = [#loom.sharding<@mesh, [[dp], []]>]} : tensor<8xf32>
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @shardings_not_tensor() {
  // expected-error@+1 {{'arith.constant' op result #0: a sharding can only describe a ranked tensor, not 'i32'}}
  %0 = arith.constant {loom.shardings = [#loom.sharding<@mesh, []>]} 1 : i32
  return
}

// -----

loom.mesh @mesh <dp = 2, tp = 4>
func.func @shardings_second_result(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.block' op result #1: dimension 0 of size 6 cannot be split 4 ways}}
  %0:2 = loom.block "b" (%x) {loom.shardings = [#loom.sharding<@mesh, [[dp]]>, #loom.sharding<@mesh, [[tp]]>]} : (tensor<8xf32>) -> (tensor<8xf32>, tensor<6xf32>) {
  ^bb0(%a: tensor<8xf32>):
    %s = loom.slice %a dim 0 offset 0 : tensor<8xf32> -> tensor<6xf32>
    loom.yield %a, %s : tensor<8xf32>, tensor<6xf32>
  }
  return
}

// -----

loom.mesh @mesh <dp = 2>
func.func @shardings_unknown_axis(%x: tensor<8xf32>) {
  %0 = loom.gelu %x {loom.shardings = [#loom.sharding<@mesh, [[]]>]} : tensor<8xf32>
  // expected-error@+1 {{'loom.gelu' op result #0: 'tp' is not an axis of mesh @mesh (axes: dp)}}
  %1 = loom.gelu %0 {loom.shardings = [#loom.sharding<@mesh, [[tp]]>]} : tensor<8xf32>
  return
}

// -----

// loom.sharding (singular) belongs on arguments; ops carry loom.shardings.
loom.mesh @mesh <dp = 2>
func.func @singular_on_op(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.gelu' op unknown loom attribute 'loom.sharding'}}
  %0 = loom.gelu %x {loom.sharding = #loom.sharding<@mesh, [[dp]]>} : tensor<8xf32>
  return
}

// -----

// expected-error@+1 {{'func.func' op unknown loom attribute 'loom.name'}}
func.func @name_on_function() attributes {loom.name = "f"} {
  return
}
