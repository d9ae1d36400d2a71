//===- bf16x8.cuh - Eight bf16 values per 16-byte access -------*- CUDA -*-===//
//
// Memory-bound kernels over bf16 tensors move 16 bytes (8 values) per load
// and store: at one value per thread, GPT-2's residual adds ran at under a
// third of an H200's memory bandwidth. The math stays
// fp32, rounded once per value, so an 8-wide kernel gives the bits of its
// one-value form. memcpy, not a pointer cast, views the bits as bf16,
// which C++ defines (the emulated host build of the kernels too).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_BF16X8_CUH
#define LOOM_RUNTIME_CUDA_BF16X8_CUH

#include <cstring>
#include <cuda_bf16.h>

namespace loom::cuda {

/// bf16 values per 16-byte access.
constexpr int kVec = 8;

/// The 8 bf16 values in `bits`, widened.
__device__ inline void widen8(float (&v)[kVec], const uint4 &bits) {
  unsigned short e[kVec];
  memcpy(e, &bits, sizeof bits);
  for (int k = 0; k < kVec; ++k)
    v[k] = __bfloat162float(__ushort_as_bfloat16(e[k]));
}

/// The 8 values rounded to bf16 (nearest even), packed.
__device__ inline uint4 round8(const float (&v)[kVec]) {
  unsigned short e[kVec];
  for (int k = 0; k < kVec; ++k)
    e[k] = __bfloat16_as_ushort(__float2bfloat16(v[k]));
  uint4 bits;
  memcpy(&bits, e, sizeof bits);
  return bits;
}

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_BF16X8_CUH
