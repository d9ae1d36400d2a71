// RUN: loom-opt %s | loom-opt | FileCheck %s

// Round trip of every attribute of the dialect, held in plain (non-loom)
// attributes so that no placement rule applies.

loom.mesh @mesh <dp = 2, tp = 4>

// CHECK-LABEL: func.func @mesh_attrs
// CHECK-SAME: attrs.grid = #loom.mesh<dp = 2, tp = 4, pp = 2>
// CHECK-SAME: attrs.one = #loom.mesh<x = 1>
// CHECK-SAME: attrs.quoted = #loom.mesh<"data parallel" = 2, "0" = 3>
func.func @mesh_attrs() attributes {
    attrs.grid = #loom.mesh<dp = 2, tp = 4, pp = 2>,
    attrs.one = #loom.mesh<x = 1>,
    attrs.quoted = #loom.mesh<"data parallel" = 2, "0" = 3>} {
  return
}

// Empty per-dimension lists mean replicated; `partial` is printed only when
// it is not empty, with its kind unless it is sums (`partial sum` reads
// back as `partial`); names that are not identifiers stay quoted.
// CHECK-LABEL: func.func @sharding_attrs
// CHECK-SAME: attrs.col = #loom.sharding<@mesh, {{\[}}[], [tp]]>
// CHECK-SAME: attrs.multi = #loom.sharding<@mesh, {{\[}}[dp, tp], []]>
// CHECK-SAME: attrs.no_partial = #loom.sharding<@mesh, {{\[}}[dp], []]>{{[,}]}}
// CHECK-SAME: attrs.partial = #loom.sharding<@mesh, {{\[}}[dp], [], []], partial = [tp]>
// CHECK-SAME: attrs.partial_max = #loom.sharding<@mesh, {{\[}}[dp], []], partial max = [tp]>
// CHECK-SAME: attrs.partial_sum = #loom.sharding<@mesh, {{\[}}[dp], []], partial = [tp]>
// CHECK-SAME: attrs.quoted = #loom.sharding<@"my mesh", {{\[}}["data parallel"], ["t-p"]], partial = ["pp 2"]>
// CHECK-SAME: attrs.replicated = #loom.sharding<@mesh, {{\[}}[], []]>
// CHECK-SAME: attrs.scalar = #loom.sharding<@mesh, []>
func.func @sharding_attrs() attributes {
    attrs.col = #loom.sharding<@mesh, [[], [tp]]>,
    attrs.multi = #loom.sharding<@mesh, [[dp, tp], []]>,
    attrs.no_partial = #loom.sharding<@mesh, [[dp], []], partial = []>,
    attrs.partial = #loom.sharding<@mesh, [[dp], [], []], partial = [tp]>,
    attrs.partial_max = #loom.sharding<@mesh, [[dp], []], partial max = [tp]>,
    attrs.partial_sum = #loom.sharding<@mesh, [[dp], []], partial sum = [tp]>,
    attrs.quoted = #loom.sharding<@"my mesh", [["data parallel"], ["t-p"]], partial = ["pp 2"]>,
    attrs.replicated = #loom.sharding<@mesh, [[], []]>,
    attrs.scalar = #loom.sharding<@mesh, []>} {
  return
}

// A bare identifier and its quoted spelling are the same axis name.
// CHECK-LABEL: func.func @sharding_same_spelling
// CHECK-SAME: attrs.s = #loom.sharding<@mesh, {{\[}}[dp]]>
func.func @sharding_same_spelling() attributes {
    attrs.s = #loom.sharding<@mesh, [["dp"]]>} {
  return
}

// CHECK-LABEL: func.func @init_attrs
// CHECK-SAME: attrs.normal = #loom.init<normal, std = 2.000000e-02>
// CHECK-SAME: attrs.ones = #loom.init<ones>
// CHECK-SAME: attrs.small = #loom.init<normal, std = 1.000000e-02>
// CHECK-SAME: attrs.zeros = #loom.init<zeros>
func.func @init_attrs() attributes {
    attrs.normal = #loom.init<normal, std = 0.02>,
    attrs.ones = #loom.init<ones>,
    attrs.small = #loom.init<normal, std = 1.0e-02>,
    attrs.zeros = #loom.init<zeros>} {
  return
}

// CHECK-LABEL: func.func @role_attrs
// CHECK-SAME: attrs.input = #loom.role<input>
// CHECK-SAME: attrs.param = #loom.role<param>
// CHECK-SAME: attrs.target = #loom.role<target>
func.func @role_attrs() attributes {
    attrs.input = #loom.role<input>,
    attrs.param = #loom.role<param>,
    attrs.target = #loom.role<target>} {
  return
}
