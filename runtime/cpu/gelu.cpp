//===- gelu.cpp - GELU, tanh approximation (GPT-2) -------------*- C++ -*-===//
#include "runtime/cpu/gelu.h"

#include <cmath>

namespace loom::cpu {

namespace {
constexpr float kGeluScale = 0.7978845608028654f; // sqrt(2/pi)
constexpr float kGeluCube = 0.044715f;
} // namespace

void geluForward(float *out, const float *inp, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCube * x * x * x);
    out[i] = 0.5f * x * (1.0f + std::tanh(u));
  }
}

void geluBackward(float *dinp, const float *inp, const float *dout, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCube * x * x * x);
    float th = std::tanh(u);
    // d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x sech^2(u) u'.
    float sech2 = 1.0f - th * th;
    float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
    dinp[i] = (0.5f * (1.0f + th) + 0.5f * x * sech2 * du) * dout[i];
  }
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
