//===- bfloat16.h - bf16 <-> fp32 conversion on the host --------*- C++ -*-===//
//
// bfloat16 is the upper half of an IEEE fp32 (sign, 8 exponent bits, 7
// mantissa bits), so widening is exact (a shift) and narrowing is a rounding
// of the low 16 bits. Rounding is to nearest, ties to even (what PyTorch's
// `tensor.to(torch.bfloat16)`, CUDA's __float2bfloat16_rn and the mixed-
// precision contract use); a NaN stays a NaN (quiet, sign kept), values past
// the largest bf16 round to infinity. The runtime stores bf16 and computes in
// fp32 (docs: program.fbs, Param.master_buffer): these are the host
// conversions behind cpu::CpuKernels, the MPI communicator's bf16 reductions,
// parameter init and checkpoints. runtime/cuda/convert.cu is the device copy.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_BFLOAT16_H
#define LOOM_RUNTIME_CORE_BFLOAT16_H

#include <cstdint>
#include <cstring>

namespace loom {

/// `value` rounded to bfloat16 (nearest, ties to even; NaN stays NaN).
inline uint16_t floatToBF16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    // NaN: keep the sign and the top payload bits, force the quiet bit so
    // truncation cannot turn it into an infinity.
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  // Adding 0x7fff plus the lowest kept bit rounds half-way cases to the
  // even neighbour; a carry into the exponent is the correct rounding up
  // (and overflows to infinity past the largest finite bf16).
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

/// The fp32 value of a bfloat16 (exact).
inline float bf16ToFloat(uint16_t value) {
  const uint32_t bits = static_cast<uint32_t>(value) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

/// out[i] = floatToBF16(in[i]) for n elements.
inline void floatsToBF16(uint16_t *out, const float *in, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = floatToBF16(in[i]);
}

/// out[i] = bf16ToFloat(in[i]) for n elements.
inline void bf16ToFloats(float *out, const uint16_t *in, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = bf16ToFloat(in[i]);
}

} // namespace loom

#endif // LOOM_RUNTIME_CORE_BFLOAT16_H
