//===- kernels_bf16.h - Kernels for bf16 training ---------------*- C++ -*-===//
//
// The kernels CudaKernels runs when an instruction has BF16 operands
// (KernelBackend::runBF16Natively): each operand is a FloatRef, bf16 or fp32
// storage as the buffer table says, loaded to fp32, computed in fp32 and
// rounded once to nearest even when stored (bf16 storage, fp32 math:
// Megatron's and llm.c's mixed precision). The math and the summation
// orders are those of kernels.cu / vocab_parallel.cu, so a native bf16 run
// computes what the executor's staging fallback (fp32 kernel on widened
// copies, outputs rounded) computes, up to fp32 round-off; the tests
// (test/runtime/BF16KernelEmulationTest.cpp) hold them to that.
//
// Intermediates an opcode keeps between two passes (layer norm statistics
// for the gradient, per-row losses, sum-of-squares partials) stay fp32 in
// caller-provided device workspace, as the staging fallback keeps them in its
// fp32 slots.
//
// Aliasing: every element-wise kernel reads an element before it writes it,
// so Add's output may be its lhs, Gelu / GeluGrad / Softmax / CrossEntropy
// gradients may write over their input (runtime/program/in_place.h).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_KERNELS_BF16_H
#define LOOM_RUNTIME_CUDA_KERNELS_BF16_H

#include "runtime/core/status.h"
#include "runtime/cuda/kernels.h"

#include <cstdint>
#include <cuda_runtime_api.h>
#include <initializer_list>
#include <vector>

namespace loom::cuda {

/// A device tensor stored as bf16 or fp32 (one flag, uniform over a launch,
/// so the branch in the kernels never diverges). `data` null: absent.
struct FloatRef {
  void *data = nullptr;
  bool bf16 = false;
};

//===----------------------------------------------------------------------===//
// Element-wise
//===----------------------------------------------------------------------===//

/// out[i] = a[i] + b[i % inner] (n elements; inner == n: plain add). out
/// may alias a.
Status mixedAdd(FloatRef out, FloatRef a, FloatRef b, int64_t n, int64_t inner,
                cudaStream_t stream);
/// Partials of the two-stage reductions over `rows` rows: rowChunks(rows)
/// per column (chunks of a fixed 128 rows, summed in order).
int64_t rowChunks(int64_t rows);
/// db[j] = sum over o of dout[o, j] (overwritten): each chunk of rows in
/// order in double, then the chunks in order; `partials` holds
/// rowChunks(outer) * inner doubles of device workspace.
Status mixedColumnSum(FloatRef db, FloatRef dout, int64_t outer, int64_t inner,
                      double *partials, cudaStream_t stream);
/// out[i] = value (rounded once when bf16).
Status mixedFill(FloatRef out, float value, int64_t n, cudaStream_t stream);
Status mixedGeluForward(FloatRef out, FloatRef inp, int64_t n,
                        cudaStream_t stream);
Status mixedGeluBackward(FloatRef dinp, FloatRef inp, FloatRef dout, int64_t n,
                         cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

/// out[N, C] = rows[idx[n] - rowBegin] for ids in [rowBegin, rowBegin + R),
/// zero rows otherwise (the whole table: rowBegin 0, R = V).
Status mixedEmbeddingForward(FloatRef out, const int32_t *idx, FloatRef rows,
                             int64_t N, int64_t rowBegin, int64_t R, int64_t C,
                             cudaStream_t stream);
/// Ints of device workspace mixedEmbeddingBackward needs.
int64_t embeddingGradWorkspaceInts(int64_t N, int64_t V);
/// dtable[V, C] = scatter-add of dout[N, C] by idx (overwritten),
/// deterministic: each table row sums its tokens' rows in token order in
/// fp32 and is written once (ids outside [0, V) add nothing); `work` holds
/// embeddingGradWorkspaceInts(N, V) ints. Also the fp32 path's kernel.
Status mixedEmbeddingBackward(FloatRef dtable, FloatRef dout,
                              const int32_t *idx, int64_t N, int64_t V,
                              int64_t C, int32_t *work, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Layer norm and softmax
//===----------------------------------------------------------------------===//

/// Statistics into fp32 `mean32` / `rstd32` (workspace, may be null) and the
/// `mean` / `rstd` buffers (may be absent); `out` may be absent.
Status mixedLayernormForward(FloatRef out, FloatRef mean, FloatRef rstd,
                             float *mean32, float *rstd32, FloatRef inp,
                             FloatRef weight, FloatRef bias, int64_t N,
                             int64_t C, float eps, cudaStream_t stream);
/// The row statistics a layer-norm gradient normalizes with: the fp32
/// mean32 / rstd32 mixedLayernormForward wrote, or, both null, computed by
/// the gradient's one-pass kernel from the rows it reads anyway, as
/// mixedLayernormForward computes them (bit for bit; with eps), and then
/// also stored into mean / rstd where given (a LayerNormGrad's scratch),
/// while the kernel runs: they must overlap nothing it reads or writes.
struct LayernormRowStatistics {
  const float *mean32 = nullptr, *rstd32 = nullptr;
  float eps = 0.0f;
  FloatRef mean, rstd;
};
/// Whether mixedLayernormBackward takes these operands in its one pass
/// (and so computes the statistics itself): all bf16, 16-byte aligned, C a
/// multiple of 8 up to 1024 (GPT-2's widths), N > 0; dinp may be absent.
bool layernormBackwardOnePass(int64_t N, int64_t C, FloatRef dinp,
                              FloatRef dout, FloatRef inp, FloatRef weight);
/// dinp, dweight, dbias (all overwritten); the parameter gradients sum
/// rows in chunks like mixedColumnSum (fp32), `partials` holding
/// 2 * rowChunks(N) * C floats of device workspace. Operands
/// layernormBackwardOnePass takes are read in one pass over dout and inp;
/// others in two, which need the forward's mean32 / rstd32 (an error
/// without them).
Status mixedLayernormBackward(FloatRef dinp, FloatRef dweight, FloatRef dbias,
                              FloatRef dout, FloatRef inp, FloatRef weight,
                              const LayernormRowStatistics &stats,
                              float *partials, int64_t N, int64_t C,
                              cudaStream_t stream);
/// Whether the two kernels below take rows of C and these operands: all
/// bf16, 16-byte aligned, C a multiple of 8 up to 1024 (GPT-2's widths).
bool residualLayernormFits(int64_t C, std::initializer_list<FloatRef> operands);
/// A residual Add and the LayerNorm of its sum in one pass over the rows
/// (residual_norms.h): sum = a + b rounded as mixedAdd rounds it, then out
/// as mixedLayernormForward computes it from sum, bit for bit (the row
/// statistics are not stored). sum may be a or b. An error unless
/// residualLayernormFits.
Status residualAddLayernormForward(FloatRef sum, FloatRef out, FloatRef a,
                                   FloatRef b, FloatRef weight, FloatRef bias,
                                   int64_t N, int64_t C, float eps,
                                   cudaStream_t stream);
/// A LayerNorm gradient and the residual Add of its input gradient:
/// mixedLayernormBackward's dweight and dbias, and sum = residual + dinp
/// (dinp rounded, then the sum, as mixedAdd would add them), dinp itself
/// not written; bit for bit the two instructions' results. sum may be
/// residual. An error unless residualLayernormFits.
Status layernormBackwardAddResidual(FloatRef sum, FloatRef dweight,
                                    FloatRef dbias, FloatRef residual,
                                    FloatRef dout, FloatRef inp,
                                    FloatRef weight,
                                    const LayernormRowStatistics &stats,
                                    float *partials, int64_t N, int64_t C,
                                    cudaStream_t stream);
Status mixedSoftmaxForward(FloatRef out, FloatRef inp, int64_t N, int64_t C,
                           cudaStream_t stream);
Status mixedSoftmaxBackward(FloatRef dinp, FloatRef dout, FloatRef out,
                            int64_t N, int64_t C, cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Cross entropy (bf16 logits, fp32 statistics and loss)
//===----------------------------------------------------------------------===//

/// loss[0] = mean of the N row losses (fp32 workspace `losses`) times scale.
Status mixedCrossEntropyForward(FloatRef loss, float *losses, FloatRef logits,
                                const int32_t *targets, int64_t N, int64_t V,
                                int64_t validV, float scale,
                                cudaStream_t stream);
/// dlogits = (softmax - onehot) * dloss[0] * dlossScale / N; may alias
/// logits.
Status mixedCrossEntropyBackward(FloatRef dlogits, FloatRef logits,
                                 const int32_t *targets, int64_t N, int64_t V,
                                 int64_t validV, FloatRef dloss,
                                 float dlossScale, cudaStream_t stream);
/// Whether mixedCrossEntropyWithGrad takes rows of V and these operands:
/// bf16, 16-byte aligned, V a multiple of 8 (GPT-2's padded 50304).
bool crossEntropyWithGradFits(int64_t V,
                              std::initializer_list<FloatRef> operands);
/// mixedCrossEntropyForward and mixedCrossEntropyBackward in one pass per
/// row (cross_entropy_fusion.h): the row losses into `losses` and their
/// mean into loss[0], and dlogits, bit for bit the two calls' results;
/// dloss is read when the kernel runs. dlogits may alias logits. An error
/// unless crossEntropyWithGradFits.
Status mixedCrossEntropyWithGrad(FloatRef loss, float *losses, FloatRef dlogits,
                                 FloatRef logits, const int32_t *targets,
                                 int64_t N, int64_t V, int64_t validV,
                                 float lossScale, FloatRef dloss,
                                 float dlossScale, cudaStream_t stream);
/// The vocab-parallel pieces (vocab_parallel.h's contracts).
Status mixedCrossEntropyRowMax(FloatRef rowMax, FloatRef logits, int64_t N,
                               int64_t V, int64_t offset, int64_t validV,
                               cudaStream_t stream);
Status mixedCrossEntropySums(FloatRef sumExp, FloatRef targetLogit,
                             FloatRef logits, FloatRef rowMax,
                             const int32_t *targets, int64_t N, int64_t V,
                             int64_t offset, int64_t validV,
                             cudaStream_t stream);
Status mixedCrossEntropyFromSums(FloatRef loss, FloatRef rowMax,
                                 FloatRef sumExp, FloatRef targetLogit,
                                 int64_t N, double divisor,
                                 cudaStream_t stream);
Status mixedCrossEntropySumsBackward(FloatRef dlogits, FloatRef logits,
                                     FloatRef rowMax, FloatRef sumExp,
                                     const int32_t *targets, int64_t N,
                                     int64_t V, int64_t offset, int64_t validV,
                                     FloatRef dloss, double tokens,
                                     cudaStream_t stream);

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

/// A tensor SumSquares reads.
struct MixedSpan {
  FloatRef data;
  int64_t size;
};
/// Doubles per tensor the sum of squares needs as `partials` workspace.
constexpr int kMixedSumBlocks = 128;
/// out[0] = sum of squares over all spans (each tensor in double over a
/// fixed tree, tensors in order, rounded once); `partials` holds
/// kMixedSumBlocks * spans.size() doubles.
Status mixedSumSquares(FloatRef out, const std::vector<MixedSpan> &tensors,
                       double *partials, cudaStream_t stream);
/// AdamW (kernels.h's adamwStep) with any storage for the parameters, grads
/// and moments (bf16 grads on fp32 masters and moments); scalars are fp32
/// or bf16 buffers too.
Status mixedAdamW(FloatRef params, FloatRef grads, FloatRef m, FloatRef v,
                  int64_t n, FloatRef lr, FloatRef step, FloatRef gradScale,
                  const AdamWHyper &hyper, cudaStream_t stream);
/// norm[0], coef[0] from sumSq[0] (kernels.h's clipCoefficient).
Status mixedClipCoef(FloatRef norm, FloatRef coef, FloatRef sumSq,
                     double maxNorm, cudaStream_t stream);

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_KERNELS_BF16_H
