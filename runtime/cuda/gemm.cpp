//===- gemm.cpp - Row-major fp32 GEMMs through cuBLASLt -------------------===//
#include "runtime/cuda/gemm.h"

#include "runtime/cuda/check.h"

#include <cublasLt.h>

namespace loom::cuda {

namespace {

/// Destroys the cuBLASLt descriptors of one call on every path.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descriptors() {
    if (pref)
      cublasLtMatmulPreferenceDestroy(pref);
    if (c)
      cublasLtMatrixLayoutDestroy(c);
    if (b)
      cublasLtMatrixLayoutDestroy(b);
    if (a)
      cublasLtMatrixLayoutDestroy(a);
    if (op)
      cublasLtMatmulDescDestroy(op);
  }
};

} // namespace

Status Gemm::create(Gemm &out) {
  LOOM_CHECK(!out.handle, "cuBLASLt handle already created");
  LOOM_CUBLAS_CHECK(cublasLtCreate(&out.handle));
  out.workspaceBytes = size_t(32) << 20;
  LOOM_CUDA_CHECK(cudaMalloc(&out.workspace, out.workspaceBytes));
  return Status::success();
}

Gemm::~Gemm() {
  if (workspace)
    cudaFree(workspace);
  if (handle)
    cublasLtDestroy(handle);
}

Status Gemm::gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                  float alpha, const float *A, int64_t lda, const float *B,
                  int64_t ldb, float beta, float *C, int64_t ldc,
                  cudaStream_t stream) {
  LOOM_CHECK(handle, "Gemm used before Gemm::create");
  if (M == 0 || N == 0)
    return Status::success();
  // Column-major view: C^T[N,M] = op(B)^T[N,K] op(A)^T[K,M]. The first
  // cuBLASLt operand is B as stored (N x K column-major when not transposed,
  // i.e. row-major [K,N] with stride ldb), the second is A.
  Descriptors d;
  LOOM_CUBLAS_CHECK(
      cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t opFirst = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opSecond = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
      d.op, CUBLASLT_MATMUL_DESC_TRANSA, &opFirst, sizeof(opFirst)));
  LOOM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
      d.op, CUBLASLT_MATMUL_DESC_TRANSB, &opSecond, sizeof(opSecond)));
  // Stored shapes (rows x cols, column-major, leading dimension).
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
      &d.a, CUDA_R_32F, transB ? K : N, transB ? N : K, ldb));
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(
      &d.b, CUDA_R_32F, transA ? M : K, transA ? K : M, lda));
  LOOM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, CUDA_R_32F, N, M, ldc));
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.pref));
  LOOM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
      d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspaceBytes,
      sizeof(workspaceBytes)));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  LOOM_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(
      handle, d.op, d.a, d.b, d.c, d.c, d.pref, 1, &heuristic, &found));
  LOOM_CHECK(found > 0, "cuBLASLt has no fp32 algorithm for a "
                            << M << "x" << N << "x" << K << " GEMM");
  // K == 0: C = beta C, which cuBLASLt also handles.
  LOOM_CUBLAS_CHECK(cublasLtMatmul(handle, d.op, &alpha, B, d.a, A, d.b, &beta,
                                   C, d.c, C, d.c, &heuristic.algo, workspace,
                                   workspaceBytes, stream));
  return Status::success();
}

} // namespace loom::cuda
