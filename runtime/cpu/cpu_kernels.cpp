//===- cpu_kernels.cpp - The fp32 CPU kernels behind KernelBackend --------===//
//
// Each method is the code the executor's instruction switch ran before the
// seam, moved here unchanged (same kernels, same scalar arithmetic), so the
// CPU backend stays bitwise identical.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/cpu_kernels.h"

#include "runtime/core/bfloat16.h"
#include "runtime/core/communicator.h" // packBlocks / unpackBlocks
#include "runtime/cpu/adamw.h"
#include "runtime/cpu/attention.h"
#include "runtime/cpu/cross_entropy.h"
#include "runtime/cpu/elementwise.h"
#include "runtime/cpu/embedding.h"
#include "runtime/cpu/gelu.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/layernorm.h"
#include "runtime/cpu/softmax.h"
#include "runtime/cpu/tensor_movement.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace loom::cpu {

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

Status CpuKernels::embeddingForward(float *out, const int32_t *ids,
                                    const float *table, int64_t N, int64_t V,
                                    int64_t C) {
  return cpu::embeddingForward(out, ids, table, N, V, C);
}

Status CpuKernels::embeddingForwardRows(float *out, const int32_t *ids,
                                        const float *rows, int64_t N, int64_t V,
                                        int64_t rowOffset, int64_t rowCount,
                                        int64_t C) {
  return cpu::embeddingForwardRows(out, ids, rows, N, V, rowOffset, rowCount,
                                   C);
}

Status CpuKernels::embeddingBackward(float *dtable, const float *dout,
                                     const int32_t *ids, int64_t N, int64_t V,
                                     int64_t C) {
  std::memset(dtable, 0, static_cast<size_t>(V * C) * sizeof(float));
  return cpu::embeddingBackward(dtable, dout, ids, N, V, C);
}

//===----------------------------------------------------------------------===//
// Element-wise, GEMMs, normalization, attention
//===----------------------------------------------------------------------===//

Status CpuKernels::add(float *out, const float *a, const float *b, int64_t n) {
  cpu::add(out, a, b, n);
  return Status::success();
}

Status CpuKernels::addBroadcast(float *out, const float *a, const float *b,
                                int64_t outer, int64_t inner) {
  cpu::addBroadcast(out, a, b, outer, inner);
  return Status::success();
}

Status CpuKernels::reduceLeading(float *db, const float *dout, int64_t outer,
                                 int64_t inner) {
  cpu::addBroadcastBackward(db, dout, outer, inner, /*accumulateInto=*/false);
  return Status::success();
}

Status CpuKernels::linearForward(float *out, const float *inp,
                                 const float *weight, const float *bias,
                                 int64_t M, int64_t K, int64_t N) {
  cpu::linearForward(out, inp, weight, bias, M, K, N);
  return Status::success();
}

Status CpuKernels::gemm(bool transA, bool transB, int64_t M, int64_t N,
                        int64_t K, float alpha, const float *A, int64_t lda,
                        const float *B, int64_t ldb, float beta, float *C,
                        int64_t ldc) {
  cpu::gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  return Status::success();
}

Status CpuKernels::columnSum(float *dbias, const float *dout, int64_t M,
                             int64_t N) {
  std::memset(dbias, 0, static_cast<size_t>(N) * sizeof(float));
  cpu::columnSumAccumulate(dbias, dout, M, N);
  return Status::success();
}

Status CpuKernels::layernormForward(float *out, float *mean, float *rstd,
                                    const float *inp, const float *weight,
                                    const float *bias, int64_t N, int64_t C,
                                    float eps) {
  cpu::layernormForward(out, mean, rstd, inp, weight, bias, N, C, eps);
  return Status::success();
}

Status CpuKernels::layernormGrad(float *dinp, float *dweight, float *dbias,
                                 const float *dout, const float *inp,
                                 const float *weight, float *mean, float *rstd,
                                 int64_t N, int64_t C, float eps) {
  cpu::layernormStats(mean, rstd, inp, N, C, eps);
  std::memset(dweight, 0, static_cast<size_t>(C) * sizeof(float));
  std::memset(dbias, 0, static_cast<size_t>(C) * sizeof(float));
  cpu::layernormBackward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N,
                         C);
  return Status::success();
}

Status CpuKernels::geluForward(float *out, const float *inp, int64_t n) {
  cpu::geluForward(out, inp, n);
  return Status::success();
}

Status CpuKernels::geluBackward(float *dinp, const float *inp,
                                const float *dout, int64_t n) {
  cpu::geluBackward(dinp, inp, dout, n);
  return Status::success();
}

Status CpuKernels::softmaxForward(float *out, const float *inp, int64_t N,
                                  int64_t C) {
  cpu::softmaxForward(out, inp, N, C);
  return Status::success();
}

Status CpuKernels::softmaxBackward(float *dinp, const float *dout,
                                   const float *out, int64_t N, int64_t C) {
  cpu::softmaxBackward(dinp, dout, out, N, C);
  return Status::success();
}

int64_t CpuKernels::attentionScratchFloats(int64_t, int64_t, int64_t, int64_t,
                                           bool, bool) const {
  return 0;
}

Status CpuKernels::attentionForward(float *out, float *lse, float *,
                                    const float *qkv, int64_t B, int64_t T,
                                    int64_t C, int64_t NH) {
  cpu::attentionForward(out, nullptr, qkv, B, T, C, NH, lse);
  return Status::success();
}

Status CpuKernels::attentionGrad(float *dqkv, const float *dout,
                                 const float *qkv, const float *, const float *,
                                 float *, int64_t B, int64_t T, int64_t C,
                                 int64_t NH) {
  cpu::attentionGrad(dqkv, dout, qkv, B, T, C, NH);
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Cross entropy
//===----------------------------------------------------------------------===//

Status CpuKernels::crossEntropyForward(float *loss, float *losses,
                                       const float *logits,
                                       const int32_t *targets, int64_t N,
                                       int64_t V, int64_t validV,
                                       double tokens) {
  LOOM_RETURN_IF_ERROR(
      cpu::crossEntropyForward(loss, losses, logits, targets, N, V, validV));
  // Tokens split across ranks: this rank's result is its share of the
  // global mean.
  if (tokens > 0)
    *loss = static_cast<float>(*loss * (static_cast<double>(N) / tokens));
  return Status::success();
}

Status CpuKernels::crossEntropyBackward(float *dlogits, const float *dloss,
                                        const float *logits,
                                        const int32_t *targets, int64_t N,
                                        int64_t V, int64_t validV,
                                        double tokens) {
  // The kernel divides by this rank's N; a global token count rescales the
  // seed so the gradient is that of the global mean.
  float seed = *dloss;
  if (tokens > 0)
    seed = static_cast<float>(seed * (static_cast<double>(N) / tokens));
  return cpu::crossEntropyBackward(dlogits, logits, targets, N, V, validV,
                                   seed);
}

Status CpuKernels::crossEntropyRowMax(float *rowMax, const float *logits,
                                      int64_t N, int64_t V, int64_t offset,
                                      int64_t validV) {
  cpu::crossEntropyRowMax(rowMax, logits, N, V, offset, validV);
  return Status::success();
}

Status CpuKernels::crossEntropySums(float *sumExp, float *targetLogit,
                                    const float *logits, const float *rowMax,
                                    const int32_t *targets, int64_t N,
                                    int64_t V, int64_t offset, int64_t validV) {
  return cpu::crossEntropySums(sumExp, targetLogit, logits, rowMax, targets, N,
                               V, offset, validV);
}

Status CpuKernels::crossEntropyFromSums(float *loss, const float *rowMax,
                                        const float *sumExp,
                                        const float *targetLogit, int64_t N,
                                        double tokens) {
  *loss = cpu::crossEntropyFromSums(rowMax, sumExp, targetLogit, N, tokens);
  return Status::success();
}

Status CpuKernels::crossEntropySumsBackward(
    float *dlogits, const float *dloss, const float *logits,
    const float *rowMax, const float *sumExp, const int32_t *targets, int64_t N,
    int64_t V, int64_t offset, int64_t validV, double tokens) {
  const float g = static_cast<float>(*dloss / tokens);
  return cpu::crossEntropySumsBackward(dlogits, logits, rowMax, sumExp, targets,
                                       N, V, offset, validV, g);
}

//===----------------------------------------------------------------------===//
// Tensor movement
//===----------------------------------------------------------------------===//

Status CpuKernels::copy(void *dst, const void *src, int64_t bytes) {
  std::memmove(dst, src, static_cast<size_t>(bytes));
  return Status::success();
}

Status CpuKernels::fillF32(float *dst, int64_t n, float value) {
  std::fill(dst, dst + n, value);
  return Status::success();
}

Status CpuKernels::fillI32(int32_t *dst, int64_t n, int32_t value) {
  std::fill(dst, dst + n, value);
  return Status::success();
}

Status CpuKernels::transpose(void *out, const void *in,
                             const std::vector<int64_t> &inShape,
                             const std::vector<int64_t> &perm,
                             int64_t elemBytes) {
  cpu::transpose(out, in, inShape, perm, elemBytes);
  return Status::success();
}

Status CpuKernels::sliceDim(void *out, const void *in,
                            const std::vector<int64_t> &inShape, int64_t dim,
                            int64_t offset, int64_t outExtent,
                            int64_t elemBytes) {
  cpu::sliceDim(out, in, inShape, dim, offset, outExtent, elemBytes);
  return Status::success();
}

Status CpuKernels::sliceDimGrad(void *out, const void *in,
                                const std::vector<int64_t> &outShape,
                                int64_t dim, int64_t offset, int64_t inExtent,
                                int64_t elemBytes) {
  cpu::sliceDimGrad(out, in, outShape, dim, offset, inExtent, elemBytes);
  return Status::success();
}

Status CpuKernels::concatDim(void *out, const std::vector<const void *> &inputs,
                             const std::vector<int64_t> &extents,
                             const std::vector<int64_t> &outShape, int64_t dim,
                             int64_t elemBytes) {
  cpu::concatDim(out, inputs, extents, outShape, dim, elemBytes);
  return Status::success();
}

Status CpuKernels::copy2D(void *dst, int64_t dstPitch, const void *src,
                          int64_t srcPitch, int64_t rowBytes, int64_t rows) {
  cpu::copy2D(dst, dstPitch, src, srcPitch, rowBytes, rows);
  return Status::success();
}

Status CpuKernels::packBlocks(void *dst, const void *src,
                              const std::vector<int64_t> &shape, int64_t dim,
                              int64_t n, int64_t elemBytes) {
  loom::packBlocks(dst, src, shape, dim, n, elemBytes);
  return Status::success();
}

Status CpuKernels::unpackBlocks(void *dst, const void *src,
                                const std::vector<int64_t> &blockShape,
                                int64_t dim, int64_t n, int64_t elemBytes) {
  loom::unpackBlocks(dst, src, blockShape, dim, n, elemBytes);
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

Status CpuKernels::sumSquares(float *out,
                              const std::vector<BufferSpan> &tensors) {
  std::vector<FloatSpan> spans;
  spans.reserve(tensors.size());
  for (const BufferSpan &t : tensors)
    spans.push_back({t.data, t.size});
  *out = cpu::sumSquares(spans);
  return Status::success();
}

Status CpuKernels::clipCoef(float *norm, float *coef, const float *sumSq,
                            double maxNorm) {
  const ClipCoefficient clip = cpu::clipCoefficient(*sumSq, maxNorm);
  *norm = clip.norm;
  *coef = clip.coef;
  return Status::success();
}

Status CpuKernels::adamw(float *params, const float *grads, float *m, float *v,
                         int64_t n, const float *lr, const float *step,
                         const float *gradScale,
                         const AdamWHyperParams &hyper) {
  const float t = *step;
  LOOM_CHECK(t >= 1.0f && t == std::floor(t),
             "the step scalar holds " << t
                                      << "; AdamW needs the 1-based step "
                                         "number the runtime writes");
  AdamWConfig cfg;
  cfg.lr = *lr;
  cfg.step = static_cast<int64_t>(t);
  cfg.gradScale = *gradScale;
  cfg.beta1 = hyper.beta1;
  cfg.beta2 = hyper.beta2;
  cfg.eps = hyper.eps;
  cfg.weightDecay = hyper.weightDecay;
  cpu::adamwStep(params, grads, m, v, n, cfg);
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Mixed precision
//===----------------------------------------------------------------------===//

Status CpuKernels::convertF32ToBF16(uint16_t *out, const float *in, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    out[i] = floatToBF16(in[i]);
  return Status::success();
}

Status CpuKernels::convertBF16ToF32(float *out, const uint16_t *in, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i)
    out[i] = bf16ToFloat(in[i]);
  return Status::success();
}

bool CpuKernels::handlesBF16Natively(program::Opcode op) const {
  return op == program::Opcode::SumSquares;
}

Status CpuKernels::runBF16Natively(const program::Instruction &ins,
                                   const std::vector<TypedOperand> &inputs,
                                   const std::vector<TypedOperand> &outputs,
                                   const std::vector<TypedOperand> &,
                                   const BF16InstructionContext &) {
  LOOM_CHECK(ins.opcode() == program::Opcode::SumSquares &&
                 outputs.size() == 1 && outputs[0].dtype == program::DType::F32,
             "the CPU backend runs only SumSquares on bf16 itself, not "
                 << program::opcodeName(ins.opcode()));
  // As cpu::sumSquares(spans): each tensor's double sum, added in order,
  // rounded once.
  double total = 0.0;
  for (const TypedOperand &t : inputs) {
    const int64_t n = program::shapeNumel(*t.shape);
    total += t.dtype == program::DType::BF16
                 ? cpu::sumSquaresBF16(static_cast<const uint16_t *>(t.data), n)
                 : cpu::sumSquares(static_cast<const float *>(t.data), n);
  }
  *static_cast<float *>(outputs[0].data) = static_cast<float>(total);
  return Status::success();
}

} // namespace loom::cpu
