//===- kernel_backend.h - The kernels the executor calls --------*- C++ -*-===//
//
// The seam between the executor (runtime/core/executor_instruction.cpp), which
// decides what each instruction reads and writes, and the code that computes
// it: one virtual per kernel family the instruction stream uses. Every pointer
// is a *buffer pointer*: an address in the backend's memory (host memory for
// the CPU backend, the device arena for CUDA), never dereferenced by the
// executor. Scalars that live in buffers (the loss seed, AdamW's lr / step /
// clip coefficient, the gradient sum of squares) are passed as buffer pointers
// for the same reason: a device backend reads them on the device, without a
// round trip to the host.
//
// Every method returns a Status: a device backend reports a failed launch
// or copy there (the CPU kernels that validate data, e.g. token ids, too).
// Outputs are overwritten (never accumulated) unless a method says
// otherwise, matching the program format's contract (program.fbs). The
// executor has already resolved aliasing: an output given here either is
// its input byte for byte where the opcode allows it, or does not overlap
// any input.
//
// Implementations: cpu::CpuKernels (runtime/cpu/cpu_kernels.h), the fp32
// CPU kernels the runtime always had, and cuda::CudaKernels (runtime/cuda/
// cuda_kernels.h) on device memory; runtime/core/backend_support.h lists
// the opcodes the CUDA build lacks.
//
// Mixed precision: the float kernels take fp32. An instruction with BF16
// operands runs them on fp32 copies the executor widens and rounds with
// convertBF16ToF32 / convertF32ToBF16 (bf16 storage, fp32 math), unless the
// backend says it runs that opcode on bf16 itself (handlesBF16Natively, the
// hook for e.g. cuBLASLt bf16 GEMMs).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_KERNEL_BACKEND_H
#define LOOM_RUNTIME_CORE_KERNEL_BACKEND_H

#include "runtime/core/status.h"
#include "runtime/program/program.h"

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

/// A float tensor given to SumSquares (buffer pointer + element count).
struct BufferSpan {
  const float *data;
  int64_t size;
};

/// An operand of an instruction a backend runs on bf16 itself
/// (KernelBackend::runBF16Natively): its buffer pointer, dtype and shape.
struct TypedOperand {
  void *data;
  program::DType dtype;
  const std::vector<int64_t> *shape;
};

/// What a native bf16 kernel needs beyond its operands: where this rank's
/// block of a vocab-parallel table or logits lies (the executor's
/// communicator knows the group) and the model's vocabulary (columns beyond
/// it are padding).
struct BF16InstructionContext {
  /// This rank's index and the group size on the instruction's axes (0 and
  /// 1 without axes).
  int64_t groupRank = 0, groupSize = 1;
  /// ModelInfo.vocab_size.
  int64_t vocabSize = 0;
};

/// AdamW's hyper-parameters compiled into the instruction (double, as
/// PyTorch holds them).
struct AdamWHyperParams {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 1e-2;
};

/// One parameter of a grouped AdamW update (KernelBackend::adamwGroup):
/// what its AdamW instruction reads and writes in place, and the bf16
/// compute copy the Cast after it writes (mixed precision), if any.
struct AdamWGroupMember {
  /// fp32 master weights, updated in place.
  float *params = nullptr;
  /// n gradients, bf16 when gradsBF16 (widened exactly), else fp32.
  const void *grads = nullptr;
  bool gradsBF16 = false;
  float *m = nullptr, *v = nullptr;
  /// Receives the updated params rounded to bf16 (convertF32ToBF16's
  /// rounding); null: no copy.
  uint16_t *bf16Params = nullptr;
  int64_t n = 0;
  double weightDecay = 0;
};

class KernelBackend {
public:
  virtual ~KernelBackend() = default;

  //===--------------------------------------------------------------------===//
  // Embedding
  //===--------------------------------------------------------------------===//
  /// out[N, C] = table[ids[n]]; errors on an id outside [0, V).
  virtual Status embeddingForward(float *out, const int32_t *ids,
                                  const float *table, int64_t N, int64_t V,
                                  int64_t C) = 0;
  /// Vocab-parallel: this rank holds rows [rowOffset, rowOffset + rows) of a
  /// V-row table; ids outside that block give zero rows.
  virtual Status embeddingForwardRows(float *out, const int32_t *ids,
                                      const float *rows, int64_t N, int64_t V,
                                      int64_t rowOffset, int64_t rowCount,
                                      int64_t C) = 0;
  /// dtable[V, C] = scatter-add of dout[N, C] by ids (overwritten).
  virtual Status embeddingBackward(float *dtable, const float *dout,
                                   const int32_t *ids, int64_t N, int64_t V,
                                   int64_t C) = 0;

  //===--------------------------------------------------------------------===//
  // Element-wise, GEMMs, normalization, attention
  //===--------------------------------------------------------------------===//
  /// out = a + b (n elements); out may alias a.
  virtual Status add(float *out, const float *a, const float *b, int64_t n) = 0;
  /// out[o, j] = a[o, j] + b[j]; out may alias a.
  virtual Status addBroadcast(float *out, const float *a, const float *b,
                              int64_t outer, int64_t inner) = 0;
  /// db[j] = sum over o of dout[o, j].
  virtual Status reduceLeading(float *db, const float *dout, int64_t outer,
                               int64_t inner) = 0;
  /// out[M, N] = inp[M, K] weight[K, N] (+ bias[N] when non-null).
  virtual Status linearForward(float *out, const float *inp,
                               const float *weight, const float *bias,
                               int64_t M, int64_t K, int64_t N) = 0;
  /// Row-major C = alpha op(A) op(B) + beta C (cblas_sgemm's contract).
  virtual Status gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                      float alpha, const float *A, int64_t lda, const float *B,
                      int64_t ldb, float beta, float *C, int64_t ldc) = 0;
  /// dbias[N] = column sums of dout[M, N].
  virtual Status columnSum(float *dbias, const float *dout, int64_t M,
                           int64_t N) = 0;
  /// out may be null; mean / rstd [N] are written for the backward.
  virtual Status layernormForward(float *out, float *mean, float *rstd,
                                  const float *inp, const float *weight,
                                  const float *bias, int64_t N, int64_t C,
                                  float eps) = 0;
  /// Recomputes mean / rstd (workspace [N] each) from inp, then dinp, dweight
  /// and dbias (all overwritten).
  virtual Status layernormGrad(float *dinp, float *dweight, float *dbias,
                               const float *dout, const float *inp,
                               const float *weight, float *mean, float *rstd,
                               int64_t N, int64_t C, float eps) = 0;
  virtual Status geluForward(float *out, const float *inp, int64_t n) = 0;
  virtual Status geluBackward(float *dinp, const float *inp, const float *dout,
                              int64_t n) = 0;
  virtual Status softmaxForward(float *out, const float *inp, int64_t N,
                                int64_t C) = 0;
  virtual Status softmaxBackward(float *dinp, const float *dout,
                                 const float *out, int64_t N, int64_t C) = 0;
  /// fp32 scratch the attention forward (grad = false) or gradient needs
  /// at `att` for these shapes, in floats; 0: none (`att` may be null).
  /// `saved`: the gradient gets the forward's output and log-sum-exp (the
  /// forward, its lse output). The program plans [B,NH,T] for a forward
  /// without lse output, the row statistics a tiled kernel keeps; for an
  /// fp32 gradient [B,NH,T] row dot products, and without saved operands
  /// [B,T,C] + [B,NH,T] before them, the flash backward's recomputed output
  /// and log-sum-exp. The executor gives a kernel that needs more a
  /// temporary.
  virtual int64_t attentionScratchFloats(int64_t B, int64_t T, int64_t C,
                                         int64_t NH, bool grad,
                                         bool saved) const = 0;
  /// out[B,T,C] from qkv[B,T,3C], with attentionScratchFloats(..., false,
  /// lse != null) floats of scratch at `att` (what is left there is the
  /// kernel's). `lse` (may be null) gets the log-sum-exp of each query
  /// row's scaled scores, [B,NH,T].
  virtual Status attentionForward(float *out, float *lse, float *att,
                                  const float *qkv, int64_t B, int64_t T,
                                  int64_t C, int64_t NH) = 0;
  /// dqkv from dout and qkv with attentionScratchFloats(..., true, saved)
  /// floats of scratch at `att`. `out` and `lse` are the forward's (both
  /// or neither; saved = both set): a kernel that can use them skips
  /// re-running the forward; without them it recomputes what it needs.
  virtual Status attentionGrad(float *dqkv, const float *dout, const float *qkv,
                               const float *out, const float *lse, float *att,
                               int64_t B, int64_t T, int64_t C, int64_t NH) = 0;

  //===--------------------------------------------------------------------===//
  // Cross entropy. Columns from validV on are vocabulary padding. `tokens`
  // is the token count the mean is over (0: this rank's N, else the global
  // count when the tokens are split across ranks).
  //===--------------------------------------------------------------------===//
  /// loss[0] = mean row loss (times N / tokens); losses [N] may be null.
  virtual Status crossEntropyForward(float *loss, float *losses,
                                     const float *logits,
                                     const int32_t *targets, int64_t N,
                                     int64_t V, int64_t validV,
                                     double tokens) = 0;
  /// dlogits from the loss seed dloss[0] (a buffer scalar); may alias logits.
  virtual Status crossEntropyBackward(float *dlogits, const float *dloss,
                                      const float *logits,
                                      const int32_t *targets, int64_t N,
                                      int64_t V, int64_t validV,
                                      double tokens) = 0;
  /// Vocab-parallel pieces: this rank's V columns start at column `offset`
  /// of the whole vocabulary.
  virtual Status crossEntropyRowMax(float *rowMax, const float *logits,
                                    int64_t N, int64_t V, int64_t offset,
                                    int64_t validV) = 0;
  virtual Status crossEntropySums(float *sumExp, float *targetLogit,
                                  const float *logits, const float *rowMax,
                                  const int32_t *targets, int64_t N, int64_t V,
                                  int64_t offset, int64_t validV) = 0;
  /// loss[0] = sum over rows of log(sumExp) + rowMax - targetLogit, / tokens
  /// (tokens > 0 here: the caller resolves 0 to N).
  virtual Status crossEntropyFromSums(float *loss, const float *rowMax,
                                      const float *sumExp,
                                      const float *targetLogit, int64_t N,
                                      double tokens) = 0;
  virtual Status crossEntropySumsBackward(
      float *dlogits, const float *dloss, const float *logits,
      const float *rowMax, const float *sumExp, const int32_t *targets,
      int64_t N, int64_t V, int64_t offset, int64_t validV, double tokens) = 0;

  //===--------------------------------------------------------------------===//
  // Tensor movement (any dtype: elemBytes per element)
  //===--------------------------------------------------------------------===//
  /// memmove semantics: dst and src may overlap.
  virtual Status copy(void *dst, const void *src, int64_t bytes) = 0;
  virtual Status fillF32(float *dst, int64_t n, float value) = 0;
  virtual Status fillI32(int32_t *dst, int64_t n, int32_t value) = 0;
  virtual Status transpose(void *out, const void *in,
                           const std::vector<int64_t> &inShape,
                           const std::vector<int64_t> &perm,
                           int64_t elemBytes) = 0;
  virtual Status sliceDim(void *out, const void *in,
                          const std::vector<int64_t> &inShape, int64_t dim,
                          int64_t offset, int64_t outExtent,
                          int64_t elemBytes) = 0;
  virtual Status sliceDimGrad(void *out, const void *in,
                              const std::vector<int64_t> &outShape, int64_t dim,
                              int64_t offset, int64_t inExtent,
                              int64_t elemBytes) = 0;
  virtual Status concatDim(void *out, const std::vector<const void *> &inputs,
                           const std::vector<int64_t> &extents,
                           const std::vector<int64_t> &outShape, int64_t dim,
                           int64_t elemBytes) = 0;
  /// `rows` rows of `rowBytes` bytes from `src` (rows `srcPitch` bytes
  /// apart) to `dst` (rows `dstPitch` bytes apart), the two disjoint
  /// (cudaMemcpy2D's contract; pitches >= rowBytes). A collective bucket's
  /// member blocks move between the member and the bucket's chunks so.
  virtual Status copy2D(void *dst, int64_t dstPitch, const void *src,
                        int64_t srcPitch, int64_t rowBytes, int64_t rows) = 0;
  /// A collective's blocks made contiguous: `src` viewed as [outer, n,
  /// inner] (`shape` split at `dim` into n blocks) to dense `dst` [n, outer,
  /// inner] (communicator.h's packBlocks, on buffer memory).
  virtual Status packBlocks(void *dst, const void *src,
                            const std::vector<int64_t> &shape, int64_t dim,
                            int64_t n, int64_t elemBytes) = 0;
  /// Inverse: n contiguous chunks of `blockShape` concatenated along `dim`.
  virtual Status unpackBlocks(void *dst, const void *src,
                              const std::vector<int64_t> &blockShape,
                              int64_t dim, int64_t n, int64_t elemBytes) = 0;

  //===--------------------------------------------------------------------===//
  // Optimizer
  //===--------------------------------------------------------------------===//
  /// out[0] = sum of squares of every tensor (double, rounded once).
  virtual Status sumSquares(float *out,
                            const std::vector<BufferSpan> &tensors) = 0;
  /// norm[0] = sqrt(sumSq[0]); coef[0] = min(1, maxNorm / (norm + 1e-6)), 1
  /// when maxNorm <= 0.
  virtual Status clipCoef(float *norm, float *coef, const float *sumSq,
                          double maxNorm) = 0;
  /// In place on params / m / v (n floats each); lr, step (1-based, as f32)
  /// and gradScale are buffer scalars. Errors when step is not a positive
  /// integer.
  virtual Status adamw(float *params, const float *grads, float *m, float *v,
                       int64_t n, const float *lr, const float *step,
                       const float *gradScale,
                       const AdamWHyperParams &hyper) = 0;
  /// Whether adamwGroup runs. The executor then gives it each run of an
  /// update's in-place AdamW instructions (with the Casts of their results
  /// to bf16) that share lr, step, gradScale and all hyper-parameters but
  /// the weight decay: one launch for what is otherwise two per parameter
  /// (PyTorch's fused / foreach AdamW makes the same trade).
  virtual bool groupsAdamW() const { return false; }
  /// Every member's adamw (`hyper` but its weightDecay, which is each
  /// member's), then its bf16 copy: bit for bit what the instructions give
  /// one by one. The members' buffers are disjoint from one another's.
  virtual Status adamwGroup(const std::vector<AdamWGroupMember> &members,
                            const float *lr, const float *step,
                            const float *gradScale,
                            const AdamWHyperParams &hyper) {
    (void)members, (void)lr, (void)step, (void)gradScale, (void)hyper;
    return Status::error("this kernel backend does not group AdamW updates");
  }

  //===--------------------------------------------------------------------===//
  // GELU in a GEMM's epilogue (gelu_epilogues.h)
  //===--------------------------------------------------------------------===//
  /// Whether linearGelu and linearGradGelu run. The executor then gives
  /// them the pairs planGeluEpilogues finds (all their GEMM operands BF16).
  virtual bool fusesGeluEpilogues() const { return false; }
  /// A Linear and the Gelu of its result in one GEMM: `pre` = x weight
  /// (+ bias), `out` = gelu(pre), the GELU taken before `out`'s rounding;
  /// without keepPre (nothing reads the pre-activation later) `pre` may be
  /// left as it was. `inputs` are the Linear's (x, weight[, bias]). `ran`
  /// false: nothing was done (an unsupported shape or alignment), and the
  /// executor runs the two instructions.
  virtual Status linearGelu(const std::vector<TypedOperand> &inputs,
                            const TypedOperand &pre, const TypedOperand &out,
                            bool keepPre, bool &ran) {
    (void)inputs, (void)pre, (void)out, (void)keepPre;
    ran = false;
    return Status::success();
  }
  /// A LinearGrad and the GeluGrad of its input gradient: first the
  /// LinearGrad's dweight (and dbias) as it computes them, then `dpre` =
  /// (dout weight^T) * gelu'(pre) from the input-gradient GEMM, whose
  /// product is not written (outputs[0] is left as it was). `inputs` and
  /// `outputs` are the LinearGrad's; `ran` as for linearGelu (false:
  /// nothing was done).
  virtual Status linearGradGelu(const std::vector<TypedOperand> &inputs,
                                const std::vector<TypedOperand> &outputs,
                                const TypedOperand &pre,
                                const TypedOperand &dpre, bool &ran) {
    (void)inputs, (void)outputs, (void)pre, (void)dpre;
    ran = false;
    return Status::success();
  }

  //===--------------------------------------------------------------------===//
  // Residual Adds fused with layer norms (residual_norms.h)
  //===--------------------------------------------------------------------===//
  /// Whether addLayerNorm and layerNormGradAdd run. The executor then gives
  /// them the pairs planResidualNorms finds (all operands BF16).
  virtual bool fusesResidualNorms() const { return false; }
  /// An Add and the LayerNorm of its sum in one call: `sum` = a + b, then
  /// the LayerNorm (`norm`: its epsilon) of it into `out`, bit for bit as
  /// the two instructions; the LayerNorm's scratch statistics are not
  /// written (read by nothing: planResidualNorms). `ran` false: nothing was
  /// done, and the executor runs the two instructions.
  virtual Status addLayerNorm(const program::Instruction &norm,
                              const TypedOperand &a, const TypedOperand &b,
                              const TypedOperand &sum,
                              const std::vector<TypedOperand> &normInputs,
                              const TypedOperand &out, bool &ran) {
    (void)norm, (void)a, (void)b, (void)sum, (void)normInputs, (void)out;
    ran = false;
    return Status::success();
  }
  /// A LayerNormGrad and the Add of its input gradient to `residual`: the
  /// LayerNormGrad's parameter gradients and scratch as it writes them, and
  /// `sum` = residual + its input gradient (rounded as the two
  /// instructions round), the input gradient itself not written (outputs[0]
  /// is left as it was). `inputs`, `outputs`, `scratch` are the
  /// LayerNormGrad's; `ran` as for addLayerNorm.
  virtual Status layerNormGradAdd(const program::Instruction &grad,
                                  const std::vector<TypedOperand> &inputs,
                                  const std::vector<TypedOperand> &outputs,
                                  const std::vector<TypedOperand> &scratch,
                                  const TypedOperand &residual,
                                  const TypedOperand &sum, bool &ran) {
    (void)grad, (void)inputs, (void)outputs, (void)scratch, (void)residual,
        (void)sum;
    ran = false;
    return Status::success();
  }

  //===--------------------------------------------------------------------===//
  // A loss and its gradient in one call (cross_entropy_fusion.h)
  //===--------------------------------------------------------------------===//
  /// Whether crossEntropyWithGrad runs. The executor then gives it the
  /// spans planCrossEntropyFusion finds (BF16 logits and gradient).
  virtual bool fusesCrossEntropyGrad() const { return false; }
  /// A CrossEntropy (`loss`: its inputs logits and targets, its outputs and
  /// scratch) and its CrossEntropyGrad (`grad`: inputs dloss, logits,
  /// targets; output dlogits) in one call, bit for bit as the two
  /// instructions (`context` as runBF16Natively's). `ran` false: nothing
  /// was done, and the executor runs the instructions.
  virtual Status crossEntropyWithGrad(
      const program::Instruction &loss, const program::Instruction &grad,
      const std::vector<TypedOperand> &lossInputs,
      const std::vector<TypedOperand> &lossOutputs,
      const std::vector<TypedOperand> &lossScratch,
      const std::vector<TypedOperand> &gradInputs, const TypedOperand &dlogits,
      const BF16InstructionContext &context, bool &ran) {
    (void)loss, (void)grad, (void)lossInputs, (void)lossOutputs,
        (void)lossScratch, (void)gradInputs, (void)dlogits, (void)context;
    ran = false;
    return Status::success();
  }

  //===--------------------------------------------------------------------===//
  // Mixed precision
  //===--------------------------------------------------------------------===//
  /// out[i] = in[i] rounded to bfloat16: to nearest, ties to even; a NaN
  /// stays a NaN, values beyond bf16's range become infinities (the
  /// contract of runtime/core/bfloat16.h's floatToBF16). Opcode::Cast and
  /// the executor's rounding of fp32-computed results into BF16 buffers.
  virtual Status convertF32ToBF16(uint16_t *out, const float *in,
                                  int64_t n) = 0;
  /// out[i] = in[i] widened to fp32 (exact).
  virtual Status convertBF16ToF32(float *out, const uint16_t *in,
                                  int64_t n) = 0;
  /// Whether the backend runs instruction `op` with BF16 operands itself,
  /// through runBF16Natively, instead of the fp32 kernel on widened copies
  /// (CUDA: every compute opcode, backend_support.h's cudaRunsBF16Natively;
  /// CPU: SumSquares).
  virtual bool handlesBF16Natively(program::Opcode op) const {
    (void)op;
    return false;
  }
  /// Runs `ins` (an opcode handlesBF16Natively claims) on its operands as
  /// they are: every pointer is a buffer pointer, BF16 or F32 as `dtype`
  /// says. An output is either byte for byte an input the opcode may write
  /// over (runtime/program/in_place.h; AdamW's state) or disjoint from
  /// every input: the executor stages any other overlap.
  virtual Status runBF16Natively(const program::Instruction &ins,
                                 const std::vector<TypedOperand> &inputs,
                                 const std::vector<TypedOperand> &outputs,
                                 const std::vector<TypedOperand> &scratch,
                                 const BF16InstructionContext &context) {
    (void)inputs, (void)outputs, (void)scratch, (void)context;
    return Status::error("this kernel backend has no native bf16 kernel for " +
                         program::opcodeName(ins.opcode()));
  }

  /// Bytes of buffer memory the kernels hold for themselves beside the
  /// program's tensors (grow-only: the most so far): cuBLASLt's workspace,
  /// the CUDA bf16 kernels' working buffers. The runtime reports it next
  /// to the tensors' peak (kernel_workspace_bytes), so a device's memory
  /// is accounted for whole. The CPU kernels keep nothing of the kind.
  virtual uint64_t workspaceBytes() const { return 0; }

  /// What the kernels chose for themselves while running, a line each,
  /// for the run's summary: the CUDA backend's attention launch shapes
  /// timed on the device (cuda/flash_shape_tuning.h), which move time
  /// only, never a result; which bias gradients cuBLASLt summed in a
  /// GEMM's epilogue, which moves results by rounding, the same on every
  /// run of a device and library. The CPU kernels choose nothing.
  virtual std::vector<std::string> kernelChoices() const { return {}; }
};

} // namespace loom

#endif // LOOM_RUNTIME_CORE_KERNEL_BACKEND_H
