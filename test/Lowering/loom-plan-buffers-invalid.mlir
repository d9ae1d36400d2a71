// RUN: loom-opt --loom-plan-buffers %s -split-input-file -verify-diagnostics

func.func @not_loom(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error@+1 {{'arith.addf' op cannot be executed by the Loom runtime; only loom compute and collective ops lower to instructions}}
  %y = arith.addf %x, %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @inside_block(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = loom.block "h.0"(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    // expected-error@+1 {{'arith.mulf' op cannot be executed by the Loom runtime}}
    %b = arith.mulf %a, %a : tensor<4xf32>
    loom.yield %b : tensor<4xf32>
  }
  return %y : tensor<4xf32>
}
