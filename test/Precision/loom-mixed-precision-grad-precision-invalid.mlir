// RUN: not loom-opt "--loom-mixed-precision=grad-precision=fp16" %s 2>&1 | FileCheck %s
// RUN: not loom-opt --loom-compile-pipeline="precision=bf16 grad-precision=f64" %s 2>&1 | FileCheck %s --check-prefix=PIPE

// A gradient precision other than bf16 or fp32 is refused, by name, also
// through the compile pipeline's `grad-precision` option.
// CHECK: error: loom-mixed-precision: grad-precision 'fp16' is not supported; use bf16 (the ZeRO paper's 2-byte gradients) or fp32 (accumulated and reduced in fp32)
// PIPE: error: loom-mixed-precision: grad-precision 'f64' is not supported; use bf16 (the ZeRO paper's 2-byte gradients) or fp32 (accumulated and reduced in fp32)
func.func @m(%w: tensor<4x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) -> tensor<f32>
    attributes {loom.model = {batch = 1 : i64}} {
  %l = loom.fill 0.0 : tensor<f32>
  return %l : tensor<f32>
}
