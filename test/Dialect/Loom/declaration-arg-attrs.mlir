// RUN: loom-opt %s | loom-opt | FileCheck %s

// Regression: loom argument attributes on a function declaration (no body)
// were rejected with "the region has no such argument"; they are checked
// against the signature instead.

loom.mesh @mesh <pp = 2>

// CHECK-LABEL: func.func private @stage
// CHECK-SAME: (tensor<4x8xf32> {loom.init = #loom.init<zeros>, loom.name = "w", loom.role = #loom.role<param>, loom.sharding = #loom.sharding<@mesh, {{\[}}[pp], []]>}, tensor<4xi32> {loom.name = "tokens", loom.role = #loom.role<input>})
func.func private @stage(tensor<4x8xf32> {loom.name = "w", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>, loom.sharding = #loom.sharding<@mesh, [[pp], []]>},
                         tensor<4xi32> {loom.name = "tokens", loom.role = #loom.role<input>})
