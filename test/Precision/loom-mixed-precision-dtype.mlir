// RUN: not loom-opt --loom-mixed-precision=dtype=fp16 %s 2>&1 | FileCheck %s
// RUN: not loom-opt --loom-compile-pipeline="precision=f16" %s 2>&1 | FileCheck %s --check-prefix=PIPE

// A precision the pass does not implement is refused, by name, also through
// the compile pipeline's `precision` option.
// CHECK: error: loom-mixed-precision: dtype 'fp16' is not supported; use bf16 (or fp32, which needs no mixed precision)
// PIPE: error: loom-mixed-precision: dtype 'f16' is not supported; use bf16 (or fp32, which needs no mixed precision)
func.func @m(%w: tensor<4x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) -> tensor<f32>
    attributes {loom.model = {batch = 1 : i64}} {
  %l = loom.fill 0.0 : tensor<f32>
  return %l : tensor<f32>
}
