//===- cross_entropy.cpp - Fused softmax + cross entropy --------*- C++ -*-===//
#include "runtime/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace loom::cpu {

namespace {

Status checkTargets(const int32_t *targets, int64_t N, int64_t V,
                    int64_t validV) {
  LOOM_CHECK(validV >= 1 && validV <= V, "cross_entropy: valid vocab size "
                                             << validV << " must be in [1, "
                                             << V << "] (the padded vocab)");
  for (int64_t n = 0; n < N; ++n)
    LOOM_CHECK(targets[n] >= 0 && targets[n] < validV,
               "cross_entropy: target " << targets[n] << " at row " << n
                                        << " is outside [0, " << validV
                                        << "); the data does not match the "
                                           "model's vocabulary");
  return Status::success();
}

} // namespace

Status crossEntropyForward(float *meanLoss, float *losses, const float *logits,
                           const int32_t *targets, int64_t N, int64_t V,
                           int64_t validV) {
  LOOM_RETURN_IF_ERROR(checkTargets(targets, N, V, validV));
  double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total)
  for (int64_t n = 0; n < N; ++n) {
    const float *x = logits + n * V;
    float maxv = -INFINITY;
    for (int64_t c = 0; c < validV; ++c)
      maxv = std::fmax(maxv, x[c]);
    float sum = 0.0f;
    for (int64_t c = 0; c < validV; ++c)
      sum += std::exp(x[c] - maxv);
    // -log p[target] = log(sum) + max - x[target], without forming p.
    float loss = std::log(sum) + maxv - x[targets[n]];
    if (losses)
      losses[n] = loss;
    total += loss;
  }
  *meanLoss = N > 0 ? static_cast<float>(total / static_cast<double>(N)) : 0.0f;
  return Status::success();
}

Status crossEntropyBackward(float *dlogits, const float *logits,
                            const int32_t *targets, int64_t N, int64_t V,
                            int64_t validV, float dloss) {
  LOOM_RETURN_IF_ERROR(checkTargets(targets, N, V, validV));
  const float g = N > 0 ? dloss / static_cast<float>(N) : 0.0f;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float *x = logits + n * V;
    float *dx = dlogits + n * V;
    float maxv = -INFINITY;
    for (int64_t c = 0; c < validV; ++c)
      maxv = std::fmax(maxv, x[c]);
    float sum = 0.0f;
    for (int64_t c = 0; c < validV; ++c)
      sum += std::exp(x[c] - maxv);
    const float inv = 1.0f / sum;
    const int64_t tgt = targets[n];
    // Element-wise read-then-write keeps in-place (dlogits == logits) valid.
    for (int64_t c = 0; c < validV; ++c) {
      float p = std::exp(x[c] - maxv) * inv;
      dx[c] = (p - (c == tgt ? 1.0f : 0.0f)) * g;
    }
    for (int64_t c = validV; c < V; ++c)
      dx[c] = 0.0f;
  }
  return Status::success();
}

namespace {

/// This rank's valid columns: those of [offset, offset + V) below validV.
int64_t localValid(int64_t V, int64_t offset, int64_t validV) {
  return std::max<int64_t>(0, std::min(V, validV - offset));
}

Status checkShardTargets(const int32_t *targets, int64_t N, int64_t validV) {
  for (int64_t n = 0; n < N; ++n)
    LOOM_CHECK(targets[n] >= 0 && targets[n] < validV,
               "cross_entropy: target " << targets[n] << " at row " << n
                                        << " is outside [0, " << validV
                                        << "); the data does not match the "
                                           "model's vocabulary");
  return Status::success();
}

} // namespace

void crossEntropyRowMax(float *rowMax, const float *logits, int64_t N,
                        int64_t V, int64_t offset, int64_t validV) {
  const int64_t cols = localValid(V, offset, validV);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float *x = logits + n * V;
    float maxv = -INFINITY;
    for (int64_t c = 0; c < cols; ++c)
      maxv = std::fmax(maxv, x[c]);
    rowMax[n] = maxv;
  }
}

Status crossEntropySums(float *sumExp, float *targetLogit, const float *logits,
                        const float *rowMax, const int32_t *targets, int64_t N,
                        int64_t V, int64_t offset, int64_t validV) {
  LOOM_RETURN_IF_ERROR(checkShardTargets(targets, N, validV));
  const int64_t cols = localValid(V, offset, validV);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float *x = logits + n * V;
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c)
      sum += std::exp(x[c] - rowMax[n]);
    sumExp[n] = sum;
    const int64_t t = static_cast<int64_t>(targets[n]) - offset;
    targetLogit[n] = t >= 0 && t < cols ? x[t] : 0.0f;
  }
  return Status::success();
}

float crossEntropyFromSums(const float *rowMax, const float *sumExp,
                           const float *targetLogit, int64_t N,
                           double divisor) {
  double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total)
  for (int64_t n = 0; n < N; ++n)
    total += std::log(sumExp[n]) + rowMax[n] - targetLogit[n];
  return divisor > 0 ? static_cast<float>(total / divisor) : 0.0f;
}

Status crossEntropySumsBackward(float *dlogits, const float *logits,
                                const float *rowMax, const float *sumExp,
                                const int32_t *targets, int64_t N, int64_t V,
                                int64_t offset, int64_t validV, float g) {
  LOOM_RETURN_IF_ERROR(checkShardTargets(targets, N, validV));
  const int64_t cols = localValid(V, offset, validV);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float *x = logits + n * V;
    float *dx = dlogits + n * V;
    const float inv = 1.0f / sumExp[n];
    const int64_t t = static_cast<int64_t>(targets[n]) - offset;
    // Element-wise read-then-write keeps in-place (dlogits == logits) valid.
    for (int64_t c = 0; c < cols; ++c) {
      float p = std::exp(x[c] - rowMax[n]) * inv;
      dx[c] = (p - (c == t ? 1.0f : 0.0f)) * g;
    }
    for (int64_t c = cols; c < V; ++c)
      dx[c] = 0.0f;
  }
  return Status::success();
}

Status crossEntropyForwardReference(float *meanLoss, float *losses,
                                    const float *logits, const int32_t *targets,
                                    int64_t N, int64_t V, int64_t validV) {
  LOOM_RETURN_IF_ERROR(checkTargets(targets, N, V, validV));
  double total = 0.0;
  for (int64_t n = 0; n < N; ++n) {
    const float *x = logits + n * V;
    double maxv = -INFINITY;
    for (int64_t c = 0; c < validV; ++c)
      maxv = std::fmax(maxv, static_cast<double>(x[c]));
    double sum = 0.0;
    for (int64_t c = 0; c < validV; ++c)
      sum += std::exp(x[c] - maxv);
    double p = std::exp(x[targets[n]] - maxv) / sum;
    double loss = -std::log(p);
    if (losses)
      losses[n] = static_cast<float>(loss);
    total += loss;
  }
  *meanLoss = N > 0 ? static_cast<float>(total / N) : 0.0f;
  return Status::success();
}

Status crossEntropyBackwardReference(float *dlogits, const float *logits,
                                     const int32_t *targets, int64_t N,
                                     int64_t V, int64_t validV, float dloss) {
  LOOM_RETURN_IF_ERROR(checkTargets(targets, N, V, validV));
  std::vector<double> p(static_cast<size_t>(V));
  for (int64_t n = 0; n < N; ++n) {
    const float *x = logits + n * V;
    double maxv = -INFINITY;
    for (int64_t c = 0; c < validV; ++c)
      maxv = std::fmax(maxv, static_cast<double>(x[c]));
    double sum = 0.0;
    for (int64_t c = 0; c < validV; ++c)
      sum += p[c] = std::exp(x[c] - maxv);
    for (int64_t c = 0; c < V; ++c) {
      double d = c < validV ? p[c] / sum - (c == targets[n] ? 1.0 : 0.0) : 0.0;
      dlogits[n * V + c] = static_cast<float>(d * dloss / N);
    }
  }
  return Status::success();
}

} // namespace loom::cpu
