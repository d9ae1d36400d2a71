//===- attention.cpp - Causal multi-head self-attention --------*- C++ -*-===//
//
// Forward is parallel over (b, h, t): each query row is independent. Backward
// is parallel over (b, h): dk and dv of a key position collect contributions
// from every later query, and all of them live in the same (b, h) slice of
// dqkv, so slices are disjoint across threads and no atomics are needed.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/attention.h"

#include <cmath>
#include <vector>

namespace loom::cpu {

namespace {

/// Softmax probabilities of query t of (b, h) against keys 0..t into
/// a[0..T) (masked positions exactly zero). Shared by the forward and
/// attentionProbs so both agree bitwise.
inline void probabilityRow(float *a, const float *qkv, int64_t b, int64_t h,
                           int64_t t, int64_t T, int64_t C, int64_t hs,
                           float scale) {
  const int64_t C3 = 3 * C;
  const float *q = qkv + (b * T + t) * C3 + h * hs;
  // 1. Scaled scores against keys 0..t, tracking the max for stability.
  float maxv = -INFINITY;
  for (int64_t t2 = 0; t2 <= t; ++t2) {
    const float *k = qkv + (b * T + t2) * C3 + C + h * hs;
    float s = 0.0f;
    for (int64_t i = 0; i < hs; ++i)
      s += q[i] * k[i];
    s *= scale;
    a[t2] = s;
    maxv = std::fmax(maxv, s);
  }
  // 2. Softmax; masked positions are exactly zero.
  float sum = 0.0f;
  for (int64_t t2 = 0; t2 <= t; ++t2) {
    a[t2] = std::exp(a[t2] - maxv);
    sum += a[t2];
  }
  float inv = 1.0f / sum;
  for (int64_t t2 = 0; t2 <= t; ++t2)
    a[t2] *= inv;
  for (int64_t t2 = t + 1; t2 < T; ++t2)
    a[t2] = 0.0f;
}

} // namespace

void attentionForward(float *out, float *att, const float *qkv, int64_t B,
                      int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        float *a = att + ((b * NH + h) * T + t) * T;
        probabilityRow(a, qkv, b, h, t, T, C, hs, scale);
        // 3. Weighted sum of values.
        float *o = out + (b * T + t) * C + h * hs;
        for (int64_t i = 0; i < hs; ++i)
          o[i] = 0.0f;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const float *v = qkv + (b * T + t2) * C3 + 2 * C + h * hs;
          const float w = a[t2];
          for (int64_t i = 0; i < hs; ++i)
            o[i] += w * v[i];
        }
      }
}

void attentionProbs(float *att, const float *qkv, int64_t B, int64_t T,
                    int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t)
        probabilityRow(att + ((b * NH + h) * T + t) * T, qkv, b, h, t, T, C, hs,
                       scale);
}

void attentionBackward(float *dqkv, const float *dout, const float *qkv,
                       const float *att, int64_t B, int64_t T, int64_t C,
                       int64_t NH) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      // This (b, h) owns dqkv[b, :, {0,C,2C} + h*hs + (0..hs)]: clear it.
      for (int64_t t = 0; t < T; ++t)
        for (int64_t part = 0; part < 3; ++part) {
          float *d = dqkv + (b * T + t) * C3 + part * C + h * hs;
          for (int64_t i = 0; i < hs; ++i)
            d[i] = 0.0f;
        }
      std::vector<float> datt(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) {
        const float *a = att + ((b * NH + h) * T + t) * T;
        const float *dy = dout + (b * T + t) * C + h * hs;
        const float *q = qkv + (b * T + t) * C3 + h * hs;
        float *dq = dqkv + (b * T + t) * C3 + h * hs;
        // 1. Through the value sum: datt = dy . v, dv += a * dy.
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const float *v = qkv + (b * T + t2) * C3 + 2 * C + h * hs;
          float *dv = dqkv + (b * T + t2) * C3 + 2 * C + h * hs;
          float s = 0.0f;
          for (int64_t i = 0; i < hs; ++i) {
            s += dy[i] * v[i];
            dv[i] += a[t2] * dy[i];
          }
          datt[t2] = s;
        }
        // 2. Through the softmax: dscore = a * (datt - sum(a * datt)).
        float dot = 0.0f;
        for (int64_t t2 = 0; t2 <= t; ++t2)
          dot += a[t2] * datt[t2];
        // 3. Through the scaled dot product into q and k.
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          float ds = a[t2] * (datt[t2] - dot) * scale;
          const float *k = qkv + (b * T + t2) * C3 + C + h * hs;
          float *dk = dqkv + (b * T + t2) * C3 + C + h * hs;
          for (int64_t i = 0; i < hs; ++i) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
          }
        }
      }
    }
}

void attentionForwardReference(float *out, float *att, const float *qkv,
                               int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> s(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        double maxv = -INFINITY;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          double acc = 0.0;
          for (int64_t i = 0; i < hs; ++i)
            acc += static_cast<double>(qkv[(b * T + t) * C3 + h * hs + i]) *
                   qkv[(b * T + t2) * C3 + C + h * hs + i];
          s[t2] = acc * scale;
          maxv = std::fmax(maxv, s[t2]);
        }
        double sum = 0.0;
        for (int64_t t2 = 0; t2 <= t; ++t2)
          sum += s[t2] = std::exp(s[t2] - maxv);
        float *a = att + ((b * NH + h) * T + t) * T;
        for (int64_t t2 = 0; t2 < T; ++t2)
          a[t2] = t2 <= t ? static_cast<float>(s[t2] / sum) : 0.0f;
        for (int64_t i = 0; i < hs; ++i) {
          double acc = 0.0;
          for (int64_t t2 = 0; t2 <= t; ++t2)
            acc += s[t2] / sum * qkv[(b * T + t2) * C3 + 2 * C + h * hs + i];
          out[(b * T + t) * C + h * hs + i] = static_cast<float>(acc);
        }
      }
}

void attentionBackwardReference(float *dqkv, const float *dout,
                                const float *qkv, const float *att, int64_t B,
                                int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> acc(static_cast<size_t>(B * T * C3), 0.0);
  std::vector<double> datt(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const float *a = att + ((b * NH + h) * T + t) * T;
        double dot = 0.0;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          double d = 0.0;
          for (int64_t i = 0; i < hs; ++i) {
            double dy = dout[(b * T + t) * C + h * hs + i];
            d += dy * qkv[(b * T + t2) * C3 + 2 * C + h * hs + i];
            acc[(b * T + t2) * C3 + 2 * C + h * hs + i] += a[t2] * dy;
          }
          datt[t2] = d;
          dot += a[t2] * d;
        }
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          double ds = a[t2] * (datt[t2] - dot) * scale;
          for (int64_t i = 0; i < hs; ++i) {
            acc[(b * T + t) * C3 + h * hs + i] +=
                ds * qkv[(b * T + t2) * C3 + C + h * hs + i];
            acc[(b * T + t2) * C3 + C + h * hs + i] +=
                ds * qkv[(b * T + t) * C3 + h * hs + i];
          }
        }
      }
  for (size_t i = 0; i < acc.size(); ++i)
    dqkv[i] = static_cast<float>(acc[i]);
}

} // namespace loom::cpu
