//===- gemm.h - Row-major GEMMs through cuBLASLt: fp32 and bf16 -*- C++ -*-===//
//
// The contract of cpu::gemm (runtime/cpu/gemm.h) on device pointers: row-major
// C[M,N] = alpha op(A) op(B) + beta C (+ bias[N] on every row). cuBLASLt is
// column-major, so the call computes C^T = op(B)^T op(A)^T, i.e. swaps the
// operands, and the bias (one value per column of the row-major C) is
// cuBLASLt's per-row epilogue bias of C^T.
//
// Two precisions, both with compute type CUBLAS_COMPUTE_32F:
//  * fp32 in / fp32 out with TF32 off: results agree with the CPU to fp32
//    round-off, which the GPU-vs-CPU loss comparison relies on;
//  * bf16 A/B with fp32 accumulation, bf16 or fp32 C (Megatron / llm.c's
//    mixed-precision GEMM; an fp32 C is what a weight gradient accumulated
//    into fp32 master gradients wants).
//
// Each distinct call shape (transposes, sizes, leading dimensions, types,
// bias or not, pointer alignments) gets a GemmPlan once: the cuBLASLt
// descriptors and the heuristic's best algorithm, cached for the lifetime of
// the Gemm. Training repeats the same few shapes every step, so after the
// first step a GEMM is one cublasLtMatmul call.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_GEMM_H
#define LOOM_RUNTIME_CUDA_GEMM_H

#include "runtime/core/status.h"

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <map>
#include <memory>
#include <tuple>

typedef struct cublasLtContext *cublasLtHandle_t;

namespace loom::cuda {

/// Element type of a GEMM operand in device memory.
enum class GemmType { F32, BF16 };

/// What the epilogue applies after the bias: cuBLASLt's GELU epilogues,
/// whose GELU is the tanh approximation (GPT-2's, the model's Gelu).
enum class GemmActivation {
  None,
  /// C = gelu(product + bias); `aux` receives product + bias (the
  /// pre-activation a GELU's gradient reads). CUBLASLT_EPILOGUE_GELU_AUX
  /// (_BIAS).
  Gelu,
  /// C = gelu(product + bias), the pre-activation not kept (no `aux`): an
  /// evaluation's MLP. CUBLASLT_EPILOGUE_GELU(_BIAS).
  GeluOnly,
  /// C = product * gelu'(aux), `aux` holding the pre-activation: the
  /// gradient through a GELU of a product's result, without the result
  /// itself. CUBLASLT_EPILOGUE_DGELU; no bias.
  GeluGrad,
};

/// One GEMM in cpu::gemm's row-major contract. A and B are `inputType`, C and
/// `bias` are `outputType`. bf16 inputs take an fp32 or bf16 output; fp32
/// inputs take only an fp32 output.
struct GemmArgs {
  bool transA = false, transB = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;
  const void *A = nullptr;
  int64_t lda = 0;
  const void *B = nullptr;
  int64_t ldb = 0;
  void *C = nullptr;
  int64_t ldc = 0;
  GemmType inputType = GemmType::F32;
  GemmType outputType = GemmType::F32;
  /// Optional [N] row added to every row of C in the epilogue (a linear
  /// layer's bias); must be 16-byte aligned (cuBLASLt's requirement).
  const void *bias = nullptr;
  /// The epilogue's activation, and its [M, N] row-major companion of C's
  /// type (leading dimension ldaux, a multiple of 8; 16-byte aligned):
  /// written by Gelu, read by GeluGrad; GeluOnly has none.
  GemmActivation activation = GemmActivation::None;
  void *aux = nullptr;
  int64_t ldaux = 0;
  /// Optional [N] output of C's type: the sums of op(B) over the k
  /// dimension, written in the epilogue. In a linear layer's weight
  /// gradient (dweight = input^T dout) op(B) is the output gradient, so
  /// this is the layer's bias gradient without a second pass over dout.
  /// cuBLASLt's CUBLASLT_EPILOGUE_BGRADA (its first operand is our B);
  /// only with alpha 1, beta 0, no bias and no activation, 16-byte aligned.
  void *biasGradient = nullptr;
};

class GemmPlan;

class Gemm {
public:
  /// Creates the cuBLASLt handle and a 32 MiB workspace on the current device
  /// (NVIDIA's recommendation for Hopper).
  static Status create(Gemm &out);
  Gemm();
  ~Gemm();
  Gemm(const Gemm &) = delete;
  Gemm &operator=(const Gemm &) = delete;

  /// Any supported GEMM (see GemmArgs), on `stream`. The first call of a
  /// shape runs the cuBLASLt heuristic; later calls reuse its choice.
  Status matmul(const GemmArgs &args, cudaStream_t stream);
  /// matmul for a GEMM the caller can also run another way (a GELU or
  /// bias-gradient epilogue): `ran` is false, and nothing is enqueued, when
  /// cuBLASLt offers no algorithm for it, refuses the one it offered when
  /// called (then for every later call of the shape too), or the arguments
  /// miss an epilogue's alignment rules; other failures are errors as in
  /// matmul.
  Status tryMatmul(const GemmArgs &args, cudaStream_t stream, bool &ran);
  /// Whether tryMatmul would run `args` (plans it; enqueues nothing).
  Status canRun(const GemmArgs &args, bool &ok);

  /// cpu::gemm's contract in fp32 (TF32 off), on `stream`.
  Status gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
              float alpha, const float *A, int64_t lda, const float *B,
              int64_t ldb, float beta, float *C, int64_t ldc,
              cudaStream_t stream);

  /// bf16 A/B, fp32 accumulation, bf16 C (bias: bf16 [N] or null).
  Status gemmBf16(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                  float alpha, const __nv_bfloat16 *A, int64_t lda,
                  const __nv_bfloat16 *B, int64_t ldb, float beta,
                  __nv_bfloat16 *C, int64_t ldc, const __nv_bfloat16 *bias,
                  cudaStream_t stream);
  /// bf16 A/B, fp32 accumulation, fp32 C (bias: fp32 [N] or null).
  Status gemmBf16(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                  float alpha, const __nv_bfloat16 *A, int64_t lda,
                  const __nv_bfloat16 *B, int64_t ldb, float beta, float *C,
                  int64_t ldc, const float *bias, cudaStream_t stream);

  /// Distinct shapes planned so far (tests check that repeats hit the cache).
  size_t planCount() const { return plans.size(); }
  /// Bytes of the cuBLASLt workspace.
  size_t workspaceSize() const { return workspaceBytes; }

private:
  /// Everything the cuBLASLt descriptors and the algorithm depend on.
  using PlanKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t,
                             int64_t, int64_t, int, int, bool, int, int, int,
                             int, int64_t, int, bool>;
  /// The cached plan of the call's shape; `plan` is null when cuBLASLt has
  /// no algorithm for it (remembered too).
  Status planFor(const GemmArgs &args, GemmPlan *&plan);
  Status checkArgs(const GemmArgs &args) const;
  /// The arguments checked and the call's plan looked up: `runnable` false
  /// when an epilogue rule or cuBLASLt refuses it; `plan` null then, and
  /// for an empty GEMM (M or N 0, runnable with nothing to do).
  Status prepare(const GemmArgs &args, GemmPlan *&plan, bool &runnable);

  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  size_t workspaceBytes = 0;
  std::map<PlanKey, std::unique_ptr<GemmPlan>> plans;
};

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_GEMM_H
