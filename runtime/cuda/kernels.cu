//===- kernels.cu - fp32 CUDA kernels of the executor's opcodes -----------===//
//
// Straightforward, deterministic kernels (llm.c dev/cuda "version 1/2"
// style): one thread per element for element-wise ops, one warp per row for
// row reductions (layer norm, softmax, cross-entropy), one thread per column
// for reductions over rows. Correctness against the CPU kernels first; the
// fused / vectorized versions are follow-ups measured on a GPU.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/kernels.h"

#include "runtime/cuda/adamw_step.cuh"

#include "runtime/cuda/check.h"
#include "runtime/cuda/launch.cuh"

#include <cmath>

namespace loom::cuda {
namespace {

using namespace launch;

//===----------------------------------------------------------------------===//
// Element-wise
//===----------------------------------------------------------------------===//

__global__ void addKernel(float *out, const float *a, const float *b,
                          int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = a[i] + b[i];
}

__global__ void addBroadcastKernel(float *out, const float *a, const float *b,
                                   int64_t n, int64_t inner) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = a[i] + b[i % inner];
}

__global__ void columnSumKernel(float *db, const float *dout, int64_t outer,
                                int64_t inner, bool accumulate) {
  int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= inner)
    return;
  double s = 0;
  for (int64_t o = 0; o < outer; ++o)
    s += dout[o * inner + j];
  db[j] = accumulate ? static_cast<float>(db[j] + s) : static_cast<float>(s);
}

template <typename T>
__global__ void fillKernel(T *out, T value, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = value;
}

constexpr float kGeluScale = 0.7978845608028654f; // sqrt(2/pi)

__global__ void geluForwardKernel(float *out, const float *inp, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    float x = inp[i];
    float cube = 0.044715f * x * x * x;
    out[i] = 0.5f * x * (1.0f + tanhf(kGeluScale * (x + cube)));
  }
}

__global__ void geluBackwardKernel(float *dinp, const float *inp,
                                   const float *dout, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    float x = inp[i];
    float cube = 0.044715f * x * x * x;
    float arg = kGeluScale * (x + cube);
    float th = tanhf(arg);
    float sech2 = 1.0f - th * th;
    float local = 0.5f * (1.0f + th) +
                  0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = local * dout[i];
  }
}

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

__global__ void embeddingForwardKernel(float *out, const int32_t *idx,
                                       const float *wte, int64_t N, int64_t V,
                                       int64_t C) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= N * C)
    return;
  int64_t n = i / C, c = i % C;
  int32_t t = idx[n];
  out[i] = (t >= 0 && t < V) ? wte[static_cast<int64_t>(t) * C + c] : 0.0f;
}

//===----------------------------------------------------------------------===//
// Layer norm
//===----------------------------------------------------------------------===//

__global__ void layernormForwardKernel(float *out, float *mean, float *rstd,
                                       const float *inp, const float *weight,
                                       const float *bias, int64_t N, int64_t C,
                                       float eps) {
  int64_t row = warpIndex();
  int lane = laneIndex();
  if (row >= N)
    return;
  const float *x = inp + row * C;
  float s = 0;
  for (int64_t c = lane; c < C; c += kWarp)
    s += x[c];
  float m = warpSum(s) / C;
  float v = 0;
  for (int64_t c = lane; c < C; c += kWarp) {
    float d = x[c] - m;
    v += d * d;
  }
  float r = rsqrtf(warpSum(v) / C + eps);
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
  if (out)
    for (int64_t c = lane; c < C; c += kWarp)
      out[row * C + c] = (x[c] - m) * r * weight[c] + bias[c];
}

__global__ void layernormBackwardInputKernel(float *dinp, const float *dout,
                                             const float *inp,
                                             const float *weight,
                                             const float *mean,
                                             const float *rstd, int64_t N,
                                             int64_t C) {
  int64_t row = warpIndex();
  int lane = laneIndex();
  if (row >= N)
    return;
  const float *x = inp + row * C, *dy = dout + row * C;
  float m = mean[row], r = rstd[row];
  float sumD = 0, sumDX = 0;
  for (int64_t c = lane; c < C; c += kWarp) {
    float xhat = (x[c] - m) * r;
    float d = weight[c] * dy[c];
    sumD += d;
    sumDX += d * xhat;
  }
  sumD = warpSum(sumD) / C;
  sumDX = warpSum(sumDX) / C;
  for (int64_t c = lane; c < C; c += kWarp) {
    float xhat = (x[c] - m) * r;
    float d = weight[c] * dy[c];
    dinp[row * C + c] = (d - sumD - xhat * sumDX) * r;
  }
}

__global__ void layernormBackwardParamKernel(float *dweight, float *dbias,
                                             const float *dout,
                                             const float *inp,
                                             const float *mean,
                                             const float *rstd, int64_t N,
                                             int64_t C) {
  int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C)
    return;
  float dw = 0, db = 0;
  for (int64_t n = 0; n < N; ++n) {
    float dy = dout[n * C + c];
    dw += (inp[n * C + c] - mean[n]) * rstd[n] * dy;
    db += dy;
  }
  if (dweight)
    dweight[c] += dw;
  if (dbias)
    dbias[c] += db;
}

//===----------------------------------------------------------------------===//
// Softmax and cross-entropy
//===----------------------------------------------------------------------===//

__global__ void softmaxForwardKernel(float *out, const float *inp, int64_t N,
                                     int64_t C) {
  int64_t row = warpIndex();
  int lane = laneIndex();
  if (row >= N)
    return;
  const float *x = inp + row * C;
  float mx = -INFINITY;
  for (int64_t c = lane; c < C; c += kWarp)
    mx = fmaxf(mx, x[c]);
  mx = warpMax(mx);
  float s = 0;
  for (int64_t c = lane; c < C; c += kWarp)
    s += expf(x[c] - mx);
  s = warpSum(s);
  // All lanes have read the row before any writes it (out may alias inp).
  __syncwarp();
  for (int64_t c = lane; c < C; c += kWarp)
    out[row * C + c] = expf(x[c] - mx) / s;
}

__global__ void softmaxBackwardKernel(float *dinp, const float *dout,
                                      const float *out, int64_t N, int64_t C) {
  int64_t row = warpIndex();
  int lane = laneIndex();
  if (row >= N)
    return;
  float dot = 0;
  for (int64_t c = lane; c < C; c += kWarp)
    dot += out[row * C + c] * dout[row * C + c];
  dot = warpSum(dot);
  __syncwarp();
  for (int64_t c = lane; c < C; c += kWarp)
    dinp[row * C + c] = out[row * C + c] * (dout[row * C + c] - dot);
}

/// Row max and log-sum-exp over the valid columns.
__device__ void rowLogSumExp(const float *x, int64_t validV, int lane,
                             float &mx, float &lse) {
  mx = -INFINITY;
  for (int64_t c = lane; c < validV; c += kWarp)
    mx = fmaxf(mx, x[c]);
  mx = warpMax(mx);
  float s = 0;
  for (int64_t c = lane; c < validV; c += kWarp)
    s += expf(x[c] - mx);
  lse = logf(warpSum(s));
}

__global__ void crossEntropyRowsKernel(float *losses, const float *logits,
                                       const int32_t *targets, int64_t N,
                                       int64_t V, int64_t validV) {
  int64_t row = warpIndex();
  int lane = laneIndex();
  if (row >= N)
    return;
  const float *x = logits + row * V;
  float mx, lse;
  rowLogSumExp(x, validV, lane, mx, lse);
  int32_t t = targets[row];
  if (lane == 0)
    losses[row] = (t >= 0 && t < validV) ? (mx + lse - x[t]) : NAN;
}

/// One block: mean of the row losses in a fixed order, times scale.
__global__ void meanKernel(float *out, const float *x, int64_t n,
                           float scale) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    s += x[i];
  s = blockSum(s);
  if (threadIdx.x == 0)
    out[0] = static_cast<float>(s / n * scale);
}

__global__ void crossEntropyBackwardKernel(float *dlogits, const float *logits,
                                           const int32_t *targets, int64_t N,
                                           int64_t V, int64_t validV,
                                           const float *dloss,
                                           float dlossScale) {
  int64_t row = warpIndex();
  int lane = laneIndex();
  if (row >= N)
    return;
  const float *x = logits + row * V;
  float mx, lse;
  rowLogSumExp(x, validV, lane, mx, lse);
  float g = dloss[0] * dlossScale / N;
  int32_t t = targets[row];
  __syncwarp(); // dlogits may alias logits
  for (int64_t c = lane; c < V; c += kWarp) {
    float d = 0;
    if (c < validV)
      d = (expf(x[c] - mx - lse) - (c == t ? 1.0f : 0.0f)) * g;
    dlogits[row * V + c] = d;
  }
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

__global__ void clipCoefKernel(float *norm, float *coef, const float *sumSq,
                               double maxNorm) {
  double n = sqrt(static_cast<double>(sumSq[0]));
  norm[0] = static_cast<float>(n);
  coef[0] = static_cast<float>(maxNorm > 0.0 ? fmin(1.0, maxNorm / (n + 1e-6))
                                             : 1.0);
}

__global__ void adamwKernel(float *params, const float *grads, float *m,
                            float *v, int64_t n, const float *lrPtr,
                            const float *stepPtr, const float *scalePtr,
                            AdamWHyper h) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  float p = params[i], mi = m[i], vi = v[i];
  adamwElement(grads[i] * scalePtr[0], p, mi, vi, lrPtr[0], stepPtr[0], h);
  params[i] = p;
  m[i] = mi;
  v[i] = vi;
}

} // namespace

//===----------------------------------------------------------------------===//
// Launchers
//===----------------------------------------------------------------------===//

Status add(float *out, const float *a, const float *b, int64_t n,
           cudaStream_t stream) {
  LOOM_LAUNCH(addKernel, blocksFor(n), kThreads, stream, out, a, b, n);
  return Status::success();
}

Status addBroadcast(float *out, const float *a, const float *b, int64_t outer,
                    int64_t inner, cudaStream_t stream) {
  LOOM_LAUNCH(addBroadcastKernel, blocksFor(outer * inner), kThreads, stream,
              out, a, b, outer * inner, inner);
  return Status::success();
}

Status addBroadcastBackward(float *db, const float *dout, int64_t outer,
                            int64_t inner, bool accumulateInto,
                            cudaStream_t stream) {
  LOOM_LAUNCH(columnSumKernel, blocksFor(inner), kThreads, stream, db, dout,
              outer, inner, accumulateInto);
  return Status::success();
}

Status fillF32(float *out, float value, int64_t n, cudaStream_t stream) {
  LOOM_LAUNCH(fillKernel<float>, blocksFor(n), kThreads, stream, out, value, n);
  return Status::success();
}

Status fillI32(int32_t *out, int32_t value, int64_t n, cudaStream_t stream) {
  LOOM_LAUNCH(fillKernel<int32_t>, blocksFor(n), kThreads, stream, out, value,
              n);
  return Status::success();
}

Status geluForward(float *out, const float *inp, int64_t n,
                   cudaStream_t stream) {
  LOOM_LAUNCH(geluForwardKernel, blocksFor(n), kThreads, stream, out, inp, n);
  return Status::success();
}

Status geluBackward(float *dinp, const float *inp, const float *dout,
                    int64_t n, cudaStream_t stream) {
  LOOM_LAUNCH(geluBackwardKernel, blocksFor(n), kThreads, stream, dinp, inp,
              dout, n);
  return Status::success();
}

Status embeddingForward(float *out, const int32_t *idx, const float *wte,
                        int64_t N, int64_t V, int64_t C, cudaStream_t stream) {
  LOOM_LAUNCH(embeddingForwardKernel, blocksFor(N * C), kThreads, stream, out,
              idx, wte, N, V, C);
  return Status::success();
}

Status layernormForward(float *out, float *mean, float *rstd, const float *inp,
                        const float *weight, const float *bias, int64_t N,
                        int64_t C, float eps, cudaStream_t stream) {
  LOOM_LAUNCH(layernormForwardKernel, blocksForRows(N), kThreads, stream, out,
              mean, rstd, inp, weight, bias, N, C, eps);
  return Status::success();
}

Status layernormBackward(float *dinp, float *dweight, float *dbias,
                         const float *dout, const float *inp,
                         const float *weight, const float *mean,
                         const float *rstd, int64_t N, int64_t C,
                         cudaStream_t stream) {
  if (dweight || dbias)
    LOOM_LAUNCH(layernormBackwardParamKernel, blocksFor(C, 64), 64, stream,
                dweight, dbias, dout, inp, mean, rstd, N, C);
  if (dinp)
    LOOM_LAUNCH(layernormBackwardInputKernel, blocksForRows(N), kThreads,
                stream, dinp, dout, inp, weight, mean, rstd, N, C);
  return Status::success();
}

Status softmaxForward(float *out, const float *inp, int64_t N, int64_t C,
                      cudaStream_t stream) {
  LOOM_LAUNCH(softmaxForwardKernel, blocksForRows(N), kThreads, stream, out,
              inp, N, C);
  return Status::success();
}

Status softmaxBackward(float *dinp, const float *dout, const float *out,
                       int64_t N, int64_t C, cudaStream_t stream) {
  LOOM_LAUNCH(softmaxBackwardKernel, blocksForRows(N), kThreads, stream, dinp,
              dout, out, N, C);
  return Status::success();
}

Status crossEntropyForward(float *meanLoss, float *losses, const float *logits,
                           const int32_t *targets, int64_t N, int64_t V,
                           int64_t validV, float scale, cudaStream_t stream) {
  LOOM_CHECK(validV >= 1 && validV <= V,
             "cross-entropy: valid vocabulary " << validV << " not in [1, "
                                                << V << "]");
  LOOM_LAUNCH(crossEntropyRowsKernel, blocksForRows(N), kThreads, stream,
              losses, logits, targets, N, V, validV);
  LOOM_LAUNCH(meanKernel, 1u, kThreads, stream, meanLoss, losses, N, scale);
  return Status::success();
}

Status crossEntropyBackward(float *dlogits, const float *logits,
                            const int32_t *targets, int64_t N, int64_t V,
                            int64_t validV, const float *dloss,
                            float dlossScale, cudaStream_t stream) {
  LOOM_CHECK(validV >= 1 && validV <= V,
             "cross-entropy: valid vocabulary " << validV << " not in [1, "
                                                << V << "]");
  LOOM_LAUNCH(crossEntropyBackwardKernel, blocksForRows(N), kThreads, stream,
              dlogits, logits, targets, N, V, validV, dloss, dlossScale);
  return Status::success();
}

Status clipCoefficient(float *norm, float *coef, const float *sumSq,
                       double maxNorm, cudaStream_t stream) {
  LOOM_LAUNCH(clipCoefKernel, 1u, 1, stream, norm, coef, sumSq, maxNorm);
  return Status::success();
}

Status adamwStep(float *params, const float *grads, float *m, float *v,
                 int64_t n, const float *lr, const float *step,
                 const float *gradScale, const AdamWHyper &hyper,
                 cudaStream_t stream) {
  LOOM_LAUNCH(adamwKernel, blocksFor(n), kThreads, stream, params, grads, m, v,
              n, lr, step, gradScale, hyper);
  return Status::success();
}

} // namespace loom::cuda
