// RUN: loom-opt %s -split-input-file -verify-diagnostics

// Verifier errors of the shape ops.

func.func @reshape_size(%x: tensor<4x32x64xf32>) {
  // expected-error@+1 {{'loom.reshape' op cannot reshape [4, 32, 64] (8192 elements) to [128, 32] (4096 elements)}}
  %0 = loom.reshape %x : tensor<4x32x64xf32> -> tensor<128x32xf32>
  return
}

// -----

func.func @reshape_mixed_types(%x: tensor<4x8xf32>) {
  // expected-error@+1 {{'loom.reshape' op mixes element types 'f32' and 'f16'}}
  %0 = loom.reshape %x : tensor<4x8xf32> -> tensor<32xf16>
  return
}

// -----

func.func @transpose_length(%x: tensor<4x8xf32>) {
  // expected-error@+1 {{'loom.transpose' op permutation has 3 entries but the input has rank 2}}
  %0 = loom.transpose %x [1, 0, 2] : tensor<4x8xf32> -> tensor<8x4xf32>
  return
}

// -----

func.func @transpose_repeated(%x: tensor<4x8xf32>) {
  // expected-error@+1 {{'loom.transpose' op permutation [0, 0] is not a permutation of 0..1}}
  %0 = loom.transpose %x [0, 0] : tensor<4x8xf32> -> tensor<4x4xf32>
  return
}

// -----

func.func @transpose_out_of_range(%x: tensor<2x3x4xf32>) {
  // expected-error@+1 {{'loom.transpose' op permutation [0, 3, 1] is not a permutation of 0..2}}
  %0 = loom.transpose %x [0, 3, 1] : tensor<2x3x4xf32> -> tensor<2x4x3xf32>
  return
}

// -----

func.func @transpose_negative(%x: tensor<4x8xf32>) {
  // expected-error@+1 {{'loom.transpose' op permutation [-1, 0] is not a permutation of 0..1}}
  %0 = loom.transpose %x [-1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  return
}

// -----

func.func @transpose_result_shape(%x: tensor<4x8xf32>) {
  // expected-error@+1 {{'loom.transpose' op result shape [4, 8] should be [8, 4]}}
  %0 = loom.transpose %x [1, 0] : tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @transpose_mixed_types(%x: tensor<4x8xf32>) {
  // expected-error@+1 {{'loom.transpose' op mixes element types 'f32' and 'bf16'}}
  %0 = loom.transpose %x [1, 0] : tensor<4x8xf32> -> tensor<8x4xbf16>
  return
}

// -----

func.func @slice_rank(%x: tensor<64x64xf32>) {
  // expected-error@+1 {{'loom.slice' op result rank 1 differs from input rank 2}}
  %0 = loom.slice %x dim 0 offset 0 : tensor<64x64xf32> -> tensor<64xf32>
  return
}

// -----

func.func @slice_dim(%x: tensor<64x64xf32>) {
  // expected-error@+1 {{'loom.slice' op dim 2 is out of range for rank 2}}
  %0 = loom.slice %x dim 2 offset 0 : tensor<64x64xf32> -> tensor<64x64xf32>
  return
}

// -----

func.func @slice_negative_dim(%x: tensor<64x64xf32>) {
  // expected-error@+1 {{'loom.slice' op dim -1 is out of range for rank 2}}
  %0 = loom.slice %x dim -1 offset 0 : tensor<64x64xf32> -> tensor<64x64xf32>
  return
}

// -----

func.func @slice_past_end(%x: tensor<64x64xf32>) {
  // expected-error@+1 {{'loom.slice' op slice of 32 at offset 40 of dimension 0 is out of bounds for size 64}}
  %0 = loom.slice %x dim 0 offset 40 : tensor<64x64xf32> -> tensor<32x64xf32>
  return
}

// -----

func.func @slice_negative_offset(%x: tensor<64x64xf32>) {
  // expected-error@+1 {{'loom.slice' op slice of 32 at offset -1 of dimension 1 is out of bounds for size 64}}
  %0 = loom.slice %x dim 1 offset -1 : tensor<64x64xf32> -> tensor<64x32xf32>
  return
}

// -----

func.func @slice_larger_than_input(%x: tensor<64x64xf32>) {
  // expected-error@+1 {{'loom.slice' op slice of 128 at offset 0 of dimension 0 is out of bounds for size 64}}
  %0 = loom.slice %x dim 0 offset 0 : tensor<64x64xf32> -> tensor<128x64xf32>
  return
}

// -----

// Regression: offset + size overflowed int64 and the slice was accepted.
func.func @slice_offset_overflow(%x: tensor<8xf32>) {
  // expected-error@+1 {{'loom.slice' op slice of 1 at offset 9223372036854775807 of dimension 0 is out of bounds for size 8}}
  %0 = loom.slice %x dim 0 offset 9223372036854775807 : tensor<8xf32> -> tensor<1xf32>
  return
}

// -----

func.func @slice_other_dim(%x: tensor<64x64xf32>) {
  // expected-error@+1 {{'loom.slice' op result dimension 1 is 32 but only dimension 0 may change (input [64, 64])}}
  %0 = loom.slice %x dim 0 offset 0 : tensor<64x64xf32> -> tensor<32x32xf32>
  return
}

// -----

func.func @slice_mixed_types(%x: tensor<64x64xf32>) {
  // expected-error@+1 {{'loom.slice' op mixes element types 'f32' and 'f16'}}
  %0 = loom.slice %x dim 0 offset 0 : tensor<64x64xf32> -> tensor<32x64xf16>
  return
}

// -----

// The custom form cannot spell zero inputs; the generic form can.
func.func @concat_no_inputs() {
  // expected-error@+1 {{'loom.concat' op needs at least one input}}
  %0 = "loom.concat"() <{dim = 0 : i64}> : () -> tensor<4xf32>
  return
}

// -----

func.func @concat_dim(%a: tensor<4x8xf32>) {
  // expected-error@+1 {{'loom.concat' op dim 2 is out of range for rank 2}}
  %0 = loom.concat %a, %a dim 2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x16xf32>
  return
}

// -----

func.func @concat_negative_dim(%a: tensor<4x8xf32>) {
  // expected-error@+1 {{'loom.concat' op dim -1 is out of range for rank 2}}
  %0 = loom.concat %a, %a dim -1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x16xf32>
  return
}

// -----

func.func @concat_input_rank(%a: tensor<4x8xf32>, %b: tensor<32xf32>) {
  // expected-error@+1 {{'loom.concat' op input #1 has rank 1 but the result has rank 2}}
  %0 = loom.concat %a, %b dim 1 : (tensor<4x8xf32>, tensor<32xf32>) -> tensor<4x16xf32>
  return
}

// -----

func.func @concat_other_dim(%a: tensor<4x8xf32>, %b: tensor<2x8xf32>) {
  // expected-error@+1 {{'loom.concat' op input #1 [2, 8] differs from the result [4, 16] in dimension 0}}
  %0 = loom.concat %a, %b dim 1 : (tensor<4x8xf32>, tensor<2x8xf32>) -> tensor<4x16xf32>
  return
}

// -----

func.func @concat_total(%a: tensor<4x8xf32>, %b: tensor<4x4xf32>) {
  // expected-error@+1 {{'loom.concat' op inputs add up to 12 along dim 1 but the result has 16}}
  %0 = loom.concat %a, %b dim 1 : (tensor<4x8xf32>, tensor<4x4xf32>) -> tensor<4x16xf32>
  return
}

// -----

func.func @concat_mixed_types(%a: tensor<4x8xf32>, %b: tensor<4x8xf16>) {
  // expected-error@+1 {{'loom.concat' op mixes element types 'f32' and 'f16'}}
  %0 = loom.concat %a, %b dim 1 : (tensor<4x8xf32>, tensor<4x8xf16>) -> tensor<4x16xf32>
  return
}
