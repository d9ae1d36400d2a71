//===- bf16_host.h - bf16 <-> fp32 conversion on the host -------*- C++ -*-===//
//
// Round-to-nearest-even fp32 -> bf16 (NaN stays a quiet NaN) and the exact
// widening back, as the device's __float2bfloat16 / __bfloat162float do.
// The host side needs them to stage bf16 operands and to build CPU
// references on bf16-rounded inputs (tests, benchmarks).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_BF16_HOST_H
#define LOOM_RUNTIME_CUDA_BF16_HOST_H

#include <cstdint>
#include <cstring>
#include <vector>

namespace loom::cuda {

/// The bf16 bit pattern nearest to `x` (ties to even).
inline uint16_t bf16BitsFromFloat(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: keep it a (quiet) NaN
    return static_cast<uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// The fp32 value of a bf16 bit pattern (exact).
inline float floatFromBf16Bits(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

/// Each value rounded to the nearest bf16, kept as fp32.
inline std::vector<float> roundedToBf16(const std::vector<float> &v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = floatFromBf16Bits(bf16BitsFromFloat(v[i]));
  return out;
}

/// The bf16 bit patterns of `v` (a host image of a __nv_bfloat16 array).
inline std::vector<uint16_t> bf16Bits(const std::vector<float> &v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = bf16BitsFromFloat(v[i]);
  return out;
}

/// fp32 values of a host image of a __nv_bfloat16 array.
inline std::vector<float> floatsFromBf16(const std::vector<uint16_t> &bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i)
    out[i] = floatFromBf16Bits(bits[i]);
  return out;
}

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_BF16_HOST_H
