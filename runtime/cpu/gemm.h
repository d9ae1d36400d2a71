//===- gemm.h - fp32 GEMM and linear layers on the CPU ----------*- C++ -*-===//
//
// Row-major GEMM (batch_invariant_gemm.h by default, OpenBLAS with
// LOOM_CPU_GEMM=openblas), a triple-loop reference for tests, and the
// linear layer in HF GPT-2 Conv1D layout (weight [in, out], y = x W + b).
//
// Gradient convention for all CPU kernels: gradients of parameters (dweight,
// dbias) are accumulated (+=), as llm.c does for gradient accumulation across
// micro-batches; gradients of activations (dinp) are overwritten (=).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CPU_GEMM_H
#define LOOM_RUNTIME_CPU_GEMM_H

#include "runtime/core/status.h"

#include <cstdint>

namespace loom::cpu {

/// Ok unless LOOM_CPU_GEMM is set to something other than `invariant` (the
/// default) or `openblas`: the error says what each means.
Status checkCpuGemmSetting();

/// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, all row-major, where
/// op(X) = X^T when the flag is set. lda/ldb/ldc are the row strides of A, B
/// and C as stored. beta == 0 ignores the previous contents of C (even NaN).
/// By default every element's bits depend only on its row of op(A), its
/// column of op(B) and K (batch_invariant_gemm.h).
void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
          float beta, float *C, int64_t ldc);

/// Plain triple loop with double accumulation; same contract as gemm().
void gemmReference(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                   float alpha, const float *A, int64_t lda, const float *B,
                   int64_t ldb, float beta, float *C, int64_t ldc);

/// out[M,N] = inp[M,K] * weight[K,N] + bias[N] (bias may be null).
void linearForward(float *out, const float *inp, const float *weight,
                   const float *bias, int64_t M, int64_t K, int64_t N);

/// Backward of linearForward given dout[M,N]:
///   dinp[M,K]    = dout * weight^T          (overwritten; skipped when null)
///   dweight[K,N] += inp^T * dout            (skipped when null)
///   dbias[N]     += sum over rows of dout   (skipped when null)
void linearBackward(float *dinp, float *dweight, float *dbias,
                    const float *dout, const float *inp, const float *weight,
                    int64_t M, int64_t K, int64_t N);

/// Reference versions (plain loops), same contracts.
void linearForwardReference(float *out, const float *inp, const float *weight,
                            const float *bias, int64_t M, int64_t K, int64_t N);
void linearBackwardReference(float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp,
                             const float *weight, int64_t M, int64_t K,
                             int64_t N);

/// dbias[N] += column sums of dout[M,N]; deterministic regardless of thread
/// count (each thread owns a block of columns and sums rows in order).
void columnSumAccumulate(float *dbias, const float *dout, int64_t M, int64_t N);

} // namespace loom::cpu

#endif // LOOM_RUNTIME_CPU_GEMM_H
