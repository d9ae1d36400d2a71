// RUN: loom-opt %s -split-input-file -verify-diagnostics --loom-mixed-precision

// Every diagnostic --loom-mixed-precision can emit.

// Already converted: the pass runs once.
// expected-error@+1 {{'func.func' op already has a bf16 value ('tensor<4x8xbf16>'); --loom-mixed-precision converts an f32 graph, once}}
func.func @m(%w: tensor<4x8xbf16> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) -> tensor<f32>
    attributes {loom.model = {batch = 1 : i64}} {
  %l = loom.fill 0.0 : tensor<f32>
  return %l : tensor<f32>
}

// -----

// A float type other than f32 inside the graph.
func.func @m(%w: tensor<4x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) -> tensor<f32>
    attributes {loom.model = {batch = 1 : i64}} {
  // expected-error@+1 {{'loom.fill' op has a value of type 'tensor<4x8xf16>'; --loom-mixed-precision converts f32 graphs only (convert the model to f32 first)}}
  %h = loom.fill 0.0 : tensor<4x8xf16>
  %l = loom.fill 0.0 : tensor<f32>
  return %l : tensor<f32>
}

// -----

// Nothing to convert.
// expected-error@+1 {{loom-mixed-precision: found no model function (loom.model) or training step (loom.train, from --loom-autodiff) to convert}}
module {
  func.func @helper(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

// Too late: after partitioning (or pipelining) the shardings of the master
// weights would be missing.
// expected-error@+1 {{'func.func' op is already partitioned; run --loom-mixed-precision after --loom-autodiff and before --loom-tensor-parallel, --loom-zero, --loom-partition and --loom-pipeline}}
func.func @m(%w: tensor<4x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) -> tensor<f32>
    attributes {loom.model = {batch = 1 : i64}, loom.partitioned} {
  %l = loom.fill 0.0 : tensor<f32>
  return %l : tensor<f32>
}

// -----

// expected-error@+1 {{'func.func' op is already a pipeline stage; run --loom-mixed-precision after --loom-autodiff and before --loom-tensor-parallel, --loom-zero, --loom-partition and --loom-pipeline}}
func.func @m_fwd(%w: tensor<4x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) -> tensor<f32>
    attributes {loom.pipeline = {stage = 0 : i64, chunk = 0 : i64}, loom.train = {phase = "forward"}} {
  %l = loom.fill 0.0 : tensor<f32>
  return %l : tensor<f32>
}

// -----

// An update that reads a parameter other than through its AdamW.
func.func @m_train(%w: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) -> tensor<f32>
    attributes {loom.train = {phase = "microbatch", microbatches = 1 : i64}} {
  %l = loom.fill 0.0 : tensor<f32>
  return %l : tensor<f32>
}
func.func @m_update(%w: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                    %g: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<grad>}) -> tensor<f32>
    attributes {loom.train = {phase = "update"}} {
  // expected-error@+1 {{'loom.sum_squares' op reads parameter 'w' in the optimizer update; --loom-mixed-precision expects only loom.adamw to read it (the fp32 master replaces it there)}}
  %s = loom.sum_squares %w, %g : tensor<8xf32>, tensor<8xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// An AdamW that updates something other than a parameter argument.
func.func @m_train(%w: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) -> tensor<f32>
    attributes {loom.train = {phase = "microbatch", microbatches = 1 : i64}} {
  %l = loom.fill 0.0 : tensor<f32>
  return %l : tensor<f32>
}
func.func @m_update(%g: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<grad>},
                    %m: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<adam_m>},
                    %s: tensor<f32> {loom.name = "lr", loom.role = #loom.role<lr>}) -> tensor<8xf32>
    attributes {loom.train = {phase = "update"}} {
  // expected-error@+1 {{'loom.adamw' op updates a value that is not a parameter argument of the optimizer update; --loom-mixed-precision cannot give it master weights}}
  %a, %b, %c = loom.adamw %m, %g, %m, %m, %s, %s, %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-8 : f64, weight_decay = 0.0 : f64} : tensor<8xf32>, tensor<f32>
  return %a : tensor<8xf32>
}
