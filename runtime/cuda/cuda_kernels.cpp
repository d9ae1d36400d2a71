//===- cuda_kernels.cpp - KernelBackend on the device arena ---------------===//
//
// Thin forwarding to the CUDA kernels, plus what the CPU kernels did around
// the kernel call (zeroing outputs a kernel accumulates into, recomputing
// statistics for the backward, the global-token rescaling of the loss).
// All pointers are device pointers; nothing here waits for the stream.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/cuda_kernels.h"

#include "runtime/cuda/adamw_group.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/convert.h"
#include "runtime/cuda/flash_attention.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/kernels_bf16.h"
#include "runtime/cuda/tensor_movement.h"
#include "runtime/cuda/vocab_parallel.h"

#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <utility>

namespace loom::cuda {

namespace {

/// An environment variable naming one of `choices` (null or empty: the
/// first); anything else is an error: "VAR='x' is not <what>; use <help>".
template <typename T>
Status parseChoice(const char *variable, const char *value,
                   std::initializer_list<std::pair<const char *, T>> choices,
                   const char *what, const char *help, T &out) {
  if (!value || !*value) {
    out = choices.begin()->second;
    return Status::success();
  }
  for (const auto &[name, choice] : choices)
    if (std::strcmp(value, name) == 0) {
      out = choice;
      return Status::success();
    }
  LOOM_ERROR(variable << "='" << value << "' is not " << what << "; use "
                      << help);
}

} // namespace

Status parseAttentionKernel(const char *value, AttentionKernel &out) {
  return parseChoice(
      "LOOM_CUDA_ATTENTION", value,
      {{"flash", AttentionKernel::Flash}, {"naive", AttentionKernel::Naive}},
      "an attention kernel",
      "flash (tiled, the default) or naive (materialized "
      "probabilities)",
      out);
}

namespace {

/// An on / off environment variable: "1" or null / empty (on, the default)
/// or "0"; anything else is an error naming both choices.
Status parseSwitch(const char *variable, const char *value, const char *on,
                   const char *off, bool &out) {
  if (!value || !*value || std::strcmp(value, "1") == 0) {
    out = true;
    return Status::success();
  }
  if (std::strcmp(value, "0") == 0) {
    out = false;
    return Status::success();
  }
  LOOM_ERROR(variable << "='" << value << "' is not 0 or 1; use 1 (" << on
                      << ", the default) or 0 (" << off << ")");
}

} // namespace

Status parseGroupAdamW(const char *value, bool &out) {
  return parseSwitch("LOOM_CUDA_GROUP_ADAMW", value,
                     "an update's AdamW instructions in one launch",
                     "a launch per instruction", out);
}

Status parseGeluEpilogue(const char *value, bool &out) {
  return parseSwitch("LOOM_CUDA_GELU_EPILOGUE", value,
                     "a GEMM and its GELU in one call",
                     "the instructions one by one", out);
}

Status parseBiasGradEpilogue(const char *value, bool &out) {
  return parseSwitch("LOOM_CUDA_BIAS_GRAD_EPILOGUE", value,
                     "a bias gradient summed in its weight gradient's GEMM",
                     "a column-sum kernel after the GEMM", out);
}

Status parseResidualNorm(const char *value, bool &out) {
  return parseSwitch("LOOM_CUDA_RESIDUAL_NORM", value,
                     "a residual Add and a layer norm in one kernel",
                     "the instructions one by one", out);
}

Status parseFusedCrossEntropy(const char *value, bool &out) {
  return parseSwitch("LOOM_CUDA_FUSED_CROSS_ENTROPY", value,
                     "a loss and its gradient in one kernel",
                     "the instructions one by one", out);
}

Status parseFlashShape(const char *value,
                       std::optional<FlashTcOccupancy> &out) {
  using Shape = std::optional<FlashTcOccupancy>;
  return parseChoice<Shape>(
      "LOOM_CUDA_FLASH_SHAPE", value,
      {{"auto", std::nullopt},
       {flashShapeName(FlashTcOccupancy::FewestSpills),
        FlashTcOccupancy::FewestSpills},
       {flashShapeName(FlashTcOccupancy::MoreBlocks),
        FlashTcOccupancy::MoreBlocks},
       {flashShapeName(FlashTcOccupancy::WideBlocks),
        FlashTcOccupancy::WideBlocks},
       {flashShapeName(FlashTcOccupancy::TallWarps),
        FlashTcOccupancy::TallWarps}},
      "a launch shape of the tensor-core attention",
      "auto (each kernel's fastest shape, timed on the device the first "
      "time a geometry runs; the default), spill0 (4 warps a block, no "
      "spills), blocks (4 warps, more blocks per SM), wide (8 warps a "
      "block) or tall (the forward's warps 32 rows each)",
      out);
}

Status CudaKernels::create(cudaStream_t computeStream,
                           std::unique_ptr<CudaKernels> &out) {
  std::unique_ptr<CudaKernels> k(new CudaKernels());
  k->computeStream = computeStream;
  LOOM_RETURN_IF_ERROR(
      parseAttentionKernel(std::getenv("LOOM_CUDA_ATTENTION"), k->attention));
  LOOM_RETURN_IF_ERROR(
      parseGroupAdamW(std::getenv("LOOM_CUDA_GROUP_ADAMW"), k->groupAdamW));
  LOOM_RETURN_IF_ERROR(parseGeluEpilogue(std::getenv("LOOM_CUDA_GELU_EPILOGUE"),
                                         k->geluEpilogue));
  LOOM_RETURN_IF_ERROR(parseBiasGradEpilogue(
      std::getenv("LOOM_CUDA_BIAS_GRAD_EPILOGUE"), k->biasGradEpilogue));
  LOOM_RETURN_IF_ERROR(parseResidualNorm(std::getenv("LOOM_CUDA_RESIDUAL_NORM"),
                                         k->residualNorm));
  LOOM_RETURN_IF_ERROR(parseFusedCrossEntropy(
      std::getenv("LOOM_CUDA_FUSED_CROSS_ENTROPY"), k->fusedCrossEntropy));
  std::optional<FlashTcOccupancy> flashShape;
  LOOM_RETURN_IF_ERROR(
      parseFlashShape(std::getenv("LOOM_CUDA_FLASH_SHAPE"), flashShape));
  k->flashShapes = FlashShapeTuner(flashShape);
  LOOM_RETURN_IF_ERROR(Gemm::create(k->gemmEngine));
  out = std::move(k);
  return Status::success();
}

CudaKernels::~CudaKernels() {
  if (workspaceDevice || !bf16Pools.empty())
    cudaStreamSynchronize(computeStream);
  if (workspaceDevice)
    cudaFree(workspaceDevice);
  for (DevicePool &pool : bf16Pools)
    if (pool.data)
      cudaFree(pool.data);
}

uint64_t CudaKernels::workspaceBytes() const {
  uint64_t bytes = workspaceDeviceBytes + gemmEngine.workspaceSize();
  for (const DevicePool &pool : bf16Pools)
    bytes += pool.bytes;
  return bytes;
}

std::vector<std::string> CudaKernels::kernelChoices() const {
  std::vector<std::string> lines;
  for (const std::string &line : flashShapes.choices())
    lines.push_back("attention launch shapes timed on the device, " + line);
  if (!biasGradShapes.empty()) {
    // Whether cuBLASLt has a BGRADA kernel for a shape is its own answer
    // on this device and library version: say where it had none.
    size_t fused = 0;
    std::ostringstream declined;
    for (const auto &[shape, ran] : biasGradShapes) {
      if (ran) {
        ++fused;
        continue;
      }
      const auto &[K, N, M] = shape;
      declined << (declined.tellp() > 0 ? ", " : "") << K << "x" << N
               << " over " << M << " rows";
    }
    std::ostringstream line;
    line << "bias gradients summed in their weight gradient's GEMM "
            "(cuBLASLt BGRADA epilogue): "
         << fused << " of " << biasGradShapes.size() << " LinearGrad shapes";
    if (fused < biasGradShapes.size())
      line << "; by a column-sum kernel where cuBLASLt had none: "
           << declined.str();
    lines.push_back(line.str());
  }
  return lines;
}

Status CudaKernels::workspace(uint64_t bytes, void *&devicePtr) {
  if (bytes > workspaceDeviceBytes) {
    if (workspaceDevice) {
      // Kernels already enqueued may still read the old workspace.
      LOOM_CUDA_CHECK(cudaStreamSynchronize(computeStream));
      LOOM_CUDA_CHECK(cudaFree(workspaceDevice));
      workspaceDevice = nullptr;
      workspaceDeviceBytes = 0;
    }
    LOOM_CUDA_CHECK(cudaMalloc(&workspaceDevice, bytes));
    workspaceDeviceBytes = bytes;
  }
  devicePtr = workspaceDevice;
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

Status CudaKernels::embeddingForward(float *out, const int32_t *ids,
                                     const float *table, int64_t N, int64_t V,
                                     int64_t C) {
  return cuda::embeddingForward(out, ids, table, N, V, C, computeStream);
}

Status CudaKernels::embeddingForwardRows(float *out, const int32_t *ids,
                                         const float *rows, int64_t N,
                                         int64_t /*V*/, int64_t rowOffset,
                                         int64_t rowCount, int64_t C) {
  return cuda::embeddingForwardRows(out, ids, rows, N, rowOffset, rowCount, C,
                                    computeStream);
}

Status CudaKernels::embeddingBackward(float *dtable, const float *dout,
                                      const int32_t *ids, int64_t N, int64_t V,
                                      int64_t C) {
  // The bf16 path's kernel on fp32 operands (it overwrites the table).
  void *work = nullptr;
  LOOM_RETURN_IF_ERROR(bf16Workspace(
      kSlotStats,
      static_cast<uint64_t>(cuda::embeddingGradWorkspaceInts(N, V)) *
          sizeof(int32_t),
      work));
  return cuda::mixedEmbeddingBackward(
      {dtable, false}, {const_cast<float *>(dout), false}, ids, N, V, C,
      static_cast<int32_t *>(work), computeStream);
}

//===----------------------------------------------------------------------===//
// Element-wise, GEMMs, normalization, attention
//===----------------------------------------------------------------------===//

Status CudaKernels::add(float *out, const float *a, const float *b, int64_t n) {
  return cuda::add(out, a, b, n, computeStream);
}

Status CudaKernels::addBroadcast(float *out, const float *a, const float *b,
                                 int64_t outer, int64_t inner) {
  return cuda::addBroadcast(out, a, b, outer, inner, computeStream);
}

Status CudaKernels::reduceLeading(float *db, const float *dout, int64_t outer,
                                  int64_t inner) {
  return cuda::addBroadcastBackward(db, dout, outer, inner,
                                    /*accumulateInto=*/false, computeStream);
}

Status CudaKernels::linearForward(float *out, const float *inp,
                                  const float *weight, const float *bias,
                                  int64_t M, int64_t K, int64_t N) {
  // out[M, N] = inp[M, K] weight[K, N] + bias: the bias in cuBLASLt's
  // epilogue when it is aligned as the epilogue needs, else added after.
  GemmArgs g;
  g.M = M, g.N = N, g.K = K;
  g.A = inp, g.lda = K, g.B = weight, g.ldb = N, g.C = out, g.ldc = N;
  const bool fused = bias && reinterpret_cast<uintptr_t>(bias) % 16 == 0;
  g.bias = fused ? bias : nullptr;
  LOOM_RETURN_IF_ERROR(gemmEngine.matmul(g, computeStream));
  if (bias && !fused)
    return cuda::addBroadcast(out, out, bias, M, N, computeStream);
  return Status::success();
}

Status CudaKernels::gemm(bool transA, bool transB, int64_t M, int64_t N,
                         int64_t K, float alpha, const float *A, int64_t lda,
                         const float *B, int64_t ldb, float beta, float *C,
                         int64_t ldc) {
  return gemmEngine.gemm(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta,
                         C, ldc, computeStream);
}

Status CudaKernels::columnSum(float *dbias, const float *dout, int64_t M,
                              int64_t N) {
  return cuda::addBroadcastBackward(dbias, dout, M, N,
                                    /*accumulateInto=*/false, computeStream);
}

Status CudaKernels::layernormForward(float *out, float *mean, float *rstd,
                                     const float *inp, const float *weight,
                                     const float *bias, int64_t N, int64_t C,
                                     float eps) {
  return cuda::layernormForward(out, mean, rstd, inp, weight, bias, N, C, eps,
                                computeStream);
}

Status CudaKernels::layernormGrad(float *dinp, float *dweight, float *dbias,
                                  const float *dout, const float *inp,
                                  const float *weight, float *mean, float *rstd,
                                  int64_t N, int64_t C, float eps) {
  // Statistics only (out = null: weight / bias are not read).
  LOOM_RETURN_IF_ERROR(cuda::layernormForward(
      nullptr, mean, rstd, inp, weight, nullptr, N, C, eps, computeStream));
  // The kernel accumulates dweight / dbias; the opcode overwrites them.
  const size_t bytes = static_cast<size_t>(C) * sizeof(float);
  LOOM_CUDA_CHECK(cudaMemsetAsync(dweight, 0, bytes, computeStream));
  LOOM_CUDA_CHECK(cudaMemsetAsync(dbias, 0, bytes, computeStream));
  return cuda::layernormBackward(dinp, dweight, dbias, dout, inp, weight, mean,
                                 rstd, N, C, computeStream);
}

Status CudaKernels::geluForward(float *out, const float *inp, int64_t n) {
  return cuda::geluForward(out, inp, n, computeStream);
}

Status CudaKernels::geluBackward(float *dinp, const float *inp,
                                 const float *dout, int64_t n) {
  return cuda::geluBackward(dinp, inp, dout, n, computeStream);
}

Status CudaKernels::softmaxForward(float *out, const float *inp, int64_t N,
                                   int64_t C) {
  return cuda::softmaxForward(out, inp, N, C, computeStream);
}

Status CudaKernels::softmaxBackward(float *dinp, const float *dout,
                                    const float *out, int64_t N, int64_t C) {
  return cuda::softmaxBackward(dinp, dout, out, N, C, computeStream);
}

bool CudaKernels::useFlash(int64_t C, int64_t NH) const {
  return attention == AttentionKernel::Flash && flashAttentionSupports(C, NH);
}

int64_t CudaKernels::attentionScratchFloats(int64_t B, int64_t T, int64_t C,
                                            int64_t NH, bool grad,
                                            bool saved) const {
  const int64_t rows = B * NH * T;
  if (!useFlash(C, NH))
    return rows * T;
  if (!grad)
    return saved ? 0 : rows;
  return saved ? rows : B * T * C + 2 * rows;
}

Status CudaKernels::attentionForward(float *out, float *lse, float *att,
                                     const float *qkv, int64_t B, int64_t T,
                                     int64_t C, int64_t NH) {
  // The flash forward writes the log-sum-exp [B,NH,T] to `lse`, or without
  // one to the start of the scratch (then nothing reads it: the gradient
  // recomputes).
  if (out && useFlash(C, NH))
    return flashAttentionForward(out, lse ? lse : att, qkv, B, T, C, NH,
                                 computeStream);
  return cuda::attentionForward(out, att, qkv, B, T, C, NH, computeStream, lse);
}

Status CudaKernels::attentionGrad(float *dqkv, const float *dout,
                                  const float *qkv, const float *out,
                                  const float *lse, float *att, int64_t B,
                                  int64_t T, int64_t C, int64_t NH) {
  if (useFlash(C, NH)) {
    const uint64_t rows = static_cast<uint64_t>(B * NH * T);
    if (out && lse) {
      // The forward's output and log-sum-exp: only the row dots D to form
      // (FlashAttention-2's backward), in the [B,NH,T] scratch at `att`.
      return flashAttentionBackward(dqkv, att, dout, qkv, out, lse, B, T, C, NH,
                                    computeStream);
    }
    // Without them: recompute (one extra forward, no T x T) into the
    // [B,NH,T,T] scratch when it holds them (T >= hs + 2), else into the
    // workspace. Layout: out [B,T,C] | lse [B,NH,T] | D [B,NH,T].
    const uint64_t need = static_cast<uint64_t>(B * T * C) + 2 * rows;
    float *scratch = att;
    if (need > rows * static_cast<uint64_t>(T)) {
      void *ws = nullptr;
      LOOM_RETURN_IF_ERROR(workspace(need * sizeof(float), ws));
      scratch = static_cast<float *>(ws);
    }
    float *fwd = scratch, *fwdLse = fwd + B * T * C, *rowDot = fwdLse + rows;
    LOOM_RETURN_IF_ERROR(
        flashAttentionForward(fwd, fwdLse, qkv, B, T, C, NH, computeStream));
    return flashAttentionBackward(dqkv, rowDot, dout, qkv, fwd, fwdLse, B, T, C,
                                  NH, computeStream);
  }
  // Probabilities recomputed (out = null), as cpu::attentionProbs; their
  // pre-softmax gradients in the workspace.
  LOOM_RETURN_IF_ERROR(
      cuda::attentionForward(nullptr, att, qkv, B, T, C, NH, computeStream));
  void *dpre = nullptr;
  LOOM_RETURN_IF_ERROR(
      workspace(static_cast<uint64_t>(B * NH * T * T) * sizeof(float), dpre));
  return cuda::attentionBackward(dqkv, dout, qkv, att,
                                 static_cast<float *>(dpre), B, T, C, NH,
                                 computeStream);
}

//===----------------------------------------------------------------------===//
// Cross entropy
//===----------------------------------------------------------------------===//

Status CudaKernels::crossEntropyForward(float *loss, float *losses,
                                        const float *logits,
                                        const int32_t *targets, int64_t N,
                                        int64_t V, int64_t validV,
                                        double tokens) {
  // The kernel needs per-row losses; without a scratch buffer they go to
  // the workspace.
  if (!losses) {
    void *ws = nullptr;
    LOOM_RETURN_IF_ERROR(
        workspace(static_cast<uint64_t>(N) * sizeof(float), ws));
    losses = static_cast<float *>(ws);
  }
  const float scale =
      tokens > 0 ? static_cast<float>(static_cast<double>(N) / tokens) : 1.0f;
  return cuda::crossEntropyForward(loss, losses, logits, targets, N, V, validV,
                                   scale, computeStream);
}

Status CudaKernels::crossEntropyBackward(float *dlogits, const float *dloss,
                                         const float *logits,
                                         const int32_t *targets, int64_t N,
                                         int64_t V, int64_t validV,
                                         double tokens) {
  const float scale =
      tokens > 0 ? static_cast<float>(static_cast<double>(N) / tokens) : 1.0f;
  return cuda::crossEntropyBackward(dlogits, logits, targets, N, V, validV,
                                    dloss, scale, computeStream);
}

Status CudaKernels::crossEntropyRowMax(float *rowMax, const float *logits,
                                       int64_t N, int64_t V, int64_t offset,
                                       int64_t validV) {
  return cuda::crossEntropyRowMax(rowMax, logits, N, V, offset, validV,
                                  computeStream);
}

Status CudaKernels::crossEntropySums(float *sumExp, float *targetLogit,
                                     const float *logits, const float *rowMax,
                                     const int32_t *targets, int64_t N,
                                     int64_t V, int64_t offset,
                                     int64_t validV) {
  return cuda::crossEntropySums(sumExp, targetLogit, logits, rowMax, targets, N,
                                V, offset, validV, computeStream);
}

Status CudaKernels::crossEntropyFromSums(float *loss, const float *rowMax,
                                         const float *sumExp,
                                         const float *targetLogit, int64_t N,
                                         double tokens) {
  return cuda::crossEntropyFromSums(loss, rowMax, sumExp, targetLogit, N,
                                    tokens, computeStream);
}

Status CudaKernels::crossEntropySumsBackward(
    float *dlogits, const float *dloss, const float *logits,
    const float *rowMax, const float *sumExp, const int32_t *targets, int64_t N,
    int64_t V, int64_t offset, int64_t validV, double tokens) {
  return cuda::crossEntropySumsBackward(dlogits, logits, rowMax, sumExp,
                                        targets, N, V, offset, validV, dloss,
                                        tokens, computeStream);
}

//===----------------------------------------------------------------------===//
// Tensor movement
//===----------------------------------------------------------------------===//

Status CudaKernels::copy(void *dst, const void *src, int64_t bytes) {
  if (bytes <= 0 || dst == src)
    return Status::success();
  const auto *d = static_cast<const uint8_t *>(dst);
  const auto *s = static_cast<const uint8_t *>(src);
  if (d < s + bytes && s < d + bytes) {
    // Overlapping ranges (memmove semantics): cudaMemcpy does not allow
    // them, so go through the workspace.
    void *ws = nullptr;
    LOOM_RETURN_IF_ERROR(workspace(static_cast<uint64_t>(bytes), ws));
    LOOM_CUDA_CHECK(cudaMemcpyAsync(ws, src, static_cast<size_t>(bytes),
                                    cudaMemcpyDeviceToDevice, computeStream));
    src = ws;
  }
  LOOM_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                  cudaMemcpyDeviceToDevice, computeStream));
  return Status::success();
}

Status CudaKernels::convertF32ToBF16(uint16_t *out, const float *in,
                                     int64_t n) {
  return cuda::convertF32ToBF16(out, in, n, computeStream);
}

Status CudaKernels::convertBF16ToF32(float *out, const uint16_t *in,
                                     int64_t n) {
  return cuda::convertBF16ToF32(out, in, n, computeStream);
}

Status CudaKernels::fillF32(float *dst, int64_t n, float value) {
  return cuda::fillF32(dst, value, n, computeStream);
}

Status CudaKernels::fillI32(int32_t *dst, int64_t n, int32_t value) {
  return cuda::fillI32(dst, value, n, computeStream);
}

Status CudaKernels::transpose(void *out, const void *in,
                              const std::vector<int64_t> &inShape,
                              const std::vector<int64_t> &perm,
                              int64_t elemBytes) {
  return cuda::transpose(out, in, inShape, perm, elemBytes, computeStream);
}

Status CudaKernels::sliceDim(void *out, const void *in,
                             const std::vector<int64_t> &inShape, int64_t dim,
                             int64_t offset, int64_t outExtent,
                             int64_t elemBytes) {
  return cuda::sliceDim(out, in, inShape, dim, offset, outExtent, elemBytes,
                        computeStream);
}

Status CudaKernels::sliceDimGrad(void *out, const void *in,
                                 const std::vector<int64_t> &outShape,
                                 int64_t dim, int64_t offset, int64_t inExtent,
                                 int64_t elemBytes) {
  return cuda::sliceDimGrad(out, in, outShape, dim, offset, inExtent, elemBytes,
                            computeStream);
}

Status CudaKernels::concatDim(void *out,
                              const std::vector<const void *> &inputs,
                              const std::vector<int64_t> &extents,
                              const std::vector<int64_t> &outShape, int64_t dim,
                              int64_t elemBytes) {
  return cuda::concatDim(out, inputs, extents, outShape, dim, elemBytes,
                         computeStream);
}

Status CudaKernels::copy2D(void *dst, int64_t dstPitch, const void *src,
                           int64_t srcPitch, int64_t rowBytes, int64_t rows) {
  return cuda::copy2D(dst, dstPitch, src, srcPitch, rowBytes, rows,
                      computeStream);
}

Status CudaKernels::packBlocks(void *dst, const void *src,
                               const std::vector<int64_t> &shape, int64_t dim,
                               int64_t n, int64_t elemBytes) {
  return cuda::packBlocks(dst, src, shape, dim, n, elemBytes, computeStream);
}

Status CudaKernels::unpackBlocks(void *dst, const void *src,
                                 const std::vector<int64_t> &blockShape,
                                 int64_t dim, int64_t n, int64_t elemBytes) {
  return cuda::unpackBlocks(dst, src, blockShape, dim, n, elemBytes,
                            computeStream);
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

Status CudaKernels::sumSquares(float *out,
                               const std::vector<BufferSpan> &tensors) {
  std::vector<MixedSpan> spans;
  spans.reserve(tensors.size());
  for (const BufferSpan &t : tensors)
    spans.push_back({{const_cast<float *>(t.data), false}, t.size});
  void *partials = nullptr;
  LOOM_RETURN_IF_ERROR(workspace(static_cast<uint64_t>(kMixedSumBlocks) *
                                     std::max<size_t>(1, spans.size()) *
                                     sizeof(double),
                                 partials));
  return mixedSumSquares({out, false}, spans, static_cast<double *>(partials),
                         computeStream);
}

Status CudaKernels::clipCoef(float *norm, float *coef, const float *sumSq,
                             double maxNorm) {
  return cuda::clipCoefficient(norm, coef, sumSq, maxNorm, computeStream);
}

/// The device kernels' copy of `hyper` (they take it by value).
static AdamWHyper deviceHyper(const AdamWHyperParams &hyper) {
  AdamWHyper h;
  h.beta1 = hyper.beta1;
  h.beta2 = hyper.beta2;
  h.eps = hyper.eps;
  h.weightDecay = hyper.weightDecay;
  return h;
}

Status CudaKernels::adamw(float *params, const float *grads, float *m, float *v,
                          int64_t n, const float *lr, const float *step,
                          const float *gradScale,
                          const AdamWHyperParams &hyper) {
  return cuda::adamwStep(params, grads, m, v, n, lr, step, gradScale,
                         deviceHyper(hyper), computeStream);
}

Status CudaKernels::adamwGroup(const std::vector<AdamWGroupMember> &members,
                               const float *lr, const float *step,
                               const float *gradScale,
                               const AdamWHyperParams &hyper) {
  // Each member's weight decay is its own (AdamWGroupMember::weightDecay).
  return adamwGroupStep(members.data(), members.size(), lr, step, gradScale,
                        deviceHyper(hyper), computeStream);
}

} // namespace loom::cuda
