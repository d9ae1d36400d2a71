// RUN: loom-opt %s | loom-opt | FileCheck %s

// Round trip of loom.block and loom.yield.

// CHECK-LABEL: func.func @one_layer
// CHECK-SAME: (%[[X:.*]]: tensor<4x32x64xf32>, %[[W:.*]]: tensor<64xf32>, %[[B:.*]]: tensor<64xf32>)
// CHECK: %[[R:.*]] = loom.block "h.0"(%[[X]], %[[W]], %[[B]]) : (tensor<4x32x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<4x32x64xf32> {
// CHECK-NEXT: ^bb0(%[[AX:.*]]: tensor<4x32x64xf32>, %[[AW:.*]]: tensor<64xf32>, %[[AB:.*]]: tensor<64xf32>):
// CHECK-NEXT: %[[N:.*]] = loom.layer_norm %[[AX]], %[[AW]], %[[AB]] : tensor<4x32x64xf32>, tensor<64xf32>, tensor<64xf32>
// CHECK-NEXT: %[[S:.*]] = loom.add %[[AX]], %[[N]] : tensor<4x32x64xf32>, tensor<4x32x64xf32>
// CHECK-NEXT: loom.yield %[[S]] : tensor<4x32x64xf32>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[R]]
func.func @one_layer(%x: tensor<4x32x64xf32>, %w: tensor<64xf32>, %b: tensor<64xf32>) -> tensor<4x32x64xf32> {
  %y = loom.block "h.0" (%x, %w, %b) : (tensor<4x32x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<4x32x64xf32> {
  ^bb0(%ax: tensor<4x32x64xf32>, %aw: tensor<64xf32>, %ab: tensor<64xf32>):
    %n = loom.layer_norm %ax, %aw, %ab : tensor<4x32x64xf32>, tensor<64xf32>, tensor<64xf32>
    %s = loom.add %ax, %n : tensor<4x32x64xf32>, tensor<4x32x64xf32>
    loom.yield %s : tensor<4x32x64xf32>
  }
  return %y : tensor<4x32x64xf32>
}

// Blocks chain; labels are kept verbatim, even with spaces.
// CHECK-LABEL: func.func @two_blocks
// CHECK: %[[B0:.*]] = loom.block "h.0"(%{{.*}}) : (tensor<8xf32>) -> tensor<8xf32>
// CHECK: loom.gelu
// CHECK: loom.yield
// CHECK: %[[B1:.*]] = loom.block "layer one"(%[[B0]]) : (tensor<8xf32>) -> tensor<8xf32>
// CHECK: loom.softmax
// CHECK: loom.yield
// CHECK: return %[[B1]]
func.func @two_blocks(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = loom.block "h.0" (%x) : (tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<8xf32>):
    %g = loom.gelu %a : tensor<8xf32>
    loom.yield %g : tensor<8xf32>
  }
  %1 = loom.block "layer one" (%0) : (tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<8xf32>):
    %s = loom.softmax %a : tensor<8xf32>
    loom.yield %s : tensor<8xf32>
  }
  return %1 : tensor<8xf32>
}

// Several results, and a block with neither inputs nor results.
// CHECK-LABEL: func.func @multi_result
// CHECK: %[[R:.*]]:2 = loom.block "pair"(%{{.*}}, %{{.*}}) : (tensor<8xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<8xf32>)
// CHECK: loom.yield %{{.*}}, %{{.*}} : tensor<4xf32>, tensor<8xf32>
// CHECK: loom.block "empty"() : () -> () {
// CHECK-NEXT: loom.yield{{$}}
// CHECK-NEXT: }
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @multi_result(%a: tensor<8xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<8xf32>) {
  %0:2 = loom.block "pair" (%a, %b) : (tensor<8xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<8xf32>) {
  ^bb0(%x: tensor<8xf32>, %y: tensor<4xf32>):
    loom.yield %y, %x : tensor<4xf32>, tensor<8xf32>
  }
  loom.block "empty" () : () -> () {
    loom.yield
  }
  return %0#0, %0#1 : tensor<4xf32>, tensor<8xf32>
}
