//===- kernels_bf16.cu - Mixed-dtype CUDA kernels for bf16 training -------===//
//
// kernels.cu's and vocab_parallel.cu's kernels with every float operand a
// FloatRef (kernels_bf16.h): the same thread layouts (one thread per
// element, one warp per row, one thread per column for reductions over
// rows) and summation orders, with loads widened to fp32 and stores rounded
// to bf16 where the operand is bf16. Where GPT-2's bf16 tensors are
// aligned, the element-wise kernels, layer norm and cross-entropy have
// variants that move 16 bytes (8 values) per load instead.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/kernels_bf16.h"

#include "runtime/cuda/adamw_step.cuh"
#include "runtime/cuda/bf16x8.cuh"
#include "runtime/cuda/check.h"
#include "runtime/cuda/launch.cuh"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cuda_bf16.h>
#include <initializer_list>

namespace loom::cuda {
namespace {

using namespace launch;

__device__ inline float ld(FloatRef r, int64_t i) {
  return r.bf16
             ? __bfloat162float(static_cast<const __nv_bfloat16 *>(r.data)[i])
             : static_cast<const float *>(r.data)[i];
}

/// Rounds to nearest even when the operand is bf16.
__device__ inline void st(FloatRef r, int64_t i, float x) {
  if (r.bf16)
    static_cast<__nv_bfloat16 *>(r.data)[i] = __float2bfloat16(x);
  else
    static_cast<float *>(r.data)[i] = x;
}

__device__ inline int64_t threadIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

/// Rows per partial of the two-stage reductions over rows.
constexpr int64_t kRowChunk = 128;

/// Columns of this rank's block below validV (vocab_parallel.cu's).
inline int64_t localValidColumns(int64_t V, int64_t offset, int64_t validV) {
  const int64_t cols = validV - offset < V ? validV - offset : V;
  return cols > 0 ? cols : 0;
}

//===----------------------------------------------------------------------===//
// Element-wise
//===----------------------------------------------------------------------===//

__global__ void addKernel(FloatRef out, FloatRef a, FloatRef b, int64_t n,
                          int64_t inner) {
  const int64_t i = threadIndex();
  if (i < n) // (no 64-bit modulo for a plain add)
    st(out, i, ld(a, i) + ld(b, inner == n ? i : i % inner));
}

// Element-wise kernels on bf16 operands of one size run 8 elements (16
// bytes) per thread (bf16x8.cuh): one element per thread, GPT-2's residual
// adds (25 MB operands) ran at under a third of the H200's memory
// bandwidth.

/// Whether every operand is bf16 and 16-byte aligned and n a multiple of
/// kVec: the 8-wide kernels apply.
bool vectorizable(int64_t n, std::initializer_list<FloatRef> operands) {
  if (n % kVec != 0)
    return false;
  for (const FloatRef &r : operands)
    if (!r.bf16 || reinterpret_cast<uintptr_t>(r.data) % sizeof(uint4) != 0)
      return false;
  return true;
}

/// out = f(a) or f(a, b), 8 elements per thread (`vectors` 16-byte groups).
template <typename F>
__global__ void map1BF16x8Kernel(uint4 *out, const uint4 *a, int64_t vectors,
                                 F f) {
  const int64_t i = threadIndex();
  if (i >= vectors)
    return;
  float va[kVec];
  widen8(va, a[i]);
  for (int k = 0; k < kVec; ++k)
    va[k] = f(va[k]);
  out[i] = round8(va);
}

template <typename F>
__global__ void map2BF16x8Kernel(uint4 *out, const uint4 *a, const uint4 *b,
                                 int64_t vectors, F f) {
  const int64_t i = threadIndex();
  if (i >= vectors)
    return;
  float va[kVec], vb[kVec];
  widen8(va, a[i]);
  widen8(vb, b[i]);
  for (int k = 0; k < kVec; ++k)
    va[k] = f(va[k], vb[k]);
  out[i] = round8(va);
}

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};

// Reductions over rows in two deterministic stages: (1) block (chunk,
// column block) sums kRowChunk rows of its columns in order into a partial,
// (2) one thread per column adds the partials in chunk order. All of the
// GPU works on stage 1 (a thread per column alone would leave it idle on
// GPT-2's 16K rows).
__global__ void columnSumPartialKernel(double *partial, FloatRef dout,
                                       int64_t outer, int64_t inner,
                                       int64_t colBlocks) {
  const int64_t chunk = blockIdx.x / colBlocks;
  const int64_t j = (blockIdx.x % colBlocks) * blockDim.x + threadIdx.x;
  if (j >= inner)
    return;
  const int64_t end = min(outer, (chunk + 1) * kRowChunk);
  double s = 0;
  for (int64_t o = chunk * kRowChunk; o < end; ++o)
    s += ld(dout, o * inner + j);
  partial[chunk * inner + j] = s;
}

// The same partials from bf16 rows in 16-byte loads (GPT-2's bias
// gradients: 16K rows of 768 to 3072 columns; the kernel above reads two
// bytes per thread and row, and keeps a 128-row chain of loads per
// thread): a block (8 warps) owns kRowChunk rows of 256 columns, warp w
// rows w, w + 8, ... of them, lane l the 8 columns of group l. Each column
// is summed in double, per warp in row order, then the 8 warps' sums in
// warp order: deterministic, though not the order of the kernel above.
constexpr int kSumWarps = kThreads / kWarp;
constexpr int kSumColumns = kWarp * kVec; // columns per block

__global__ void __launch_bounds__(kThreads)
    columnSumPartialBF16x8Kernel(double *partial, const __nv_bfloat16 *dout,
                                 int64_t outer, int64_t inner,
                                 int64_t colBlocks) {
  __shared__ double warpSums[kSumWarps * kSumColumns];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t chunk = blockIdx.x / colBlocks;
  const int64_t col0 = (blockIdx.x % colBlocks) * kSumColumns;
  const int64_t group = col0 / kVec + lane, groups = inner / kVec;
  const int64_t end = min(outer, (chunk + 1) * kRowChunk);
  double sum[kVec] = {};
  if (group < groups)
    for (int64_t o = chunk * kRowChunk + warp; o < end; o += kSumWarps) {
      float x[kVec];
      widen8(x, reinterpret_cast<const uint4 *>(dout + o * inner)[group]);
#pragma unroll
      for (int k = 0; k < kVec; ++k)
        sum[k] += x[k];
    }
#pragma unroll
  for (int k = 0; k < kVec; ++k)
    warpSums[warp * kSumColumns + lane * kVec + k] = sum[k];
  __syncthreads();
  const int64_t col = col0 + threadIdx.x;
  if (col >= inner)
    return;
  double s = 0;
  for (int w = 0; w < kSumWarps; ++w)
    s += warpSums[w * kSumColumns + threadIdx.x];
  partial[chunk * inner + col] = s;
}

__global__ void columnSumFinishKernel(FloatRef db, const double *partial,
                                      int64_t chunks, int64_t inner) {
  const int64_t j = threadIndex();
  if (j >= inner)
    return;
  double s = 0;
  for (int64_t c = 0; c < chunks; ++c)
    s += partial[c * inner + j];
  st(db, j, static_cast<float>(s));
}

__global__ void fillKernel(FloatRef out, float value, int64_t n) {
  const int64_t i = threadIndex();
  if (i < n)
    st(out, i, value);
}

constexpr float kGeluScale = 0.7978845608028654f; // sqrt(2/pi)

__device__ inline float gelu(float x) {
  const float cube = 0.044715f * x * x * x;
  return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + cube)));
}

/// d gelu(x) / dx.
__device__ inline float geluSlope(float x) {
  const float cube = 0.044715f * x * x * x;
  const float th = tanhf(kGeluScale * (x + cube));
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) +
         0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}

__global__ void geluForwardKernel(FloatRef out, FloatRef inp, int64_t n) {
  const int64_t i = threadIndex();
  if (i < n)
    st(out, i, gelu(ld(inp, i)));
}

__global__ void geluBackwardKernel(FloatRef dinp, FloatRef inp, FloatRef dout,
                                   int64_t n) {
  const int64_t i = threadIndex();
  if (i < n)
    st(dinp, i, geluSlope(ld(inp, i)) * ld(dout, i));
}

struct Gelu {
  __device__ float operator()(float x) const { return gelu(x); }
};
struct GeluGrad {
  __device__ float operator()(float x, float dy) const {
    return geluSlope(x) * dy;
  }
};

//===----------------------------------------------------------------------===//
// Embedding
//===----------------------------------------------------------------------===//

__global__ void embeddingForwardKernel(FloatRef out, const int32_t *idx,
                                       FloatRef rows, int64_t N,
                                       int64_t rowBegin, int64_t R, int64_t C) {
  const int64_t i = threadIndex();
  if (i >= N * C)
    return;
  const int64_t n = i / C, c = i % C;
  const int64_t r = static_cast<int64_t>(idx[n]) - rowBegin;
  st(out, i, r >= 0 && r < R ? ld(rows, r * C + c) : 0.0f);
}

// The embedding gradient in four steps, deterministic without a [V, C]
// fp32 accumulator: (1) count each id's tokens, (2) scan the counts into
// each id's range of a token list, (3) fill the list stably (an id's tokens
// in position order), (4) one warp per table row adds its tokens' gradient
// rows in that order into fp32 registers, kColumnsPerLane columns per lane
// at a time, and writes the row once (rounded once when bf16): the sums of
// the CPU kernel, in its order. Each warp scanning every token id for its
// row instead (V x N id reads) took 2.65 ms per GPT-2 step on an H200.
constexpr int kColumnsPerLane = 8;
constexpr int kScanThreads = 1024; // steps 2 and 3: one block

__global__ void embeddingClearKernel(int32_t *counts, int64_t V) {
  const int64_t v = threadIndex();
  if (v < V)
    counts[v] = 0;
}

__global__ void embeddingCountKernel(int32_t *counts, const int32_t *idx,
                                     int64_t N, int64_t V) {
  const int64_t n = threadIndex();
  if (n < N && idx[n] >= 0 && idx[n] < V)
    atomicAdd(&counts[idx[n]], 1); // integer counts: the same every run
}

/// offsets[v] = tokens of ids below v (v = 0..V); counts becomes each id's
/// cursor, its range's start. Thread t owns a contiguous range of ids.
__global__ void embeddingScanKernel(int32_t *offsets, int32_t *counts,
                                    int64_t V) {
  __shared__ int32_t start[kScanThreads];
  const int64_t per = (V + kScanThreads - 1) / kScanThreads;
  const int64_t begin = min(V, threadIdx.x * per), end = min(V, begin + per);
  int32_t sum = 0;
  for (int64_t v = begin; v < end; ++v)
    sum += counts[v];
  start[threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t run = 0;
    for (int t = 0; t < kScanThreads; ++t) {
      const int32_t own = start[t];
      start[t] = run;
      run += own;
    }
    offsets[V] = run;
  }
  __syncthreads();
  int32_t run = start[threadIdx.x];
  for (int64_t v = begin; v < end; ++v) {
    const int32_t own = counts[v];
    offsets[v] = run;
    counts[v] = run;
    run += own;
  }
}

/// positions[cursor[id] + rank] = n, chunk by chunk in token order, rank the
/// tokens of the same id earlier in the chunk; the chunk's last token of an
/// id moves that id's cursor past the chunk's.
__global__ void embeddingListKernel(int32_t *positions, int32_t *cursor,
                                    const int32_t *idx, int64_t N, int64_t V) {
  __shared__ int32_t ids[kScanThreads];
  const int t = threadIdx.x;
  for (int64_t base = 0; base < N; base += kScanThreads) {
    const int64_t n = base + t;
    int32_t id = n < N ? idx[n] : -1;
    if (id >= V)
      id = -1;
    ids[t] = id;
    __syncthreads();
    int32_t slot = -1;
    bool last = true;
    if (id >= 0) {
      const int chunk =
          static_cast<int>(min(static_cast<int64_t>(kScanThreads), N - base));
      int rank = 0;
      for (int j = 0; j < chunk; ++j)
        if (ids[j] == id) {
          rank += j < t;
          last = last && j <= t;
        }
      slot = cursor[id] + rank;
      positions[slot] = static_cast<int32_t>(n);
    }
    __syncthreads(); // every cursor read before one moves
    if (slot >= 0 && last)
      cursor[id] = slot + 1;
    __syncthreads(); // cursors moved and ids read before the next chunk
  }
}

__global__ void embeddingGradRowsKernel(FloatRef dtable, FloatRef dout,
                                        const int32_t *positions,
                                        const int32_t *offsets, int64_t V,
                                        int64_t C) {
  const int64_t row = warpIndex();
  const int lane = laneIndex();
  if (row >= V)
    return;
  const int32_t begin = offsets[row], end = offsets[row + 1];
  for (int64_t c0 = 0; c0 < C; c0 += kWarp * kColumnsPerLane) {
    float acc[kColumnsPerLane];
    for (int k = 0; k < kColumnsPerLane; ++k)
      acc[k] = 0.0f;
    for (int32_t p = begin; p < end; ++p) {
      const int64_t base = static_cast<int64_t>(positions[p]) * C;
      for (int k = 0; k < kColumnsPerLane; ++k) {
        const int64_t c = c0 + k * kWarp + lane;
        if (c < C)
          acc[k] += ld(dout, base + c);
      }
    }
    for (int k = 0; k < kColumnsPerLane; ++k) {
      const int64_t c = c0 + k * kWarp + lane;
      if (c < C)
        st(dtable, row * C + c, acc[k]);
    }
  }
}

//===----------------------------------------------------------------------===//
// Layer norm
//===----------------------------------------------------------------------===//

/// Row statistics of the layer-norm forward: the program's mean and rstd
/// results (in their own dtypes, when requested) and the fp32 copies the
/// backward reads (when requested).
__device__ void storeRowStatistics(FloatRef mean, FloatRef rstd, float *mean32,
                                   float *rstd32, int64_t row, float m,
                                   float r) {
  if (mean.data)
    st(mean, row, m);
  if (rstd.data)
    st(rstd, row, r);
  if (mean32)
    mean32[row] = m;
  if (rstd32)
    rstd32[row] = r;
}

__global__ void layernormForwardKernel(FloatRef out, FloatRef mean,
                                       FloatRef rstd, float *mean32,
                                       float *rstd32, FloatRef inp,
                                       FloatRef weight, FloatRef bias,
                                       int64_t N, int64_t C, float eps) {
  const int64_t row = warpIndex();
  const int lane = laneIndex();
  if (row >= N)
    return;
  const int64_t base = row * C;
  float s = 0;
  for (int64_t c = lane; c < C; c += kWarp)
    s += ld(inp, base + c);
  const float m = warpSum(s) / C;
  float v = 0;
  for (int64_t c = lane; c < C; c += kWarp) {
    const float d = ld(inp, base + c) - m;
    v += d * d;
  }
  const float r = rsqrtf(warpSum(v) / C + eps);
  if (lane == 0)
    storeRowStatistics(mean, rstd, mean32, rstd32, row, m, r);
  if (out.data)
    for (int64_t c = lane; c < C; c += kWarp)
      st(out, base + c,
         (ld(inp, base + c) - m) * r * ld(weight, c) + ld(bias, c));
}

// The 16-byte layer-norm kernels below: a lane holds up to kMaxLnGroups
// 8-column groups of a row, so rows up to kMaxLnFusedColumns wide.
constexpr int kLnWarps = kThreads / kWarp;
constexpr int kMaxLnGroups = 4;
constexpr int64_t kMaxLnFusedColumns = int64_t(kWarp) * kVec * kMaxLnGroups;
static_assert(kMaxLnGroups == 4, "byLnGroups picks among four kernels");

/// The instance of a 16-byte layer-norm kernel whose lanes hold as many
/// 8-column groups as a row of C (at most kMaxLnFusedColumns) needs, so
/// narrow rows keep fewer registers live.
template <typename Kernel>
Kernel byLnGroups(int64_t C, Kernel one, Kernel two, Kernel three,
                  Kernel four) {
  switch ((C / kVec + kWarp - 1) / kWarp) {
  case 1:
    return one;
  case 2:
    return two;
  case 3:
    return three;
  default:
    return four;
  }
}

/// The mean and 1 / std of a row of C held packed by a warp (the lane's
/// 8-column groups lane, lane + 32, ...; zero past the row's `groups`):
/// the one definition of the 16-byte layer-norm kernels' statistics, so a
/// gradient that computes them from its rows gets the forward's bits.
template <int kGroups>
__device__ inline void packedRowStatistics(const uint4 (&xBits)[kGroups],
                                           int64_t groups, int lane, int64_t C,
                                           float eps, float &m, float &r) {
  float s = 0.0f;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    float x[kVec];
    widen8(x, xBits[g]);
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      s += x[k];
  }
  m = warpSum(s) / C;
  float v = 0.0f;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    if (lane + int64_t(kWarp) * g >= groups)
      continue;
    float x[kVec];
    widen8(x, xBits[g]);
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      v += (x[k] - m) * (x[k] - m);
  }
  r = rsqrtf(warpSum(v) / C + eps);
}

/// layernormForwardKernel for bf16 rows of C (a multiple of 8, at most
/// kMaxLnFusedColumns) in 16-byte loads: the lane's 8-column groups (lane,
/// lane + 32, ...) are read once and kept packed for the mean, the
/// variance and the output. out (and then weight and bias) are bf16 and
/// 16-byte aligned, or out is null (statistics only). With `residual` the
/// row normalized is inp + residual, rounded to bf16 and stored into `sum`
/// first (a residual Add fused in, residual_norms.h: the bits mixedAdd
/// writes); sum may be inp or residual (each lane reads its groups before
/// it writes them).
template <int kGroups>
__global__ void layernormForwardRowsKernel(
    __nv_bfloat16 *out, FloatRef mean, FloatRef rstd, float *mean32,
    float *rstd32, const __nv_bfloat16 *inp, const __nv_bfloat16 *residual,
    __nv_bfloat16 *sum, const __nv_bfloat16 *weight, const __nv_bfloat16 *bias,
    int64_t N, int64_t C, float eps) {
  const int64_t row = warpIndex();
  const int lane = laneIndex();
  if (row >= N)
    return;
  const int64_t groups = C / kVec;
  const auto *xRow = reinterpret_cast<const uint4 *>(inp + row * C);
  uint4 xBits[kGroups];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int64_t group = lane + int64_t(kWarp) * g;
    xBits[g] = group < groups ? xRow[group] : make_uint4(0, 0, 0, 0);
    if (residual && group < groups) {
      float a[kVec], b[kVec];
      widen8(a, xBits[g]);
      widen8(b, reinterpret_cast<const uint4 *>(residual + row * C)[group]);
#pragma unroll
      for (int k = 0; k < kVec; ++k)
        a[k] += b[k];
      xBits[g] = round8(a);
      reinterpret_cast<uint4 *>(sum + row * C)[group] = xBits[g];
    }
  }
  float m, r;
  packedRowStatistics(xBits, groups, lane, C, eps, m, r);
  if (lane == 0)
    storeRowStatistics(mean, rstd, mean32, rstd32, row, m, r);
  if (!out)
    return;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int64_t group = lane + int64_t(kWarp) * g;
    if (group >= groups)
      continue;
    float x[kVec], w[kVec], b[kVec], y[kVec];
    widen8(x, xBits[g]);
    widen8(w, reinterpret_cast<const uint4 *>(weight)[group]);
    widen8(b, reinterpret_cast<const uint4 *>(bias)[group]);
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      y[k] = (x[k] - m) * r * w[k] + b[k];
    reinterpret_cast<uint4 *>(out + row * C)[group] = round8(y);
  }
}

__global__ void layernormBackwardInputKernel(FloatRef dinp, FloatRef dout,
                                             FloatRef inp, FloatRef weight,
                                             const float *mean,
                                             const float *rstd, int64_t N,
                                             int64_t C) {
  const int64_t row = warpIndex();
  const int lane = laneIndex();
  if (row >= N)
    return;
  const int64_t base = row * C;
  const float m = mean[row], r = rstd[row];
  float sumD = 0, sumDX = 0;
  for (int64_t c = lane; c < C; c += kWarp) {
    const float xhat = (ld(inp, base + c) - m) * r;
    const float d = ld(weight, c) * ld(dout, base + c);
    sumD += d;
    sumDX += d * xhat;
  }
  sumD = warpSum(sumD) / C;
  sumDX = warpSum(sumDX) / C;
  for (int64_t c = lane; c < C; c += kWarp) {
    const float xhat = (ld(inp, base + c) - m) * r;
    const float d = ld(weight, c) * ld(dout, base + c);
    st(dinp, base + c, (d - sumD - xhat * sumDX) * r);
  }
}

__global__ void layernormParamPartialKernel(float *partial, FloatRef dout,
                                            FloatRef inp, const float *mean,
                                            const float *rstd, int64_t N,
                                            int64_t C, int64_t colBlocks) {
  const int64_t chunk = blockIdx.x / colBlocks;
  const int64_t c = (blockIdx.x % colBlocks) * blockDim.x + threadIdx.x;
  if (c >= C)
    return;
  const int64_t chunks = (N + kRowChunk - 1) / kRowChunk;
  const int64_t end = min(N, (chunk + 1) * kRowChunk);
  float dw = 0, db = 0;
  for (int64_t n = chunk * kRowChunk; n < end; ++n) {
    const float dy = ld(dout, n * C + c);
    dw += (ld(inp, n * C + c) - mean[n]) * rstd[n] * dy;
    db += dy;
  }
  partial[chunk * C + c] = dw;
  partial[(chunks + chunk) * C + c] = db;
}

__global__ void layernormParamFinishKernel(FloatRef dweight, FloatRef dbias,
                                           const float *partial, int64_t chunks,
                                           int64_t C) {
  const int64_t c = threadIndex();
  if (c >= C)
    return;
  float dw = 0, db = 0;
  for (int64_t k = 0; k < chunks; ++k) {
    dw += partial[k * C + c];
    db += partial[(chunks + k) * C + c];
  }
  if (dweight.data)
    st(dweight, c, dw);
  if (dbias.data)
    st(dbias, c, db);
}

// The bf16 layer-norm gradient in one pass when every operand is bf16,
// 16-byte aligned and C a multiple of 8 up to 32 * 8 * kMaxLnGroups: a
// block (8 warps) owns kRowChunk rows, a warp every 8th of them, a lane
// 8-column groups lane, lane + 32, ... of each. Each warp reads its rows'
// dout and inp once, 16 bytes a load, writes dinp and keeps the lane's
// columns' dweight and dbias sums in registers; the block then adds its 8
// warps' sums in warp order into the chunk's partial (the layout of
// layernormParamPartialKernel's, finished by layernormParamFinishKernel),
// so the sums are deterministic. The separate partial and input kernels
// read both operands twice, in 2-byte loads.
//
// With `residual`, dinp receives residual + dinp as a following bf16 Add
// would write it (dinp rounded, then the sum rounded; residual_norms.h);
// dinp may be residual.
//
// Without mean / rstd the warp computes each row's statistics from the
// packed row it holds anyway (packedRowStatistics: the forward's bits) and
// stores them into meanOut / rstdOut where given, instead of a statistics
// kernel reading every row once more before this one.
template <int kGroups>
__global__ void __launch_bounds__(kThreads) layernormBackwardFusedKernel(
    __nv_bfloat16 *dinp, float *partial, const __nv_bfloat16 *dout,
    const __nv_bfloat16 *inp, const __nv_bfloat16 *weight, const float *mean,
    const float *rstd, FloatRef meanOut, FloatRef rstdOut, float eps,
    const __nv_bfloat16 *residual, int64_t N, int64_t C) {
  __shared__ float warpSums[kLnWarps * kMaxLnFusedColumns];
  const int warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  const int64_t chunk = blockIdx.x, chunks = (N + kRowChunk - 1) / kRowChunk;
  const int64_t begin = chunk * kRowChunk, end = min(N, begin + kRowChunk);
  const int64_t groups = C / kVec;
  // The row's operands stay packed (4 registers per 8 columns) between the
  // two passes over it; the sums are fp32.
  uint4 wBits[kGroups], dyBits[kGroups], xBits[kGroups];
  float dw[kGroups][kVec], db[kGroups][kVec];
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int64_t group = lane + int64_t(kWarp) * g;
    wBits[g] = group < groups ? reinterpret_cast<const uint4 *>(weight)[group]
                              : make_uint4(0, 0, 0, 0);
    dyBits[g] = xBits[g] = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int k = 0; k < kVec; ++k)
      dw[g][k] = db[g][k] = 0.0f;
  }
  for (int64_t row = begin + warp; row < end; row += kLnWarps) {
    const auto *dyRow = reinterpret_cast<const uint4 *>(dout + row * C);
    const auto *xRow = reinterpret_cast<const uint4 *>(inp + row * C);
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const int64_t group = lane + int64_t(kWarp) * g;
      if (group >= groups)
        continue;
      dyBits[g] = dyRow[group];
      xBits[g] = xRow[group];
    }
    float m, r;
    if (mean) {
      m = mean[row];
      r = rstd[row];
    } else {
      packedRowStatistics(xBits, groups, lane, C, eps, m, r);
      if (lane == 0)
        storeRowStatistics(meanOut, rstdOut, nullptr, nullptr, row, m, r);
    }
    float sumD = 0.0f, sumDX = 0.0f;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const int64_t group = lane + int64_t(kWarp) * g;
      if (group >= groups)
        continue;
      float w[kVec], dy[kVec], x[kVec];
      widen8(w, wBits[g]);
      widen8(dy, dyBits[g]);
      widen8(x, xBits[g]);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float xhat = (x[k] - m) * r, d = w[k] * dy[k];
        sumD += d;
        sumDX += d * xhat;
        dw[g][k] += xhat * dy[k];
        db[g][k] += dy[k];
      }
    }
    sumD = warpSum(sumD) / C;
    sumDX = warpSum(sumDX) / C;
    if (!dinp)
      continue;
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const int64_t group = lane + int64_t(kWarp) * g;
      if (group >= groups)
        continue;
      float w[kVec], dy[kVec], x[kVec], out[kVec];
      widen8(w, wBits[g]);
      widen8(dy, dyBits[g]);
      widen8(x, xBits[g]);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float xhat = (x[k] - m) * r;
        out[k] = (w[k] * dy[k] - sumD - xhat * sumDX) * r;
      }
      uint4 bits = round8(out);
      if (residual) {
        float res[kVec];
        widen8(out, bits);
        widen8(res, reinterpret_cast<const uint4 *>(residual + row * C)[group]);
#pragma unroll
        for (int k = 0; k < kVec; ++k)
          out[k] = res[k] + out[k];
        bits = round8(out);
      }
      reinterpret_cast<uint4 *>(dinp + row * C)[group] = bits;
    }
  }
  if (!partial)
    return;
  // The chunk's partials: dweight's, then dbias's, each the 8 warps' sums
  // added in warp order.
  for (int which = 0; which < 2; ++which) {
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const int64_t col = (lane + int64_t(kWarp) * g) * kVec;
      if (col < C)
#pragma unroll
        for (int k = 0; k < kVec; ++k)
          warpSums[warp * kMaxLnFusedColumns + col + k] =
              which == 0 ? dw[g][k] : db[g][k];
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < C; c += kThreads) {
      float sum = 0.0f;
      for (int v = 0; v < kLnWarps; ++v)
        sum += warpSums[v * kMaxLnFusedColumns + c];
      partial[(which * chunks + chunk) * C + c] = sum;
    }
    __syncthreads(); // the sums read before dbias's overwrite them
  }
}

//===----------------------------------------------------------------------===//
// Softmax and cross-entropy
//===----------------------------------------------------------------------===//

__global__ void softmaxForwardKernel(FloatRef out, FloatRef inp, int64_t N,
                                     int64_t C) {
  const int64_t row = warpIndex();
  const int lane = laneIndex();
  if (row >= N)
    return;
  const int64_t base = row * C;
  float mx = -INFINITY;
  for (int64_t c = lane; c < C; c += kWarp)
    mx = fmaxf(mx, ld(inp, base + c));
  mx = warpMax(mx);
  float s = 0;
  for (int64_t c = lane; c < C; c += kWarp)
    s += expf(ld(inp, base + c) - mx);
  s = warpSum(s);
  __syncwarp(); // out may alias inp: every lane has read the row
  for (int64_t c = lane; c < C; c += kWarp)
    st(out, base + c, expf(ld(inp, base + c) - mx) / s);
}

__global__ void softmaxBackwardKernel(FloatRef dinp, FloatRef dout,
                                      FloatRef out, int64_t N, int64_t C) {
  const int64_t row = warpIndex();
  const int lane = laneIndex();
  if (row >= N)
    return;
  const int64_t base = row * C;
  float dot = 0;
  for (int64_t c = lane; c < C; c += kWarp)
    dot += ld(out, base + c) * ld(dout, base + c);
  dot = warpSum(dot);
  __syncwarp();
  for (int64_t c = lane; c < C; c += kWarp)
    st(dinp, base + c, ld(out, base + c) * (ld(dout, base + c) - dot));
}

/// Row max and log-sum-exp over the valid columns of the row at `base`, in
/// one pass over the row (the online softmax: each lane's sum rescaled when
/// its maximum grows, the lanes' sums rescaled to the warp's maximum): a
/// GPT-2 logits row is 50304 values, read once here instead of twice.
__device__ void rowLogSumExp(FloatRef x, int64_t base, int64_t validV, int lane,
                             float &mx, float &lse) {
  float m = -INFINITY, s = 0.0f;
  for (int64_t c = lane; c < validV; c += kWarp) {
    const float v = ld(x, base + c);
    if (v > m) {
      s = s * expf(m - v) + 1.0f; // expf(-inf) = 0 on the first value
      m = v;
    } else if (v != -INFINITY) { // a -inf logit adds 0 (and no NaN)
      s += expf(v - m);
    }
  }
  mx = warpMax(m);
  // A lane with no valid column (m = -inf) adds nothing.
  lse = logf(warpSum(m == -INFINITY ? 0.0f : s * expf(m - mx)));
}

__global__ void crossEntropyRowsKernel(float *losses, FloatRef logits,
                                       const int32_t *targets, int64_t N,
                                       int64_t V, int64_t validV) {
  const int64_t row = warpIndex();
  const int lane = laneIndex();
  if (row >= N)
    return;
  float mx, lse;
  rowLogSumExp(logits, row * V, validV, lane, mx, lse);
  const int32_t t = targets[row];
  if (lane == 0)
    losses[row] =
        (t >= 0 && t < validV) ? (mx + lse - ld(logits, row * V + t)) : NAN;
}

/// One block: mean of the row losses in a fixed order, times scale.
__global__ void meanKernel(FloatRef out, const float *x, int64_t n,
                           float scale) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    s += x[i];
  s = blockSum(s);
  if (threadIdx.x == 0)
    st(out, 0, static_cast<float>(s / n * scale));
}

__global__ void crossEntropyBackwardKernel(FloatRef dlogits, FloatRef logits,
                                           const int32_t *targets, int64_t N,
                                           int64_t V, int64_t validV,
                                           FloatRef dloss, float dlossScale) {
  const int64_t row = warpIndex();
  const int lane = laneIndex();
  if (row >= N)
    return;
  const int64_t base = row * V;
  float mx, lse;
  rowLogSumExp(logits, base, validV, lane, mx, lse);
  const float g = ld(dloss, 0) * dlossScale / N;
  const int32_t t = targets[row];
  __syncwarp(); // dlogits may alias logits
  for (int64_t c = lane; c < V; c += kWarp) {
    float d = 0;
    if (c < validV)
      d = (expf(ld(logits, base + c) - mx - lse) - (c == t ? 1.0f : 0.0f)) * g;
    st(dlogits, base + c, d);
  }
}

// GPT-2's logits (16K rows of 50304 bf16) in 16-byte loads, a block per
// row: the warp-per-row kernels above read them two bytes per lane, an
// instruction per element. Blocks of kCeThreads keep few rows in flight
// (at most 4 a SM: 528 rows of 100 KB on 132 SMs, about the 50 MB of an
// H100's or H200's L2), so the gradient's second pass over a row mostly
// finds it still in L2; it reads the row back to front, the part its
// first pass read last first.
constexpr int kCeThreads = 512;
constexpr int kCeWarps = kCeThreads / kWarp;

/// (m, s) = the running max and sum of exp(x - m) of a set of values,
/// merged with another set's (m2, s2). An empty set is (-inf, 0); a set
/// holding a NaN has s = NaN, which every merge keeps.
__device__ inline void mergeSoftmaxStats(float &m, float &s, float m2,
                                         float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) {
    s += s2; // both empty: 0, or a NaN carried along
    return;
  }
  s = s * expf(m - mx) + s2 * expf(m2 - mx); // expf(-inf) = 0: empty adds 0
  m = mx;
}

/// The row max and log-sum-exp of the first validV values of a row of
/// `groups` 16-byte groups, in every thread of the block: each thread's
/// groups (t, t + kCeThreads, ...) in one online-softmax pass, then a fixed
/// tree over lanes and warps (deterministic). Ends with a barrier, so every
/// thread has read its part of the row on return.
__device__ void blockRowLogSumExp(const uint4 *row, int64_t groups,
                                  int64_t validV, float &mx, float &lse) {
  __shared__ float warpM[kCeWarps], warpS[kCeWarps];
  float m = -INFINITY, s = 0.0f;
  bool nan = false; // fmaxf skips NaN: a NaN logit must still give NaN
  for (int64_t g = threadIdx.x; g < groups; g += kCeThreads) {
    float x[kVec];
    widen8(x, row[g]);
    float gm = -INFINITY;
    for (int k = 0; k < kVec; ++k) {
      if (g * kVec + k >= validV)
        x[k] = -INFINITY; // vocabulary padding
      nan |= x[k] != x[k];
      gm = fmaxf(gm, x[k]);
    }
    if (gm == -INFINITY)
      continue; // nothing valid here (a -inf logit adds 0)
    if (gm > m) {
      s *= expf(m - gm);
      m = gm;
    }
    for (int k = 0; k < kVec; ++k)
      s += expf(x[k] - m);
  }
  if (nan)
    s = NAN;
  for (int o = kWarp / 2; o > 0; o /= 2)
    mergeSoftmaxStats(m, s, laneXor(m, o), laneXor(s, o));
  const int warp = threadIdx.x / kWarp;
  if (laneIndex() == 0) {
    warpM[warp] = m;
    warpS[warp] = s;
  }
  __syncthreads();
  m = warpM[0];
  s = warpS[0];
  for (int w = 1; w < kCeWarps; ++w)
    mergeSoftmaxStats(m, s, warpM[w], warpS[w]);
  mx = m;
  lse = logf(s);
  __syncthreads(); // warpM / warpS are free again; the row is read
}

__global__ void __launch_bounds__(kCeThreads)
    crossEntropyRowsBF16x8Kernel(float *losses, const __nv_bfloat16 *logits,
                                 const int32_t *targets, int64_t V,
                                 int64_t validV) {
  const int64_t row = blockIdx.x;
  float mx, lse;
  blockRowLogSumExp(reinterpret_cast<const uint4 *>(logits + row * V), V / kVec,
                    validV, mx, lse);
  if (threadIdx.x != 0)
    return;
  const int32_t t = targets[row];
  losses[row] = (t >= 0 && t < validV)
                    ? mx + lse - __bfloat162float(logits[row * V + t])
                    : NAN;
}

/// A row's gradient from its statistics: (softmax - onehot(t)) * g over
/// the first validV values, 0 over the padding. Each thread rewrites only
/// the groups it read in blockRowLogSumExp (t, t + kCeThreads, ...), back
/// to front, so dlogits may alias logits once that call has returned.
__device__ inline void writeRowGradient(uint4 *out, const uint4 *in,
                                        int64_t groups, int64_t validV,
                                        float mx, float lse, int32_t t,
                                        float g) {
  if (threadIdx.x >= groups)
    return;
  const int64_t last =
      threadIdx.x + (groups - 1 - threadIdx.x) / kCeThreads * kCeThreads;
  for (int64_t gi = last; gi >= 0; gi -= kCeThreads) {
    float x[kVec];
    widen8(x, in[gi]);
    for (int k = 0; k < kVec; ++k) {
      const int64_t c = gi * kVec + k;
      x[k] = c < validV ? (expf(x[k] - mx - lse) - (c == t ? 1.0f : 0.0f)) * g
                        : 0.0f;
    }
    out[gi] = round8(x);
  }
}

__global__ void __launch_bounds__(kCeThreads) crossEntropyBackwardBF16x8Kernel(
    __nv_bfloat16 *dlogits, const __nv_bfloat16 *logits, const int32_t *targets,
    int64_t N, int64_t V, int64_t validV, FloatRef dloss, float dlossScale) {
  const int64_t row = blockIdx.x, groups = V / kVec;
  const auto *in = reinterpret_cast<const uint4 *>(logits + row * V);
  float mx, lse;
  blockRowLogSumExp(in, groups, validV, mx, lse);
  writeRowGradient(reinterpret_cast<uint4 *>(dlogits + row * V), in, groups,
                   validV, mx, lse, targets[row],
                   ld(dloss, 0) * dlossScale / N);
}

/// crossEntropyRowsBF16x8Kernel and crossEntropyBackwardBF16x8Kernel in one:
/// the row is read once from memory for its statistics and its loss, and
/// again (mostly from L2) for its gradient.
__global__ void __launch_bounds__(kCeThreads)
    crossEntropyWithGradBF16x8Kernel(float *losses, __nv_bfloat16 *dlogits,
                                     const __nv_bfloat16 *logits,
                                     const int32_t *targets, int64_t N,
                                     int64_t V, int64_t validV, FloatRef dloss,
                                     float dlossScale) {
  const int64_t row = blockIdx.x, groups = V / kVec;
  const auto *in = reinterpret_cast<const uint4 *>(logits + row * V);
  const int32_t t = targets[row];
  const bool valid = t >= 0 && t < validV;
  // The target's logit before any thread may overwrite it (dlogits may
  // alias logits; blockRowLogSumExp ends with a barrier).
  const float target =
      threadIdx.x == 0 && valid ? __bfloat162float(logits[row * V + t]) : 0.0f;
  float mx, lse;
  blockRowLogSumExp(in, groups, validV, mx, lse);
  if (threadIdx.x == 0)
    losses[row] = valid ? mx + lse - target : NAN;
  writeRowGradient(reinterpret_cast<uint4 *>(dlogits + row * V), in, groups,
                   validV, mx, lse, t, ld(dloss, 0) * dlossScale / N);
}

__global__ void rowMaxKernel(FloatRef rowMax, FloatRef logits, int64_t N,
                             int64_t V, int64_t cols) {
  const int64_t row = warpIndex();
  const int lane = laneIndex();
  if (row >= N)
    return;
  float m = -INFINITY;
  for (int64_t c = lane; c < cols; c += kWarp)
    m = fmaxf(m, ld(logits, row * V + c));
  m = warpMax(m);
  if (lane == 0)
    st(rowMax, row, m);
}

__global__ void sumsKernel(FloatRef sumExp, FloatRef targetLogit,
                           FloatRef logits, FloatRef rowMax,
                           const int32_t *targets, int64_t N, int64_t V,
                           int64_t offset, int64_t cols) {
  const int64_t row = warpIndex();
  const int lane = laneIndex();
  if (row >= N)
    return;
  const int64_t base = row * V;
  const float m = ld(rowMax, row);
  float s = 0.0f;
  for (int64_t c = lane; c < cols; c += kWarp)
    s += expf(ld(logits, base + c) - m);
  s = warpSum(s);
  if (lane == 0) {
    st(sumExp, row, s);
    const int64_t t = static_cast<int64_t>(targets[row]) - offset;
    st(targetLogit, row, t >= 0 && t < cols ? ld(logits, base + t) : 0.0f);
  }
}

__global__ void fromSumsKernel(FloatRef loss, FloatRef rowMax, FloatRef sumExp,
                               FloatRef targetLogit, int64_t N,
                               double divisor) {
  double s = 0.0;
  for (int64_t n = threadIdx.x; n < N; n += kThreads)
    s += log(static_cast<double>(ld(sumExp, n))) +
         static_cast<double>(ld(rowMax, n)) -
         static_cast<double>(ld(targetLogit, n));
  s = blockSum(s);
  if (threadIdx.x == 0)
    st(loss, 0, divisor > 0 ? static_cast<float>(s / divisor) : 0.0f);
}

__global__ void sumsBackwardKernel(FloatRef dlogits, FloatRef logits,
                                   FloatRef rowMax, FloatRef sumExp,
                                   const int32_t *targets, int64_t N, int64_t V,
                                   int64_t offset, int64_t cols, FloatRef dloss,
                                   double tokens) {
  const int64_t i = threadIndex();
  if (i >= N * V)
    return;
  const int64_t n = i / V, c = i % V;
  if (c >= cols) {
    st(dlogits, i, 0.0f);
    return;
  }
  const float g = static_cast<float>(ld(dloss, 0) / tokens);
  const float p = expf(ld(logits, i) - ld(rowMax, n)) * (1.0f / ld(sumExp, n));
  const int64_t t = static_cast<int64_t>(targets[n]) - offset;
  st(dlogits, i, (p - (c == t ? 1.0f : 0.0f)) * g);
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

/// Tensors whose sums of squares one launch takes (GPT-2's 148 gradients:
/// three launches instead of 148, most of them for a few thousand values).
constexpr int kSumSquaresGroup = 64;
struct SumSquaresGroup {
  FloatRef x[kSumSquaresGroup];
  int64_t n[kSumSquaresGroup];
  /// The launch's blocks for tensor t are firstBlock[t] .. firstBlock[t+1]-1.
  int firstBlock[kSumSquaresGroup + 1];
};

/// The blocks of its kMixedSumBlocks that a tensor of n values keeps busy:
/// block b's first element is b * kThreads, so blocks from ceil(n /
/// kThreads) on would sum nothing (at least one block, to write the zeros).
inline int sumSquaresBlocksUsed(int64_t n) {
  return static_cast<int>(
      std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, kMixedSumBlocks));
}

/// Block b of tensor t (b < sumSquaresBlocksUsed) sums the squares of
/// elements b * kThreads + threadIdx.x + k * kMixedSumBlocks * kThreads
/// (k = 0, 1, ...) in order, then blockSum's fixed tree, into
/// partial[t * kMixedSumBlocks + b]; the tensor's last block also writes
/// the zeros its idle blocks would have written. Launching only busy
/// blocks leaves every partial as it was when each tensor had all
/// kMixedSumBlocks (the same bits), and spares GPT-2's biases and layer
/// norms about 120 idle blocks each (and the emulated device, which runs a
/// block's 256 threads one after another, most of the kernel's time).
__global__ void sumSquaresPartialKernel(double *partial, SumSquaresGroup g) {
  int t = 0;
  while (int(blockIdx.x) >= g.firstBlock[t + 1])
    ++t;
  const int b = blockIdx.x - g.firstBlock[t];
  const int used = g.firstBlock[t + 1] - g.firstBlock[t];
  const int64_t n = g.n[t];
  double s = 0;
  for (int64_t i = b * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(kMixedSumBlocks) * blockDim.x) {
    const double v = ld(g.x[t], i);
    s += v * v;
  }
  s = blockSum(s);
  double *mine = partial + int64_t(t) * kMixedSumBlocks;
  if (threadIdx.x == 0)
    mine[b] = s;
  if (b == used - 1)
    for (int idle = used + threadIdx.x; idle < kMixedSumBlocks;
         idle += blockDim.x)
      mine[idle] = 0.0;
}

/// One block of kThreads: thread t sums partials t, t + kThreads, ... in
/// order, then blockSum's fixed tree (the same order every run; with one
/// thread summing, SumSquares took 3.07 ms per GPT-2 step on an H200).
__global__ void sumPartialsKernel(FloatRef out, const double *partial,
                                  int64_t count) {
  double s = 0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads)
    s += partial[i];
  s = blockSum(s);
  if (threadIdx.x == 0)
    st(out, 0, static_cast<float>(s));
}

__global__ void clipCoefKernel(FloatRef norm, FloatRef coef, FloatRef sumSq,
                               double maxNorm) {
  if (threadIdx.x != 0)
    return;
  const double n = sqrt(static_cast<double>(ld(sumSq, 0)));
  st(norm, 0, static_cast<float>(n));
  st(coef, 0,
     static_cast<float>(maxNorm > 0.0 ? fmin(1.0, maxNorm / (n + 1e-6)) : 1.0));
}

__global__ void adamwKernel(FloatRef params, FloatRef grads, FloatRef m,
                            FloatRef v, int64_t n, FloatRef lrRef,
                            FloatRef stepRef, FloatRef scaleRef,
                            AdamWHyper h) {
  const int64_t i = threadIndex();
  if (i >= n)
    return;
  float p = ld(params, i), mi = ld(m, i), vi = ld(v, i);
  adamwElement(ld(grads, i) * ld(scaleRef, 0), p, mi, vi, ld(lrRef, 0),
               ld(stepRef, 0), h);
  st(params, i, p);
  st(m, i, mi);
  st(v, i, vi);
}

} // namespace

//===----------------------------------------------------------------------===//
// Launchers
//===----------------------------------------------------------------------===//

Status mixedAdd(FloatRef out, FloatRef a, FloatRef b, int64_t n, int64_t inner,
                cudaStream_t stream) {
  if (inner == n && vectorizable(n, {out, a, b})) {
    LOOM_LAUNCH(map2BF16x8Kernel<Sum>, blocksFor(n / kVec), kThreads, stream,
                static_cast<uint4 *>(out.data),
                static_cast<const uint4 *>(a.data),
                static_cast<const uint4 *>(b.data), n / kVec, Sum());
    return Status::success();
  }
  LOOM_LAUNCH(addKernel, blocksFor(n), kThreads, stream, out, a, b, n, inner);
  return Status::success();
}

int64_t rowChunks(int64_t rows) { return (rows + kRowChunk - 1) / kRowChunk; }

Status mixedColumnSum(FloatRef db, FloatRef dout, int64_t outer, int64_t inner,
                      double *partials, cudaStream_t stream) {
  const int64_t chunks = rowChunks(outer);
  if (vectorizable(inner, {dout})) {
    const int64_t colBlocks = (inner + kSumColumns - 1) / kSumColumns;
    LOOM_LAUNCH(columnSumPartialBF16x8Kernel,
                static_cast<unsigned>(chunks * colBlocks), kThreads, stream,
                partials, static_cast<const __nv_bfloat16 *>(dout.data), outer,
                inner, colBlocks);
  } else {
    const int64_t colBlocks = blocksFor(inner);
    LOOM_LAUNCH(columnSumPartialKernel,
                static_cast<unsigned>(chunks * colBlocks), kThreads, stream,
                partials, dout, outer, inner, colBlocks);
  }
  LOOM_LAUNCH(columnSumFinishKernel, blocksFor(inner), kThreads, stream, db,
              static_cast<const double *>(partials), chunks, inner);
  return Status::success();
}

Status mixedFill(FloatRef out, float value, int64_t n, cudaStream_t stream) {
  LOOM_LAUNCH(fillKernel, blocksFor(n), kThreads, stream, out, value, n);
  return Status::success();
}

Status mixedGeluForward(FloatRef out, FloatRef inp, int64_t n,
                        cudaStream_t stream) {
  if (vectorizable(n, {out, inp})) {
    LOOM_LAUNCH(map1BF16x8Kernel<Gelu>, blocksFor(n / kVec), kThreads, stream,
                static_cast<uint4 *>(out.data),
                static_cast<const uint4 *>(inp.data), n / kVec, Gelu());
    return Status::success();
  }
  LOOM_LAUNCH(geluForwardKernel, blocksFor(n), kThreads, stream, out, inp, n);
  return Status::success();
}

Status mixedGeluBackward(FloatRef dinp, FloatRef inp, FloatRef dout, int64_t n,
                         cudaStream_t stream) {
  if (vectorizable(n, {dinp, inp, dout})) {
    LOOM_LAUNCH(map2BF16x8Kernel<GeluGrad>, blocksFor(n / kVec), kThreads,
                stream, static_cast<uint4 *>(dinp.data),
                static_cast<const uint4 *>(inp.data),
                static_cast<const uint4 *>(dout.data), n / kVec, GeluGrad());
    return Status::success();
  }
  LOOM_LAUNCH(geluBackwardKernel, blocksFor(n), kThreads, stream, dinp, inp,
              dout, n);
  return Status::success();
}

Status mixedEmbeddingForward(FloatRef out, const int32_t *idx, FloatRef rows,
                             int64_t N, int64_t rowBegin, int64_t R, int64_t C,
                             cudaStream_t stream) {
  LOOM_LAUNCH(embeddingForwardKernel, blocksFor(N * C), kThreads, stream, out,
              idx, rows, N, rowBegin, R, C);
  return Status::success();
}

int64_t embeddingGradWorkspaceInts(int64_t N, int64_t V) {
  return 2 * V + 1 + N;
}

Status mixedEmbeddingBackward(FloatRef dtable, FloatRef dout,
                              const int32_t *idx, int64_t N, int64_t V,
                              int64_t C, int32_t *work, cudaStream_t stream) {
  LOOM_CHECK(N < (int64_t(1) << 31) && V < (int64_t(1) << 31),
             "embedding gradient: " << N << " tokens or " << V
                                    << " rows exceed its 32-bit token lists");
  int32_t *counts = work, *offsets = work + V, *positions = work + 2 * V + 1;
  LOOM_LAUNCH(embeddingClearKernel, blocksFor(V), kThreads, stream, counts, V);
  LOOM_LAUNCH(embeddingCountKernel, blocksFor(N), kThreads, stream, counts, idx,
              N, V);
  LOOM_LAUNCH(embeddingScanKernel, 1u, kScanThreads, stream, offsets, counts,
              V);
  LOOM_LAUNCH(embeddingListKernel, 1u, kScanThreads, stream, positions, counts,
              idx, N, V);
  LOOM_LAUNCH(embeddingGradRowsKernel, blocksForRows(V), kThreads, stream,
              dtable, dout, static_cast<const int32_t *>(positions),
              static_cast<const int32_t *>(offsets), V, C);
  return Status::success();
}

Status mixedLayernormForward(FloatRef out, FloatRef mean, FloatRef rstd,
                             float *mean32, float *rstd32, FloatRef inp,
                             FloatRef weight, FloatRef bias, int64_t N,
                             int64_t C, float eps, cudaStream_t stream) {
  if (C <= kMaxLnFusedColumns && vectorizable(C, {inp}) &&
      (!out.data || vectorizable(C, {out, weight, bias}))) {
    auto *y = static_cast<__nv_bfloat16 *>(out.data);
    const auto *x = static_cast<const __nv_bfloat16 *>(inp.data);
    const auto *w = static_cast<const __nv_bfloat16 *>(weight.data);
    const auto *b = static_cast<const __nv_bfloat16 *>(bias.data);
    const auto kernel = byLnGroups(
        C, layernormForwardRowsKernel<1>, layernormForwardRowsKernel<2>,
        layernormForwardRowsKernel<3>, layernormForwardRowsKernel<4>);
    LOOM_LAUNCH(kernel, blocksForRows(N), kThreads, stream, y, mean, rstd,
                mean32, rstd32, x, nullptr, nullptr, w, b, N, C, eps);
    return Status::success();
  }
  LOOM_LAUNCH(layernormForwardKernel, blocksForRows(N), kThreads, stream, out,
              mean, rstd, mean32, rstd32, inp, weight, bias, N, C, eps);
  return Status::success();
}

namespace {

/// layernormBackwardOnePass (a name of this file's own, so a call from
/// here with FloatRef arguments finds no other by argument-dependent
/// lookup when the file is compiled into another namespace, as the
/// emulation tests do).
bool onePassLayernormBackward(int64_t N, int64_t C, FloatRef dinp,
                              FloatRef dout, FloatRef inp, FloatRef weight) {
  return C <= kMaxLnFusedColumns && N > 0 &&
         vectorizable(C, {dout, inp, weight}) &&
         (!dinp.data || vectorizable(C, {dinp}));
}

/// layernormBackwardFusedKernel over every row chunk, then the parameter
/// gradients' finish: mixedLayernormBackward's one pass (residual null) and
/// layernormBackwardAddResidual's (dinp then the sum).
Status launchOnePassLayernormBackward(FloatRef dinp, FloatRef dweight,
                                      FloatRef dbias, FloatRef residual,
                                      FloatRef dout, FloatRef inp,
                                      FloatRef weight,
                                      const LayernormRowStatistics &stats,
                                      float *partials, int64_t N, int64_t C,
                                      cudaStream_t stream) {
  LOOM_CHECK(!stats.mean32 == !stats.rstd32,
             "layer-norm gradient: give both fp32 statistics or neither");
  const bool params = dweight.data || dbias.data;
  const auto kernel = byLnGroups(
      C, layernormBackwardFusedKernel<1>, layernormBackwardFusedKernel<2>,
      layernormBackwardFusedKernel<3>, layernormBackwardFusedKernel<4>);
  LOOM_LAUNCH(kernel, static_cast<unsigned>(rowChunks(N)), kThreads, stream,
              static_cast<__nv_bfloat16 *>(dinp.data),
              params ? partials : nullptr,
              static_cast<const __nv_bfloat16 *>(dout.data),
              static_cast<const __nv_bfloat16 *>(inp.data),
              static_cast<const __nv_bfloat16 *>(weight.data), stats.mean32,
              stats.rstd32, stats.mean, stats.rstd, stats.eps,
              static_cast<const __nv_bfloat16 *>(residual.data), N, C);
  if (params)
    LOOM_LAUNCH(layernormParamFinishKernel, blocksFor(C), kThreads, stream,
                dweight, dbias, static_cast<const float *>(partials),
                rowChunks(N), C);
  return Status::success();
}

} // namespace

bool layernormBackwardOnePass(int64_t N, int64_t C, FloatRef dinp,
                              FloatRef dout, FloatRef inp, FloatRef weight) {
  return onePassLayernormBackward(N, C, dinp, dout, inp, weight);
}

Status mixedLayernormBackward(FloatRef dinp, FloatRef dweight, FloatRef dbias,
                              FloatRef dout, FloatRef inp, FloatRef weight,
                              const LayernormRowStatistics &stats,
                              float *partials, int64_t N, int64_t C,
                              cudaStream_t stream) {
  if (onePassLayernormBackward(N, C, dinp, dout, inp, weight))
    return launchOnePassLayernormBackward(dinp, dweight, dbias, FloatRef{},
                                          dout, inp, weight, stats, partials, N,
                                          C, stream);
  const bool params = dweight.data || dbias.data;
  const float *mean32 = stats.mean32, *rstd32 = stats.rstd32;
  LOOM_CHECK((mean32 && rstd32) || N == 0,
             "layer-norm gradient of " << N << " x " << C
                                       << " rows its one-pass kernel does "
                                          "not take: it needs the forward's "
                                          "fp32 statistics (mean32, rstd32)");
  if (params) {
    const int64_t chunks = rowChunks(N), colBlocks = blocksFor(C);
    LOOM_LAUNCH(layernormParamPartialKernel,
                static_cast<unsigned>(chunks * colBlocks), kThreads, stream,
                partials, dout, inp, mean32, rstd32, N, C, colBlocks);
    LOOM_LAUNCH(layernormParamFinishKernel, blocksFor(C), kThreads, stream,
                dweight, dbias, static_cast<const float *>(partials), chunks,
                C);
  }
  if (dinp.data)
    LOOM_LAUNCH(layernormBackwardInputKernel, blocksForRows(N), kThreads,
                stream, dinp, dout, inp, weight, mean32, rstd32, N, C);
  return Status::success();
}

bool residualLayernormFits(int64_t C,
                           std::initializer_list<FloatRef> operands) {
  return C <= kMaxLnFusedColumns && vectorizable(C, operands);
}

Status residualAddLayernormForward(FloatRef sum, FloatRef out, FloatRef a,
                                   FloatRef b, FloatRef weight, FloatRef bias,
                                   int64_t N, int64_t C, float eps,
                                   cudaStream_t stream) {
  LOOM_CHECK(residualLayernormFits(C, {sum, out, a, b, weight, bias}),
             "the residual Add + LayerNorm kernel takes 16-byte aligned bf16 "
             "rows of a multiple of 8 columns up to "
                 << kMaxLnFusedColumns << ", got " << C);
  const auto kernel = byLnGroups(
      C, layernormForwardRowsKernel<1>, layernormForwardRowsKernel<2>,
      layernormForwardRowsKernel<3>, layernormForwardRowsKernel<4>);
  LOOM_LAUNCH(kernel, blocksForRows(N), kThreads, stream,
              static_cast<__nv_bfloat16 *>(out.data), FloatRef{}, FloatRef{},
              nullptr, nullptr, static_cast<const __nv_bfloat16 *>(a.data),
              static_cast<const __nv_bfloat16 *>(b.data),
              static_cast<__nv_bfloat16 *>(sum.data),
              static_cast<const __nv_bfloat16 *>(weight.data),
              static_cast<const __nv_bfloat16 *>(bias.data), N, C, eps);
  return Status::success();
}

Status layernormBackwardAddResidual(FloatRef sum, FloatRef dweight,
                                    FloatRef dbias, FloatRef residual,
                                    FloatRef dout, FloatRef inp,
                                    FloatRef weight,
                                    const LayernormRowStatistics &stats,
                                    float *partials, int64_t N, int64_t C,
                                    cudaStream_t stream) {
  LOOM_CHECK(N > 0 &&
                 residualLayernormFits(C, {sum, residual, dout, inp, weight}),
             "the LayerNorm gradient + residual Add kernel takes 16-byte "
             "aligned bf16 rows of a multiple of 8 columns up to "
                 << kMaxLnFusedColumns << ", got " << N << " x " << C);
  return launchOnePassLayernormBackward(sum, dweight, dbias, residual, dout,
                                        inp, weight, stats, partials, N, C,
                                        stream);
}

Status mixedSoftmaxForward(FloatRef out, FloatRef inp, int64_t N, int64_t C,
                           cudaStream_t stream) {
  LOOM_LAUNCH(softmaxForwardKernel, blocksForRows(N), kThreads, stream, out,
              inp, N, C);
  return Status::success();
}

Status mixedSoftmaxBackward(FloatRef dinp, FloatRef dout, FloatRef out,
                            int64_t N, int64_t C, cudaStream_t stream) {
  LOOM_LAUNCH(softmaxBackwardKernel, blocksForRows(N), kThreads, stream, dinp,
              dout, out, N, C);
  return Status::success();
}

Status mixedCrossEntropyForward(FloatRef loss, float *losses, FloatRef logits,
                                const int32_t *targets, int64_t N, int64_t V,
                                int64_t validV, float scale,
                                cudaStream_t stream) {
  if (vectorizable(V, {logits}))
    LOOM_LAUNCH(crossEntropyRowsBF16x8Kernel, static_cast<unsigned>(N),
                kCeThreads, stream, losses,
                static_cast<const __nv_bfloat16 *>(logits.data), targets, V,
                validV);
  else
    LOOM_LAUNCH(crossEntropyRowsKernel, blocksForRows(N), kThreads, stream,
                losses, logits, targets, N, V, validV);
  LOOM_LAUNCH(meanKernel, 1u, kThreads, stream, loss,
              static_cast<const float *>(losses), N, scale);
  return Status::success();
}

Status mixedCrossEntropyBackward(FloatRef dlogits, FloatRef logits,
                                 const int32_t *targets, int64_t N, int64_t V,
                                 int64_t validV, FloatRef dloss,
                                 float dlossScale, cudaStream_t stream) {
  if (vectorizable(V, {dlogits, logits})) {
    LOOM_LAUNCH(crossEntropyBackwardBF16x8Kernel, static_cast<unsigned>(N),
                kCeThreads, stream, static_cast<__nv_bfloat16 *>(dlogits.data),
                static_cast<const __nv_bfloat16 *>(logits.data), targets, N, V,
                validV, dloss, dlossScale);
    return Status::success();
  }
  LOOM_LAUNCH(crossEntropyBackwardKernel, blocksForRows(N), kThreads, stream,
              dlogits, logits, targets, N, V, validV, dloss, dlossScale);
  return Status::success();
}

bool crossEntropyWithGradFits(int64_t V,
                              std::initializer_list<FloatRef> operands) {
  return vectorizable(V, operands);
}

Status mixedCrossEntropyWithGrad(FloatRef loss, float *losses, FloatRef dlogits,
                                 FloatRef logits, const int32_t *targets,
                                 int64_t N, int64_t V, int64_t validV,
                                 float lossScale, FloatRef dloss,
                                 float dlossScale, cudaStream_t stream) {
  LOOM_CHECK(crossEntropyWithGradFits(V, {dlogits, logits}),
             "the fused cross-entropy takes bf16 rows of a multiple of 8 "
             "values at 16-byte aligned addresses (V = "
                 << V << ")");
  LOOM_LAUNCH(crossEntropyWithGradBF16x8Kernel, static_cast<unsigned>(N),
              kCeThreads, stream, losses,
              static_cast<__nv_bfloat16 *>(dlogits.data),
              static_cast<const __nv_bfloat16 *>(logits.data), targets, N, V,
              validV, dloss, dlossScale);
  LOOM_LAUNCH(meanKernel, 1u, kThreads, stream, loss,
              static_cast<const float *>(losses), N, lossScale);
  return Status::success();
}

Status mixedCrossEntropyRowMax(FloatRef rowMax, FloatRef logits, int64_t N,
                               int64_t V, int64_t offset, int64_t validV,
                               cudaStream_t stream) {
  LOOM_LAUNCH(rowMaxKernel, blocksForRows(N), kThreads, stream, rowMax, logits,
              N, V, localValidColumns(V, offset, validV));
  return Status::success();
}

Status mixedCrossEntropySums(FloatRef sumExp, FloatRef targetLogit,
                             FloatRef logits, FloatRef rowMax,
                             const int32_t *targets, int64_t N, int64_t V,
                             int64_t offset, int64_t validV,
                             cudaStream_t stream) {
  LOOM_LAUNCH(sumsKernel, blocksForRows(N), kThreads, stream, sumExp,
              targetLogit, logits, rowMax, targets, N, V, offset,
              localValidColumns(V, offset, validV));
  return Status::success();
}

Status mixedCrossEntropyFromSums(FloatRef loss, FloatRef rowMax,
                                 FloatRef sumExp, FloatRef targetLogit,
                                 int64_t N, double divisor,
                                 cudaStream_t stream) {
  LOOM_LAUNCH(fromSumsKernel, 1u, kThreads, stream, loss, rowMax, sumExp,
              targetLogit, N, divisor);
  return Status::success();
}

Status mixedCrossEntropySumsBackward(FloatRef dlogits, FloatRef logits,
                                     FloatRef rowMax, FloatRef sumExp,
                                     const int32_t *targets, int64_t N,
                                     int64_t V, int64_t offset, int64_t validV,
                                     FloatRef dloss, double tokens,
                                     cudaStream_t stream) {
  LOOM_LAUNCH(sumsBackwardKernel, blocksFor(N * V), kThreads, stream, dlogits,
              logits, rowMax, sumExp, targets, N, V, offset,
              localValidColumns(V, offset, validV), dloss, tokens);
  return Status::success();
}

Status mixedSumSquares(FloatRef out, const std::vector<MixedSpan> &tensors,
                       double *partials, cudaStream_t stream) {
  // Each tensor's partials in its own block range, then one ordered sum of
  // all of them (tensor by tensor, block by block): a fixed order.
  const int64_t count = int64_t(tensors.size()) * kMixedSumBlocks;
  for (size_t first = 0; first < tensors.size(); first += kSumSquaresGroup) {
    const size_t members =
        std::min<size_t>(kSumSquaresGroup, tensors.size() - first);
    SumSquaresGroup g;
    g.firstBlock[0] = 0;
    for (size_t j = 0; j < members; ++j) {
      g.x[j] = tensors[first + j].data;
      g.n[j] = tensors[first + j].size;
      g.firstBlock[j + 1] = g.firstBlock[j] + sumSquaresBlocksUsed(g.n[j]);
    }
    LOOM_LAUNCH(sumSquaresPartialKernel,
                static_cast<unsigned>(g.firstBlock[members]), kThreads, stream,
                partials + first * kMixedSumBlocks, g);
  }
  LOOM_LAUNCH(sumPartialsKernel, 1u, kThreads, stream, out,
              static_cast<const double *>(partials), count);
  return Status::success();
}

Status mixedAdamW(FloatRef params, FloatRef grads, FloatRef m, FloatRef v,
                  int64_t n, FloatRef lr, FloatRef step, FloatRef gradScale,
                  const AdamWHyper &hyper, cudaStream_t stream) {
  LOOM_LAUNCH(adamwKernel, blocksFor(n), kThreads, stream, params, grads, m, v,
              n, lr, step, gradScale, hyper);
  return Status::success();
}

Status mixedClipCoef(FloatRef norm, FloatRef coef, FloatRef sumSq,
                     double maxNorm, cudaStream_t stream) {
  LOOM_LAUNCH(clipCoefKernel, 1u, 32, stream, norm, coef, sumSq, maxNorm);
  return Status::success();
}

} // namespace loom::cuda
