// RUN: loom-opt %s | FileCheck %s
// RUN: loom-opt %s | loom-opt | FileCheck %s
// RUN: loom-opt %s -mlir-print-op-generic | loom-opt | FileCheck %s

// The schedule prints one line per chunk and one per stage; with several
// chunks per stage an action names its local chunk after the dot.

loom.mesh @mesh <pp = 2>
func.func @f0() {
  return
}
func.func @b0() {
  return
}
func.func @f1() {
  return
}
func.func @b1() {
  return
}
func.func @u0() {
  return
}
func.func @u1() {
  return
}

// CHECK-LABEL: func.func @shared
// CHECK: loom.group_all_reduce %{{.*}} on @mesh [pp] members [0, 1] sum {reason = "tied"} : tensor<4xf32>
func.func @shared(%g: tensor<4xf32>) -> tensor<4xf32> {
  %0 = loom.group_all_reduce %g on @mesh [pp] members [0, 1] sum {reason = "tied"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK:      loom.pipeline_schedule "interleaved" stages 2 virtual 2 microbatches 2 {
// CHECK-NEXT:   chunk 0 ["embedding", "h.0"] forward @f0 backward @b0
// CHECK-NEXT:   chunk 1 ["h.1"] forward @f1 backward @b1
// CHECK-NEXT:   chunk 2 ["h.2"] forward @f0 backward @b0
// CHECK-NEXT:   chunk 3 ["head"] forward @f1 backward @b1
// CHECK-NEXT:   stage 0 update @u0 : F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0
// CHECK-NEXT:   stage 1 update @u1 : F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0 B1.0
// CHECK-NEXT: }
loom.pipeline_schedule "interleaved" stages 2 virtual 2 microbatches 2 {
  chunk 0 ["embedding", "h.0"] forward @f0 backward @b0
  chunk 1 ["h.1"] forward @f1 backward @b1
  chunk 2 ["h.2"] forward @f0 backward @b0
  chunk 3 ["head"] forward @f1 backward @b1
  stage 0 update @u0 : F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0
  stage 1 update @u1 : F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0 B1.0
}

// A forward-only pipeline (an evaluation): no backward functions, no
// updates, forward actions only.
// CHECK:      loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 3 {
// CHECK-NEXT:   chunk 0 ["embedding", "h.0"] forward @f0{{$}}
// CHECK-NEXT:   chunk 1 ["h.1", "head"] forward @f1{{$}}
// CHECK-NEXT:   stage 0 : F0 F1 F2
// CHECK-NEXT:   stage 1 : F0 F1 F2
// CHECK-NEXT: }
loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 3 {
  chunk 0 ["embedding", "h.0"] forward @f0
  chunk 1 ["h.1", "head"] forward @f1
  stage 0 : F0 F1 F2
  stage 1 : F0 F1 F2
}
