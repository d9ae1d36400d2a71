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

// -----

// A last-micro-batch reduction is skipped in the other micro-batches, so its
// result must be its input's storage: a value something else also reads
// cannot be reduced in place.
loom.mesh @mesh <dp = 2>
func.func @last_microbatch_shared_input(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {loom.train = {phase = "microbatch", microbatches = 2 : i64}} {
  %s = loom.add %x, %x : tensor<4xf32>, tensor<4xf32>
  // expected-error@+1 {{'loom.all_reduce' op reduces input #0 in place (last_microbatch), but it is read by other ops too; reduce a value only this op reads}}
  %r = loom.all_reduce %s on @mesh [dp] sum last_microbatch : tensor<4xf32>
  %t = loom.add %s, %r : tensor<4xf32>, tensor<4xf32>
  return %r, %t : tensor<4xf32>, tensor<4xf32>
}

// -----

// Nor can an argument (its storage outlives the micro-batch function).
loom.mesh @mesh <dp = 2>
func.func @last_microbatch_argument(%x: tensor<4xf32>) -> tensor<4xf32>
    attributes {loom.train = {phase = "microbatch", microbatches = 2 : i64}} {
  // expected-error@+1 {{'loom.all_reduce' op reduces input #0 in place (last_microbatch), but it is an argument; reduce a value only this op reads}}
  %r = loom.all_reduce %x on @mesh [dp] sum last_microbatch : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// The same for ZeRO-1's in-place reduce-scatter.
loom.mesh @mesh <dp = 2>
func.func @last_microbatch_scatter_shared_input(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
    attributes {loom.train = {phase = "microbatch", microbatches = 2 : i64}} {
  %s = loom.add %x, %x : tensor<4xf32>, tensor<4xf32>
  // expected-error@+1 {{'loom.reduce_scatter' op reduces input #0 in place (last_microbatch), but it is read by other ops too; reduce a value only this op reads}}
  %r = loom.reduce_scatter %s on @mesh [dp] dim 0 sum last_microbatch : tensor<4xf32> -> tensor<4xf32>
  %t = loom.add %s, %r : tensor<4xf32>, tensor<4xf32>
  return %r, %t : tensor<4xf32>, tensor<4xf32>
}
