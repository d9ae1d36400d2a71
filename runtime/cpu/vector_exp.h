//===- vector_exp.h - Branch-free exp that loops can vectorize --*- C++ -*-===//
//
// Shared by the softmax inside attention and by GELU: std::exp is a libm call
// that keeps a loop scalar, and -ffast-math would change results elsewhere.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_RUNTIME_CPU_VECTOR_EXP_H
#define LOOM_RUNTIME_CPU_VECTOR_EXP_H

#include <cstdint>
#include <cstring>

namespace loom::cpu {

/// exp(t) for t in [-80, 80] (callers clamp: at -80 it is ~1.8e-35, never a
/// denormal), within ~2 ulp of expf. Cephes-style polynomial, branch-free.
inline float expClamped(float t) {
  // n = round(t / ln 2) via the 1.5 * 2^23 trick (no fast-math needed).
  const float kMagic = 12582912.0f;
  float n = (t * 1.44269504088896341f + kMagic) - kMagic;
  // r = t - n ln 2 in two steps (Cephes C1 + C2).
  float r = t - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  // Multiply by 2^n, n in [-116, 116]: build the float's exponent bits.
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

} // namespace loom::cpu

#endif // LOOM_RUNTIME_CPU_VECTOR_EXP_H
