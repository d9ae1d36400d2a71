//===- gemm.h - Row-major fp32 GEMMs through cuBLASLt -----------*- C++ -*-===//
//
// The contract of cpu::gemm (runtime/cpu/gemm.h) on device pointers: row-major
// C[M,N] = alpha op(A) op(B) + beta C. cuBLASLt is column-major, so the call
// computes C^T = op(B)^T op(A)^T, i.e. swaps the operands. Compute type
// CUBLAS_COMPUTE_32F (TF32 off): results agree with the CPU to fp32
// round-off, which the GPU-vs-CPU loss comparison relies on. bf16 inputs with
// fp32 accumulation are the follow-up (--precision bf16).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_GEMM_H
#define LOOM_RUNTIME_CUDA_GEMM_H

#include "runtime/core/status.h"

#include <cstdint>
#include <cuda_runtime_api.h>

typedef struct cublasLtContext *cublasLtHandle_t;

namespace loom::cuda {

class Gemm {
public:
  /// Creates the cuBLASLt handle and a 32 MiB workspace on the current device.
  static Status create(Gemm &out);
  Gemm() = default;
  ~Gemm();
  Gemm(const Gemm &) = delete;
  Gemm &operator=(const Gemm &) = delete;

  /// cpu::gemm's contract, on `stream`.
  Status gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
              float alpha, const float *A, int64_t lda, const float *B,
              int64_t ldb, float beta, float *C, int64_t ldc,
              cudaStream_t stream);

private:
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
};

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_GEMM_H
