// RUN: loom-opt %s -split-input-file -verify-diagnostics "--loom-mixed-precision=grad-precision=fp32"

// fp32 gradients keep each accumulator f32 and widen the micro-batch's
// gradient before its accumulation, so each accumulator must be read once,
// by a top-level loom.add returned as its update (what --loom-autodiff
// builds).

// An accumulator read by something else too.
// expected-error@+1 {{'func.func' op has gradient accumulator 'w' that is not read once by a top-level loom.add returned as its update; grad-precision=fp32 needs the micro-batch function as --loom-autodiff builds it}}
func.func @m_train(%w: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                   %g: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<grad>}) -> (tensor<f32>, tensor<8xf32> {loom.updates = 1 : i64})
    attributes {loom.train = {phase = "microbatch", microbatches = 1 : i64}} {
  %l = loom.fill 0.0 : tensor<f32>
  %a = loom.add %g, %w : tensor<8xf32>, tensor<8xf32>
  %b = loom.add %a, %g : tensor<8xf32>, tensor<8xf32>
  return %l, %b : tensor<f32>, tensor<8xf32>
}

// -----

// An accumulation returned as something other than the accumulator's update.
// expected-error@+1 {{'func.func' op has gradient accumulator 'w' that is not read once by a top-level loom.add returned as its update; grad-precision=fp32 needs the micro-batch function as --loom-autodiff builds it}}
func.func @m_train(%w: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                   %g: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<grad>}) -> (tensor<f32>, tensor<8xf32>)
    attributes {loom.train = {phase = "microbatch", microbatches = 1 : i64}} {
  %l = loom.fill 0.0 : tensor<f32>
  %a = loom.add %g, %w : tensor<8xf32>, tensor<8xf32>
  return %l, %a : tensor<f32>, tensor<8xf32>
}
