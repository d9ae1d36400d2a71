// RUN: loom-opt %s | loom-opt | FileCheck %s

// loom.model on a function: a dictionary of the configuration, kept as is.

// CHECK-LABEL: func.func @gpt2
// CHECK-SAME: attributes {loom.model = {batch = 4 : i64, layer_norm_epsilon = 1.000000e-05 : f64, n_embd = 64 : i64, n_head = 4 : i64, n_layer = 2 : i64, n_positions = 64 : i64, seq = 32 : i64, vocab_size = 256 : i64}}
func.func @gpt2(%w: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    attributes {loom.model = {n_layer = 2 : i64, n_head = 4 : i64, n_embd = 64 : i64, vocab_size = 256 : i64, n_positions = 64 : i64, batch = 4 : i64, seq = 32 : i64, layer_norm_epsilon = 1.0e-05 : f64}} {
  return
}

// An empty configuration is allowed, and the same loom.name may appear in
// two different model functions.
// CHECK-LABEL: func.func @empty_config
// CHECK-SAME: loom.name = "w"
// CHECK-SAME: attributes {loom.model = {}}
func.func @empty_config(%w: tensor<8xf32> {loom.name = "w"}) attributes {loom.model = {}} {
  return
}

// A model function may be a declaration.
// CHECK-LABEL: func.func private @external_model
// CHECK-SAME: attributes {loom.model = {n_layer = 1 : i64}}
func.func private @external_model(tensor<8xf32>) attributes {loom.model = {n_layer = 1 : i64}}
