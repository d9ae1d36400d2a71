//===- cuda_kernels.h - KernelBackend on the device arena -------*- C++ -*-===//
//
// The CUDA implementation of KernelBackend (runtime/core/kernel_backend.h):
// every buffer pointer is a device pointer (into the rank's DeviceArena or a
// device workspace), every call is enqueued on one compute stream and
// returns without waiting. GEMMs go to cuBLASLt (gemm.h, fp32 with TF32 off,
// so results are comparable with the CPU's), attention to the tiled
// flash_attention.cu (or attention.cu, see AttentionKernel), the rest to
// kernels.cu, vocab_parallel.cu, transpose.cu and tensor_movement.cpp.
//
// Differences from cpu::CpuKernels a caller must know:
//  * token ids / targets are not validated on the device (the executor
//    checks them on the host before copying them in);
//  * AdamW does not check the step scalar (the executor writes it);
//  * results agree with the CPU to fp32 round-off, not bitwise (different
//    summation orders).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_CUDA_KERNELS_H
#define LOOM_RUNTIME_CUDA_CUDA_KERNELS_H

#include "runtime/core/kernel_backend.h"
#include "runtime/cuda/flash_attention_mma.h"
#include "runtime/cuda/flash_shape_tuning.h"
#include "runtime/cuda/gemm.h"

#include <cuda_runtime_api.h>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

namespace loom::cuda {

struct LayernormRowStatistics; // kernels_bf16.h

/// Which causal-attention implementation the Attention / AttentionGrad
/// opcodes run.
enum class AttentionKernel {
  /// flash_attention.cu: tiled, online softmax, no [B,NH,T,T] traffic; the
  /// gradient recomputes the forward's output and log-sum-exp into the
  /// opcode's scratch. Head sizes above kFlashMaxHeadSize use Naive.
  Flash,
  /// attention.cu: probabilities materialized in the [B,NH,T,T] scratch.
  Naive,
};

/// Parses the value of LOOM_CUDA_ATTENTION: "flash", "naive", or null /
/// empty for the default (flash); anything else is an error that names the
/// variable and the accepted values.
Status parseAttentionKernel(const char *value, AttentionKernel &out);

/// Parses the value of LOOM_CUDA_GROUP_ADAMW: "1" or null / empty (the
/// default: an update's AdamW instructions run grouped, adamw_group.h) or
/// "0" (one launch per instruction, to compare); anything else is an error.
Status parseGroupAdamW(const char *value, bool &out);

/// Parses the value of LOOM_CUDA_GELU_EPILOGUE: "1" or null / empty (the
/// default: a bf16 Linear and its Gelu, and a LinearGrad and its GeluGrad,
/// run as one GEMM with the GELU in its epilogue, gelu_epilogues.h) or "0"
/// (the instructions one by one, to compare); anything else is an error.
Status parseGeluEpilogue(const char *value, bool &out);

/// Parses the value of LOOM_CUDA_BIAS_GRAD_EPILOGUE: "1" or null / empty
/// (the default: a bf16 LinearGrad's bias gradient is summed in the
/// epilogue of its weight gradient's GEMM, cuBLASLt's BGRADA, where
/// cuBLASLt has a kernel for it) or "0" (a column-sum kernel after the
/// GEMM, to compare); anything else is an error.
Status parseBiasGradEpilogue(const char *value, bool &out);

/// Parses the value of LOOM_CUDA_RESIDUAL_NORM: "1" or null / empty (the
/// default: a bf16 residual Add and the LayerNorm after it, and a
/// LayerNormGrad and the Add of its input gradient, run as one kernel,
/// residual_norms.h) or "0" (the instructions one by one, to compare);
/// anything else is an error.
Status parseResidualNorm(const char *value, bool &out);

/// Parses the value of LOOM_CUDA_FUSED_CROSS_ENTROPY: "1" or null / empty
/// (the default: a bf16 CrossEntropy and its CrossEntropyGrad run as one
/// kernel, cross_entropy_fusion.h) or "0" (the instructions one by one, to
/// compare); anything else is an error.
Status parseFusedCrossEntropy(const char *value, bool &out);

/// Parses the value of LOOM_CUDA_FLASH_SHAPE, the launch shapes of the
/// bf16 tensor-core attention kernels (flash_attention_mma.h): "auto" or
/// null / empty (nullopt, the default: each kernel's fastest shape, timed
/// on the device, flash_shape_tuning.h), or one shape for every kernel:
/// "spill0" (FewestSpills), "blocks" (MoreBlocks), "wide" (WideBlocks) or
/// "tall" (TallWarps), the rows tc-spill0, tc-blocks, tc-wide and tc-tall
/// of bench/attention_cuda.cpp; anything else is an error naming the five.
Status parseFlashShape(const char *value, std::optional<FlashTcOccupancy> &out);

class CudaKernels final : public KernelBackend {
public:
  /// Creates the cuBLASLt handle on the current device; kernels run on
  /// `computeStream` (not owned; must outlive this object). The attention
  /// kernel comes from the environment (LOOM_CUDA_ATTENTION, see
  /// parseAttentionKernel), whether AdamW updates run grouped
  /// (LOOM_CUDA_GROUP_ADAMW, parseGroupAdamW), whether GELUs run in their
  /// GEMM's epilogue (LOOM_CUDA_GELU_EPILOGUE, parseGeluEpilogue), bias
  /// gradients in theirs (LOOM_CUDA_BIAS_GRAD_EPILOGUE,
  /// parseBiasGradEpilogue),
  /// residual Adds with layer norms (LOOM_CUDA_RESIDUAL_NORM,
  /// parseResidualNorm) and losses with their gradients
  /// (LOOM_CUDA_FUSED_CROSS_ENTROPY, parseFusedCrossEntropy), and the
  /// tensor-core attention's launch shape (LOOM_CUDA_FLASH_SHAPE,
  /// parseFlashShape); a bad value is an error here.
  static Status create(cudaStream_t computeStream,
                       std::unique_ptr<CudaKernels> &out);
  ~CudaKernels() override;
  CudaKernels(const CudaKernels &) = delete;
  CudaKernels &operator=(const CudaKernels &) = delete;

  cudaStream_t stream() const { return computeStream; }
  AttentionKernel attentionKernel() const { return attention; }
  void setAttentionKernel(AttentionKernel k) { attention = k; }
  /// The cuBLASLt engine, for callers with bf16 operands
  /// (Gemm::gemmBf16 on stream()).
  Gemm &gemms() { return gemmEngine; }

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
  /// Flash: the forward's log-sum-exp [B,NH,T] (none when it has an lse
  /// output); the gradient's row dots D [B,NH,T], after the recomputed
  /// output and log-sum-exp without saved ones: out [B,T,C] | lse [B,NH,T]
  /// | D [B,NH,T]. Naive: the probabilities [B,NH,T,T] both ways.
  int64_t attentionScratchFloats(int64_t B, int64_t T, int64_t C, int64_t NH,
                                 bool grad, bool saved) const override;
  Status attentionForward(float *out, float *lse, float *att, const float *qkv,
                          int64_t B, int64_t T, int64_t C, int64_t NH) override;
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
  /// adamw_group.h's launches, unless LOOM_CUDA_GROUP_ADAMW=0.
  bool groupsAdamW() const override { return groupAdamW; }
  Status adamwGroup(const std::vector<AdamWGroupMember> &members,
                    const float *lr, const float *step, const float *gradScale,
                    const AdamWHyperParams &hyper) override;
  /// cuBLASLt's GELU epilogues on bf16 operands (cuda_kernels_bf16.cpp),
  /// unless LOOM_CUDA_GELU_EPILOGUE=0.
  bool fusesGeluEpilogues() const override { return geluEpilogue; }
  Status linearGelu(const std::vector<TypedOperand> &inputs,
                    const TypedOperand &pre, const TypedOperand &out,
                    bool keepPre, bool &ran) override;
  Status linearGradGelu(const std::vector<TypedOperand> &inputs,
                        const std::vector<TypedOperand> &outputs,
                        const TypedOperand &pre, const TypedOperand &dpre,
                        bool &ran) override;
  /// kernels_bf16.h's residual layer norm kernels (cuda_kernels_bf16.cpp),
  /// unless LOOM_CUDA_RESIDUAL_NORM=0.
  bool fusesResidualNorms() const override { return residualNorm; }
  Status addLayerNorm(const program::Instruction &norm, const TypedOperand &a,
                      const TypedOperand &b, const TypedOperand &sum,
                      const std::vector<TypedOperand> &normInputs,
                      const TypedOperand &out, bool &ran) override;
  Status layerNormGradAdd(const program::Instruction &grad,
                          const std::vector<TypedOperand> &inputs,
                          const std::vector<TypedOperand> &outputs,
                          const std::vector<TypedOperand> &scratch,
                          const TypedOperand &residual, const TypedOperand &sum,
                          bool &ran) override;
  /// kernels_bf16.h's mixedCrossEntropyWithGrad (cuda_kernels_bf16.cpp),
  /// unless LOOM_CUDA_FUSED_CROSS_ENTROPY=0.
  bool fusesCrossEntropyGrad() const override { return fusedCrossEntropy; }
  Status crossEntropyWithGrad(const program::Instruction &loss,
                              const program::Instruction &grad,
                              const std::vector<TypedOperand> &lossInputs,
                              const std::vector<TypedOperand> &lossOutputs,
                              const std::vector<TypedOperand> &lossScratch,
                              const std::vector<TypedOperand> &gradInputs,
                              const TypedOperand &dlogits,
                              const BF16InstructionContext &context,
                              bool &ran) override;
  Status convertF32ToBF16(uint16_t *out, const float *in, int64_t n) override;
  Status convertBF16ToF32(float *out, const uint16_t *in, int64_t n) override;
  /// Every compute opcode (backend_support.h's cudaRunsBF16Natively), in
  /// cuda_kernels_bf16.cpp.
  bool handlesBF16Natively(program::Opcode op) const override;
  /// workspace()'s, the bf16 pools' and cuBLASLt's workspace bytes.
  uint64_t workspaceBytes() const override;
  /// The attention launch shapes timed so far (FlashShapeTuner::choices).
  std::vector<std::string> kernelChoices() const override;
  Status runBF16Natively(const program::Instruction &ins,
                         const std::vector<TypedOperand> &inputs,
                         const std::vector<TypedOperand> &outputs,
                         const std::vector<TypedOperand> &scratch,
                         const BF16InstructionContext &context) override;

private:
  CudaKernels() = default;
  /// A device workspace of at least `bytes` (grow-only; stream-ordered:
  /// growing waits for the stream before freeing the old one).
  Status workspace(uint64_t bytes, void *&devicePtr);

  /// True when the flash kernels run this attention (see AttentionKernel).
  bool useFlash(int64_t C, int64_t NH) const;

  /// Device workspaces of the bf16 kernels, one per use within an
  /// instruction (grow-only, stream-ordered like workspace()).
  enum BF16Slot : size_t {
    kSlotStats,  // fp32 statistics, log-sum-exp, row losses, partials
    kSlotResult, // an fp32 result rounded afterwards, accumulators
    kSlotWidenA, // fp32 copies of bf16 operands (mixed-dtype fallback)
    kSlotWidenB,
  };
  struct DevicePool {
    void *data = nullptr;
    uint64_t bytes = 0;
  };
  Status bf16Workspace(size_t slot, uint64_t bytes, void *&ptr);
  /// bf16Workspace(slot) as `n` floats.
  Status floatWorkspace(size_t slot, int64_t n, float *&out);
  /// `t` as fp32: itself when F32, else widened into workspace `slot`.
  Status widened(size_t slot, const TypedOperand &t, const float *&out);
  /// Row-major C = op(A) op(B) (+ bias) on operands of any float dtype:
  /// cuBLASLt bf16 when A and B are bf16, else fp32 on widened copies.
  Status gemmMixed(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                   const TypedOperand &A, int64_t lda, const TypedOperand &B,
                   int64_t ldb, const TypedOperand &C, int64_t ldc,
                   const TypedOperand *bias);
  /// A LayerNormGrad's row statistics (kernels_bf16.h): left to its
  /// one-pass kernel when `onePass`, else recomputed into fp32 workspace
  /// first (and its scratch buffers either way); and the workspace for its
  /// parameter gradients' partial sums.
  Status layernormGradStatistics(const program::Instruction &grad,
                                 const std::vector<TypedOperand> &in,
                                 const std::vector<TypedOperand> &scr,
                                 bool onePass, LayernormRowStatistics &stats,
                                 float *&partials);
  /// fp64 per-chunk partial sums for mixedColumnSum of outer x inner.
  Status columnSumWorkspace(int64_t outer, int64_t inner, double *&partials);
  /// A LinearGrad's dinput (in: dout, input, weight).
  Status linearInputGrad(const std::vector<TypedOperand> &in,
                         const TypedOperand &dinput);
  /// A LinearGrad's dweight and, with a third output, dbias (in: dout,
  /// input, weight; out: dinput (untouched), dweight[, dbias]).
  Status linearWeightGrads(const std::vector<TypedOperand> &in,
                           const std::vector<TypedOperand> &out);
  /// A CrossEntropy's row losses (fp32 workspace) into its scratch buffer,
  /// when it has one.
  Status keepRowLosses(const std::vector<TypedOperand> &scratch,
                       const float *losses, int64_t N);
  /// Attention (in: qkv) or AttentionGrad (in: dout, qkv) on bf16 operands.
  Status attentionBF16(const std::vector<TypedOperand> &in,
                       const std::vector<TypedOperand> &out, bool grad,
                       int64_t NH);

  std::vector<DevicePool> bf16Pools;
  cudaStream_t computeStream = nullptr;
  AttentionKernel attention = AttentionKernel::Flash;
  bool groupAdamW = true;
  bool geluEpilogue = true;
  bool biasGradEpilogue = true;
  bool residualNorm = true;
  bool fusedCrossEntropy = true;
  FlashShapeTuner flashShapes;
  /// Each bf16 LinearGrad shape with a bias (dweight's K x N over M rows)
  /// and whether cuBLASLt summed its bias gradient in the GEMM's epilogue
  /// (kernelChoices reports them; the answer is cuBLASLt's, per shape).
  std::map<std::tuple<int64_t, int64_t, int64_t>, bool> biasGradShapes;
  Gemm gemmEngine;
  void *workspaceDevice = nullptr;
  uint64_t workspaceDeviceBytes = 0;
};

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_CUDA_KERNELS_H
