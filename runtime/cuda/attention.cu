//===- attention.cu - Causal multi-head attention, forward and backward ---===//
//
// The llm.c layout of runtime/cpu/attention.h: qkv[B,T,3C] packed, head h
// uses columns [h*hs, (h+1)*hs) of q, k and v; probabilities att[B,NH,T,T]
// are kept for the backward. One warp per (b, h, query row) for the
// forward; the backward is deterministic without atomics: one warp per
// query row forms dpre = att * (datt - sum(att * datt)) into a temporary
// and dq, then one warp per key row sums dk and dv over the query rows that
// see it, in order.
//
// This materializes T x T per head (O(B NH T^2) memory and traffic). A
// flash-attention-style kernel would instead tile queries x keys through
// shared memory with an online softmax, keep only the per-row log-sum-exp
// for the backward (recomputing probabilities tile by tile), and use tensor
// cores (wgmma on sm_90) for the two GEMMs per tile; the program would then
// plan a [B,NH,T] scratch instead of [B,NH,T,T].
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/kernels.h"

#include "runtime/cuda/check.h"
#include "runtime/cuda/launch.cuh"

#include <cmath>

namespace loom::cuda {
namespace {

using namespace launch;

/// Row `r` of the (b, h, t) rows: probabilities att[b,h,t,:] and, when
/// `lse` is set, their log-sum-exp lse[r].
__global__ void attentionProbsKernel(float *att, float *lse, const float *qkv,
                                     int64_t B, int64_t T, int64_t C,
                                     int64_t NH) {
  const int64_t r = warpIndex();
  const int lane = laneIndex();
  if (r >= B * NH * T)
    return;
  const int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const float *q = qkv + (b * T + t) * C3 + h * hs;
  float *row = att + r * T;
  float mx = -INFINITY;
  for (int64_t k = lane; k <= t; k += kWarp) {
    const float *key = qkv + (b * T + k) * C3 + C + h * hs;
    float s = 0;
    for (int64_t i = 0; i < hs; ++i)
      s += q[i] * key[i];
    s *= scale;
    row[k] = s;
    mx = fmaxf(mx, s);
  }
  mx = warpMax(mx);
  float sum = 0;
  for (int64_t k = lane; k <= t; k += kWarp) {
    float e = expf(row[k] - mx);
    row[k] = e;
    sum += e;
  }
  sum = warpSum(sum);
  if (lse && lane == 0)
    lse[r] = mx + logf(sum);
  const float inv = 1.0f / sum;
  for (int64_t k = lane; k < T; k += kWarp)
    row[k] = k <= t ? row[k] * inv : 0.0f;
}

/// out[b,t,h*hs + i] = sum_k att[b,h,t,k] v[b,k,h,i].
__global__ void attentionValuesKernel(float *out, const float *att,
                                      const float *qkv, int64_t B, int64_t T,
                                      int64_t C, int64_t NH) {
  const int64_t r = warpIndex();
  const int lane = laneIndex();
  if (r >= B * NH * T)
    return;
  const int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
  const int64_t hs = C / NH, C3 = 3 * C;
  const float *row = att + r * T;
  for (int64_t i = lane; i < hs; i += kWarp) {
    float s = 0;
    for (int64_t k = 0; k <= t; ++k)
      s += row[k] * qkv[(b * T + k) * C3 + 2 * C + h * hs + i];
    out[(b * T + t) * C + h * hs + i] = s;
  }
}

/// dpre[b,h,t,k] = att * (datt - sum_k att * datt) with datt = dout_t . v_k
/// (scaled by 1/sqrt(hs)); then dq_t = sum_k dpre k_k.
__global__ void attentionBackwardQueryKernel(float *dqkv, float *dpre,
                                             const float *dout,
                                             const float *qkv,
                                             const float *att, int64_t B,
                                             int64_t T, int64_t C, int64_t NH) {
  const int64_t r = warpIndex();
  const int lane = laneIndex();
  if (r >= B * NH * T)
    return;
  const int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  const float *dy = dout + (b * T + t) * C + h * hs;
  const float *row = att + r * T;
  float *drow = dpre + r * T;
  float dot = 0;
  for (int64_t k = lane; k <= t; k += kWarp) {
    const float *v = qkv + (b * T + k) * C3 + 2 * C + h * hs;
    float d = 0;
    for (int64_t i = 0; i < hs; ++i)
      d += dy[i] * v[i];
    drow[k] = d;
    dot += d * row[k];
  }
  dot = warpSum(dot);
  for (int64_t k = lane; k < T; k += kWarp)
    drow[k] = k <= t ? row[k] * (drow[k] - dot) * scale : 0.0f;
  __syncwarp();
  for (int64_t i = lane; i < hs; i += kWarp) {
    float s = 0;
    for (int64_t k = 0; k <= t; ++k)
      s += drow[k] * qkv[(b * T + k) * C3 + C + h * hs + i];
    dqkv[(b * T + t) * C3 + h * hs + i] = s;
  }
}

/// dk_k = sum_{t >= k} dpre[t,k] q_t; dv_k = sum_{t >= k} att[t,k] dout_t.
__global__ void attentionBackwardKeyKernel(float *dqkv, const float *dpre,
                                           const float *dout, const float *qkv,
                                           const float *att, int64_t B,
                                           int64_t T, int64_t C, int64_t NH) {
  const int64_t r = warpIndex();
  const int lane = laneIndex();
  if (r >= B * NH * T)
    return;
  const int64_t k = r % T, h = (r / T) % NH, b = r / (T * NH);
  const int64_t hs = C / NH, C3 = 3 * C;
  const int64_t head = (b * NH + h) * T * T;
  for (int64_t i = lane; i < hs; i += kWarp) {
    float dk = 0, dv = 0;
    for (int64_t t = k; t < T; ++t) {
      dk += dpre[head + t * T + k] * qkv[(b * T + t) * C3 + h * hs + i];
      dv += att[head + t * T + k] * dout[(b * T + t) * C + h * hs + i];
    }
    dqkv[(b * T + k) * C3 + C + h * hs + i] = dk;
    dqkv[(b * T + k) * C3 + 2 * C + h * hs + i] = dv;
  }
}

} // namespace

Status attentionForward(float *out, float *att, const float *qkv, int64_t B,
                        int64_t T, int64_t C, int64_t NH, cudaStream_t stream,
                        float *lse) {
  LOOM_CHECK(NH > 0 && C % NH == 0,
             "attention: C = " << C << " is not divisible by " << NH
                               << " heads");
  const int64_t rows = B * NH * T;
  if (rows == 0)
    return Status::success();
  LOOM_LAUNCH(attentionProbsKernel, blocksForRows(rows), kThreads, stream, att,
              lse, qkv, B, T, C, NH);
  if (out)
    LOOM_LAUNCH(attentionValuesKernel, blocksForRows(rows), kThreads, stream,
                out, att, qkv, B, T, C, NH);
  return Status::success();
}

Status attentionBackward(float *dqkv, const float *dout, const float *qkv,
                         const float *att, float *dpre, int64_t B, int64_t T,
                         int64_t C, int64_t NH, cudaStream_t stream) {
  LOOM_CHECK(NH > 0 && C % NH == 0,
             "attention: C = " << C << " is not divisible by " << NH
                               << " heads");
  const int64_t rows = B * NH * T;
  if (rows == 0)
    return Status::success();
  LOOM_LAUNCH(attentionBackwardQueryKernel, blocksForRows(rows), kThreads,
              stream, dqkv, dpre, dout, qkv, att, B, T, C, NH);
  LOOM_LAUNCH(attentionBackwardKeyKernel, blocksForRows(rows), kThreads,
              stream, dqkv, dpre, dout, qkv, att, B, T, C, NH);
  return Status::success();
}

} // namespace loom::cuda
