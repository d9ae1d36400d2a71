// RUN: loom-opt --loom-plan-buffers %s | FileCheck %s
// RUN: loom-opt --loom-plan-buffers=alignment=256 %s | FileCheck %s --check-prefix=ALIGN

// Arguments sit at the bottom for the whole step; a dead tensor's bytes are
// reused (%c takes %a's slot); an op never writes over its own inputs; views
// share their source's offset.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: loom.offset = 0 : i64
// CHECK-SAME: loom.arena_bytes = 768 : i64
// CHECK: %[[A:.*]] = loom.gelu %{{.*}} {loom.offsets = array<i64: 256>}
// CHECK: %[[B:.*]] = loom.gelu %[[A]] {loom.offsets = array<i64: 512>}
// CHECK: %[[C:.*]] = loom.gelu %[[B]] {loom.offsets = array<i64: 256>}
// CHECK: loom.reshape %[[C]] {loom.offsets = array<i64: 256>}
// CHECK: loom.reshape %{{.*}} {loom.offsets = array<i64: 256>}
// ALIGN-LABEL: func.func @chain
// ALIGN-SAME: loom.arena_bytes = 768 : i64
func.func @chain(%x: tensor<4x16xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) -> tensor<4x16xf32> {
  %a = loom.gelu %x : tensor<4x16xf32>
  %b = loom.gelu %a : tensor<4x16xf32>
  %c = loom.gelu %b : tensor<4x16xf32>
  %r = loom.reshape %c : tensor<4x16xf32> -> tensor<64xf32>
  %d = loom.reshape %r : tensor<64xf32> -> tensor<4x16xf32>
  return %d : tensor<4x16xf32>
}

// Alignment rounds every buffer up: 3 floats take 64 bytes, or 256.
// CHECK-LABEL: func.func @aligned
// CHECK-SAME: loom.offset = 0 : i64
// CHECK-SAME: loom.offset = 64 : i64
// CHECK-SAME: loom.arena_bytes = 192 : i64
// CHECK: loom.add {{.*}} {loom.offsets = array<i64: 128>}
// ALIGN-LABEL: func.func @aligned
// ALIGN-SAME: loom.offset = 256 : i64
// ALIGN-SAME: loom.arena_bytes = 768 : i64
func.func @aligned(%x: tensor<3xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<ones>},
                   %y: tensor<3xf32> {loom.name = "y", loom.role = #loom.role<param>, loom.init = #loom.init<ones>}) -> tensor<3xf32> {
  %s = loom.add %x, %y : tensor<3xf32>, tensor<3xf32>
  return %s : tensor<3xf32>
}

// Blocks are inlined: the block argument is its operand's storage, the
// block result the yielded value's. Layer norm gets two scratch buffers
// (mean, rstd: 4 rows each), attention one (probabilities [B, NH, T, T]).
// CHECK-LABEL: func.func @block
// CHECK: %[[IN:.*]] = loom.gelu %{{.*}} {loom.offsets = array<i64: [[INOFF:[0-9]+]]>}
// CHECK: loom.block "h.0"(%[[IN]], %{{.*}}, %{{.*}})
// CHECK: loom.layer_norm {{.*}}loom.scratch_offsets = array<i64: [[M:[0-9]+]], [[R:[0-9]+]]>
// CHECK: loom.linear
// CHECK: loom.attention {{.*}}loom.scratch_offsets = array<i64: [[P:[0-9]+]]>
// CHECK: loom.yield
// CHECK: loom.gelu %{{.*}} {loom.offsets
func.func @block(%x: tensor<1x4x8xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                 %w: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<ones>},
                 %qw: tensor<8x24xf32> {loom.name = "qw", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>}) -> tensor<1x4x8xf32> {
  %in = loom.gelu %x : tensor<1x4x8xf32>
  %y = loom.block "h.0"(%in, %w, %qw) : (tensor<1x4x8xf32>, tensor<8xf32>, tensor<8x24xf32>) -> tensor<1x4x8xf32> {
  ^bb0(%a: tensor<1x4x8xf32>, %aw: tensor<8xf32>, %aq: tensor<8x24xf32>):
    %n = loom.layer_norm %a, %aw, %aw : tensor<1x4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %q = loom.linear %n, %aq : tensor<1x4x8xf32>, tensor<8x24xf32> -> tensor<1x4x24xf32>
    %o = loom.attention %q {num_heads = 2 : i64} : tensor<1x4x24xf32> -> tensor<1x4x8xf32>
    loom.yield %o : tensor<1x4x8xf32>
  }
  %z = loom.gelu %y : tensor<1x4x8xf32>
  return %z : tensor<1x4x8xf32>
}

// The layer-norm gradient recomputes the row statistics (mean, rstd: 4 rows
// each, 16 bytes) into two scratch buffers of its own, planned like the
// forward's, so no step allocates beside the arena.
// CHECK-LABEL: func.func @layer_norm_grad
// CHECK: loom.layer_norm_grad {{.*}}loom.scratch_offsets = array<i64: {{[0-9]+}}, {{[0-9]+}}>}
func.func @layer_norm_grad(%x: tensor<1x4x8xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                           %w: tensor<8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<ones>})
    -> (tensor<1x4x8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %dy = loom.gelu %x : tensor<1x4x8xf32>
  %dx, %dw, %db = loom.layer_norm_grad %dy, %x, %w : tensor<1x4x8xf32>, tensor<1x4x8xf32>, tensor<8xf32> -> tensor<1x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  return %dx, %dw, %db : tensor<1x4x8xf32>, tensor<8xf32>, tensor<8xf32>
}

// An fp32 attention gradient gets the flash backward's working set: the
// recomputed output [B, T, C] (1x4x8) and the log-sum-exp and row dot
// products [B, NH, T] (1x2x4 each), 48 floats; a bf16 one runs in the CUDA
// bf16 kernels' own memory and gets none.
// CHECK-LABEL: func.func @attention_grad
// CHECK: loom.attention_grad {{.*}}loom.scratch_offsets = array<i64: {{[0-9]+}}>, num_heads = 2 : i64} : tensor<1x4x8xf32>
// CHECK: loom.attention_grad {{.*}}{loom.offsets = array<i64: {{[0-9]+}}>, num_heads = 2 : i64} : tensor<1x4x8xbf16>
func.func @attention_grad(%x: tensor<1x4x24xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                          %y: tensor<1x4x24xbf16> {loom.name = "y", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> (tensor<1x4x24xf32>, tensor<1x4x24xbf16>) {
  %o = loom.attention %x {num_heads = 2 : i64} : tensor<1x4x24xf32> -> tensor<1x4x8xf32>
  %d = loom.attention_grad %o, %x {num_heads = 2 : i64} : tensor<1x4x8xf32>, tensor<1x4x24xf32> -> tensor<1x4x24xf32>
  %p = loom.attention %y {num_heads = 2 : i64} : tensor<1x4x24xbf16> -> tensor<1x4x8xbf16>
  %e = loom.attention_grad %p, %y {num_heads = 2 : i64} : tensor<1x4x8xbf16>, tensor<1x4x24xbf16> -> tensor<1x4x24xbf16>
  return %d, %e : tensor<1x4x24xf32>, tensor<1x4x24xbf16>
}

// A GELU right after the linear that computes its input may run in that
// linear's GEMM epilogue on the CUDA backend, which reads the linear's
// inputs while it writes the GELU: %x, read last by the linear, stays
// allocated through the GELU, whose result takes bytes of its own (not
// %x's, 1280).
// CHECK-LABEL: func.func @gelu_after_linear
// CHECK: loom.gelu %arg0 {loom.offsets = array<i64: 1280>}
// CHECK: loom.linear {{.*}} {loom.offsets = array<i64: 1536>}
// CHECK: loom.gelu {{.*}} {loom.offsets = array<i64: 1792>}
func.func @gelu_after_linear(%p: tensor<4x16xf32> {loom.name = "p", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
                             %w: tensor<16x16xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>})
    -> tensor<4x16xf32> {
  %x = loom.gelu %p : tensor<4x16xf32>
  %l = loom.linear %x, %w : tensor<4x16xf32>, tensor<16x16xf32> -> tensor<4x16xf32>
  %g = loom.gelu %l : tensor<4x16xf32>
  return %g : tensor<4x16xf32>
}
