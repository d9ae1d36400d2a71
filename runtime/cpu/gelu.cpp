//===- gelu.cpp - GELU, tanh approximation (GPT-2) --------------*- C++ -*-===//
//
// The fast kernels use 0.5 (1 + tanh u) = 1 / (1 + exp(-2u)) = s, so
//   gelu(x)  = x s
//   gelu'(x) = s + 2 x s (1 - s) u',  1 - s = exp(-2u) s,
// which, unlike 1 + tanh u, has no cancellation for negative x: the relative
// error stays a few ulp. exp is a branch-free Cephes-style polynomial that
// GCC vectorizes without -ffast-math; the loops are OpenMP-parallel, and the
// chunk kernels are compiled for AVX2+FMA as well as the baseline ISA
// (target_clones, chosen at load time).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/gelu.h"
#include "runtime/cpu/vector_exp.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace loom::cpu {

namespace {
constexpr float kGeluScale = 0.7978845608028654f; // sqrt(2/pi)
constexpr float kGeluCube = 0.044715f;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LOOM_GELU_CLONES __attribute__((target_clones("avx2,fma", "default")))
#else
#define LOOM_GELU_CLONES
#endif


/// v clamped to [-bound, bound]. Both bounds are computed, then one is
/// picked: two chained selects let GCC jump-thread (and constant-fold exp)
/// into branches that block vectorization.
inline float clampSymmetric(float v, float bound) {
  float lo = v < -bound ? -bound : v;
  float hi = v > bound ? bound : v;
  return v < 0.0f ? lo : hi;
}

/// s = 1 / (1 + exp(-2u)) = 0.5 (1 + tanh u) and e = exp(-2u), with -2u
/// clamped to [-80, 80] (exp stays finite and s normal); s is set to exactly
/// 0 for x < -10.3 (-2u > 80), where it is below 2e-35 anyway, so that
/// gelu(x) = x s is exactly 0 in the far negative tail, as the reference is.
inline float sigmoidTwoU(float x, float &e) {
  float t = -2.0f * kGeluScale * (x + kGeluCube * x * x * x);
  e = expClamped(clampSymmetric(t, 80.0f));
  // A 0/1 mask multiply, not a select (see clampSymmetric), and on x, not t
  // (a mask on t gets jump-threaded against the clamp too): x < -10.3 is
  // about -2u > 80.
  return static_cast<float>(x >= -10.3f) / (1.0f + e);
}

LOOM_GELU_CLONES
void geluForwardChunk(float *out, const float *inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float x = inp[i], e;
    out[i] = x * sigmoidTwoU(x, e);
  }
}

LOOM_GELU_CLONES
void geluBackwardChunk(float *dinp, const float *inp, const float *dout,
                       int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    float x = inp[i], e;
    float s = sigmoidTwoU(x, e);
    // 1 - s = e s. (As with any float formulation, x^2 in u' overflows for
    // |x| > 1e19: the result is then not finite.)
    float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
    dinp[i] = (s + 2.0f * x * s * (e * s) * du) * dout[i];
  }
}

/// Splits [0, n) into cache-friendly chunks, in parallel when n is large.
template <typename F> void forChunks(int64_t n, F &&f) {
  constexpr int64_t kChunk = 8192;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > 32768)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t i0 = c * kChunk;
    f(i0, std::min(n, i0 + kChunk) - i0);
  }
}
} // namespace

void geluForward(float *out, const float *inp, int64_t n) {
  forChunks(n, [&](int64_t i0, int64_t len) {
    geluForwardChunk(out + i0, inp + i0, len);
  });
}

void geluBackward(float *dinp, const float *inp, const float *dout, int64_t n) {
  forChunks(n, [&](int64_t i0, int64_t len) {
    geluBackwardChunk(dinp + i0, inp + i0, dout + i0, len);
  });
}

void geluForwardReference(float *out, const float *inp, int64_t n) {
  const double k = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < n; ++i) {
    double x = inp[i];
    out[i] = static_cast<float>(
        0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x))));
  }
}

void geluBackwardReference(float *dinp, const float *inp, const float *dout,
                           int64_t n) {
  const double k = std::sqrt(2.0 / M_PI);
  for (int64_t i = 0; i < n; ++i) {
    double x = inp[i];
    double th = std::tanh(k * (x + 0.044715 * x * x * x));
    double d = 0.5 * (1.0 + th) +
               0.5 * x * (1.0 - th * th) * k * (1.0 + 3.0 * 0.044715 * x * x);
    dinp[i] = static_cast<float>(d * dout[i]);
  }
}

} // namespace loom::cpu
