// RUN: not loom-opt --loom-autodiff %s 2>&1 | FileCheck %s --check-prefix=NOMODEL
// RUN: not loom-opt --loom-autodiff=microbatches=0 %s 2>&1 | FileCheck %s --check-prefix=MB
// NOMODEL: error: loom-autodiff: no model function (a func.func with loom.model that returns the loss)
// MB: error: loom-autodiff: microbatches must be >= 1, got 0
func.func @not_a_model(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
