//===- adamw.cpp - AdamW optimizer step and gradient norm -------*- C++ -*-===//
#include "runtime/cpu/adamw.h"

#include "runtime/core/bfloat16.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace loom::cpu {

void adamwStep(float *params, const float *grads, float *m, float *v, int64_t n,
               const AdamWConfig &cfg) {
  // Scalars are formed in double and rounded once, mirroring
  // torch.optim.AdamW's single-tensor fp32 path so results agree to round-off.
  const double bc1 = 1.0 - std::pow(cfg.beta1, static_cast<double>(cfg.step));
  const double bc2 = 1.0 - std::pow(cfg.beta2, static_cast<double>(cfg.step));
  const float stepSize = static_cast<float>(cfg.lr / bc1);
  const float bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  const float decay = static_cast<float>(1.0 - cfg.lr * cfg.weightDecay);
  const float b2 = static_cast<float>(cfg.beta2);
  const float oneMinusB1 = static_cast<float>(1.0 - cfg.beta1);
  const float oneMinusB2 = static_cast<float>(1.0 - cfg.beta2);
  const float eps = static_cast<float>(cfg.eps);
  const float gradScale = cfg.gradScale;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    float g = grads[i] * gradScale;
    float p = params[i] * decay;
    // exp_avg.lerp_(grad, 1 - beta1): m + (1 - beta1) * (g - m).
    float mi = m[i] + oneMinusB1 * (g - m[i]);
    float vi = b2 * v[i] + oneMinusB2 * g * g;
    float denom = std::sqrt(vi) / bc2Sqrt + eps;
    params[i] = p - stepSize * (mi / denom);
    m[i] = mi;
    v[i] = vi;
  }
}

void adamwStepReference(float *params, const float *grads, float *m, float *v,
                        int64_t n, const AdamWConfig &cfg) {
  const double b1 = cfg.beta1, b2 = cfg.beta2;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(cfg.step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(cfg.step));
  for (int64_t i = 0; i < n; ++i) {
    double g = static_cast<double>(grads[i]) * cfg.gradScale;
    double p = params[i] * (1.0 - cfg.lr * cfg.weightDecay);
    double mi = b1 * m[i] + (1.0 - b1) * g;
    double vi = b2 * v[i] + (1.0 - b2) * g * g;
    double mhat = mi / bc1, vhat = vi / bc2;
    params[i] =
        static_cast<float>(p - cfg.lr * mhat / (std::sqrt(vhat) + cfg.eps));
    m[i] = static_cast<float>(mi);
    v[i] = static_cast<float>(vi);
  }
}

double sumSquares(const float *x, int64_t n) {
  constexpr int64_t kChunk = 8192;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    double acc = 0.0;
    for (int64_t i = c * kChunk; i < end; ++i)
      acc += static_cast<double>(x[i]) * x[i];
    partial[c] = acc;
  }
  double total = 0.0;
  for (double p : partial)
    total += p;
  return total;
}

double sumSquaresBF16(const uint16_t *x, int64_t n) {
  constexpr int64_t kChunk = 8192; // as sumSquares
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    double acc = 0.0;
    for (int64_t i = c * kChunk; i < end; ++i) {
      const float v = bf16ToFloat(x[i]);
      acc += static_cast<double>(v) * v;
    }
    partial[c] = acc;
  }
  double total = 0.0;
  for (double p : partial)
    total += p;
  return total;
}

double sumSquaresReference(const float *x, int64_t n) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i)
    total += static_cast<double>(x[i]) * x[i];
  return total;
}

float sumSquares(const std::vector<FloatSpan> &tensors) {
  double total = 0.0;
  for (const FloatSpan &t : tensors)
    total += sumSquares(t.data, t.size);
  return static_cast<float>(total);
}

ClipCoefficient clipCoefficient(float sumOfSquares, double maxNorm) {
  const double norm = std::sqrt(static_cast<double>(sumOfSquares));
  const double coef =
      maxNorm > 0.0 ? std::min(1.0, maxNorm / (norm + 1e-6)) : 1.0;
  return {static_cast<float>(norm), static_cast<float>(coef)};
}

} // namespace loom::cpu
