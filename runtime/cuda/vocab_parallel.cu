//===- vocab_parallel.cu - Vocab-parallel embedding / cross entropy -------===//
//
// Simple, deterministic kernels in kernels.cu's style: one thread per
// element, one warp per row for row reductions, one block with a fixed
// reduction tree for the scalar loss. Not yet measured on a GPU: the row
// kernels read each row twice (max, then sums); fusing them is a follow-up
// once a profile says it matters.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/vocab_parallel.h"

#include "runtime/cuda/check.h"
#include "runtime/cuda/launch.cuh"

#include <cmath>

namespace loom::cuda {
namespace {

using namespace launch;

/// Columns of this rank's block below validV (as cpu::localValid).
__host__ __device__ int64_t localValid(int64_t V, int64_t offset,
                                       int64_t validV) {
  const int64_t cols = validV - offset < V ? validV - offset : V;
  return cols > 0 ? cols : 0;
}

__global__ void embeddingRowsKernel(float *out, const int32_t *idx,
                                    const float *rows, int64_t N,
                                    int64_t rowBegin, int64_t R, int64_t C) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * C)
    return;
  const int64_t n = i / C, c = i % C;
  const int64_t r = static_cast<int64_t>(idx[n]) - rowBegin;
  out[i] = r >= 0 && r < R ? rows[r * C + c] : 0.0f;
}

// Warp per row: row = global warp index; all lanes of a warp share the row,
// so the early return keeps whole warps together for the shuffles.
__global__ void rowMaxKernel(float *rowMax, const float *logits, int64_t N,
                             int64_t V, int64_t cols) {
  const int64_t row = warpIndex();
  const int lane = laneIndex();
  if (row >= N)
    return;
  const float *x = logits + row * V;
  float m = -INFINITY;
  for (int64_t c = lane; c < cols; c += kWarp)
    m = fmaxf(m, x[c]);
  m = warpMax(m);
  if (lane == 0)
    rowMax[row] = m;
}

__global__ void sumsKernel(float *sumExp, float *targetLogit,
                           const float *logits, const float *rowMax,
                           const int32_t *targets, int64_t N, int64_t V,
                           int64_t offset, int64_t cols) {
  const int64_t row = warpIndex();
  const int lane = laneIndex();
  if (row >= N)
    return;
  const float *x = logits + row * V;
  const float m = rowMax[row];
  float s = 0.0f;
  for (int64_t c = lane; c < cols; c += kWarp)
    s += expf(x[c] - m);
  s = warpSum(s);
  if (lane == 0) {
    sumExp[row] = s;
    const int64_t t = static_cast<int64_t>(targets[row]) - offset;
    targetLogit[row] = t >= 0 && t < cols ? x[t] : 0.0f;
  }
}

// One block: thread j sums rows j, j + kThreads, ... in double, then a fixed
// shared-memory tree; the same order every run.
__global__ void fromSumsKernel(float *loss, const float *rowMax,
                               const float *sumExp, const float *targetLogit,
                               int64_t N, double divisor) {
  double s = 0.0;
  for (int64_t n = threadIdx.x; n < N; n += kThreads)
    s += log(static_cast<double>(sumExp[n])) + static_cast<double>(rowMax[n]) -
         static_cast<double>(targetLogit[n]);
  s = blockSum(s);
  if (threadIdx.x == 0)
    loss[0] = divisor > 0 ? static_cast<float>(s / divisor) : 0.0f;
}

// One thread per element; each reads its own logit before writing it, so
// dlogits may alias logits.
__global__ void sumsBackwardKernel(float *dlogits, const float *logits,
                                   const float *rowMax, const float *sumExp,
                                   const int32_t *targets, int64_t N, int64_t V,
                                   int64_t offset, int64_t cols,
                                   const float *dloss, double tokens) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * V)
    return;
  const int64_t n = i / V, c = i % V;
  if (c >= cols) {
    dlogits[i] = 0.0f;
    return;
  }
  const float g = static_cast<float>(dloss[0] / tokens);
  const float p = expf(logits[i] - rowMax[n]) * (1.0f / sumExp[n]);
  const int64_t t = static_cast<int64_t>(targets[n]) - offset;
  dlogits[i] = (p - (c == t ? 1.0f : 0.0f)) * g;
}

} // namespace

Status embeddingForwardRows(float *out, const int32_t *idx, const float *rows,
                            int64_t N, int64_t rowBegin, int64_t R, int64_t C,
                            cudaStream_t stream) {
  LOOM_LAUNCH(embeddingRowsKernel, blocksFor(N * C), kThreads, stream, out, idx,
              rows, N, rowBegin, R, C);
  return Status::success();
}

Status crossEntropyRowMax(float *rowMax, const float *logits, int64_t N,
                          int64_t V, int64_t offset, int64_t validV,
                          cudaStream_t stream) {
  LOOM_LAUNCH(rowMaxKernel, blocksForRows(N), kThreads, stream, rowMax,
              logits, N, V, localValid(V, offset, validV));
  return Status::success();
}

Status crossEntropySums(float *sumExp, float *targetLogit, const float *logits,
                        const float *rowMax, const int32_t *targets, int64_t N,
                        int64_t V, int64_t offset, int64_t validV,
                        cudaStream_t stream) {
  LOOM_LAUNCH(sumsKernel, blocksForRows(N), kThreads, stream, sumExp,
              targetLogit, logits, rowMax, targets, N, V, offset,
              localValid(V, offset, validV));
  return Status::success();
}

Status crossEntropyFromSums(float *loss, const float *rowMax,
                            const float *sumExp, const float *targetLogit,
                            int64_t N, double divisor, cudaStream_t stream) {
  LOOM_LAUNCH(fromSumsKernel, 1u, kThreads, stream, loss, rowMax, sumExp,
              targetLogit, N, divisor);
  return Status::success();
}

Status crossEntropySumsBackward(float *dlogits, const float *logits,
                                const float *rowMax, const float *sumExp,
                                const int32_t *targets, int64_t N, int64_t V,
                                int64_t offset, int64_t validV,
                                const float *dloss, double tokens,
                                cudaStream_t stream) {
  LOOM_LAUNCH(sumsBackwardKernel, blocksFor(N * V), kThreads, stream, dlogits,
              logits, rowMax, sumExp, targets, N, V, offset,
              localValid(V, offset, validV), dloss, tokens);
  return Status::success();
}

} // namespace loom::cuda
