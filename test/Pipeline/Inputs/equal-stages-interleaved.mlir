// Eight chunks with exactly equal costs on 4 stages (2 per stage, interleaved).
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
  loom.send %z to @mesh [pp] peer 0 tag 6 : tensor<64x64xf32>
  return %y : tensor<64x64xf32>
}
func.func @bwd3(%y: tensor<64x64xf32> {loom.name = "c3.y", loom.role = #loom.role<stash>}) {
  %dz = loom.recv from @mesh [pp] peer 0 tag 7 : tensor<64x64xf32>
  %dy = loom.gelu_grad %dz, %y : tensor<64x64xf32>
  %dx = loom.gelu_grad %dy, %y : tensor<64x64xf32>
  loom.send %dx to @mesh [pp] peer 2 tag 5 : tensor<64x64xf32>
  return
}
func.func @fwd4() -> (tensor<64x64xf32> {loom.stash = "c4.y"}) {
  %x = loom.recv from @mesh [pp] peer 3 tag 6 : tensor<64x64xf32>
  %y = loom.gelu %x : tensor<64x64xf32>
  %z = loom.gelu %y : tensor<64x64xf32>
  loom.send %z to @mesh [pp] peer 1 tag 8 : tensor<64x64xf32>
  return %y : tensor<64x64xf32>
}
func.func @bwd4(%y: tensor<64x64xf32> {loom.name = "c4.y", loom.role = #loom.role<stash>}) {
  %dz = loom.recv from @mesh [pp] peer 1 tag 9 : tensor<64x64xf32>
  %dy = loom.gelu_grad %dz, %y : tensor<64x64xf32>
  %dx = loom.gelu_grad %dy, %y : tensor<64x64xf32>
  loom.send %dx to @mesh [pp] peer 3 tag 7 : tensor<64x64xf32>
  return
}
func.func @fwd5() -> (tensor<64x64xf32> {loom.stash = "c5.y"}) {
  %x = loom.recv from @mesh [pp] peer 0 tag 8 : tensor<64x64xf32>
  %y = loom.gelu %x : tensor<64x64xf32>
  %z = loom.gelu %y : tensor<64x64xf32>
  loom.send %z to @mesh [pp] peer 2 tag 10 : tensor<64x64xf32>
  return %y : tensor<64x64xf32>
}
func.func @bwd5(%y: tensor<64x64xf32> {loom.name = "c5.y", loom.role = #loom.role<stash>}) {
  %dz = loom.recv from @mesh [pp] peer 2 tag 11 : tensor<64x64xf32>
  %dy = loom.gelu_grad %dz, %y : tensor<64x64xf32>
  %dx = loom.gelu_grad %dy, %y : tensor<64x64xf32>
  loom.send %dx to @mesh [pp] peer 0 tag 9 : tensor<64x64xf32>
  return
}
func.func @fwd6() -> (tensor<64x64xf32> {loom.stash = "c6.y"}) {
  %x = loom.recv from @mesh [pp] peer 1 tag 10 : tensor<64x64xf32>
  %y = loom.gelu %x : tensor<64x64xf32>
  %z = loom.gelu %y : tensor<64x64xf32>
  loom.send %z to @mesh [pp] peer 3 tag 12 : tensor<64x64xf32>
  return %y : tensor<64x64xf32>
}
func.func @bwd6(%y: tensor<64x64xf32> {loom.name = "c6.y", loom.role = #loom.role<stash>}) {
  %dz = loom.recv from @mesh [pp] peer 3 tag 13 : tensor<64x64xf32>
  %dy = loom.gelu_grad %dz, %y : tensor<64x64xf32>
  %dx = loom.gelu_grad %dy, %y : tensor<64x64xf32>
  loom.send %dx to @mesh [pp] peer 1 tag 11 : tensor<64x64xf32>
  return
}
func.func @fwd7() -> (tensor<64x64xf32> {loom.stash = "c7.y"}) {
  %x = loom.recv from @mesh [pp] peer 2 tag 12 : tensor<64x64xf32>
  %y = loom.gelu %x : tensor<64x64xf32>
  %z = loom.gelu %y : tensor<64x64xf32>
  return %y : tensor<64x64xf32>
}
func.func @bwd7(%y: tensor<64x64xf32> {loom.name = "c7.y", loom.role = #loom.role<stash>}) {
  %dy = loom.gelu_grad %y, %y : tensor<64x64xf32>
  %dx = loom.gelu_grad %dy, %y : tensor<64x64xf32>
  loom.send %dx to @mesh [pp] peer 2 tag 13 : tensor<64x64xf32>
  return
}
loom.pipeline_schedule "interleaved" stages 4 virtual 2 microbatches 8 {
  chunk 0 ["u0"] forward @fwd0 backward @bwd0
  chunk 1 ["u1"] forward @fwd1 backward @bwd1
  chunk 2 ["u2"] forward @fwd2 backward @bwd2
  chunk 3 ["u3"] forward @fwd3 backward @bwd3
  chunk 4 ["u4"] forward @fwd4 backward @bwd4
  chunk 5 ["u5"] forward @fwd5 backward @bwd5
  chunk 6 ["u6"] forward @fwd6 backward @bwd6
  chunk 7 ["u7"] forward @fwd7 backward @bwd7
  stage 0 : F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 F5.0 F6.0 B0.1 F7.0 B1.1 F4.1 B2.1 F5.1 B3.1 F6.1 B0.0 F7.1 B1.0 B2.0 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0
  stage 1 : F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 F3.1 F4.0 B0.1 F5.0 B1.1 F6.0 B2.1 F7.0 B3.1 F4.1 B0.0 F5.1 B1.0 F6.1 B2.0 F7.1 B3.0 B4.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0
  stage 2 : F0.0 F1.0 F2.0 F3.0 F0.1 F1.1 F2.1 B0.1 F3.1 B1.1 F4.0 B2.1 F5.0 B3.1 F6.0 B0.0 F7.0 B1.0 F4.1 B2.0 F5.1 B3.0 F6.1 B4.1 F7.1 B5.1 B6.1 B7.1 B4.0 B5.0 B6.0 B7.0
  stage 3 : F0.0 F1.0 F2.0 F3.0 F0.1 B0.1 F1.1 B1.1 F2.1 B2.1 F3.1 B3.1 F4.0 B0.0 F5.0 B1.0 F6.0 B2.0 F7.0 B3.0 F4.1 B4.1 F5.1 B5.1 F6.1 B6.1 F7.1 B7.1 B4.0 B5.0 B6.0 B7.0
}
