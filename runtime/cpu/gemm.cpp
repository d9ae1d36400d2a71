//===- gemm.cpp - fp32 GEMM and linear layers on the CPU --------*- C++ -*-===//
#include "runtime/cpu/gemm.h"

#include "runtime/cpu/batch_invariant_gemm.h"

#include <algorithm>
#include <cblas.h>
#include <cstdlib>
#include <string>
#include <vector>

namespace loom::cpu {

namespace {

enum class GemmChoice { Invariant, OpenBlas, Unknown };

/// LOOM_CPU_GEMM: `invariant` (unset: the default) runs batchInvariantGemm;
/// `openblas` OpenBLAS's sgemm, often faster on large shapes, but its bits
/// may depend on the batch, the thread count and the CPU
/// (batch_invariant_gemm.h), so partitioned runs then match the
/// single-rank run only to round-off.
GemmChoice gemmChoice() {
  const char *v = std::getenv("LOOM_CPU_GEMM");
  if (!v || std::string(v) == "invariant")
    return GemmChoice::Invariant;
  return std::string(v) == "openblas" ? GemmChoice::OpenBlas
                                      : GemmChoice::Unknown;
}

bool useOpenBlas() {
  static const bool openblas = gemmChoice() == GemmChoice::OpenBlas;
  return openblas;
}

} // namespace

Status checkCpuGemmSetting() {
  LOOM_CHECK(gemmChoice() != GemmChoice::Unknown,
             "LOOM_CPU_GEMM='"
                 << std::getenv("LOOM_CPU_GEMM")
                 << "' is not invariant or openblas; use invariant (the "
                    "default: every element summed in one order, whatever "
                    "the batch, threads or CPU) or openblas (OpenBLAS's "
                    "sgemm)");
  return Status::success();
}

void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
          float alpha, const float *A, int64_t lda, const float *B, int64_t ldb,
          float beta, float *C, int64_t ldc) {
  if (M == 0 || N == 0)
    return;
  if (!useOpenBlas()) {
    batchInvariantGemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C,
                       ldc);
    return;
  }
  if (K == 0) {
    // BLAS would scale C by beta; do the same without calling it with K=0,
    // and honour "beta == 0 ignores C".
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j)
        C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, static_cast<int>(M),
              static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C,
              static_cast<int>(ldc));
}

void gemmReference(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                   float alpha, const float *A, int64_t lda, const float *B,
                   int64_t ldb, float beta, float *C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        float a = transA ? A[k * lda + i] : A[i * lda + k];
        float b = transB ? B[j * ldb + k] : B[k * ldb + j];
        acc += static_cast<double>(a) * b;
      }
      float prev = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
      C[i * ldc + j] = static_cast<float>(alpha * acc) + prev;
    }
}

void columnSumAccumulate(float *dbias, const float *dout, int64_t M,
                         int64_t N) {
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (N + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = blk * kBlock, j1 = std::min(N, j0 + kBlock);
    float acc[kBlock] = {};
    for (int64_t i = 0; i < M; ++i) {
      const float *row = dout + i * N;
      for (int64_t j = j0; j < j1; ++j)
        acc[j - j0] += row[j];
    }
    for (int64_t j = j0; j < j1; ++j)
      dbias[j] += acc[j - j0];
  }
}

void linearForward(float *out, const float *inp, const float *weight,
                   const float *bias, int64_t M, int64_t K, int64_t N) {
  if (bias) {
    // Broadcast the bias into out, then let BLAS accumulate onto it (beta=1),
    // which saves a second pass over the output.
#pragma omp parallel for schedule(static) if (M * N > 65536)
    for (int64_t i = 0; i < M; ++i)
      std::copy(bias, bias + N, out + i * N);
    gemm(false, false, M, N, K, 1.0f, inp, K, weight, N, 1.0f, out, N);
  } else {
    gemm(false, false, M, N, K, 1.0f, inp, K, weight, N, 0.0f, out, N);
  }
}

void linearBackward(float *dinp, float *dweight, float *dbias,
                    const float *dout, const float *inp, const float *weight,
                    int64_t M, int64_t K, int64_t N) {
  if (dinp) // dinp[M,K] = dout[M,N] * weight[K,N]^T
    gemm(false, true, M, K, N, 1.0f, dout, N, weight, N, 0.0f, dinp, K);
  if (dweight) // dweight[K,N] += inp[M,K]^T * dout[M,N]
    gemm(true, false, K, N, M, 1.0f, inp, K, dout, N, 1.0f, dweight, N);
  if (dbias)
    columnSumAccumulate(dbias, dout, M, N);
}

void linearForwardReference(float *out, const float *inp, const float *weight,
                            const float *bias, int64_t M, int64_t K,
                            int64_t N) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = bias ? bias[j] : 0.0;
      for (int64_t k = 0; k < K; ++k)
        acc += static_cast<double>(inp[i * K + k]) * weight[k * N + j];
      out[i * N + j] = static_cast<float>(acc);
    }
}

void linearBackwardReference(float *dinp, float *dweight, float *dbias,
                             const float *dout, const float *inp,
                             const float *weight, int64_t M, int64_t K,
                             int64_t N) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K && dinp; ++k) {
      double acc = 0.0;
      for (int64_t j = 0; j < N; ++j)
        acc += static_cast<double>(dout[i * N + j]) * weight[k * N + j];
      dinp[i * K + k] = static_cast<float>(acc);
    }
  for (int64_t k = 0; k < K && dweight; ++k)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0.0;
      for (int64_t i = 0; i < M; ++i)
        acc += static_cast<double>(inp[i * K + k]) * dout[i * N + j];
      dweight[k * N + j] += static_cast<float>(acc);
    }
  for (int64_t j = 0; j < N && dbias; ++j) {
    double acc = 0.0;
    for (int64_t i = 0; i < M; ++i)
      acc += dout[i * N + j];
    dbias[j] += static_cast<float>(acc);
  }
}

} // namespace loom::cpu
