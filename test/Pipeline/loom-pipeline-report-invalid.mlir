// RUN: loom-opt %s -split-input-file -verify-diagnostics --loom-pipeline-report -o /dev/null
//
// The report simulates the schedule's sends and receives and rejects one
// that deadlocks or mismatches them, naming the stage, action and
// micro-batch.

// Stage 0 waits for the gradient of micro-batch 0 before it sends the
// activation of micro-batch 1 that stage 1 needs first: a deadlock.
loom.mesh @mesh <pp = 2>
func.func @fwd0() -> (tensor<4xf32> {loom.stash = "c0.y"}) {
  %y = loom.fill 1.0 : tensor<4xf32>
  loom.send %y to @mesh [pp] peer 1 tag 0 : tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @bwd0(%y: tensor<4xf32> {loom.name = "c0.y", loom.role = #loom.role<stash>}) {
  %dy = loom.recv from @mesh [pp] peer 1 tag 1 : tensor<4xf32>
  return
}
func.func @fwd1() -> (tensor<4xf32> {loom.stash = "c1.y"}) {
  %x = loom.recv from @mesh [pp] peer 0 tag 0 : tensor<4xf32>
  return %x : tensor<4xf32>
}
func.func @bwd1(%y: tensor<4xf32> {loom.name = "c1.y", loom.role = #loom.role<stash>}) {
  loom.send %y to @mesh [pp] peer 0 tag 1 : tensor<4xf32>
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op schedule "1f1b" fails: the schedule deadlocks: stage 0 waits in B0 (backward of micro-batch 0) for tag 1 from stage 1; stage 1 waits in F1 (forward of micro-batch 1) for tag 0 from stage 0}}
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 2 {
  chunk 0 ["u0"] forward @fwd0 backward @bwd0
  chunk 1 ["u1"] forward @fwd1 backward @bwd1
  stage 0 : F0 B0 F1 B1
  stage 1 : F0 F1 B0 B1
}

// -----

// The stages visit the micro-batches in different orders: stage 1's
// receive for micro-batch 1 gets micro-batch 0's activation.
loom.mesh @mesh <pp = 2>
func.func @fwd0() -> (tensor<4xf32> {loom.stash = "c0.y"}) {
  %y = loom.fill 1.0 : tensor<4xf32>
  loom.send %y to @mesh [pp] peer 1 tag 0 : tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @bwd0(%y: tensor<4xf32> {loom.name = "c0.y", loom.role = #loom.role<stash>}) {
  %dy = loom.recv from @mesh [pp] peer 1 tag 1 : tensor<4xf32>
  return
}
func.func @fwd1() -> (tensor<4xf32> {loom.stash = "c1.y"}) {
  %x = loom.recv from @mesh [pp] peer 0 tag 0 : tensor<4xf32>
  return %x : tensor<4xf32>
}
func.func @bwd1(%y: tensor<4xf32> {loom.name = "c1.y", loom.role = #loom.role<stash>}) {
  loom.send %y to @mesh [pp] peer 0 tag 1 : tensor<4xf32>
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op schedule "1f1b" fails: stage 1 in F1 (forward of micro-batch 1) receives tag 0 from stage 0 but gets the forward of micro-batch 0: the two stages run their micro-batches in different orders}}
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 2 {
  chunk 0 ["u0"] forward @fwd0 backward @bwd0
  chunk 1 ["u1"] forward @fwd1 backward @bwd1
  stage 0 : F0 F1 B0 B1
  stage 1 : F1 B1 F0 B0
}

// -----

// A receive of another size than the send.
loom.mesh @mesh <pp = 2>
func.func @fwd0() -> (tensor<4xf32> {loom.stash = "c0.y"}) {
  %y = loom.fill 1.0 : tensor<4xf32>
  loom.send %y to @mesh [pp] peer 1 tag 0 : tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @bwd0(%y: tensor<4xf32> {loom.name = "c0.y", loom.role = #loom.role<stash>}) {
  %dy = loom.recv from @mesh [pp] peer 1 tag 1 : tensor<4xf32>
  return
}
func.func @fwd1() -> (tensor<4xf32> {loom.stash = "c1.y"}) {
  %x = loom.recv from @mesh [pp] peer 0 tag 0 : tensor<8xf32>
  %y = loom.fill 1.0 : tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @bwd1(%y: tensor<4xf32> {loom.name = "c1.y", loom.role = #loom.role<stash>}) {
  loom.send %y to @mesh [pp] peer 0 tag 1 : tensor<4xf32>
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op schedule "gpipe" fails: stage 1 in F0 (forward of micro-batch 0) receives 32 bytes with tag 0 but stage 0 sends 16}}
loom.pipeline_schedule "gpipe" stages 2 virtual 1 microbatches 2 {
  chunk 0 ["u0"] forward @fwd0 backward @bwd0
  chunk 1 ["u1"] forward @fwd1 backward @bwd1
  stage 0 : F0 F1 B0 B1
  stage 1 : F0 F1 B0 B1
}

// -----

// A gradient that is sent but never received.
loom.mesh @mesh <pp = 2>
func.func @fwd0() -> (tensor<4xf32> {loom.stash = "c0.y"}) {
  %y = loom.fill 1.0 : tensor<4xf32>
  loom.send %y to @mesh [pp] peer 1 tag 0 : tensor<4xf32>
  return %y : tensor<4xf32>
}
func.func @bwd0(%y: tensor<4xf32> {loom.name = "c0.y", loom.role = #loom.role<stash>}) {
  return
}
func.func @fwd1() -> (tensor<4xf32> {loom.stash = "c1.y"}) {
  %x = loom.recv from @mesh [pp] peer 0 tag 0 : tensor<4xf32>
  return %x : tensor<4xf32>
}
func.func @bwd1(%y: tensor<4xf32> {loom.name = "c1.y", loom.role = #loom.role<stash>}) {
  loom.send %y to @mesh [pp] peer 0 tag 1 : tensor<4xf32>
  return
}
// expected-error@+1 {{'loom.pipeline_schedule' op schedule "gpipe" fails: stage 1 sends tag 1 to stage 0 in B0 (backward of micro-batch 0) but no action of stage 0 receives it}}
loom.pipeline_schedule "gpipe" stages 2 virtual 1 microbatches 2 {
  chunk 0 ["u0"] forward @fwd0 backward @bwd0
  chunk 1 ["u1"] forward @fwd1 backward @bwd1
  stage 0 : F0 F1 B0 B1
  stage 1 : F0 F1 B0 B1
}

