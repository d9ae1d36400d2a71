//===- cross_entropy.cpp - Fused softmax + cross entropy -------*- C++ -*-===//
#include "runtime/cpu/cross_entropy.h"

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
