// RUN: loom-opt %s -split-input-file -verify-diagnostics -allow-unregistered-dialect

// Verifier errors of loom.block and loom.yield. (Unregistered ops are
// allowed only to build a body whose terminator is not loom.yield.)

func.func @argument_count(%x: tensor<8xf32>, %w: tensor<8xf32>) {
  // expected-error@+1 {{'loom.block' op body has 1 arguments but the block has 2 inputs}}
  %0 = loom.block "h.0" (%x, %w) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<8xf32>):
    loom.yield %a : tensor<8xf32>
  }
  return
}

// -----

func.func @argument_type(%x: tensor<8xf32>, %w: tensor<4xf32>) {
  // expected-error@+1 {{'loom.block' op body argument #1 has type 'tensor<8xf32>' but input #1 has type 'tensor<4xf32>'}}
  %0 = loom.block "h.0" (%x, %w) : (tensor<8xf32>, tensor<4xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<8xf32>, %b: tensor<8xf32>):
    loom.yield %a : tensor<8xf32>
  }
  return
}

// -----

func.func @not_yield(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.block' op body must end with loom.yield}}
  %0 = loom.block "h.0" (%x) : (tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<8xf32>):
    "other.terminator"(%a) : (tensor<8xf32>) -> ()
  }
  return
}

// -----

func.func @yield_count(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.block' op yields 2 values of types 'tensor<8xf32>', 'tensor<8xf32>' but the block returns 'tensor<8xf32>'}}
  %0 = loom.block "h.0" (%x) : (tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<8xf32>):
    loom.yield %a, %a : tensor<8xf32>, tensor<8xf32>
  }
  return
}

// -----

func.func @yield_type(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.block' op yields 1 values of types 'tensor<8xf32>' but the block returns 'tensor<4xf32>'}}
  %0 = loom.block "h.0" (%x) : (tensor<8xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<8xf32>):
    loom.yield %a : tensor<8xf32>
  }
  return
}

// -----

func.func @empty_label(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.block' op needs a label such as "h.0"}}
  %0 = loom.block "" (%x) : (tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<8xf32>):
    loom.yield %a : tensor<8xf32>
  }
  return
}

// -----

func.func @no_terminator(%x: tensor<8xf32>) {
  %0 = loom.block "h.0" (%x) : (tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<8xf32>):
    // expected-error@+1 {{block with no terminator}}
    %g = loom.gelu %a : tensor<8xf32>
  }
  return
}

// -----

func.func @empty_body(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.block' op expects a non-empty block}}
  %0 = loom.block "h.0" (%x) : (tensor<8xf32>) -> tensor<8xf32> {
  }
  return
}

// -----

// The body is isolated: it may not use values from outside.
func.func @not_isolated(%x: tensor<8xf32>, %w: tensor<8xf32>) {
  // expected-note@+1 {{required by region isolation constraints}}
  %0 = loom.block "h.0" (%x) : (tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<8xf32>):
    // expected-error@+1 {{using value defined outside the region}}
    %s = loom.add %a, %w : tensor<8xf32>, tensor<8xf32>
    loom.yield %s : tensor<8xf32>
  }
  return
}

// -----

func.func @unranked_input(%x: tensor<*xf32>) {
  // expected-error@+1 {{'loom.block' op operand #0 must be variadic of ranked tensor of any type values, but got 'tensor<*xf32>'}}
  loom.block "h.0" (%x) : (tensor<*xf32>) -> () {
  ^bb0(%a: tensor<*xf32>):
    loom.yield
  }
  return
}

// -----

func.func @yield_outside_block(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.yield' op expects parent op 'loom.block'}}
  loom.yield %x : tensor<8xf32>
}

// -----

func.func @two_blocks(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.block' op expects region #0 to have 0 or 1 blocks}}
  loom.block "h.0" (%x) : (tensor<8xf32>) -> () {
  ^bb0(%a: tensor<8xf32>):
    loom.yield
  ^bb1:
    loom.yield
  }
  return
}
