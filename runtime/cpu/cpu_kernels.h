//===- cpu_kernels.h - The fp32 CPU kernels ---------------------*- C++ -*-===//
//
// KernelBackend (runtime/core/kernel_backend.h) on host memory: each method
// forwards to the CPU kernel the executor has always called (OpenBLAS GEMMs,
// the fused C++ kernels of runtime/cpu/), with the same arguments in the same
// order, so CPU results are bitwise what they were before the seam existed.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CPU_CPU_KERNELS_H
#define LOOM_RUNTIME_CPU_CPU_KERNELS_H

#include "runtime/core/kernel_backend.h"

namespace loom::cpu {

/// The CPU kernel backend. Stateless: buffer pointers are host pointers. Not
/// final: tests derive from it to switch its native bf16 SumSquares off.
class CpuKernels : public KernelBackend {
public:
  Status embeddingForward(float *out, const int32_t *ids, const float *table,
                          int64_t N, int64_t V, int64_t C) override;
  Status embeddingForwardRows(float *out, const int32_t *ids, const float *rows,
                              int64_t N, int64_t V, int64_t rowOffset,
                              int64_t rowCount, int64_t C) override;
  Status embeddingBackward(float *dtable, const float *dout, const int32_t *ids,
                           int64_t N, int64_t V, int64_t C) override;
  Status add(float *out, const float *a, const float *b, int64_t n) override;
  Status addBroadcast(float *out, const float *a, const float *b, int64_t outer,
                      int64_t inner) override;
  Status reduceLeading(float *db, const float *dout, int64_t outer,
                       int64_t inner) override;
  Status linearForward(float *out, const float *inp, const float *weight,
                       const float *bias, int64_t M, int64_t K,
                       int64_t N) override;
  Status gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
              float alpha, const float *A, int64_t lda, const float *B,
              int64_t ldb, float beta, float *C, int64_t ldc) override;
  Status columnSum(float *dbias, const float *dout, int64_t M,
                   int64_t N) override;
  Status layernormForward(float *out, float *mean, float *rstd,
                          const float *inp, const float *weight,
                          const float *bias, int64_t N, int64_t C,
                          float eps) override;
  Status layernormGrad(float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight,
                       float *mean, float *rstd, int64_t N, int64_t C,
                       float eps) override;
  Status geluForward(float *out, const float *inp, int64_t n) override;
  Status geluBackward(float *dinp, const float *inp, const float *dout,
                      int64_t n) override;
  Status softmaxForward(float *out, const float *inp, int64_t N,
                        int64_t C) override;
  Status softmaxBackward(float *dinp, const float *dout, const float *out,
                         int64_t N, int64_t C) override;
  /// None: the probabilities exist one head (or row block) at a time in a
  /// thread's own buffer (cpu/attention.h).
  int64_t attentionScratchFloats(int64_t B, int64_t T, int64_t C, int64_t NH,
                                 bool grad, bool saved) const override;
  Status attentionForward(float *out, float *lse, float *att, const float *qkv,
                          int64_t B, int64_t T, int64_t C, int64_t NH) override;
  /// Recomputes each head's probabilities whether or not `out` and `lse`
  /// are given: the CPU backward is one sgemm-based code path, bitwise the
  /// same with and without the saved forward.
  Status attentionGrad(float *dqkv, const float *dout, const float *qkv,
                       const float *out, const float *lse, float *att,
                       int64_t B, int64_t T, int64_t C, int64_t NH) override;
  Status crossEntropyForward(float *loss, float *losses, const float *logits,
                             const int32_t *targets, int64_t N, int64_t V,
                             int64_t validV, double tokens) override;
  Status crossEntropyBackward(float *dlogits, const float *dloss,
                              const float *logits, const int32_t *targets,
                              int64_t N, int64_t V, int64_t validV,
                              double tokens) override;
  Status crossEntropyRowMax(float *rowMax, const float *logits, int64_t N,
                            int64_t V, int64_t offset, int64_t validV) override;
  Status crossEntropySums(float *sumExp, float *targetLogit,
                          const float *logits, const float *rowMax,
                          const int32_t *targets, int64_t N, int64_t V,
                          int64_t offset, int64_t validV) override;
  Status crossEntropyFromSums(float *loss, const float *rowMax,
                              const float *sumExp, const float *targetLogit,
                              int64_t N, double tokens) override;
  Status crossEntropySumsBackward(float *dlogits, const float *dloss,
                                  const float *logits, const float *rowMax,
                                  const float *sumExp, const int32_t *targets,
                                  int64_t N, int64_t V, int64_t offset,
                                  int64_t validV, double tokens) override;
  Status copy(void *dst, const void *src, int64_t bytes) override;
  Status fillF32(float *dst, int64_t n, float value) override;
  Status fillI32(int32_t *dst, int64_t n, int32_t value) override;
  Status transpose(void *out, const void *in,
                   const std::vector<int64_t> &inShape,
                   const std::vector<int64_t> &perm,
                   int64_t elemBytes) override;
  Status sliceDim(void *out, const void *in,
                  const std::vector<int64_t> &inShape, int64_t dim,
                  int64_t offset, int64_t outExtent,
                  int64_t elemBytes) override;
  Status sliceDimGrad(void *out, const void *in,
                      const std::vector<int64_t> &outShape, int64_t dim,
                      int64_t offset, int64_t inExtent,
                      int64_t elemBytes) override;
  Status concatDim(void *out, const std::vector<const void *> &inputs,
                   const std::vector<int64_t> &extents,
                   const std::vector<int64_t> &outShape, int64_t dim,
                   int64_t elemBytes) override;
  Status copy2D(void *dst, int64_t dstPitch, const void *src,
                int64_t srcPitch, int64_t rowBytes, int64_t rows) override;
  Status packBlocks(void *dst, const void *src,
                    const std::vector<int64_t> &shape, int64_t dim, int64_t n,
                    int64_t elemBytes) override;
  Status unpackBlocks(void *dst, const void *src,
                      const std::vector<int64_t> &blockShape, int64_t dim,
                      int64_t n, int64_t elemBytes) override;
  Status sumSquares(float *out,
                    const std::vector<BufferSpan> &tensors) override;
  Status clipCoef(float *norm, float *coef, const float *sumSq,
                  double maxNorm) override;
  Status adamw(float *params, const float *grads, float *m, float *v, int64_t n,
               const float *lr, const float *step, const float *gradScale,
               const AdamWHyperParams &hyper) override;
  Status convertF32ToBF16(uint16_t *out, const float *in, int64_t n) override;
  Status convertBF16ToF32(float *out, const uint16_t *in, int64_t n) override;
  /// SumSquares reads BF16 gradients itself (cpu::sumSquaresBF16): the
  /// result equals the fp32 kernel on widened copies, without staging every
  /// gradient of the model at once.
  bool handlesBF16Natively(program::Opcode op) const override;
  Status runBF16Natively(const program::Instruction &ins,
                         const std::vector<TypedOperand> &inputs,
                         const std::vector<TypedOperand> &outputs,
                         const std::vector<TypedOperand> &scratch,
                         const BF16InstructionContext &context) override;
};

} // namespace loom::cpu

#endif // LOOM_RUNTIME_CPU_CPU_KERNELS_H
