//===- vocab_parallel.h - Vocab-parallel embedding, loss --------*- C++ -*-===//
//
// The CUDA versions of runtime/cpu/embedding.h's embeddingForwardRows and
// runtime/cpu/cross_entropy.h's vocab-parallel pieces (Megatron's
// vocab-parallel cross entropy: RowMax, CrossEntropySums, -FromSums,
// -SumsGrad), same contracts, on device pointers and a stream. Unlike the
// CPU kernels they do not validate token ids (a device kernel cannot return
// an error cheaply): the executor checks the tokens and targets on the host
// before copying them in; ids outside the rank's block give zero rows /
// zero target logits, as on the CPU.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_VOCAB_PARALLEL_H
#define LOOM_RUNTIME_CUDA_VOCAB_PARALLEL_H

#include "runtime/core/status.h"

#include <cstdint>
#include <cuda_runtime_api.h>

namespace loom::cuda {

/// out[N, C]: row rows[idx[n] - rowBegin] when that is in [0, R), else 0.
Status embeddingForwardRows(float *out, const int32_t *idx, const float *rows,
                            int64_t N, int64_t rowBegin, int64_t R, int64_t C,
                            cudaStream_t stream);

/// rowMax[n] = max over this rank's valid columns of logits[n, :V] (columns
/// offset + c < validV); -inf when the rank holds none.
Status crossEntropyRowMax(float *rowMax, const float *logits, int64_t N,
                          int64_t V, int64_t offset, int64_t validV,
                          cudaStream_t stream);

/// sumExp[n] = sum of exp(logit - rowMax[n]) over the valid columns;
/// targetLogit[n] = logits[n, targets[n] - offset] when this rank holds the
/// target column, else 0.
Status crossEntropySums(float *sumExp, float *targetLogit, const float *logits,
                        const float *rowMax, const int32_t *targets, int64_t N,
                        int64_t V, int64_t offset, int64_t validV,
                        cudaStream_t stream);

/// loss[0] = (sum over n of log(sumExp[n]) + rowMax[n] - targetLogit[n]) /
/// divisor, summed in double in a fixed order (deterministic); 0 when
/// divisor <= 0.
Status crossEntropyFromSums(float *loss, const float *rowMax,
                            const float *sumExp, const float *targetLogit,
                            int64_t N, double divisor, cudaStream_t stream);

/// dlogits[n, c] = (softmax - onehot) * (dloss[0] / tokens) on valid
/// columns, 0 on padding; may alias logits. `dloss` is a device scalar.
Status crossEntropySumsBackward(float *dlogits, const float *logits,
                                const float *rowMax, const float *sumExp,
                                const int32_t *targets, int64_t N, int64_t V,
                                int64_t offset, int64_t validV,
                                const float *dloss, double tokens,
                                cudaStream_t stream);

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_VOCAB_PARALLEL_H
