// RUN: loom-opt %s -split-input-file -verify-diagnostics

// Parse and verify errors of #loom.mesh, #loom.sharding, #loom.init and
// #loom.role.

// expected-error@+1 {{mesh axis names must be non-empty}}
loom.mesh @m <"" = 2>

// -----

// expected-error@+1 {{mesh axis 'dp' appears twice}}
loom.mesh @m <dp = 2, tp = 2, dp = 4>

// -----

// expected-error@+1 {{mesh axis 'tp' has size 0; sizes must be >= 1}}
loom.mesh @m <dp = 2, tp = 0>

// -----

// expected-error@+1 {{mesh axis 'dp' has size -2; sizes must be >= 1}}
func.func @f() attributes {attrs.m = #loom.mesh<dp = -2>} {
  return
}

// -----

// Regression: the device count overflowed int64 and group sizes divided by 0.
// expected-error@+1 {{mesh device count overflows 64 bits at axis 'b'}}
loom.mesh @m <a = 4294967296, b = 4294967296>

// -----

// expected-error@+1 {{expected '='}}
loom.mesh @m <dp 2>

// -----

// expected-error@+1 {{expected valid keyword or string}}
loom.mesh @m <>

// -----

// expected-error@+1 {{expected integer value}}
loom.mesh @m <dp = two>

// -----

// expected-error@+1 {{sharding axes must be non-empty names}}
func.func @f() attributes {attrs.s = #loom.sharding<@m, [[""]]>} {
  return
}

// -----

// expected-error@+1 {{mesh axis 'dp' is used twice in one sharding}}
func.func @f() attributes {attrs.s = #loom.sharding<@m, [[dp], [tp, dp]]>} {
  return
}

// -----

// An axis cannot both split a dimension and hold partial sums.
// expected-error@+1 {{mesh axis 'tp' is used twice in one sharding}}
func.func @f() attributes {attrs.s = #loom.sharding<@m, [[tp], []], partial = [tp]>} {
  return
}

// -----

// expected-error@+1 {{sharding axes must be non-empty names}}
func.func @f() attributes {attrs.s = #loom.sharding<@m, [[dp]], partial = [""]>} {
  return
}

// -----

// Partial results combine by sum or max only.
// expected-error@+1 {{partial results combine by sum or max, not 'avg'}}
func.func @f() attributes {attrs.s = #loom.sharding<@m, [[dp]], partial avg = [tp]>} {
  return
}

// -----

// expected-error@+1 {{expected valid '@'-identifier for symbol name}}
func.func @f() attributes {attrs.s = #loom.sharding<m, [[dp]]>} {
  return
}

// -----

// expected-error@+1 {{expected 'partial'}}
func.func @f() attributes {attrs.s = #loom.sharding<@m, [[dp]], replicated = [tp]>} {
  return
}

// -----

// expected-error@+1 {{expected '['}}
func.func @f() attributes {attrs.s = #loom.sharding<@m, [dp]>} {
  return
}

// -----

// expected-error@+1 {{unknown initializer 'uniform' (expected normal, zeros or ones)}}
func.func @f() attributes {attrs.i = #loom.init<uniform>} {
  return
}

// -----

// expected-error@+1 {{expected ','}}
func.func @f() attributes {attrs.i = #loom.init<normal>} {
  return
}

// -----

// expected-error@+1 {{expected 'std'}}
func.func @f() attributes {attrs.i = #loom.init<normal, mean = 0.0>} {
  return
}

// -----

// expected-error@+1 {{normal initializer needs a positive finite std, got 0}}
func.func @f() attributes {attrs.i = #loom.init<normal, std = 0.0>} {
  return
}

// -----

// expected-error@+1 {{normal initializer needs a positive finite std, got -2.000000e-02}}
func.func @f() attributes {attrs.i = #loom.init<normal, std = -0.02>} {
  return
}

// -----

// expected-error@+1 {{normal initializer needs a positive finite std, got 1.000000e+30}}
func.func @f() attributes {attrs.i = #loom.init<normal, std = 1.0e30>} {
  return
}

// -----

// Only `normal` takes a std.
// expected-error@+1 {{expected '>'}}
func.func @f() attributes {attrs.i = #loom.init<zeros, std = 0.02>} {
  return
}

// -----

// expected-error@+1 {{expected valid keyword or string}}
func.func @f() attributes {attrs.i = #loom.init<>} {
  return
}

// -----

// expected-error@+2 {{expected ::mlir::loom::Role to be one of: param, input, target}}
// expected-error@+1 {{failed to parse Loom_RoleAttr parameter 'value'}}
func.func @f() attributes {attrs.r = #loom.role<weight>} {
  return
}

// -----

// expected-error@+1 {{expected '<'}}
func.func @f() attributes {attrs.r = #loom.role} {
  return
}

// -----

// expected-error@+1 {{unknown attribute `meshes` in dialect `loom`}}
func.func @f() attributes {attrs.x = #loom.meshes<dp = 2>} {
  return
}
