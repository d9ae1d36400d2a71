// RUN: loom-opt --loom-plan-buffers %s -split-input-file -verify-diagnostics

func.func @not_loom(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'arith.addf' op cannot be executed by the Loom runtime; only loom compute and collective ops lower to instructions}}
  %y = arith.addf %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @inside_block(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = loom.block "h.0"(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    // expected-error@+1 {{'arith.mulf' op cannot be executed by the Loom runtime}}
    %b = arith.mulf %a, %a : tensor<4xf32>
    loom.yield %b : tensor<4xf32>
  }
  return %y : tensor<4xf32>
}

// -----

// What a pipeline forward keeps must be a value it computes: an argument
// lives through the step in the arena, not in a micro-batch's stash slot.
// expected-error@+1 {{'func.func' op result #0 (stash 'chunk0.stash0') is an argument's storage; a stash slot holds only values the forward computes}}
func.func @stash_argument(%x: tensor<4xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> (tensor<4xf32> {loom.stash = "chunk0.stash0"})
    attributes {loom.pipeline = {stage = 0 : i64, chunk = 0 : i64},
                loom.train = {phase = "forward"}} {
  return %x : tensor<4xf32>
}

// -----

// A backward's stash argument reads what a forward of its stage keeps.
// expected-error@+1 {{'func.func' op stash argument #0 ('chunk0.stash7') is kept by no forward of this pipeline stage}}
func.func @stash_unkept(%s: tensor<4xf32> {loom.name = "chunk0.stash7", loom.role = #loom.role<stash>})
    -> tensor<4xf32>
    attributes {loom.pipeline = {stage = 0 : i64, chunk = 0 : i64},
                loom.train = {phase = "backward"}} {
  %y = loom.gelu %s : tensor<4xf32>
  return %y : tensor<4xf32>
}
