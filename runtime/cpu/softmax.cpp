//===- softmax.cpp - Row softmax over the last dimension --------*- C++ -*-===//
#include "runtime/cpu/softmax.h"

#include <cmath>
#include <vector>

namespace loom::cpu {

void softmaxForward(float *out, const float *inp, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float *x = inp + i * C;
    float *y = out + i * C;
    float maxv = -INFINITY;
    for (int64_t c = 0; c < C; ++c)
      maxv = std::fmax(maxv, x[c]);
    float sum = 0.0f;
    for (int64_t c = 0; c < C; ++c) {
      y[c] = std::exp(x[c] - maxv);
      sum += y[c];
    }
    float inv = 1.0f / sum;
    for (int64_t c = 0; c < C; ++c)
      y[c] *= inv;
  }
}

void softmaxBackward(float *dinp, const float *dout, const float *out,
                     int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const float *y = out + i * C;
    const float *dy = dout + i * C;
    float dot = 0.0f;
    for (int64_t c = 0; c < C; ++c)
      dot += y[c] * dy[c];
    float *dx = dinp + i * C;
    for (int64_t c = 0; c < C; ++c)
      dx[c] = y[c] * (dy[c] - dot);
  }
}

void softmaxForwardReference(float *out, const float *inp, int64_t N,
                             int64_t C) {
  std::vector<double> e(static_cast<size_t>(C));
  for (int64_t i = 0; i < N; ++i) {
    double maxv = -INFINITY;
    for (int64_t c = 0; c < C; ++c)
      maxv = std::fmax(maxv, static_cast<double>(inp[i * C + c]));
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c)
      sum += e[c] = std::exp(inp[i * C + c] - maxv);
    for (int64_t c = 0; c < C; ++c)
      out[i * C + c] = static_cast<float>(e[c] / sum);
  }
}

void softmaxBackwardReference(float *dinp, const float *dout, const float *out,
                              int64_t N, int64_t C) {
  for (int64_t i = 0; i < N; ++i) {
    double dot = 0.0;
    for (int64_t c = 0; c < C; ++c)
      dot += static_cast<double>(out[i * C + c]) * dout[i * C + c];
    for (int64_t c = 0; c < C; ++c)
      dinp[i * C + c] =
          static_cast<float>(out[i * C + c] * (dout[i * C + c] - dot));
  }
}

} // namespace loom::cpu
