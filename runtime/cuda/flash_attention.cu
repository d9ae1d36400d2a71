//===- flash_attention.cu - Tiled causal attention (FlashAttention-2) -----===//
//
// See flash_attention.h for the algorithm. Work split (one thread per owned
// row, head size padded with zeros up to the compiled kHs in {16,32,64,128}):
//
//   forward   block = kFwdRows query rows of one (b, h); key/value tiles of
//             kFwdKeys rows go through shared memory; each thread keeps its
//             query and output rows in registers and updates the online
//             softmax kChunk keys at a time (one rescale per chunk).
//   rowDot    one warp per (b, h, query row): D = dout . out.
//   dK/dV     block = kBwdRows key rows; query / dout tiles of kBwdStream
//             rows (with their lse and D) stream through shared memory,
//             starting at the block's first key (causality).
//   dQ        block = kBwdRows query rows; key / value tiles of kBwdStream
//             rows stream through shared memory up to the block's last row.
//
// A thread's own rows in the backward live in shared memory padded to
// kHs + 1 floats, so the 32 threads of a warp read 32 different banks; the
// streamed tiles are read by every thread at the same address (broadcast).
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/flash_attention.h"

#include "runtime/cuda/bf16x8.cuh"
#include "runtime/cuda/check.h"
#include "runtime/cuda/flash_attention_mma.h"
#include "runtime/cuda/launch.cuh"

#include <cmath>
#include <type_traits>

namespace loom::cuda {
namespace {

using namespace launch;

constexpr int kFwdRows = 64; // query rows (threads) per forward block
constexpr int kChunk = 8;    // keys per online-softmax update

template <int kHs> struct FlashTiles {
  static_assert(kHs % 16 == 0 && kHs <= 128, "unsupported head size");
  /// Keys per forward tile: K and V tiles take 32 KiB of shared memory.
  static constexpr int kFwdKeys = kHs <= 64 ? 64 : 32;
  /// Rows (threads) a backward block owns, and rows per streamed tile: the
  /// owned rows (2 x kBwdRows x (kHs+1) floats) plus two streamed tiles stay
  /// under the 48 KiB of static shared memory.
  static constexpr int kBwdRows = kHs <= 64 ? 64 : 32;
  static constexpr int kBwdStream = kHs <= 64 ? 16 : 8;
  static_assert(kFwdKeys % kChunk == 0, "tiles hold whole chunks");
  static_assert(kBwdRows % kBwdStream == 0, "owned rows hold whole tiles");
};

__device__ inline float toFloat(float x) { return x; }
__device__ inline float toFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline void storeAs(float *p, float x) { *p = x; }
__device__ inline void storeAs(__nv_bfloat16 *p, float x) {
  *p = __float2bfloat16(x);
}

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

/// blockIdx.x = bh * tiles + tile: query rows [tile*kFwdRows, +kFwdRows) of
/// head bh = b*NH + h.
template <typename Elem, int kHs>
__global__ void __launch_bounds__(kFwdRows)
    flashForwardKernel(Elem *out, float *lse, const Elem *qkv, int64_t T,
                       int64_t C, int64_t NH, int hs, float scale, int tiles) {
  constexpr int kKeys = FlashTiles<kHs>::kFwdKeys;
  __shared__ float kTile[kKeys * kHs];
  __shared__ float vTile[kKeys * kHs];
  const int tid = threadIdx.x;
  const int64_t tile = blockIdx.x % tiles, bh = blockIdx.x / tiles;
  const int64_t b = bh / NH, h = bh % NH, C3 = 3 * C;
  const int64_t q0 = tile * kFwdRows, i = q0 + tid;
  const bool valid = i < T;
  // q of row 0 of this head; k and v are C and 2C further along a row.
  const Elem *head = qkv + b * T * C3 + h * hs;

  // 1. This thread's query row (zero-padded to kHs).
  float q[kHs], o[kHs];
#pragma unroll
  for (int d = 0; d < kHs; ++d) {
    q[d] = valid && d < hs ? toFloat(head[i * C3 + d]) : 0.0f;
    o[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;

  // 2. Key tiles up to the block's last query row (causal).
  const int64_t lastRow = min(T, q0 + kFwdRows) - 1;
  for (int64_t k0 = 0; k0 <= lastRow; k0 += kKeys) {
    __syncthreads(); // every thread is done with the previous tile
    for (int e = tid; e < kKeys * kHs; e += kFwdRows) {
      const int r = e / kHs, d = e % kHs;
      const int64_t key = k0 + r;
      const bool in = key < T && d < hs;
      kTile[e] = in ? toFloat(head[key * C3 + C + d]) : 0.0f;
      vTile[e] = in ? toFloat(head[key * C3 + 2 * C + d]) : 0.0f;
    }
    __syncthreads();
    if (!valid)
      continue;
    // 3. Online softmax, kChunk keys at a time. The first chunk processed
    //    holds key 0 <= i, so m is finite after it and no -inf - -inf occurs.
    for (int c0 = 0; c0 < kKeys && k0 + c0 <= i; c0 += kChunk) {
      float s[kChunk];
      float chunkMax = -INFINITY;
#pragma unroll
      for (int u = 0; u < kChunk; ++u) {
        const float *kr = kTile + (c0 + u) * kHs;
        float acc = 0.0f;
#pragma unroll
        for (int d = 0; d < kHs; ++d)
          acc += q[d] * kr[d];
        s[u] = k0 + c0 + u <= i ? acc * scale : -INFINITY;
        chunkMax = fmaxf(chunkMax, s[u]);
      }
      const float mNew = fmaxf(m, chunkMax);
      const float correction = expf(m - mNew); // 0 on the first chunk
      l *= correction;
#pragma unroll
      for (int d = 0; d < kHs; ++d)
        o[d] *= correction;
#pragma unroll
      for (int u = 0; u < kChunk; ++u) {
        const float p = expf(s[u] - mNew); // 0 for masked keys
        l += p;
        const float *vr = vTile + (c0 + u) * kHs;
#pragma unroll
        for (int d = 0; d < kHs; ++d)
          o[d] += p * vr[d];
      }
      m = mNew;
    }
  }

  // 4. Normalize; keep the log-sum-exp for the backward.
  if (!valid)
    return;
  const float inv = 1.0f / l;
  Elem *dst = out + (b * T + i) * C + h * hs;
#pragma unroll
  for (int d = 0; d < kHs; ++d)
    if (d < hs)
      storeAs(dst + d, o[d] * inv);
  lse[bh * T + i] = m + logf(l);
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

/// rowDot[bh*T + i] = dout[b,i,h,:] . out[b,i,h,:], one warp per row.
template <typename Elem>
__global__ void flashRowDotKernel(float *rowDot, const Elem *dout,
                                  const Elem *out, int64_t B, int64_t T,
                                  int64_t C, int64_t NH) {
  const int64_t r = warpIndex();
  if (r >= B * NH * T)
    return;
  const int64_t i = r % T, bh = r / T, b = bh / NH, h = bh % NH;
  const int64_t hs = C / NH;
  const Elem *dy = dout + (b * T + i) * C + h * hs;
  const Elem *y = out + (b * T + i) * C + h * hs;
  float s = 0.0f;
  for (int64_t d = laneIndex(); d < hs; d += kWarp)
    s += toFloat(dy[d]) * toFloat(y[d]);
  s = warpSum(s);
  if (laneIndex() == 0)
    rowDot[r] = s;
}

/// flashRowDotKernel for bf16 heads of 64 in 16-byte loads: 8 lanes per
/// row, taken in memory order (row m = (b T + i) NH + h of dout and out),
/// their 8-value dots summed over the 8 lanes. (A warp per row reads two
/// bytes per lane: 196 608 warps of two loads each for a GPT-2 layer.)
constexpr int kRowDotLanes = kFlashTensorCoreHeadSize / kVec;

__global__ void flashRowDotBF16x8Kernel(float *rowDot, const uint4 *dout,
                                        const uint4 *out, int64_t rows,
                                        int64_t T, int64_t NH) {
  const int64_t thread =
      static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t m = thread / kRowDotLanes;
  float s = 0.0f;
  if (m < rows) {
    float dy[kVec], y[kVec];
    widen8(dy, dout[thread]);
    widen8(y, out[thread]);
    for (int k = 0; k < kVec; ++k)
      s += dy[k] * y[k];
  }
  // Every lane of the warp takes part in the exchanges.
  for (int o = 1; o < kRowDotLanes; o *= 2)
    s += laneXor(s, o);
  if (m < rows && thread % kRowDotLanes == 0) {
    const int64_t h = m % NH, bi = m / NH;
    rowDot[(bi / T * NH + h) * T + bi % T] = s;
  }
}

/// rowDot for one of the tensor-core kernels' layers (bf16, heads of 64).
Status rowDotTensorCores(float *rowDot, const __nv_bfloat16 *dout,
                         const __nv_bfloat16 *out, int64_t B, int64_t T,
                         int64_t C, int64_t NH, cudaStream_t stream) {
  const int64_t rows = B * T * NH;
  if (reinterpret_cast<uintptr_t>(dout) % sizeof(uint4) == 0 &&
      reinterpret_cast<uintptr_t>(out) % sizeof(uint4) == 0) {
    LOOM_LAUNCH(flashRowDotBF16x8Kernel, blocksFor(rows * kRowDotLanes),
                kThreads, stream, rowDot, reinterpret_cast<const uint4 *>(dout),
                reinterpret_cast<const uint4 *>(out), rows, T, NH);
    return Status::success();
  }
  LOOM_LAUNCH(flashRowDotKernel<__nv_bfloat16>, blocksForRows(rows), kThreads,
              stream, rowDot, dout, out, B, T, C, NH);
  return Status::success();
}

/// Loads rows [r0, r0 + rows) of the head's column block at `column` (q: 0,
/// k: C, v: 2C of qkv; or dout's with stride C) into tile[rows][ld], zero
/// past T and past hs. All threads of the block take part.
template <typename Elem, int kHs>
__device__ inline void loadRows(float *tile, int ld, int rows, const Elem *src,
                                int64_t stride, int64_t r0, int64_t T, int hs) {
  for (int e = threadIdx.x; e < rows * kHs; e += blockDim.x) {
    const int r = e / kHs, d = e % kHs;
    const int64_t row = r0 + r;
    tile[r * ld + d] = row < T && d < hs ? toFloat(src[row * stride + d]) : 0.0f;
  }
}

/// blockIdx.x = bh * tiles + tile: key rows [tile*kBwdRows, +kBwdRows).
/// Writes dk and dv of those rows.
template <typename Elem, int kHs>
__global__ void __launch_bounds__(FlashTiles<kHs>::kBwdRows)
    flashBackwardKeyKernel(Elem *dqkv, const Elem *dout, const Elem *qkv,
                           const float *lse, const float *rowDot, int64_t T,
                           int64_t C, int64_t NH, int hs, float scale,
                           int tiles) {
  constexpr int kRows = FlashTiles<kHs>::kBwdRows;
  constexpr int kStream = FlashTiles<kHs>::kBwdStream;
  constexpr int kLd = kHs + 1; // padded: conflict-free own-row reads
  __shared__ float kOwn[kRows * kLd], vOwn[kRows * kLd];
  __shared__ float qTile[kStream * kHs], dyTile[kStream * kHs];
  __shared__ float lseTile[kStream], dTile[kStream];
  const int tid = threadIdx.x;
  const int64_t tile = blockIdx.x % tiles, bh = blockIdx.x / tiles;
  const int64_t b = bh / NH, h = bh % NH, C3 = 3 * C;
  const int64_t k0 = tile * kRows, j = k0 + tid;
  const bool valid = j < T;
  const Elem *qHead = qkv + b * T * C3 + h * hs;
  const Elem *dyHead = dout + b * T * C + h * hs;
  const float *lseHead = lse + bh * T, *dHead = rowDot + bh * T;

  // 1. The block's key and value rows.
  loadRows<Elem, kHs>(kOwn, kLd, kRows, qHead + C, C3, k0, T, hs);
  loadRows<Elem, kHs>(vOwn, kLd, kRows, qHead + 2 * C, C3, k0, T, hs);
  float dk[kHs], dv[kHs];
#pragma unroll
  for (int d = 0; d < kHs; ++d)
    dk[d] = dv[d] = 0.0f;
  const float *kr = kOwn + tid * kLd, *vr = vOwn + tid * kLd;

  // 2. Query tiles from the block's first key on (earlier queries do not
  //    see these keys).
  for (int64_t t0 = k0; t0 < T; t0 += kStream) {
    __syncthreads(); // own rows loaded / previous tile consumed
    loadRows<Elem, kHs>(qTile, kHs, kStream, qHead, C3, t0, T, hs);
    loadRows<Elem, kHs>(dyTile, kHs, kStream, dyHead, C, t0, T, hs);
    if (tid < kStream) {
      const bool in = t0 + tid < T;
      lseTile[tid] = in ? lseHead[t0 + tid] : 0.0f;
      dTile[tid] = in ? dHead[t0 + tid] : 0.0f;
    }
    __syncthreads();
    if (!valid)
      continue;
#pragma unroll 1
    for (int u = 0; u < kStream; ++u) {
      const int64_t t = t0 + u;
      if (t < j || t >= T) // query t sees key j only when j <= t
        continue;
      const float *qr = qTile + u * kHs, *dyr = dyTile + u * kHs;
      float qk = 0.0f, dp = 0.0f;
#pragma unroll
      for (int d = 0; d < kHs; ++d) {
        qk += qr[d] * kr[d];
        dp += dyr[d] * vr[d];
      }
      const float p = expf(qk * scale - lseTile[u]);
      const float ds = p * (dp - dTile[u]);
#pragma unroll
      for (int d = 0; d < kHs; ++d) {
        dv[d] += p * dyr[d];
        dk[d] += ds * qr[d];
      }
    }
  }

  // 3. dk = scale dS^T Q, dv = P^T dO.
  if (!valid)
    return;
  Elem *dkRow = dqkv + (b * T + j) * C3 + C + h * hs;
  Elem *dvRow = dkRow + C;
#pragma unroll
  for (int d = 0; d < kHs; ++d)
    if (d < hs) {
      storeAs(dkRow + d, dk[d] * scale);
      storeAs(dvRow + d, dv[d]);
    }
}

/// blockIdx.x = bh * tiles + tile: query rows [tile*kBwdRows, +kBwdRows).
/// Writes dq of those rows.
template <typename Elem, int kHs>
__global__ void __launch_bounds__(FlashTiles<kHs>::kBwdRows)
    flashBackwardQueryKernel(Elem *dqkv, const Elem *dout, const Elem *qkv,
                             const float *lse, const float *rowDot, int64_t T,
                             int64_t C, int64_t NH, int hs, float scale,
                             int tiles) {
  constexpr int kRows = FlashTiles<kHs>::kBwdRows;
  constexpr int kStream = FlashTiles<kHs>::kBwdStream;
  constexpr int kLd = kHs + 1;
  __shared__ float qOwn[kRows * kLd], dyOwn[kRows * kLd];
  __shared__ float kTile[kStream * kHs], vTile[kStream * kHs];
  const int tid = threadIdx.x;
  const int64_t tile = blockIdx.x % tiles, bh = blockIdx.x / tiles;
  const int64_t b = bh / NH, h = bh % NH, C3 = 3 * C;
  const int64_t q0 = tile * kRows, i = q0 + tid;
  const bool valid = i < T;
  const Elem *qHead = qkv + b * T * C3 + h * hs;
  const Elem *dyHead = dout + b * T * C + h * hs;

  // 1. The block's query and output-gradient rows, and this row's lse / D.
  loadRows<Elem, kHs>(qOwn, kLd, kRows, qHead, C3, q0, T, hs);
  loadRows<Elem, kHs>(dyOwn, kLd, kRows, dyHead, C, q0, T, hs);
  const float rowLse = valid ? lse[bh * T + i] : 0.0f;
  const float rowD = valid ? rowDot[bh * T + i] : 0.0f;
  float dq[kHs];
#pragma unroll
  for (int d = 0; d < kHs; ++d)
    dq[d] = 0.0f;
  const float *qr = qOwn + tid * kLd, *dyr = dyOwn + tid * kLd;

  // 2. Key tiles up to the block's last query row.
  const int64_t lastRow = min(T, q0 + kRows) - 1;
  for (int64_t k0 = 0; k0 <= lastRow; k0 += kStream) {
    __syncthreads();
    loadRows<Elem, kHs>(kTile, kHs, kStream, qHead + C, C3, k0, T, hs);
    loadRows<Elem, kHs>(vTile, kHs, kStream, qHead + 2 * C, C3, k0, T, hs);
    __syncthreads();
    if (!valid)
      continue;
#pragma unroll 1
    for (int u = 0; u < kStream; ++u) {
      if (k0 + u > i) // key beyond the query (and so beyond T): masked
        break;
      const float *kr = kTile + u * kHs, *vr = vTile + u * kHs;
      float qk = 0.0f, dp = 0.0f;
#pragma unroll
      for (int d = 0; d < kHs; ++d) {
        qk += qr[d] * kr[d];
        dp += dyr[d] * vr[d];
      }
      const float p = expf(qk * scale - rowLse);
      const float ds = p * (dp - rowD);
#pragma unroll
      for (int d = 0; d < kHs; ++d)
        dq[d] += ds * kr[d];
    }
  }

  // 3. dq = scale dS K.
  if (!valid)
    return;
  Elem *dqRow = dqkv + (b * T + i) * C3 + h * hs;
#pragma unroll
  for (int d = 0; d < kHs; ++d)
    if (d < hs)
      storeAs(dqRow + d, dq[d] * scale);
}

//===----------------------------------------------------------------------===//
// Launchers
//===----------------------------------------------------------------------===//

Status checkShape(int64_t B, int64_t T, int64_t C, int64_t NH) {
  LOOM_CHECK(flashAttentionSupports(C, NH),
             "flash attention: C = " << C << " over " << NH
                                     << " heads is not a head size of 1.."
                                     << kFlashMaxHeadSize
                                     << "; use LOOM_CUDA_ATTENTION=naive");
  LOOM_CHECK(B >= 0 && T >= 0, "flash attention: negative B = " << B
                                                               << " or T = " << T);
  return Status::success();
}

/// Blocks of `rows` rows covering T for every (b, h), as one grid.x; errors
/// beyond CUDA's grid limit instead of launching a truncated grid.
Status gridFor(int64_t B, int64_t T, int64_t NH, int rows, int &tiles,
               unsigned &blocks) {
  const int64_t t = (T + rows - 1) / rows, n = t * B * NH;
  LOOM_CHECK(n < (int64_t(1) << 31),
             "flash attention: " << n << " blocks exceed CUDA's grid limit");
  tiles = static_cast<int>(t);
  blocks = static_cast<unsigned>(n);
  return Status::success();
}

template <typename Elem, int kHs>
Status forwardWith(Elem *out, float *lse, const Elem *qkv, int64_t B,
                   int64_t T, int64_t C, int64_t NH, cudaStream_t stream) {
  const int hs = static_cast<int>(C / NH);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  int tiles = 0;
  unsigned blocks = 0;
  LOOM_RETURN_IF_ERROR(gridFor(B, T, NH, kFwdRows, tiles, blocks));
  auto *kernel = flashForwardKernel<Elem, kHs>;
  LOOM_LAUNCH(kernel, blocks, kFwdRows, stream, out, lse, qkv, T, C, NH, hs,
              scale, tiles);
  return Status::success();
}

template <typename Elem, int kHs>
Status backwardWith(Elem *dqkv, float *rowDot, const Elem *dout,
                    const Elem *qkv, const Elem *out, const float *lse,
                    int64_t B, int64_t T, int64_t C, int64_t NH,
                    cudaStream_t stream) {
  constexpr int kRows = FlashTiles<kHs>::kBwdRows;
  const int hs = static_cast<int>(C / NH);
  const float scale = 1.0f / sqrtf(static_cast<float>(hs));
  LOOM_LAUNCH(flashRowDotKernel<Elem>, blocksForRows(B * NH * T), kThreads,
              stream, rowDot, dout, out, B, T, C, NH);
  int tiles = 0;
  unsigned blocks = 0;
  LOOM_RETURN_IF_ERROR(gridFor(B, T, NH, kRows, tiles, blocks));
  auto *keyKernel = flashBackwardKeyKernel<Elem, kHs>;
  auto *queryKernel = flashBackwardQueryKernel<Elem, kHs>;
  LOOM_LAUNCH(keyKernel, blocks, kRows, stream, dqkv, dout, qkv, lse, rowDot,
              T, C, NH, hs, scale, tiles);
  LOOM_LAUNCH(queryKernel, blocks, kRows, stream, dqkv, dout, qkv, lse, rowDot,
              T, C, NH, hs, scale, tiles);
  return Status::success();
}

/// Calls f.template operator()<kHs>() with the smallest compiled head size
/// that holds C / NH (checkShape has bounded it).
template <typename F> Status dispatchHeadSize(int64_t hs, F &&f) {
  if (hs <= 16)
    return f(std::integral_constant<int, 16>());
  if (hs <= 32)
    return f(std::integral_constant<int, 32>());
  if (hs <= 64)
    return f(std::integral_constant<int, 64>());
  return f(std::integral_constant<int, 128>());
}

template <typename Elem>
Status forward(Elem *out, float *lse, const Elem *qkv, int64_t B, int64_t T,
               int64_t C, int64_t NH, cudaStream_t stream,
               FlashTcShapes shapes) {
  LOOM_RETURN_IF_ERROR(checkShape(B, T, C, NH));
  if (B * T == 0)
    return Status::success();
  if constexpr (std::is_same_v<Elem, __nv_bfloat16>)
    if (C / NH == kFlashTensorCoreHeadSize)
      // Qualified, so argument-dependent lookup of FlashTcOccupancy does
      // not also find the real kernels where the tests emulate these.
      return cuda::flashAttentionForwardTensorCores(out, lse, qkv, B, T, C, NH,
                                                    stream, shapes.forward);
  return dispatchHeadSize(C / NH, [&](auto hs) {
    return forwardWith<Elem, decltype(hs)::value>(out, lse, qkv, B, T, C, NH,
                                                  stream);
  });
}

template <typename Elem>
Status backward(Elem *dqkv, float *rowDot, const Elem *dout, const Elem *qkv,
                const Elem *out, const float *lse, int64_t B, int64_t T,
                int64_t C, int64_t NH, cudaStream_t stream,
                FlashTcShapes shapes) {
  LOOM_RETURN_IF_ERROR(checkShape(B, T, C, NH));
  if (B * T == 0)
    return Status::success();
  if constexpr (std::is_same_v<Elem, __nv_bfloat16>)
    if (C / NH == kFlashTensorCoreHeadSize) {
      LOOM_RETURN_IF_ERROR(
          rowDotTensorCores(rowDot, dout, out, B, T, C, NH, stream));
      return cuda::flashAttentionBackwardTensorCores(
          dqkv, rowDot, dout, qkv, lse, B, T, C, NH, stream, shapes);
    }
  return dispatchHeadSize(C / NH, [&](auto hs) {
    return backwardWith<Elem, decltype(hs)::value>(dqkv, rowDot, dout, qkv, out,
                                                   lse, B, T, C, NH, stream);
  });
}

} // namespace

Status flashAttentionForward(float *out, float *lse, const float *qkv,
                             int64_t B, int64_t T, int64_t C, int64_t NH,
                             cudaStream_t stream) {
  // fp32 has no tensor-core kernels: no launch shape to choose.
  return forward(out, lse, qkv, B, T, C, NH, stream, FlashTcShapes{});
}

Status flashAttentionForward(__nv_bfloat16 *out, float *lse,
                             const __nv_bfloat16 *qkv, int64_t B, int64_t T,
                             int64_t C, int64_t NH, cudaStream_t stream,
                             FlashTcShapes shapes) {
  return forward(out, lse, qkv, B, T, C, NH, stream, shapes);
}

Status flashAttentionBackward(float *dqkv, float *rowDot, const float *dout,
                              const float *qkv, const float *out,
                              const float *lse, int64_t B, int64_t T,
                              int64_t C, int64_t NH, cudaStream_t stream) {
  return backward(dqkv, rowDot, dout, qkv, out, lse, B, T, C, NH, stream,
                  FlashTcShapes{});
}

Status flashAttentionBackward(__nv_bfloat16 *dqkv, float *rowDot,
                              const __nv_bfloat16 *dout,
                              const __nv_bfloat16 *qkv,
                              const __nv_bfloat16 *out, const float *lse,
                              int64_t B, int64_t T, int64_t C, int64_t NH,
                              cudaStream_t stream, FlashTcShapes shapes) {
  return backward(dqkv, rowDot, dout, qkv, out, lse, B, T, C, NH, stream,
                  shapes);
}

} // namespace loom::cuda
