// RUN: loom-opt %s | loom-opt | FileCheck %s

// The discardable attributes of model arguments: loom.name, loom.role,
// loom.init, loom.sharding.

loom.mesh @mesh <dp = 2, tp = 4>

// CHECK-LABEL: func.func @model_args
// CHECK-SAME: %{{[^:]*}}: tensor<256x64xf32> {loom.init = #loom.init<normal, std = 2.000000e-02>, loom.name = "wte.weight", loom.role = #loom.role<param>}
// CHECK-SAME: %{{[^:]*}}: tensor<64xf32> {loom.init = #loom.init<ones>, loom.name = "ln_f.weight", loom.role = #loom.role<param>}
// CHECK-SAME: %{{[^:]*}}: tensor<64xf32> {loom.init = #loom.init<zeros>, loom.name = "ln_f.bias", loom.role = #loom.role<param>}
// CHECK-SAME: %{{[^:]*}}: tensor<4x32xi32> {loom.name = "tokens", loom.role = #loom.role<input>}
// CHECK-SAME: %{{[^:]*}}: tensor<4x32xi32> {loom.name = "targets", loom.role = #loom.role<target>}
func.func @model_args(
    %wte: tensor<256x64xf32> {loom.name = "wte.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>},
    %lnw: tensor<64xf32> {loom.name = "ln_f.weight", loom.role = #loom.role<param>, loom.init = #loom.init<ones>},
    %lnb: tensor<64xf32> {loom.name = "ln_f.bias", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>},
    %tokens: tensor<4x32xi32> {loom.name = "tokens", loom.role = #loom.role<input>},
    %targets: tensor<4x32xi32> {loom.name = "targets", loom.role = #loom.role<target>}) {
  return
}

// Shardings on arguments: column-parallel on tp, a 2-axis split, partial
// sums, replicated; and the other attributes alongside.
// CHECK-LABEL: func.func @sharded_args
// CHECK-SAME: %{{[^:]*}}: tensor<64x256xf32> {loom.init = #loom.init<normal, std = 2.000000e-02>, loom.name = "c_fc.weight", loom.role = #loom.role<param>, loom.sharding = #loom.sharding<@mesh, {{\[}}[], [tp]]>}
// CHECK-SAME: %{{[^:]*}}: tensor<8x64xf32> {loom.sharding = #loom.sharding<@mesh, {{\[}}[dp, tp], []]>}
// CHECK-SAME: %{{[^:]*}}: tensor<4x32x64xf32> {loom.sharding = #loom.sharding<@mesh, {{\[}}[dp], [], []], partial = [tp]>}
// CHECK-SAME: %{{[^:]*}}: tensor<4x32xi32> {loom.name = "tokens", loom.role = #loom.role<input>, loom.sharding = #loom.sharding<@mesh, {{\[}}[], []]>}
// CHECK-SAME: %{{[^:]*}}: tensor<f32> {loom.sharding = #loom.sharding<@mesh, []>}
func.func @sharded_args(
    %w: tensor<64x256xf32> {loom.name = "c_fc.weight", loom.role = #loom.role<param>, loom.init = #loom.init<normal, std = 0.02>, loom.sharding = #loom.sharding<@mesh, [[], [tp]]>},
    %a: tensor<8x64xf32> {loom.sharding = #loom.sharding<@mesh, [[dp, tp], []]>},
    %p: tensor<4x32x64xf32> {loom.sharding = #loom.sharding<@mesh, [[dp], [], []], partial = [tp]>},
    %t: tensor<4x32xi32> {loom.name = "tokens", loom.role = #loom.role<input>, loom.sharding = #loom.sharding<@mesh, [[], []]>},
    %s: tensor<f32> {loom.sharding = #loom.sharding<@mesh, []>}) {
  return
}

// A name alone is allowed on any argument, and arguments without loom
// attributes mix freely with those that have them.
// CHECK-LABEL: func.func @name_only
// CHECK-SAME: (%{{[^:]*}}: tensor<8xf32> {loom.name = "activation"}, %{{[^:]*}}: tensor<8xf32>)
func.func @name_only(%x: tensor<8xf32> {loom.name = "activation"}, %y: tensor<8xf32>) {
  return
}

// The mesh may be declared after its first use.
// CHECK-LABEL: func.func @mesh_declared_later
// CHECK-SAME: loom.sharding = #loom.sharding<@later, {{\[}}[x]]>
// CHECK: loom.mesh @later <x = 2>
func.func @mesh_declared_later(%x: tensor<8xf32> {loom.sharding = #loom.sharding<@later, [[x]]>}) {
  return
}
loom.mesh @later <x = 2>
