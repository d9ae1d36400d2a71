// RUN: loom-opt --loom-plan-buffers -split-input-file %s | FileCheck %s
// RUN: loom-opt --loom-plan-buffers=in-place=false -split-input-file %s | FileCheck %s --check-prefix=APART
// RUN: loom-opt --loom-autodiff --loom-plan-buffers %S/loom-plan-buffers-train.mlir | FileCheck %s --check-prefix=TRAIN
// RUN: not loom-opt --loom-plan-buffers=in-place=maybe %s 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: for the --in-place option: 'maybe' is invalid value for boolean argument! Try 0 or 1

// A result takes the bytes of the operand its kernel writes over (an add's
// lhs, a GELU gradient's incoming gradient, a softmax's input) when its op
// reads that operand last: %a's bytes (64) hold %b, then %c, then %d; a
// view of a moved result is its storage too. Without in-place each result
// has bytes of its own.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: loom.arena_bytes = 128 : i64
// CHECK: loom.gelu %arg0 {loom.offsets = array<i64: 64>}
// CHECK: loom.add {{.*}} {loom.offsets = array<i64: 64>}
// CHECK: loom.gelu_grad {{.*}} {loom.offsets = array<i64: 64>}
// CHECK: loom.reshape {{.*}} {loom.offsets = array<i64: 64>}
// CHECK: loom.softmax {{.*}} {loom.offsets = array<i64: 64>}
// APART-LABEL: func.func @chain
// APART-SAME: loom.arena_bytes = 192 : i64
func.func @chain(%x: tensor<4x4xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> tensor<16xf32> {
  %a = loom.gelu %x : tensor<4x4xf32>
  %b = loom.add %a, %x : tensor<4x4xf32>, tensor<4x4xf32>
  %c = loom.gelu_grad %b, %x : tensor<4x4xf32>
  %v = loom.reshape %c : tensor<4x4xf32> -> tensor<16xf32>
  %d = loom.softmax %v : tensor<16xf32>
  return %d : tensor<16xf32>
}

// -----

// Not in place: %a is read again after the add (the second add then writes
// over %b, which it reads last); an add's rhs (%x, then %a) is never
// written over; nor is an operand the op reads twice (%s + %s); nor a
// GELU's input (the runtime fuses the GELU into its GEMM's epilogue, which
// writes the GELU beside the pre-activation).
// CHECK-LABEL: func.func @kept
// CHECK: loom.gelu %arg0 {loom.offsets = array<i64: 64>}
// CHECK: loom.add %0, %arg0 {loom.offsets = array<i64: 128>}
// CHECK: loom.add %1, %0 {loom.offsets = array<i64: 128>}
// CHECK: loom.gelu %arg0 {loom.offsets = array<i64: 64>}
// CHECK: loom.add %arg0, %3 {loom.offsets = array<i64: 192>}
// CHECK: loom.add %4, %4 {loom.offsets = array<i64: 64>}
// CHECK: loom.gelu %5 {loom.offsets = array<i64: 192>}
func.func @kept(%x: tensor<4x4xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %a = loom.gelu %x : tensor<4x4xf32>
  %b = loom.add %a, %x : tensor<4x4xf32>, tensor<4x4xf32>
  %c = loom.add %b, %a : tensor<4x4xf32>, tensor<4x4xf32>
  %r = loom.gelu %x : tensor<4x4xf32>
  %s = loom.add %x, %r : tensor<4x4xf32>, tensor<4x4xf32>
  %t = loom.add %s, %s : tensor<4x4xf32>, tensor<4x4xf32>
  %u = loom.gelu %t : tensor<4x4xf32>
  return %c, %u : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// An async all-gather's result is complete before its first reader runs,
// so an add that reads it last may write over it (at 128), while the
// gather's packed scratch (192) is held until then.
// CHECK-LABEL: func.func @gathered
// CHECK: loom.all_gather {{.*}} async {loom.offsets = array<i64: 128>, loom.scratch_offsets = array<i64: 192>}
// CHECK: loom.add {{.*}} {loom.offsets = array<i64: 128>}
loom.mesh @mesh <dp = 2>
func.func @gathered(%w: tensor<4x2xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                    %x: tensor<4x4xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> tensor<4x4xf32> {
  %g = loom.all_gather %w on @mesh [dp] dim 1 async : tensor<4x2xf32> -> tensor<4x4xf32>
  %h = loom.gelu %x : tensor<4x4xf32>
  %a = loom.add %g, %h : tensor<4x4xf32>, tensor<4x4xf32>
  return %a : tensor<4x4xf32>
}

// A derived training step: the logits' gradient is written over the logits
// (the cross-entropy gradient reads them last), the largest tensor of a
// GPT step, at its peak.
// TRAIN-LABEL: func.func @lm_train(
// TRAIN: %[[L:.*]] = loom.linear {{.*}} {loom.offsets = array<i64: [[LOFF:[0-9]+]]>}
// TRAIN: loom.cross_entropy_grad %{{.*}}, %[[L]], %{{.*}} {loom.offsets = array<i64: [[LOFF]]>}
