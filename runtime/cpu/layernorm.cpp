//===- layernorm.cpp - LayerNorm over the last dimension --------*- C++ -*-===//
//
// Forward and dinp are parallel over rows. dweight/dbias are reductions over
// rows; they are parallel over column blocks with rows summed in order, so the
// result does not depend on the thread count (no atomics, no per-thread
// partials).
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/layernorm.h"

#include <algorithm>
#include <cmath>

namespace loom::cpu {

namespace {

/// Mean and reciprocal standard deviation of one row. Two passes (mean, then
/// centred variance) avoid the cancellation of E[x^2] - E[x]^2 when the mean
/// is large. Shared by the forward and layernormStats so both agree bitwise.
inline void rowStats(const float *x, int64_t C, float eps, float &mean,
                     float &rstd) {
  float m = 0.0f;
  for (int64_t c = 0; c < C; ++c)
    m += x[c];
  m /= static_cast<float>(C);
  float v = 0.0f;
  for (int64_t c = 0; c < C; ++c) {
    float d = x[c] - m;
    v += d * d;
  }
  v /= static_cast<float>(C);
  mean = m;
  rstd = 1.0f / std::sqrt(v + eps);
}

} // namespace

void layernormForward(float *out, float *mean, float *rstd, const float *inp,
                      const float *weight, const float *bias, int64_t N,
                      int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float *x = inp + i * C;
    float *y = out + i * C;
    float m, s;
    rowStats(x, C, eps, m, s);
    for (int64_t c = 0; c < C; ++c)
      y[c] = (x[c] - m) * s * weight[c] + bias[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

void layernormStats(float *mean, float *rstd, const float *inp, int64_t N,
                    int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i)
    rowStats(inp + i * C, C, eps, mean[i], rstd[i]);
}

void layernormBackward(float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight,
                       const float *mean, const float *rstd, int64_t N,
                       int64_t C) {
  if (dinp) {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < N; ++i) {
      const float *x = inp + i * C;
      const float *dy = dout + i * C;
      const float m = mean[i], s = rstd[i];
      // dinp = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * weight.
      float sumG = 0.0f, sumGX = 0.0f;
      for (int64_t c = 0; c < C; ++c) {
        float xhat = (x[c] - m) * s;
        float g = dy[c] * weight[c];
        sumG += g;
        sumGX += g * xhat;
      }
      sumG /= static_cast<float>(C);
      sumGX /= static_cast<float>(C);
      float *dx = dinp + i * C;
      for (int64_t c = 0; c < C; ++c) {
        float xhat = (x[c] - m) * s;
        dx[c] = s * (dy[c] * weight[c] - sumG - xhat * sumGX);
      }
    }
  }
  if (!dweight && !dbias)
    return;
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    float dw[kBlock] = {}, db[kBlock] = {};
    for (int64_t i = 0; i < N; ++i) {
      const float *x = inp + i * C;
      const float *dy = dout + i * C;
      const float m = mean[i], s = rstd[i];
      for (int64_t c = c0; c < c1; ++c) {
        dw[c - c0] += dy[c] * (x[c] - m) * s;
        db[c - c0] += dy[c];
      }
    }
    for (int64_t c = c0; c < c1; ++c) {
      if (dweight)
        dweight[c] += dw[c - c0];
      if (dbias)
        dbias[c] += db[c - c0];
    }
  }
}

void layernormForwardReference(float *out, float *mean, float *rstd,
                               const float *inp, const float *weight,
                               const float *bias, int64_t N, int64_t C,
                               float eps) {
  for (int64_t i = 0; i < N; ++i) {
    const float *x = inp + i * C;
    double m = 0.0, v = 0.0;
    for (int64_t c = 0; c < C; ++c)
      m += x[c];
    m /= C;
    for (int64_t c = 0; c < C; ++c)
      v += (x[c] - m) * (x[c] - m);
    v /= C;
    double s = 1.0 / std::sqrt(v + eps);
    for (int64_t c = 0; c < C; ++c)
      out[i * C + c] = static_cast<float>((x[c] - m) * s * weight[c] + bias[c]);
    mean[i] = static_cast<float>(m);
    rstd[i] = static_cast<float>(s);
  }
}

void layernormBackwardReference(float *dinp, float *dweight, float *dbias,
                                const float *dout, const float *inp,
                                const float *weight, const float *mean,
                                const float *rstd, int64_t N, int64_t C) {
  for (int64_t i = 0; i < N; ++i) {
    const float *x = inp + i * C;
    const float *dy = dout + i * C;
    const double m = mean[i], s = rstd[i];
    double sumG = 0.0, sumGX = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      double xhat = (x[c] - m) * s;
      double g = static_cast<double>(dy[c]) * weight[c];
      sumG += g;
      sumGX += g * xhat;
      if (dweight)
        dweight[c] += static_cast<float>(dy[c] * xhat);
      if (dbias)
        dbias[c] += dy[c];
    }
    sumG /= C;
    sumGX /= C;
    for (int64_t c = 0; c < C && dinp; ++c) {
      double xhat = (x[c] - m) * s;
      dinp[i * C + c] = static_cast<float>(
          s * (static_cast<double>(dy[c]) * weight[c] - sumG - xhat * sumGX));
    }
  }
}

} // namespace loom::cpu
