// RUN: not loom-opt %s -split-input-file 2>&1 | FileCheck %s

// References to a mesh that is not declared: a located error, exit code 1,
// in a collective, in an argument sharding and in an op's shardings.

// CHECK: malformed-unknown-mesh.mlir:[[@LINE+2]]:8: error: 'loom.all_reduce' op refers to unknown mesh @mesh; declare it with `loom.mesh`
func.func @collective(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = loom.all_reduce %x on @mesh [dp] sum : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// A collective inside a block still finds no mesh.
// CHECK: malformed-unknown-mesh.mlir:[[@LINE+5]]:10: error: 'loom.reduce_scatter' op refers to unknown mesh @grid; declare it with `loom.mesh`
loom.mesh @mesh <dp = 2>
func.func @in_block(%x: tensor<8xf32>) -> tensor<4xf32> {
  %0 = loom.block "h.0" (%x) : (tensor<8xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<8xf32>):
    %r = loom.reduce_scatter %a on @grid [dp] dim 0 sum : tensor<8xf32> -> tensor<4xf32>
    loom.yield %r : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

// CHECK: malformed-unknown-mesh.mlir:[[@LINE+1]]:1: error: 'func.func' op argument #0 sharding refers to unknown mesh @mesh; declare it with `loom.mesh`
func.func @arg_sharding(%x: tensor<8xf32> {loom.sharding = #loom.sharding<@mesh, [[dp]]>}) {
  return
}

// -----

// CHECK: malformed-unknown-mesh.mlir:[[@LINE+3]]:8: error: 'loom.gelu' op result #0 refers to unknown mesh @tp_mesh; declare it with `loom.mesh`
loom.mesh @mesh <tp = 2>
func.func @op_shardings(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = loom.gelu %x {loom.shardings = [#loom.sharding<@tp_mesh, [[tp]]>]} : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

// A mesh in another module is out of reach.
// CHECK: malformed-unknown-mesh.mlir:[[@LINE+6]]:5: error: 'loom.send' op refers to unknown mesh @inner; declare it with `loom.mesh`
module @a {
  loom.mesh @inner <pp = 2>
}
module @b {
  func.func @send(%x: tensor<8xf32>) {
    loom.send %x to @inner [pp] peer 1 tag 0 : tensor<8xf32>
    return
  }
}
