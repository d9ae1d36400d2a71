//===- cuda_kernels_bf16.cpp - CudaKernels on bf16 operands ---------------===//
//
// KernelBackend::runBF16Natively for the CUDA backend: every compute opcode
// a bf16 program uses (backend_support.h's cudaRunsBF16Natively) runs on the
// buffers as they are, without the executor's fp32 staging around it:
//  * Linear / LinearGrad / Matmul / MatmulGrad: cuBLASLt bf16 GEMMs with
//    fp32 accumulation (gemm.h), bf16 out (weight gradients straight into
//    the bf16 gradient buffers, rounded once); the bias in the epilogue when
//    it is 16-byte aligned, else added by a bf16 kernel;
//  * Attention / AttentionGrad: the bf16 flash kernels (tensor cores at head
//    size 64), log-sum-exp and row dots in fp32 workspace;
//  * everything else: kernels_bf16.h (bf16 load / store, fp32 math).
// An instruction whose operands mix dtypes in a way these fast paths do not
// take (an fp32 GEMM operand next to a bf16 one, a head size the flash
// kernels lack) widens the offending operands into fp32 workspace and runs
// the fp32 kernel, exactly what the executor's staging would do, so no
// compiled program is refused for its dtypes.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/backend_support.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/convert.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/flash_attention.h"
#include "runtime/cuda/kernels_bf16.h"

#include <algorithm>
#include <cuda_bf16.h>

namespace loom::cuda {

using program::DType;
using program::Opcode;

namespace {

FloatRef ref(const TypedOperand &t) { return {t.data, t.dtype == DType::BF16}; }
FloatRef none() { return {}; }
int64_t numel(const TypedOperand &t) { return program::shapeNumel(*t.shape); }
bool isBF16(const TypedOperand &t) { return t.dtype == DType::BF16; }
__nv_bfloat16 *bf16(const TypedOperand &t) {
  return static_cast<__nv_bfloat16 *>(t.data);
}

/// gemm.h's arguments for row-major C = op(A) op(B) with bf16 A and B and C
/// as stored (bf16 or fp32): every cuBLASLt call of this file starts here,
/// then adds its bias or epilogue.
GemmArgs bf16GemmArgs(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                      const TypedOperand &A, int64_t lda, const TypedOperand &B,
                      int64_t ldb, const TypedOperand &C, int64_t ldc) {
  GemmArgs g;
  g.transA = transA, g.transB = transB;
  g.M = M, g.N = N, g.K = K;
  g.A = A.data, g.lda = lda, g.B = B.data, g.ldb = ldb;
  g.C = C.data, g.ldc = ldc;
  g.inputType = GemmType::BF16;
  g.outputType = isBF16(C) ? GemmType::BF16 : GemmType::F32;
  return g;
}

/// The loss's share of the global token count (a CrossEntropy's or
/// CrossEntropyGrad's `value`: the tokens of the whole step).
float tokenScale(int64_t N, double tokens) {
  return tokens > 0 ? static_cast<float>(static_cast<double>(N) / tokens)
                    : 1.0f;
}

} // namespace

bool CudaKernels::handlesBF16Natively(Opcode op) const {
  return cudaRunsBF16Natively(op);
}

Status CudaKernels::bf16Workspace(size_t slot, uint64_t bytes, void *&ptr) {
  if (bf16Pools.size() <= slot)
    bf16Pools.resize(slot + 1);
  DevicePool &pool = bf16Pools[slot];
  bytes = std::max<uint64_t>(bytes, 256);
  if (bytes > pool.bytes) {
    if (pool.data) {
      // Kernels already enqueued may still use the old block.
      LOOM_CUDA_CHECK(cudaStreamSynchronize(computeStream));
      LOOM_CUDA_CHECK(cudaFree(pool.data));
      pool = DevicePool();
    }
    LOOM_CUDA_CHECK(cudaMalloc(&pool.data, bytes));
    pool.bytes = bytes;
  }
  ptr = pool.data;
  return Status::success();
}

Status CudaKernels::floatWorkspace(size_t slot, int64_t n, float *&out) {
  void *ws = nullptr;
  LOOM_RETURN_IF_ERROR(
      bf16Workspace(slot, static_cast<uint64_t>(n) * sizeof(float), ws));
  out = static_cast<float *>(ws);
  return Status::success();
}

Status CudaKernels::widened(size_t slot, const TypedOperand &t,
                            const float *&out) {
  if (!isBF16(t)) {
    out = static_cast<const float *>(t.data);
    return Status::success();
  }
  void *ws = nullptr;
  LOOM_RETURN_IF_ERROR(
      bf16Workspace(slot, static_cast<uint64_t>(numel(t)) * sizeof(float), ws));
  LOOM_RETURN_IF_ERROR(convertBF16ToF32(static_cast<float *>(ws),
                                        static_cast<const uint16_t *>(t.data),
                                        numel(t)));
  out = static_cast<const float *>(ws);
  return Status::success();
}

Status CudaKernels::gemmMixed(bool transA, bool transB, int64_t M, int64_t N,
                              int64_t K, const TypedOperand &A, int64_t lda,
                              const TypedOperand &B, int64_t ldb,
                              const TypedOperand &C, int64_t ldc,
                              const TypedOperand *bias) {
  if (isBF16(A) && isBF16(B) && (!bias || bias->dtype == C.dtype)) {
    // The fast path: bf16 in, fp32 accumulate, C as stored (bf16 or fp32).
    GemmArgs g = bf16GemmArgs(transA, transB, M, N, K, A, lda, B, ldb, C, ldc);
    const bool fused =
        bias && reinterpret_cast<uintptr_t>(bias->data) % 16 == 0;
    g.bias = fused ? bias->data : nullptr;
    LOOM_RETURN_IF_ERROR(gemmEngine.matmul(g, computeStream));
    if (bias && !fused)
      return mixedAdd(ref(C), ref(C), ref(*bias), M * N, N, computeStream);
    return Status::success();
  }
  // Mixed dtypes: the fp32 GEMM on widened copies (as the staging would).
  const float *a = nullptr, *b = nullptr;
  LOOM_RETURN_IF_ERROR(widened(kSlotWidenA, A, a));
  LOOM_RETURN_IF_ERROR(widened(kSlotWidenB, B, b));
  float *c = static_cast<float *>(C.data);
  if (isBF16(C)) {
    void *ws = nullptr;
    LOOM_RETURN_IF_ERROR(bf16Workspace(
        kSlotResult, static_cast<uint64_t>(M * ldc) * sizeof(float), ws));
    c = static_cast<float *>(ws);
  }
  LOOM_RETURN_IF_ERROR(gemmEngine.gemm(transA, transB, M, N, K, 1.0f, a, lda, b,
                                       ldb, 0.0f, c, ldc, computeStream));
  if (bias)
    LOOM_RETURN_IF_ERROR(mixedAdd({c, false}, {c, false}, ref(*bias), M * ldc,
                                  N, computeStream));
  if (isBF16(C))
    return convertF32ToBF16(static_cast<uint16_t *>(C.data), c, M * ldc);
  return Status::success();
}

Status CudaKernels::attentionBF16(const std::vector<TypedOperand> &in,
                                  const std::vector<TypedOperand> &out,
                                  bool grad, int64_t NH) {
  const TypedOperand &qkvOp = grad ? in[1] : in[0];
  const auto &q = *qkvOp.shape; // [B, T, 3C] or [B, T, 3, C]
  const int64_t B = q[0], T = q[1], C = q.size() == 4 ? q[3] : q[2] / 3;
  const uint64_t rows = static_cast<uint64_t>(B * NH * T);
  // The forward's f32 log-sum-exp output, or the gradient's saved forward
  // (output and log-sum-exp, inputs 2 and 3).
  float *lseOut =
      !grad && out.size() == 2 ? static_cast<float *>(out[1].data) : nullptr;
  const TypedOperand *savedOut = grad && in.size() == 4 ? &in[2] : nullptr;
  const float *savedLse =
      savedOut ? static_cast<const float *>(in[3].data) : nullptr;
  const bool allBF16 = isBF16(qkvOp) && isBF16(out[0]) &&
                       (!grad || isBF16(in[0])) &&
                       (!savedOut || isBF16(*savedOut));
  if (allBF16 && flashAttentionSupports(C, NH)) {
    void *stats = nullptr;
    LOOM_RETURN_IF_ERROR(
        bf16Workspace(kSlotStats, 2 * rows * sizeof(float), stats));
    float *lse32 = static_cast<float *>(stats), *rowDot = lse32 + rows;
    const FlashGeometry geometry{B, T, NH};
    const FlashTcShapes shapes = flashShapes.shapesFor(geometry);
    // Each launch of the tensor-core kernels (head size 64) below is
    // followed, the first time its geometry runs, by the timing of its
    // launch shapes (flash_shape_tuning.h): they rewrite the same bits.
    const bool tensorCores = C / NH == kFlashTensorCoreHeadSize;
    auto timeShapes = [&](FlashKernel kernel,
                          const FlashShapeTuner::Launch &launch) {
      return tensorCores && flashShapes.untimed(kernel, geometry)
                 ? flashShapes.time(kernel, geometry, computeStream, launch)
                 : Status::success();
    };
    auto forward = [&](__nv_bfloat16 *o, float *lse) -> Status {
      const __nv_bfloat16 *qkv = bf16(qkvOp);
      LOOM_RETURN_IF_ERROR(flashAttentionForward(o, lse, qkv, B, T, C, NH,
                                                 computeStream, shapes));
      return timeShapes(FlashKernel::Forward, [&](FlashTcOccupancy shape) {
        return flashAttentionForwardTensorCores(o, lse, qkv, B, T, C, NH,
                                                computeStream, shape);
      });
    };
    auto backward = [&](const __nv_bfloat16 *o, const float *lse) -> Status {
      __nv_bfloat16 *dqkv = bf16(out[0]);
      const __nv_bfloat16 *dout = bf16(in[0]), *qkv = bf16(qkvOp);
      LOOM_RETURN_IF_ERROR(flashAttentionBackward(
          dqkv, rowDot, dout, qkv, o, lse, B, T, C, NH, computeStream, shapes));
      // The row dots the backward computed stay in place for the timing.
      LOOM_RETURN_IF_ERROR(
          timeShapes(FlashKernel::Keys, [&](FlashTcOccupancy shape) {
            return flashBackwardKeysTensorCores(dqkv, rowDot, dout, qkv, lse, B,
                                                T, C, NH, computeStream, shape);
          }));
      return timeShapes(FlashKernel::Queries, [&](FlashTcOccupancy shape) {
        return flashBackwardQueriesTensorCores(dqkv, rowDot, dout, qkv, lse, B,
                                               T, C, NH, computeStream, shape);
      });
    };
    if (!grad)
      return forward(bf16(out[0]), lseOut ? lseOut : lse32);
    if (savedOut)
      return backward(bf16(*savedOut), savedLse);
    // Without the saved forward: recompute its output and log-sum-exp (bf16
    // output, as the forward stored it).
    void *o = nullptr;
    LOOM_RETURN_IF_ERROR(bf16Workspace(
        kSlotResult, static_cast<uint64_t>(B * T * C) * sizeof(__nv_bfloat16),
        o));
    auto *fwd = static_cast<__nv_bfloat16 *>(o);
    LOOM_RETURN_IF_ERROR(forward(fwd, lse32));
    return backward(fwd, lse32);
  }
  // A head size the flash kernels lack, or mixed dtypes: the fp32 kernels
  // on widened copies, the [B,NH,T,T] probabilities in workspace. This rare
  // path recomputes the forward rather than widen a saved one too.
  const float *qkv = nullptr, *dout = nullptr;
  LOOM_RETURN_IF_ERROR(widened(kSlotWidenA, qkvOp, qkv));
  if (grad)
    LOOM_RETURN_IF_ERROR(widened(kSlotWidenB, in[0], dout));
  void *att = nullptr, *res = nullptr;
  LOOM_RETURN_IF_ERROR(
      bf16Workspace(kSlotStats, rows * static_cast<uint64_t>(T) * 4, att));
  float *result = static_cast<float *>(out[0].data);
  if (isBF16(out[0])) {
    LOOM_RETURN_IF_ERROR(bf16Workspace(
        kSlotResult, static_cast<uint64_t>(numel(out[0])) * 4, res));
    result = static_cast<float *>(res);
  }
  if (grad)
    LOOM_RETURN_IF_ERROR(attentionGrad(result, dout, qkv, nullptr, nullptr,
                                       static_cast<float *>(att), B, T, C, NH));
  else
    LOOM_RETURN_IF_ERROR(attentionForward(
        result, lseOut, static_cast<float *>(att), qkv, B, T, C, NH));
  if (isBF16(out[0]))
    return convertF32ToBF16(static_cast<uint16_t *>(out[0].data), result,
                            numel(out[0]));
  return Status::success();
}

Status CudaKernels::columnSumWorkspace(int64_t outer, int64_t inner,
                                       double *&partials) {
  void *ws = nullptr;
  LOOM_RETURN_IF_ERROR(bf16Workspace(
      kSlotStats,
      static_cast<uint64_t>(rowChunks(outer) * inner) * sizeof(double), ws));
  partials = static_cast<double *>(ws);
  return Status::success();
}

Status CudaKernels::linearInputGrad(const std::vector<TypedOperand> &in,
                                    const TypedOperand &dinput) {
  const int64_t K = (*in[2].shape)[0], N = numel(in[2]) / K;
  const int64_t M = numel(in[1]) / K;
  // dinput[M,K] = dout[M,N] weight^T.
  return gemmMixed(false, true, M, K, N, in[0], N, in[2], N, dinput, K,
                   nullptr);
}

Status CudaKernels::linearWeightGrads(const std::vector<TypedOperand> &in,
                                      const std::vector<TypedOperand> &out) {
  const int64_t K = (*in[2].shape)[0], N = numel(in[2]) / K;
  const int64_t M = numel(in[1]) / K;
  // dweight[K,N] = input^T dout; dbias[N] = dout's column sums, in the
  // GEMM's epilogue where cuBLASLt can (dout is its B: the sums over k of
  // op(B)), saving a pass over dout's M x N.
  if (out.size() >= 3 && biasGradEpilogue && isBF16(in[0]) && isBF16(in[1]) &&
      out[2].dtype == out[1].dtype) {
    GemmArgs g =
        bf16GemmArgs(true, false, K, N, M, in[1], K, in[0], N, out[1], N);
    g.biasGradient = out[2].data;
    bool ran = false;
    LOOM_RETURN_IF_ERROR(gemmEngine.tryMatmul(g, computeStream, ran));
    biasGradShapes[{K, N, M}] = ran;
    if (ran)
      return Status::success();
  }
  LOOM_RETURN_IF_ERROR(
      gemmMixed(true, false, K, N, M, in[1], K, in[0], N, out[1], N, nullptr));
  if (out.size() < 3)
    return Status::success();
  double *partials = nullptr;
  LOOM_RETURN_IF_ERROR(columnSumWorkspace(M, N, partials));
  return mixedColumnSum(ref(out[2]), ref(in[0]), M, N, partials, computeStream);
}

//===----------------------------------------------------------------------===//
// GELU in the GEMM's epilogue (gelu_epilogues.h)
//===----------------------------------------------------------------------===//

Status CudaKernels::linearGelu(const std::vector<TypedOperand> &in,
                               const TypedOperand &pre, const TypedOperand &out,
                               bool keepPre, bool &ran) {
  ran = false;
  const TypedOperand *bias = in.size() == 3 ? &in[2] : nullptr;
  if (!geluEpilogue || !isBF16(in[0]) || !isBF16(in[1]) || !isBF16(pre) ||
      !isBF16(out) || (bias && !isBF16(*bias)) ||
      (bias && reinterpret_cast<uintptr_t>(bias->data) % 16 != 0))
    return Status::success();
  const int64_t K = (*in[1].shape)[0], N = numel(in[1]) / K;
  const int64_t M = numel(in[0]) / K;
  GemmArgs g = bf16GemmArgs(false, false, M, N, K, in[0], K, in[1], N, out, N);
  g.bias = bias ? bias->data : nullptr;
  if (keepPre) {
    g.activation = GemmActivation::Gelu;
    g.aux = pre.data, g.ldaux = N;
  } else {
    g.activation = GemmActivation::GeluOnly;
  }
  return gemmEngine.tryMatmul(g, computeStream, ran);
}

Status CudaKernels::linearGradGelu(const std::vector<TypedOperand> &in,
                                   const std::vector<TypedOperand> &out,
                                   const TypedOperand &pre,
                                   const TypedOperand &dpre, bool &ran) {
  ran = false;
  if (!geluEpilogue || !isBF16(in[0]) || !isBF16(in[2]) || !isBF16(pre) ||
      !isBF16(dpre))
    return Status::success();
  const int64_t K = (*in[2].shape)[0], N = numel(in[2]) / K;
  const int64_t M = numel(in[1]) / K;
  // dpre[M,K] = (dout[M,N] weight^T) * gelu'(pre), after the weight
  // gradients: dpre may overlap the LinearGrad's x (planGeluEpilogues).
  GemmArgs g = bf16GemmArgs(false, true, M, K, N, in[0], N, in[2], N, dpre, K);
  g.activation = GemmActivation::GeluGrad;
  g.aux = pre.data, g.ldaux = K;
  bool supported = false;
  LOOM_RETURN_IF_ERROR(gemmEngine.canRun(g, supported));
  if (!supported)
    return Status::success();
  LOOM_RETURN_IF_ERROR(linearWeightGrads(in, out));
  bool fused = false;
  LOOM_RETURN_IF_ERROR(gemmEngine.tryMatmul(g, computeStream, fused));
  if (!fused) {
    // cuBLASLt refused the DGELU algorithm when called (its heuristic had
    // offered it): the rest of the two instructions as they would run,
    // the LinearGrad's input gradient, then the GeluGrad of it.
    LOOM_RETURN_IF_ERROR(linearInputGrad(in, out[0]));
    LOOM_RETURN_IF_ERROR(mixedGeluBackward(ref(dpre), ref(pre), ref(out[0]),
                                           M * K, computeStream));
  }
  ran = true;
  return Status::success();
}

Status CudaKernels::layernormGradStatistics(
    const program::Instruction &grad, const std::vector<TypedOperand> &in,
    const std::vector<TypedOperand> &scr, bool onePass,
    LayernormRowStatistics &stats, float *&partials) {
  const int64_t C = in[1].shape->back(), N = numel(in[1]) / C;
  // The statistics are recomputed from the input (the forward's are not
  // kept), in fp32, and written to the scratch buffers as the opcode
  // promises: by the one-pass gradient kernel from the rows it reads
  // anyway, else by a statistics kernel first.
  stats = LayernormRowStatistics{};
  stats.eps = static_cast<float>(grad.epsilon());
  if (!scr.empty())
    stats.mean = ref(scr[0]), stats.rstd = ref(scr[1]);
  void *ws = nullptr;
  if (!onePass) {
    LOOM_RETURN_IF_ERROR(bf16Workspace(
        kSlotStats, static_cast<uint64_t>(2 * N) * sizeof(float), ws));
    float *fp32 = static_cast<float *>(ws);
    LOOM_RETURN_IF_ERROR(mixedLayernormForward(
        {}, stats.mean, stats.rstd, fp32, fp32 + N, ref(in[1]), ref(in[2]), {},
        N, C, stats.eps, computeStream));
    stats.mean32 = fp32, stats.rstd32 = fp32 + N;
  }
  LOOM_RETURN_IF_ERROR(bf16Workspace(
      kSlotResult, static_cast<uint64_t>(2 * rowChunks(N) * C) * sizeof(float),
      ws));
  partials = static_cast<float *>(ws);
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Residual Adds fused with layer norms (residual_norms.h)
//===----------------------------------------------------------------------===//

Status CudaKernels::addLayerNorm(const program::Instruction &norm,
                                 const TypedOperand &a, const TypedOperand &b,
                                 const TypedOperand &sum,
                                 const std::vector<TypedOperand> &normInputs,
                                 const TypedOperand &out, bool &ran) {
  ran = false;
  // The LayerNorm normalizes rows of its own input's last dimension (the
  // Add's sum, by bytes; its shape may differ).
  const int64_t C = normInputs[0].shape->back(), N = numel(normInputs[0]) / C;
  if (!residualNorm ||
      !residualLayernormFits(C, {ref(sum), ref(out), ref(a), ref(b),
                                 ref(normInputs[1]), ref(normInputs[2])}))
    return Status::success();
  LOOM_RETURN_IF_ERROR(residualAddLayernormForward(
      ref(sum), ref(out), ref(a), ref(b), ref(normInputs[1]),
      ref(normInputs[2]), N, C, static_cast<float>(norm.epsilon()),
      computeStream));
  ran = true;
  return Status::success();
}

Status CudaKernels::layerNormGradAdd(
    const program::Instruction &grad, const std::vector<TypedOperand> &in,
    const std::vector<TypedOperand> &out,
    const std::vector<TypedOperand> & /*scratch: not written, below*/,
    const TypedOperand &residual, const TypedOperand &sum, bool &ran) {
  ran = false;
  const int64_t C = in[1].shape->back(), N = numel(in[1]) / C;
  if (!residualNorm || N == 0 ||
      !residualLayernormFits(
          C, {ref(sum), ref(residual), ref(in[0]), ref(in[1]), ref(in[2])}))
    return Status::success();
  LayernormRowStatistics stats;
  float *partials = nullptr;
  // The LayerNormGrad's scratch is not written: nothing reads it, and the
  // buffer planner may have put it on bytes the Add writes after it (the
  // sum), which the fused kernel writes while it would store them.
  LOOM_RETURN_IF_ERROR(
      layernormGradStatistics(grad, in, {}, /*onePass=*/true, stats, partials));
  LOOM_RETURN_IF_ERROR(layernormBackwardAddResidual(
      ref(sum), ref(out[1]), ref(out[2]), ref(residual), ref(in[0]), ref(in[1]),
      ref(in[2]), stats, partials, N, C, computeStream));
  ran = true;
  return Status::success();
}

//===----------------------------------------------------------------------===//
// A loss and its gradient in one call (cross_entropy_fusion.h)
//===----------------------------------------------------------------------===//

Status CudaKernels::keepRowLosses(const std::vector<TypedOperand> &scratch,
                                  const float *losses, int64_t N) {
  // A scratch buffer for the row losses gets them, as on the fp32 path.
  if (scratch.empty())
    return Status::success();
  return isBF16(scratch[0])
             ? convertF32ToBF16(static_cast<uint16_t *>(scratch[0].data),
                                losses, N)
             : copy(scratch[0].data, losses, N * 4);
}

Status CudaKernels::crossEntropyWithGrad(
    const program::Instruction &loss, const program::Instruction &grad,
    const std::vector<TypedOperand> &in, const std::vector<TypedOperand> &out,
    const std::vector<TypedOperand> &scratch,
    const std::vector<TypedOperand> &gradIn, const TypedOperand &dlogits,
    const BF16InstructionContext &context, bool &ran) {
  ran = false;
  const int64_t V = in[0].shape->back(), N = numel(in[0]) / V;
  if (!fusedCrossEntropy || N == 0 ||
      !crossEntropyWithGradFits(V, {ref(in[0]), ref(dlogits)}))
    return Status::success();
  const int64_t validV = std::min<int64_t>(V, context.vocabSize);
  float *losses = nullptr;
  LOOM_RETURN_IF_ERROR(floatWorkspace(kSlotStats, N, losses));
  LOOM_RETURN_IF_ERROR(mixedCrossEntropyWithGrad(
      ref(out[0]), losses, ref(dlogits), ref(in[0]),
      static_cast<const int32_t *>(in[1].data), N, V, validV,
      tokenScale(N, loss.value()), ref(gradIn[0]), tokenScale(N, grad.value()),
      computeStream));
  LOOM_RETURN_IF_ERROR(keepRowLosses(scratch, losses, N));
  ran = true;
  return Status::success();
}

Status CudaKernels::runBF16Natively(const program::Instruction &ins,
                                    const std::vector<TypedOperand> &in,
                                    const std::vector<TypedOperand> &out,
                                    const std::vector<TypedOperand> &scr,
                                    const BF16InstructionContext &context) {
  const Opcode op = ins.opcode();
  const cudaStream_t s = computeStream;
  auto ids = [](const TypedOperand &t) {
    return static_cast<const int32_t *>(t.data);
  };
  switch (op) {
  case Opcode::Embedding: {
    const auto &t = *in[0].shape;
    return mixedEmbeddingForward(ref(out[0]), ids(in[1]), ref(in[0]),
                                 numel(in[1]), context.groupRank * t[0], t[0],
                                 t[1], s);
  }
  case Opcode::EmbeddingGrad: {
    const auto &t = *out[0].shape;
    const int64_t N = numel(in[1]);
    void *work = nullptr;
    LOOM_RETURN_IF_ERROR(bf16Workspace(
        kSlotStats,
        static_cast<uint64_t>(embeddingGradWorkspaceInts(N, t[0])) *
            sizeof(int32_t),
        work));
    return mixedEmbeddingBackward(ref(out[0]), ref(in[0]), ids(in[1]), N, t[0],
                                  t[1], static_cast<int32_t *>(work), s);
  }
  case Opcode::Add:
    return mixedAdd(ref(out[0]), ref(in[0]), ref(in[1]), numel(in[0]),
                    numel(in[1]), s);
  case Opcode::ReduceLeading: {
    const int64_t inner = numel(out[0]), outer = numel(in[0]) / inner;
    double *partials = nullptr;
    LOOM_RETURN_IF_ERROR(columnSumWorkspace(outer, inner, partials));
    return mixedColumnSum(ref(out[0]), ref(in[0]), outer, inner, partials, s);
  }
  case Opcode::Linear: {
    // The weight is [K, out...]: its output dimensions are one N.
    const int64_t K = (*in[1].shape)[0], N = numel(in[1]) / K;
    const int64_t M = numel(in[0]) / K;
    return gemmMixed(false, false, M, N, K, in[0], K, in[1], N, out[0], N,
                     in.size() == 3 ? &in[2] : nullptr);
  }
  case Opcode::LinearGrad:
    LOOM_RETURN_IF_ERROR(linearInputGrad(in, out[0]));
    return linearWeightGrads(in, out);
  case Opcode::Matmul: {
    const auto &r = *in[1].shape;
    const bool t = ins.transpose_rhs();
    const int64_t K = t ? r[1] : r[0], N = t ? r[0] : r[1];
    const int64_t M = numel(in[0]) / K;
    return gemmMixed(false, t, M, N, K, in[0], K, in[1], r[1], out[0], N,
                     nullptr);
  }
  case Opcode::MatmulGrad: {
    const auto &r = *in[2].shape;
    const bool t = ins.transpose_rhs();
    const int64_t K = t ? r[1] : r[0], N = t ? r[0] : r[1];
    const int64_t M = numel(in[1]) / K;
    LOOM_RETURN_IF_ERROR(gemmMixed(false, !t, M, K, N, in[0], N, in[2], r[1],
                                   out[0], K, nullptr));
    if (t)
      return gemmMixed(true, false, N, K, M, in[0], N, in[1], K, out[1], K,
                       nullptr);
    return gemmMixed(true, false, K, N, M, in[1], K, in[0], N, out[1], N,
                     nullptr);
  }
  case Opcode::LayerNorm: {
    const int64_t C = in[0].shape->back(), N = numel(in[0]) / C;
    return mixedLayernormForward(
        ref(out[0]), scr.empty() ? none() : ref(scr[0]),
        scr.empty() ? none() : ref(scr[1]), nullptr, nullptr, ref(in[0]),
        ref(in[1]), ref(in[2]), N, C, static_cast<float>(ins.epsilon()), s);
  }
  case Opcode::LayerNormGrad: {
    const int64_t C = in[1].shape->back(), N = numel(in[1]) / C;
    const bool onePass = layernormBackwardOnePass(N, C, ref(out[0]), ref(in[0]),
                                                  ref(in[1]), ref(in[2]));
    LayernormRowStatistics stats;
    float *partials = nullptr;
    LOOM_RETURN_IF_ERROR(
        layernormGradStatistics(ins, in, scr, onePass, stats, partials));
    return mixedLayernormBackward(ref(out[0]), ref(out[1]), ref(out[2]),
                                  ref(in[0]), ref(in[1]), ref(in[2]), stats,
                                  partials, N, C, s);
  }
  case Opcode::Gelu:
    return mixedGeluForward(ref(out[0]), ref(in[0]), numel(in[0]), s);
  case Opcode::GeluGrad:
    return mixedGeluBackward(ref(out[0]), ref(in[1]), ref(in[0]), numel(in[1]),
                             s);
  case Opcode::Softmax: {
    const int64_t C = in[0].shape->back();
    return mixedSoftmaxForward(ref(out[0]), ref(in[0]), numel(in[0]) / C, C, s);
  }
  case Opcode::SoftmaxGrad: {
    const int64_t C = in[1].shape->back();
    return mixedSoftmaxBackward(ref(out[0]), ref(in[0]), ref(in[1]),
                                numel(in[1]) / C, C, s);
  }
  case Opcode::Attention:
    return attentionBF16(in, out, /*grad=*/false, ins.num_heads());
  case Opcode::AttentionGrad:
    return attentionBF16(in, out, /*grad=*/true, ins.num_heads());
  case Opcode::CrossEntropy: {
    const int64_t V = in[0].shape->back(), N = numel(in[0]) / V;
    const int64_t validV = std::min<int64_t>(V, context.vocabSize);
    float *losses = nullptr;
    LOOM_RETURN_IF_ERROR(floatWorkspace(kSlotStats, N, losses));
    LOOM_RETURN_IF_ERROR(
        mixedCrossEntropyForward(ref(out[0]), losses, ref(in[0]), ids(in[1]), N,
                                 V, validV, tokenScale(N, ins.value()), s));
    return keepRowLosses(scr, losses, N);
  }
  case Opcode::CrossEntropyGrad: {
    const int64_t V = in[1].shape->back(), N = numel(in[1]) / V;
    const int64_t validV = std::min<int64_t>(V, context.vocabSize);
    return mixedCrossEntropyBackward(ref(out[0]), ref(in[1]), ids(in[2]), N, V,
                                     validV, ref(in[0]),
                                     tokenScale(N, ins.value()), s);
  }
  case Opcode::RowMax:
  case Opcode::CrossEntropySums:
  case Opcode::CrossEntropySumsGrad: {
    const TypedOperand &logits =
        op == Opcode::CrossEntropySumsGrad ? in[1] : in[0];
    const int64_t V = logits.shape->back(), N = numel(logits) / V;
    const int64_t offset = context.groupRank * V;
    const int64_t validV =
        std::min<int64_t>(V * context.groupSize, context.vocabSize);
    if (op == Opcode::RowMax)
      return mixedCrossEntropyRowMax(ref(out[0]), ref(in[0]), N, V, offset,
                                     validV, s);
    if (op == Opcode::CrossEntropySums)
      return mixedCrossEntropySums(ref(out[0]), ref(out[1]), ref(in[0]),
                                   ref(in[1]), ids(in[2]), N, V, offset, validV,
                                   s);
    const double tokens = ins.value() > 0 ? ins.value() : double(N);
    return mixedCrossEntropySumsBackward(ref(out[0]), ref(in[1]), ref(in[2]),
                                         ref(in[3]), ids(in[4]), N, V, offset,
                                         validV, ref(in[0]), tokens, s);
  }
  case Opcode::CrossEntropyFromSums: {
    const int64_t N = numel(in[0]);
    const double tokens = ins.value() > 0 ? ins.value() : double(N);
    return mixedCrossEntropyFromSums(ref(out[0]), ref(in[0]), ref(in[1]),
                                     ref(in[2]), N, tokens, s);
  }
  case Opcode::Fill:
    return mixedFill(ref(out[0]), static_cast<float>(ins.value()),
                     numel(out[0]), s);
  case Opcode::SumSquares: {
    std::vector<MixedSpan> spans;
    for (const TypedOperand &t : in)
      spans.push_back({ref(t), numel(t)});
    void *partials = nullptr;
    LOOM_RETURN_IF_ERROR(bf16Workspace(kSlotStats,
                                       static_cast<uint64_t>(kMixedSumBlocks) *
                                           std::max<size_t>(1, in.size()) *
                                           sizeof(double),
                                       partials));
    return mixedSumSquares(ref(out[0]), spans, static_cast<double *>(partials),
                           s);
  }
  case Opcode::ClipCoef:
    return mixedClipCoef(ref(out[0]), ref(out[1]), ref(in[0]), ins.max_norm(),
                         s);
  case Opcode::AdamW: {
    // In place on (param, m, v): an output that is not its input buffer
    // (ZeRO's fresh parameter shard) starts as a copy of it.
    const size_t state[3] = {0, 2, 3};
    for (size_t j = 0; j < 3; ++j)
      if (out[j].data != in[state[j]].data)
        LOOM_RETURN_IF_ERROR(copy(out[j].data, in[state[j]].data,
                                  numel(in[state[j]]) *
                                      program::dtypeBytes(in[state[j]].dtype)));
    AdamWHyper h;
    h.beta1 = ins.beta1();
    h.beta2 = ins.beta2();
    h.eps = ins.adam_eps();
    h.weightDecay = ins.weight_decay();
    return mixedAdamW(ref(out[0]), ref(in[1]), ref(out[1]), ref(out[2]),
                      numel(in[0]), ref(in[4]), ref(in[5]), ref(in[6]), h, s);
  }
  default:
    break;
  }
  LOOM_ERROR("the CUDA backend has no bf16 kernel for "
             << program::opcodeName(op)
             << " (cudaRunsBF16Natively and runBF16Natively disagree)");
}

} // namespace loom::cuda
