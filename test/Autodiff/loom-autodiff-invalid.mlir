// RUN: loom-opt --loom-autodiff %s -split-input-file -verify-diagnostics

// expected-error@+1 {{'func.func' op must return the loss as one scalar float tensor (tensor<f32>) to be differentiated, but returns 'tensor<2x4xf32>'}}
func.func @vector_loss(%w: tensor<2x4xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) -> tensor<2x4xf32>
    attributes {loom.model = {}} {
  %y = loom.gelu %w : tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

loom.mesh @mesh <tp = 2>
func.func @no_rule(%w: tensor<4x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                   %tgt: tensor<4xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32>
    attributes {loom.model = {}} {
  // expected-error@+1 {{'loom.all_reduce' op has no gradient rule (GradientOpInterface), so the loss cannot be differentiated through it}}
  %r = loom.all_reduce %w on @mesh [tp] sum : tensor<4x8xf32>
  %loss = loom.cross_entropy %r, %tgt : tensor<4x8xf32>, tensor<4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// expected-error@+1 {{'func.func' op has no parameters (arguments with loom.role = #loom.role<param>) to train}}
func.func @no_params(%x: tensor<4x8xf32>, %tgt: tensor<4xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32>
    attributes {loom.model = {}} {
  %loss = loom.cross_entropy %x, %tgt : tensor<4x8xf32>, tensor<4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// expected-warning@+1 {{parameter 'unused' does not influence the loss; it gets no gradient and no update}}
func.func @unused(%w: tensor<4x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                  %u: tensor<8xf32> {loom.name = "unused", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                  %tgt: tensor<4xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32>
    attributes {loom.model = {}} {
  %loss = loom.cross_entropy %w, %tgt : tensor<4x8xf32>, tensor<4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// expected-warning@+2 {{parameter 'w' does not influence the loss; it gets no gradient and no update}}
// expected-error@+1 {{'func.func' op has no parameter that influences the loss; there is nothing to train}}
func.func @frozen(%w: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                  %x: tensor<4x8xf32>,
                  %tgt: tensor<4xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32>
    attributes {loom.model = {}} {
  %loss = loom.cross_entropy %x, %tgt : tensor<4x8xf32>, tensor<4xi32> -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Attention's log-sum-exp is kept for its own gradient, not differentiated.
func.func @lse_on_loss_path(%qkv: tensor<1x4x24xf32> {loom.name = "qkv", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                            %tgt: tensor<1x2xi32> {loom.name = "targets", loom.role = #loom.role<target>}) -> tensor<f32>
    attributes {loom.model = {}} {
  // expected-error@+1 {{'loom.attention' op has its lse result on the path to the loss; attention's gradient rule differentiates its output only (compute the statistic separately)}}
  %y, %lse = loom.attention %qkv {num_heads = 2 : i64} : tensor<1x4x24xf32> -> tensor<1x4x8xf32>, tensor<1x2x4xf32>
  %loss = loom.cross_entropy %lse, %tgt : tensor<1x2x4xf32>, tensor<1x2xi32> -> tensor<f32>
  return %loss : tensor<f32>
}
