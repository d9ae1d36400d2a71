//===- bf16_round.cuh - fp32 <-> bf16 bits on the device -------*- CUDA -*-===//
//
// The rounding of runtime/core/bfloat16.h's floatToBF16 as a device
// function, for every kernel that stores a bf16 copy of an fp32 value that
// Opcode::Cast would otherwise round (convert.cu, and the grouped AdamW's
// bf16 parameter copies): to nearest, ties to even, in integer arithmetic
// on the fp32 bits; a NaN keeps its sign and top payload bits (quieted),
// which CUDA's __float2bfloat16_rn, returning one canonical NaN, would not.
// One definition keeps a fused copy bitwise equal to the Cast it replaces.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_BF16_ROUND_CUH
#define LOOM_RUNTIME_CUDA_BF16_ROUND_CUH

#include <cstdint>

namespace loom::cuda {

__device__ inline uint16_t roundToBF16Bits(float x) {
  uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((bits >> 16) | 0x0040u); // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);                  // ties to even
  return static_cast<uint16_t>(bits >> 16);
}

/// bf16 bits widened to the fp32 value they stand for (exact).
__device__ inline float widenBF16Bits(uint16_t bits) {
  return __uint_as_float(static_cast<uint32_t>(bits) << 16);
}

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_BF16_ROUND_CUH
