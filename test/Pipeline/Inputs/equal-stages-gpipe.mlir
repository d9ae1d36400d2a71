// Equal-cost chunks under GPipe.
loom.mesh @mesh <pp = 4>
func.func @fwd0(%w: tensor<64x64xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) -> (tensor<64x64xf32> {loom.stash = "c0.y"}) {
  %y = loom.gelu %w : tensor<64x64xf32>
  %z = loom.gelu %y : tensor<64x64xf32>
  loom.send %z to @mesh [pp] peer 1 tag 0 : tensor<64x64xf32>
  return %y : tensor<64x64xf32>
}
func.func @bwd0(%y: tensor<64x64xf32> {loom.name = "c0.y", loom.role = #loom.role<stash>}) {
  %dz = loom.recv from @mesh [pp] peer 1 tag 1 : tensor<64x64xf32>
  %dy = loom.gelu_grad %dz, %y : tensor<64x64xf32>
  %dx = loom.gelu_grad %dy, %y : tensor<64x64xf32>
  return
}
func.func @fwd1() -> (tensor<64x64xf32> {loom.stash = "c1.y"}) {
  %x = loom.recv from @mesh [pp] peer 0 tag 0 : tensor<64x64xf32>
  %y = loom.gelu %x : tensor<64x64xf32>
  %z = loom.gelu %y : tensor<64x64xf32>
  loom.send %z to @mesh [pp] peer 2 tag 2 : tensor<64x64xf32>
  return %y : tensor<64x64xf32>
}
func.func @bwd1(%y: tensor<64x64xf32> {loom.name = "c1.y", loom.role = #loom.role<stash>}) {
  %dz = loom.recv from @mesh [pp] peer 2 tag 3 : tensor<64x64xf32>
  %dy = loom.gelu_grad %dz, %y : tensor<64x64xf32>
  %dx = loom.gelu_grad %dy, %y : tensor<64x64xf32>
  loom.send %dx to @mesh [pp] peer 0 tag 1 : tensor<64x64xf32>
  return
}
func.func @fwd2() -> (tensor<64x64xf32> {loom.stash = "c2.y"}) {
  %x = loom.recv from @mesh [pp] peer 1 tag 2 : tensor<64x64xf32>
  %y = loom.gelu %x : tensor<64x64xf32>
  %z = loom.gelu %y : tensor<64x64xf32>
  loom.send %z to @mesh [pp] peer 3 tag 4 : tensor<64x64xf32>
  return %y : tensor<64x64xf32>
}
func.func @bwd2(%y: tensor<64x64xf32> {loom.name = "c2.y", loom.role = #loom.role<stash>}) {
  %dz = loom.recv from @mesh [pp] peer 3 tag 5 : tensor<64x64xf32>
  %dy = loom.gelu_grad %dz, %y : tensor<64x64xf32>
  %dx = loom.gelu_grad %dy, %y : tensor<64x64xf32>
  loom.send %dx to @mesh [pp] peer 1 tag 3 : tensor<64x64xf32>
  return
}
func.func @fwd3() -> (tensor<64x64xf32> {loom.stash = "c3.y"}) {
  %x = loom.recv from @mesh [pp] peer 2 tag 4 : tensor<64x64xf32>
  %y = loom.gelu %x : tensor<64x64xf32>
  %z = loom.gelu %y : tensor<64x64xf32>
  return %y : tensor<64x64xf32>
}
func.func @bwd3(%y: tensor<64x64xf32> {loom.name = "c3.y", loom.role = #loom.role<stash>}) {
  %dy = loom.gelu_grad %y, %y : tensor<64x64xf32>
  %dx = loom.gelu_grad %dy, %y : tensor<64x64xf32>
  loom.send %dx to @mesh [pp] peer 2 tag 5 : tensor<64x64xf32>
  return
}
loom.pipeline_schedule "gpipe" stages 4 virtual 1 microbatches 8 {
  chunk 0 ["u0"] forward @fwd0 backward @bwd0
  chunk 1 ["u1"] forward @fwd1 backward @bwd1
  chunk 2 ["u2"] forward @fwd2 backward @bwd2
  chunk 3 ["u3"] forward @fwd3 backward @bwd3
  stage 0 : F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7
  stage 1 : F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7
  stage 2 : F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7
  stage 3 : F0 F1 F2 F3 F4 F5 F6 F7 B0 B1 B2 B3 B4 B5 B6 B7
}
