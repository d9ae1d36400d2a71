//===- adamw.h - AdamW optimizer step and gradient norm ---------*- C++ -*-===//
//
// Matches torch.optim.AdamW (amsgrad=False, maximize=False):
//   p   -= lr * wd * p                              (decoupled weight decay)
//   m    = b1 * m + (1 - b1) * g
//   v    = b2 * v + (1 - b2) * g^2
//   p   -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// with t the 1-based step count. The gradient may be pre-scaled: global-norm
// clipping (SumSquares, then ClipCoef) multiplies every gradient by
// min(1, max_norm / (norm + 1e-6)) as torch.nn.utils.clip_grad_norm_ does.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CPU_ADAMW_H
#define LOOM_RUNTIME_CPU_ADAMW_H

#include <cstdint>
#include <vector>

namespace loom::cpu {

/// Hyper-parameters of one AdamW step. Held in double, as PyTorch holds them
/// as Python floats: (1 - beta2) for beta2 = 0.999 is then 1e-3 to double
/// precision before it is rounded to fp32, not 1 - 0.999f.
struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weightDecay = 1e-2;
  /// 1-based step number for the bias corrections.
  int64_t step = 1;
  /// Every gradient is multiplied by this before use (clipping).
  float gradScale = 1.0f;
};

/// Updates params, m and v (each n floats) in place from grads.
void adamwStep(float *params, const float *grads, float *m, float *v, int64_t n,
               const AdamWConfig &cfg);

/// Reference version (serial, double arithmetic), same contract.
void adamwStepReference(float *params, const float *grads, float *m, float *v,
                        int64_t n, const AdamWConfig &cfg);

/// Sum of squares of x[0..n) accumulated in double. Summed in fixed-size
/// chunks combined in order, so the result is independent of the thread count
/// (every rank of a partitioned run reproduces the same clip factor).
double sumSquares(const float *x, int64_t n);

/// Reference: one serial double accumulator.
double sumSquaresReference(const float *x, int64_t n);

/// sumSquares of bf16 values (x[i] widened exactly to fp32): the same
/// chunks and order, so it equals sumSquares of the widened copy bit for
/// bit without materializing it.
double sumSquaresBF16(const uint16_t *x, int64_t n);

/// A tensor the SumSquares kernel reads.
struct FloatSpan {
  const float *data;
  int64_t size;
};

/// The SumSquares kernel: each tensor's sumSquares, added in order in double
/// and rounded once to f32 (the scalar the partitioner may all-reduce).
float sumSquares(const std::vector<FloatSpan> &tensors);

/// What the ClipCoef kernel writes (torch.nn.utils.clip_grad_norm_).
struct ClipCoefficient {
  /// sqrt(sumSquares): the global gradient norm before clipping.
  float norm;
  /// min(1, maxNorm / (norm + 1e-6)), or 1 when maxNorm <= 0 (no clipping).
  float coef;
};

/// The ClipCoef kernel, from the global sum of squares; computed in double
/// and rounded once per output.
ClipCoefficient clipCoefficient(float sumOfSquares, double maxNorm);

} // namespace loom::cpu

#endif // LOOM_RUNTIME_CPU_ADAMW_H
