// RUN: loom-opt %s -split-input-file -verify-diagnostics
//
// Structural errors of loom.pipeline_schedule and loom.group_all_reduce.

func.func @f0() {
  return
}
func.func @b0() {
  return
}
func.func @f1() {
  return
}
func.func @b1() {
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op schedule 'zigzag' is not gpipe, 1f1b or interleaved}}
loom.pipeline_schedule "zigzag" stages 2 virtual 1 microbatches 2 {
  chunk 0 ["u0"] forward @f0 backward @b0
  chunk 1 ["u1"] forward @f1 backward @b1
  stage 0 : F0 F1 B0 B1
  stage 1 : F0 B0 F1 B1
}

// -----

func.func @f0() {
  return
}
func.func @b0() {
  return
}
func.func @f1() {
  return
}
func.func @b1() {
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op has 2 chunks but 2 stages x 2 virtual = 4 are needed}}
loom.pipeline_schedule "1f1b" stages 2 virtual 2 microbatches 2 {
  chunk 0 ["u0"] forward @f0 backward @b0
  chunk 1 ["u1"] forward @f1 backward @b1
  stage 0 : F0 F1 B0 B1
  stage 1 : F0 B0 F1 B1
}

// -----

func.func @f0() {
  return
}
func.func @b0() {
  return
}
func.func @f1() {
  return
}
func.func @b1() {
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op stage 0 runs F0 twice}}
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 2 {
  chunk 0 ["u0"] forward @f0 backward @b0
  chunk 1 ["u1"] forward @f1 backward @b1
  stage 0 : F0 F0 B0 B1
  stage 1 : F0 B0 F1 B1
}

// -----

func.func @f0() {
  return
}
func.func @b0() {
  return
}
func.func @f1() {
  return
}
func.func @b1() {
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op stage 0 runs B1 before its forward}}
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 2 {
  chunk 0 ["u0"] forward @f0 backward @b0
  chunk 1 ["u1"] forward @f1 backward @b1
  stage 0 : F0 B0 B1 F1
  stage 1 : F0 B0 F1 B1
}

// -----

func.func @f0() {
  return
}
func.func @b0() {
  return
}
func.func @f1() {
  return
}
func.func @b1() {
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op stage 1 runs 1 backward actions but 1 chunks x 2 micro-batches need one each}}
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 2 {
  chunk 0 ["u0"] forward @f0 backward @b0
  chunk 1 ["u1"] forward @f1 backward @b1
  stage 0 : F0 F1 B0 B1
  stage 1 : F0 B0 F1
}

// -----

func.func @f0() {
  return
}
func.func @b0() {
  return
}
func.func @f1() {
  return
}
func.func @b1() {
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op stage 0 action F2 names a chunk or micro-batch out of range (1 chunks per stage, 2 micro-batches)}}
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 2 {
  chunk 0 ["u0"] forward @f0 backward @b0
  chunk 1 ["u1"] forward @f1 backward @b1
  stage 0 : F0 F1 F2 B0 B1
  stage 1 : F0 B0 F1 B1
}

// -----

func.func @f0() {
  return
}
func.func @b0() {
  return
}
func.func @f1() {
  return
}
func.func @b1() {
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op has 1 update functions for 2 stages}}
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 2 {
  chunk 0 ["u0"] forward @f0 backward @b0
  chunk 1 ["u1"] forward @f1 backward @b1
  stage 0 update @f0 : F0 F1 B0 B1
  stage 1 : F0 B0 F1 B1
}

// -----

func.func @f0() {
  return
}
func.func @b0() {
  return
}
func.func @f1() {
  return
}
func.func @b1() {
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op refers to @missing, which is not a function of the module}}
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 2 {
  chunk 0 ["u0"] forward @missing backward @b0
  chunk 1 ["u1"] forward @f1 backward @b1
  stage 0 : F0 F1 B0 B1
  stage 1 : F0 B0 F1 B1
}

// -----

func.func @f0() {
  return
}
func.func @b0() {
  return
}
func.func @f1() {
  return
}
func.func @b1() {
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op chunk 1 must list its units as non-empty strings}}
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 2 {
  chunk 0 ["u0"] forward @f0 backward @b0
  chunk 1 [] forward @f1 backward @b1
  stage 0 : F0 F1 B0 B1
  stage 1 : F0 B0 F1 B1
}

// -----

func.func @f0() {
  return
}
func.func @b0() {
  return
}
func.func @f1() {
  return
}
func.func @b1() {
  return
}
// expected-error@+4 {{expected 'chunk', 'stage' or an action such as F0, B0 or F0.1, got 'X0'}}
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 2 {
  chunk 0 ["u0"] forward @f0 backward @b0
  chunk 1 ["u1"] forward @f1 backward @b1
  stage 0 : F0 X0 F1 B0 B1
  stage 1 : F0 B0 F1 B1
}

// -----

func.func @f0() {
  return
}
func.func @b0() {
  return
}
func.func @f1() {
  return
}
func.func @b1() {
  return
}
// expected-error@+3 {{expected chunk 1, got chunk 2}}
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 2 {
  chunk 0 ["u0"] forward @f0 backward @b0
  chunk 2 ["u1"] forward @f1 backward @b1
  stage 0 : F0 F1 B0 B1
  stage 1 : F0 B0 F1 B1
}

// -----

loom.mesh @mesh <dp = 2, pp = 4>
func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'loom.group_all_reduce' op needs at least two members}}
  %y = loom.group_all_reduce %x on @mesh [pp] members [0] sum : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

loom.mesh @mesh <dp = 2, pp = 4>
func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'loom.group_all_reduce' op member 4 is outside axis pp of size 4}}
  %y = loom.group_all_reduce %x on @mesh [pp] members [0, 4] sum : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

loom.mesh @mesh <dp = 2, pp = 4>
func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'loom.group_all_reduce' op members must be distinct and increasing}}
  %y = loom.group_all_reduce %x on @mesh [pp] members [3, 0] sum : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

loom.mesh @mesh <dp = 2, pp = 4>
func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'loom.group_all_reduce' op must name exactly one mesh axis, whose coordinates `members` lists}}
  %y = loom.group_all_reduce %x on @mesh [dp, pp] members [0, 1] sum : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

loom.mesh @mesh <dp = 2, pp = 4>
func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'loom.group_all_reduce' op 'tp' is not an axis of mesh @mesh (axes: dp, pp)}}
  %y = loom.group_all_reduce %x on @mesh [tp] members [0, 1] sum : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// Forward-only (an evaluation): no backward actions, no updates, every
// forward once, and no chunk with a backward unless all have one.
func.func @f0() {
  return
}
func.func @f1() {
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op stage 1 runs B0 but the pipeline is forward-only (no backward functions)}}
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 1 {
  chunk 0 ["u0"] forward @f0
  chunk 1 ["u1"] forward @f1
  stage 0 : F0
  stage 1 : F0 B0
}

// -----

func.func @f0() {
  return
}
func.func @f1() {
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op stage 0 runs 1 forward actions but 1 chunks x 2 micro-batches need one each}}
loom.pipeline_schedule "gpipe" stages 2 virtual 1 microbatches 2 {
  chunk 0 ["u0"] forward @f0
  chunk 1 ["u1"] forward @f1
  stage 0 : F0
  stage 1 : F0 F1
}

// -----

func.func @f0() {
  return
}
func.func @f1() {
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op is forward-only (no backward functions) but has update functions; an evaluation updates nothing}}
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 1 {
  chunk 0 ["u0"] forward @f0
  chunk 1 ["u1"] forward @f1
  stage 0 update @f0 : F0
  stage 1 update @f1 : F0
}

// -----

func.func @f0() {
  return
}
func.func @b0() {
  return
}
func.func @f1() {
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op has 1 backward functions for 2 chunks; a training step needs one per chunk, an evaluation (forward-only) none}}
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 1 {
  chunk 0 ["u0"] forward @f0 backward @b0
  chunk 1 ["u1"] forward @f1
  stage 0 : F0 B0
  stage 1 : F0 B0
}

// -----

func.func @f0() {
  return
}
func.func @f1() {
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op loom.cost_model must be {peak_tflops = F, bandwidth_gbs = F} with positive values, on a loom.pipeline_schedule}}
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 1 {
  chunk 0 ["u0"] forward @f0
  chunk 1 ["u1"] forward @f1
  stage 0 : F0
  stage 1 : F0
} {loom.cost_model = {peak_tflops = 100.0 : f64, bandwidth_gbs = -1.0 : f64}}
