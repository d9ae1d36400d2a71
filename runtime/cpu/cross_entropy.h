//===- cross_entropy.h - Fused softmax + cross entropy ----------*- C++ -*-===//
//
// loss = mean over N rows of -log softmax(logits[n, :validV])[target[n]].
// Columns >= validV are vocabulary padding (Megatron pads V to a multiple of
// the TP size times 128): they are excluded from the softmax and get a zero
// gradient. The backward recomputes the softmax from the logits instead of
// storing probabilities, as llm.c's fused classifier does.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CPU_CROSS_ENTROPY_H
#define LOOM_RUNTIME_CPU_CROSS_ENTROPY_H

#include "runtime/core/status.h"

#include <cstdint>

namespace loom::cpu {

/// Computes the mean loss over N rows of logits[N, V] (row stride V) into
/// `meanLoss`, and per-row losses into `losses[N]` when it is non-null.
/// Errors when validV is not in [1, V] or a target is not in [0, validV).
Status crossEntropyForward(float *meanLoss, float *losses, const float *logits,
                           const int32_t *targets, int64_t N, int64_t V,
                           int64_t validV);

/// dlogits[N, V] = (softmax - onehot(target)) * dloss / N on valid columns,
/// 0 on padding columns (overwritten). dlogits may alias logits, which lets
/// the caller reuse the logits buffer as llm.c does. Same errors as forward.
Status crossEntropyBackward(float *dlogits, const float *logits,
                            const int32_t *targets, int64_t N, int64_t V,
                            int64_t validV, float dloss);

//===----------------------------------------------------------------------===//
// Vocab-parallel pieces (Megatron's): logits[N, V] hold columns
// [offset, offset + V) of a vocabulary whose first validV columns are valid
// (the rest is padding). Each rank reduces its columns to per-row
// statistics; all-reducing the maxima (max) and then the sums (sum) gives
// the full softmax's, from which the loss and each rank's gradient follow.
//===----------------------------------------------------------------------===//

/// rowMax[n] = max over this rank's valid columns (-inf when it has none).
void crossEntropyRowMax(float *rowMax, const float *logits, int64_t N,
                        int64_t V, int64_t offset, int64_t validV);

/// sumExp[n] = Σ exp(logits[n, c] - rowMax[n]) over this rank's valid
/// columns; targetLogit[n] = logits[n, target - offset] when this rank
/// holds the target, else 0. Errors when a target is not in [0, validV).
Status crossEntropySums(float *sumExp, float *targetLogit, const float *logits,
                        const float *rowMax, const int32_t *targets, int64_t N,
                        int64_t V, int64_t offset, int64_t validV);

/// Σ_n (log sumExp[n] + rowMax[n] - targetLogit[n]) / divisor.
float crossEntropyFromSums(const float *rowMax, const float *sumExp,
                           const float *targetLogit, int64_t N,
                           double divisor);

/// dlogits[n, c] = (exp(logits[n, c] - rowMax[n]) / sumExp[n] -
/// [offset + c == target]) * g on valid columns, 0 on padding (overwritten;
/// may alias logits). Same errors as crossEntropySums.
Status crossEntropySumsBackward(float *dlogits, const float *logits,
                                const float *rowMax, const float *sumExp,
                                const int32_t *targets, int64_t N, int64_t V,
                                int64_t offset, int64_t validV, float g);

/// Reference versions in double precision, same contracts.
Status crossEntropyForwardReference(float *meanLoss, float *losses,
                                    const float *logits, const int32_t *targets,
                                    int64_t N, int64_t V, int64_t validV);
Status crossEntropyBackwardReference(float *dlogits, const float *logits,
                                     const int32_t *targets, int64_t N,
                                     int64_t V, int64_t validV, float dloss);

} // namespace loom::cpu

#endif // LOOM_RUNTIME_CPU_CROSS_ENTROPY_H
