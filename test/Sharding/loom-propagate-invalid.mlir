// RUN: loom-opt --loom-propagate %s -verify-diagnostics

loom.mesh @a <dp = 2>
// expected-error@+1 {{'loom.mesh' op is a second mesh; sharding propagation works on one mesh}}
loom.mesh @b <tp = 2>
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
