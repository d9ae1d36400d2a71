//===- kernels.h - fp32 CUDA kernels of the executor's opcodes --*- C++ -*-===//
//
// Device counterparts of runtime/cpu/*.h with the same contracts (shapes,
// layouts, overwrite vs accumulate), so each is tested against the CPU
// kernel. All pointers are device pointers; scalars the program keeps in the
// arena (the loss seed, lr, step, clip coefficient) are read on the device,
// so a training step needs no host round trip. Every launch goes on
// `stream`; a returned error names the failed launch.
//
// Determinism: no floating-point atomics. Reductions over rows (parameter
// gradients of layer norm / bias / position embedding, the embedding
// scatter) give each thread a column and sum rows in order; the loss and the
// gradient norm reduce in a fixed tree.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_KERNELS_H
#define LOOM_RUNTIME_CUDA_KERNELS_H

#include "runtime/core/status.h"

#include <cstdint>
#include <cuda_runtime_api.h>
#include <vector>

namespace loom::cuda {

//===----------------------------------------------------------------------===//
// Element-wise and broadcast (runtime/cpu/elementwise.h, gelu.h)
//===----------------------------------------------------------------------===//

Status add(float *out, const float *a, const float *b, int64_t n,
           cudaStream_t stream);
/// out[o, j] = a[o, j] + b[j]; out may alias a.
Status addBroadcast(float *out, const float *a, const float *b, int64_t outer,
                    int64_t inner, cudaStream_t stream);
/// db[j] (+)= sum over o of dout[o, j], rows in order.
Status addBroadcastBackward(float *db, const float *dout, int64_t outer,
                            int64_t inner, bool accumulateInto,
                            cudaStream_t stream);
Status fillF32(float *out, float value, int64_t n, cudaStream_t stream);
Status fillI32(int32_t *out, int32_t value, int64_t n, cudaStream_t stream);
Status geluForward(float *out, const float *inp, int64_t n,
                   cudaStream_t stream);
Status geluBackward(float *dinp, const float *inp, const float *dout,
                    int64_t n, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Embedding (runtime/cpu/embedding.h)
//===----------------------------------------------------------------------===//

/// out[N, C] = wte[idx[n], :]. Indices outside [0, V) give a zero row (the
/// caller validates tokens on the host before copying them in).
Status embeddingForward(float *out, const int32_t *idx, const float *wte,
                        int64_t N, int64_t V, int64_t C, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Layer norm, softmax, cross-entropy
//===----------------------------------------------------------------------===//

/// `out` may be null (statistics only, as cpu::layernormStats).
Status layernormForward(float *out, float *mean, float *rstd, const float *inp,
                        const float *weight, const float *bias, int64_t N,
                        int64_t C, float eps, cudaStream_t stream);
/// dinp overwritten; dweight / dbias accumulated (+=).
Status layernormBackward(float *dinp, float *dweight, float *dbias,
                         const float *dout, const float *inp,
                         const float *weight, const float *mean,
                         const float *rstd, int64_t N, int64_t C,
                         cudaStream_t stream);
Status softmaxForward(float *out, const float *inp, int64_t N, int64_t C,
                      cudaStream_t stream);
Status softmaxBackward(float *dinp, const float *dout, const float *out,
                       int64_t N, int64_t C, cudaStream_t stream);
/// meanLoss[0] = mean of the N row losses (written to `losses[N]`, device
/// workspace the caller provides), times `scale` (the executor's global
/// token share; 1 for a whole batch).
Status crossEntropyForward(float *meanLoss, float *losses, const float *logits,
                           const int32_t *targets, int64_t N, int64_t V,
                           int64_t validV, float scale, cudaStream_t stream);
/// dlogits = (softmax - onehot) * (*dloss * dlossScale) / N on valid
/// columns, 0 on padding; may alias logits. `dloss` is a device scalar.
Status crossEntropyBackward(float *dlogits, const float *logits,
                            const int32_t *targets, int64_t N, int64_t V,
                            int64_t validV, const float *dloss,
                            float dlossScale, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Attention (attention.cu; runtime/cpu/attention.h layout)
//===----------------------------------------------------------------------===//

/// out[B,T,C] and att[B,NH,T,T] (zeros above the diagonal) from qkv[B,T,3C].
/// `out` may be null (probabilities only, as cpu::attentionProbs); `lse`
/// (may be null) gets each row's log-sum-exp [B,NH,T].
Status attentionForward(float *out, float *att, const float *qkv, int64_t B,
                        int64_t T, int64_t C, int64_t NH, cudaStream_t stream,
                        float *lse = nullptr);
/// dqkv[B,T,3C] overwritten; `dpre` is B*NH*T*T floats of device memory
/// for the pre-softmax gradients (the caller's, so it is accounted for).
Status attentionBackward(float *dqkv, const float *dout, const float *qkv,
                         const float *att, float *dpre, int64_t B, int64_t T,
                         int64_t C, int64_t NH, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Optimizer (runtime/cpu/adamw.h)
//===----------------------------------------------------------------------===//

// The sum of squares of the gradients is kernels_bf16.h's mixedSumSquares,
// which takes fp32 tensors too.
/// norm[0] = sqrt(*sumSq), coef[0] = min(1, maxNorm / (norm + 1e-6)) (1 when
/// maxNorm <= 0), in double.
Status clipCoefficient(float *norm, float *coef, const float *sumSq,
                       double maxNorm, cudaStream_t stream);
/// AdamW hyper-parameters that are compiled into the instruction.
struct AdamWHyper {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 1e-2;
};
/// In place on params / m / v; lr, step (1-based, as f32) and gradScale
/// are device scalars.
Status adamwStep(float *params, const float *grads, float *m, float *v,
                 int64_t n, const float *lr, const float *step,
                 const float *gradScale, const AdamWHyper &hyper,
                 cudaStream_t stream);

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_KERNELS_H
