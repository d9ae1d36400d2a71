//===- flash_attention_wmma.cu - Tensor-core bf16 flash attention ---------===//
//
// See flash_attention_wmma.h. Every kernel runs 4 warps (128 threads); a
// block owns 64 rows of one (b, h) head (queries in the forward and in dQ,
// keys in dK/dV), each warp 16 of them, and streams the other side in tiles
// of 64 rows through shared memory. Per warp and tile:
//
//   forward           S = Q_w K^T -> fp32 scratch; the online softmax
//                     (FlashAttention-2): P = exp(scale S - m) (bf16,
//                     masked) against the running row max m, the row sum
//                     l and O rescaled by exp(m_old - m); O += P V. O and
//                     the row statistics live in registers: lanes 2r and
//                     2r + 1 own row r, 32 of its 64 columns each.
//   dK/dV             S^T = K_w Q^T, P^T = exp(scale S^T - lse) (bf16),
//                     dV_w += P^T dO,  dP^T = V_w dO^T,
//                     dS^T = P^T (dP^T - D) (bf16),  dK_w += dS^T Q
//   dQ                S = Q_w K^T, P, dP = dO_w V^T, dS = P (dP - D),
//                     dQ_w += dS K
//
// The warp's own 16 x 64 operand (Q_w, K_w, V_w, dO_w) stays in four A
// fragments for the whole kernel. Shared tiles are row-major with a padded
// leading dimension (kLd bf16, kLdF fp32) that keeps WMMA's 32-byte
// alignment and spreads rows over banks; they are filled with 16-byte
// loads when every operand is 16-byte aligned. The backward's elementwise
// steps give each lane entries lane, lane + 32, ... of the warp's 16 x 64
// tile.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/flash_attention_wmma.h"

#include "runtime/cuda/check.h"
#include "runtime/cuda/launch.cuh"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <mma.h>

namespace loom::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kHs = 64;           // head size
constexpr int kWarps = 4;         // warps per block
constexpr int kTc = 32 * kWarps;  // threads per block
constexpr int kRows = 16;         // rows per warp (one WMMA tile)
constexpr int kBlockRows = 64;    // rows per block = kWarps * kRows
constexpr int kTile = 64;         // streamed rows per tile
constexpr int kLd = kHs + 8;      // bf16 row stride of shared tiles
constexpr int kLdF = kTile + 4;   // fp32 row stride of the per-warp scratch
static_assert(kBlockRows == kWarps * kRows && kTile == kHs,
              "one 64 x 64 tile shape for every shared operand");

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16,
                             wmma::row_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16,
                                wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16,
                                wmma::col_major>;
using FragAcc = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

/// tile[r][d] (row stride kLd) = src[(r0 + r) * stride + d] for the 64 rows
/// from r0, zero past T. All threads of the block take part. `vec`: src
/// and stride keep 16-byte alignment, so a row is 8 loads of 8 elements.
__device__ inline void stageRows(__nv_bfloat16 *tile, const __nv_bfloat16 *src,
                                 int64_t stride, int64_t r0, int64_t T,
                                 bool vec) {
  constexpr int kVec = 8; // bf16 per 16-byte load
  if (vec) {
    for (int e = threadIdx.x; e < kTile * kHs / kVec; e += kTc) {
      const int r = e / (kHs / kVec), d = (e % (kHs / kVec)) * kVec;
      const int64_t row = r0 + r;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (row < T)
        v = *reinterpret_cast<const uint4 *>(src + row * stride + d);
      *reinterpret_cast<uint4 *>(tile + r * kLd + d) = v;
    }
    return;
  }
  for (int e = threadIdx.x; e < kTile * kHs; e += kTc) {
    const int r = e / kHs, d = e % kHs;
    const int64_t row = r0 + r;
    tile[r * kLd + d] =
        row < T ? src[row * stride + d] : __float2bfloat16(0.0f);
  }
}

/// The warp's 16 x 64 rows of a staged tile as four A fragments.
__device__ inline void loadOwnRows(FragA (&frag)[4],
                                   const __nv_bfloat16 *tile, int warp) {
  for (int k = 0; k < 4; ++k)
    wmma::load_matrix_sync(frag[k], tile + warp * kRows * kLd + 16 * k, kLd);
}

/// scratch[16][64] (stride kLdF) = own[16 x 64] other^T, `other` a staged
/// [64][64] tile: S = Q K^T, S^T = K Q^T, dP = dO V^T, dP^T = V dO^T.
__device__ inline void timesTransposed(float *scratch, const FragA (&own)[4],
                                       const __nv_bfloat16 *other) {
  for (int n = 0; n < 4; ++n) {
    FragAcc acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < 4; ++k) {
      FragBCol b; // element (d, j) at other[j][d]
      wmma::load_matrix_sync(b, other + 16 * n * kLd + 16 * k, kLd);
      wmma::mma_sync(acc, own[k], b, acc);
    }
    wmma::store_matrix_sync(scratch + 16 * n, acc, kLdF, wmma::mem_row_major);
  }
}

/// acc[n] += lhs[16 x 64] (the warp's bf16 rows, stride kLd) times
/// other[64][64] (a staged tile): O += P V, dV += P^T dO, dK += dS^T Q,
/// dQ += dS K.
__device__ inline void accumulateProduct(FragAcc (&acc)[4],
                                         const __nv_bfloat16 *lhs,
                                         const __nv_bfloat16 *other) {
  for (int k = 0; k < 4; ++k) {
    FragA a;
    wmma::load_matrix_sync(a, lhs + 16 * k, kLd);
    for (int n = 0; n < 4; ++n) {
      FragBRow b;
      wmma::load_matrix_sync(b, other + 16 * k * kLd + 16 * n, kLd);
      wmma::mma_sync(acc[n], a, b, acc[n]);
    }
  }
}

/// Writes acc (16 x 64) through the warp's scratch to rows [row0, row0+16)
/// of dst (row stride `stride`), times `scale`, rows from T on skipped.
__device__ inline void storeRows(__nv_bfloat16 *dst, int64_t stride,
                                 FragAcc (&acc)[4], float *scratch,
                                 int64_t row0, int64_t T, float scale,
                                 int lane) {
  for (int n = 0; n < 4; ++n)
    wmma::store_matrix_sync(scratch + 16 * n, acc[n], kLdF,
                            wmma::mem_row_major);
  __syncwarp();
  for (int e = lane; e < kRows * kHs; e += 32) {
    const int r = e / kHs, d = e % kHs;
    if (row0 + r < T)
      dst[(row0 + r) * stride + d] =
          __float2bfloat16(scratch[r * kLdF + d] * scale);
  }
  __syncwarp();
}

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

/// Column j (0..31) of the 32 a lane owns in its row: pairs of adjacent
/// columns, alternating between the row's two lanes every 2 columns, so a
/// warp's 32 lanes reading their j-th entry hit 16 banks, not 8.
__device__ inline int ownColumn(int half, int j) {
  return (j >> 1) * 4 + half * 2 + (j & 1);
}

/// blockIdx.x = bh * tiles + tile: queries [tile*64, +64) of head bh.
__global__ void __launch_bounds__(kTc)
    flashForwardTcKernel(__nv_bfloat16 *out, float *lse,
                         const __nv_bfloat16 *qkv, int64_t T, int64_t C,
                         int64_t NH, float scale, int tiles, bool vec) {
  __shared__ __align__(32) __nv_bfloat16 kTileS[kTile * kLd];
  __shared__ __align__(32) __nv_bfloat16 vTileS[kTile * kLd];
  __shared__ __align__(32) __nv_bfloat16 pTile[kBlockRows * kLd];
  __shared__ __align__(32) float scratchAll[kWarps * kRows * kLdF];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tile = blockIdx.x % tiles, bh = blockIdx.x / tiles;
  const int64_t b = bh / NH, h = bh % NH, C3 = 3 * C;
  const int64_t q0 = tile * kBlockRows, w0 = q0 + warp * kRows;
  const __nv_bfloat16 *head = qkv + b * T * C3 + h * kHs;
  float *scratch = scratchAll + warp * kRows * kLdF;
  __nv_bfloat16 *pOwn = pTile + warp * kRows * kLd;

  // 1. Q_w as fragments (staged through pTile).
  stageRows(pTile, head, C3, q0, T, vec);
  __syncthreads();
  FragA q[4];
  loadOwnRows(q, pTile, warp);
  const int64_t lastRow = min(T, q0 + kBlockRows) - 1;

  // 2. Key tiles up to the block's last query. Lanes 2r, 2r + 1 own query
  //    row i = w0 + r: its running max m, sum l and 32 columns of O.
  const int r = lane >> 1, half = lane & 1;
  const int64_t i = w0 + r;
  float m = -INFINITY, l = 0.0f, o[kHs / 2];
  for (int j = 0; j < kHs / 2; ++j)
    o[j] = 0.0f;
  for (int64_t k0 = 0; k0 <= lastRow; k0 += kTile) {
    __syncthreads(); // previous tile consumed (and Q loaded from pTile)
    stageRows(kTileS, head + C, C3, k0, T, vec);
    stageRows(vTileS, head + 2 * C, C3, k0, T, vec);
    __syncthreads();
    timesTransposed(scratch, q, kTileS); // S = Q_w K^T
    __syncwarp();
    // Scaled scores of keys k0 + c <= i (-inf elsewhere), the tile's max.
    float sc[kTile / 2], tileMax = -INFINITY;
    for (int j = 0; j < kTile / 2; ++j) {
      const int c = ownColumn(half, j);
      sc[j] = i < T && k0 + c <= i ? scratch[r * kLdF + c] * scale : -INFINITY;
      tileMax = fmaxf(tileMax, sc[j]);
    }
    const float mNew = fmaxf(m, launch::pairMax(tileMax));
    // P against the new max; a row with no key yet (m = -inf) has none.
    float sum = 0.0f;
    for (int j = 0; j < kTile / 2; ++j) {
      const float p = sc[j] == -INFINITY ? 0.0f : expf(sc[j] - mNew);
      pOwn[r * kLd + ownColumn(half, j)] = __float2bfloat16(p);
      sum += p;
    }
    const float alpha = m == -INFINITY ? 0.0f : expf(m - mNew);
    l = l * alpha + launch::pairSum(sum);
    m = mNew;
    __syncwarp(); // P stored, S read
    // O = alpha O + P V: the product through the warp's scratch.
    FragAcc pv[4];
    for (int n = 0; n < 4; ++n)
      wmma::fill_fragment(pv[n], 0.0f);
    accumulateProduct(pv, pOwn, vTileS);
    for (int n = 0; n < 4; ++n)
      wmma::store_matrix_sync(scratch + 16 * n, pv[n], kLdF,
                              wmma::mem_row_major);
    __syncwarp();
    for (int j = 0; j < kHs / 2; ++j)
      o[j] = o[j] * alpha + scratch[r * kLdF + ownColumn(half, j)];
    __syncwarp(); // scratch read before the next S
  }

  // 3. out = O / l and lse = m + log l for the rows of this warp.
  if (i < T) {
    __nv_bfloat16 *dst = out + b * T * C + h * kHs + i * C;
    const float inv = 1.0f / l;
    for (int j = 0; j < kHs / 2; ++j)
      dst[ownColumn(half, j)] = __float2bfloat16(o[j] * inv);
    if (half == 0)
      lse[bh * T + i] = m + logf(l);
  }
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

/// blockIdx.x = bh * tiles + tile: keys [tile*64, +64) of head bh; writes
/// their dk and dv.
__global__ void __launch_bounds__(kTc)
    flashBackwardKeyTcKernel(__nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                             const __nv_bfloat16 *qkv, const float *lse,
                             const float *rowDot, int64_t T, int64_t C,
                             int64_t NH, float scale, int tiles, bool vec) {
  __shared__ __align__(32) __nv_bfloat16 qTileS[kTile * kLd];
  __shared__ __align__(32) __nv_bfloat16 dyTileS[kTile * kLd];
  __shared__ __align__(32) __nv_bfloat16 pTile[kBlockRows * kLd];
  __shared__ __align__(32) float scratchAll[kWarps * kRows * kLdF];
  __shared__ float lseTile[kTile], dTile[kTile];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tile = blockIdx.x % tiles, bh = blockIdx.x / tiles;
  const int64_t b = bh / NH, h = bh % NH, C3 = 3 * C;
  const int64_t k0 = tile * kBlockRows, w0 = k0 + warp * kRows;
  const __nv_bfloat16 *head = qkv + b * T * C3 + h * kHs;
  const __nv_bfloat16 *dyHead = dout + b * T * C + h * kHs;
  float *scratch = scratchAll + warp * kRows * kLdF;
  __nv_bfloat16 *pOwn = pTile + warp * kRows * kLd;

  // 1. K_w and V_w as fragments (staged through pTile in turn).
  FragA kw[4], vw[4];
  stageRows(pTile, head + C, C3, k0, T, vec);
  __syncthreads();
  loadOwnRows(kw, pTile, warp);
  __syncthreads();
  stageRows(pTile, head + 2 * C, C3, k0, T, vec);
  __syncthreads();
  loadOwnRows(vw, pTile, warp);
  FragAcc dk[4], dv[4];
  for (int n = 0; n < 4; ++n) {
    wmma::fill_fragment(dk[n], 0.0f);
    wmma::fill_fragment(dv[n], 0.0f);
  }

  // 2. Query tiles from the block's first key on (earlier queries do not
  //    see these keys).
  for (int64_t t0 = k0; t0 < T; t0 += kTile) {
    __syncthreads(); // previous tile consumed (and V loaded from pTile)
    stageRows(qTileS, head, C3, t0, T, vec);
    stageRows(dyTileS, dyHead, C, t0, T, vec);
    if (threadIdx.x < kTile) {
      const int64_t t = t0 + threadIdx.x;
      lseTile[threadIdx.x] = t < T ? lse[bh * T + t] : 0.0f;
      dTile[threadIdx.x] = t < T ? rowDot[bh * T + t] : 0.0f;
    }
    __syncthreads();
    // P^T (16 keys x 64 queries), masked where the query precedes the key.
    timesTransposed(scratch, kw, qTileS);
    __syncwarp();
    for (int e = lane; e < kRows * kTile; e += 32) {
      const int r = e / kTile, c = e % kTile;
      const int64_t j = w0 + r, t = t0 + c;
      const float p = t >= j && t < T && j < T
                          ? expf(scratch[r * kLdF + c] * scale - lseTile[c])
                          : 0.0f;
      pOwn[r * kLd + c] = __float2bfloat16(p);
    }
    __syncwarp();
    accumulateProduct(dv, pOwn, dyTileS); // dV += P^T dO
    // dS^T = P^T (dP^T - D), dP^T = V_w dO^T; in place over P^T.
    timesTransposed(scratch, vw, dyTileS);
    __syncwarp();
    for (int e = lane; e < kRows * kTile; e += 32) {
      const int r = e / kTile, c = e % kTile;
      const float p = __bfloat162float(pOwn[r * kLd + c]);
      pOwn[r * kLd + c] =
          __float2bfloat16(p * (scratch[r * kLdF + c] - dTile[c]));
    }
    __syncwarp();
    accumulateProduct(dk, pOwn, qTileS); // dK += dS^T Q (scale at the end)
    __syncwarp();
  }

  // 3. dk and dv rows of this warp.
  __nv_bfloat16 *dkHead = dqkv + b * T * C3 + C + h * kHs;
  storeRows(dkHead, C3, dk, scratch, w0, T, scale, lane);
  storeRows(dkHead + C, C3, dv, scratch, w0, T, 1.0f, lane);
}

/// blockIdx.x = bh * tiles + tile: queries [tile*64, +64) of head bh;
/// writes their dq.
__global__ void __launch_bounds__(kTc)
    flashBackwardQueryTcKernel(__nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                               const __nv_bfloat16 *qkv, const float *lse,
                               const float *rowDot, int64_t T, int64_t C,
                               int64_t NH, float scale, int tiles, bool vec) {
  __shared__ __align__(32) __nv_bfloat16 kTileS[kTile * kLd];
  __shared__ __align__(32) __nv_bfloat16 vTileS[kTile * kLd];
  __shared__ __align__(32) __nv_bfloat16 pTile[kBlockRows * kLd];
  __shared__ __align__(32) float scratchAll[kWarps * kRows * kLdF];
  __shared__ float rowLse[kBlockRows], rowD[kBlockRows];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t tile = blockIdx.x % tiles, bh = blockIdx.x / tiles;
  const int64_t b = bh / NH, h = bh % NH, C3 = 3 * C;
  const int64_t q0 = tile * kBlockRows, w0 = q0 + warp * kRows;
  const __nv_bfloat16 *head = qkv + b * T * C3 + h * kHs;
  const __nv_bfloat16 *dyHead = dout + b * T * C + h * kHs;
  float *scratch = scratchAll + warp * kRows * kLdF;
  __nv_bfloat16 *pOwn = pTile + warp * kRows * kLd;

  // 1. Q_w and dO_w as fragments; the rows' lse and D.
  FragA qw[4], dyw[4];
  stageRows(pTile, head, C3, q0, T, vec);
  if (threadIdx.x < kBlockRows) {
    const int64_t i = q0 + threadIdx.x;
    rowLse[threadIdx.x] = i < T ? lse[bh * T + i] : 0.0f;
    rowD[threadIdx.x] = i < T ? rowDot[bh * T + i] : 0.0f;
  }
  __syncthreads();
  loadOwnRows(qw, pTile, warp);
  __syncthreads();
  stageRows(pTile, dyHead, C, q0, T, vec);
  __syncthreads();
  loadOwnRows(dyw, pTile, warp);
  FragAcc dq[4];
  for (int n = 0; n < 4; ++n)
    wmma::fill_fragment(dq[n], 0.0f);

  // 2. Key tiles up to the block's last query row.
  const int64_t lastRow = min(T, q0 + kBlockRows) - 1;
  for (int64_t k0 = 0; k0 <= lastRow; k0 += kTile) {
    __syncthreads(); // previous tile consumed (and dO loaded from pTile)
    stageRows(kTileS, head + C, C3, k0, T, vec);
    stageRows(vTileS, head + 2 * C, C3, k0, T, vec);
    __syncthreads();
    timesTransposed(scratch, qw, kTileS); // S = Q_w K^T
    __syncwarp();
    for (int e = lane; e < kRows * kTile; e += 32) {
      const int r = e / kTile, c = e % kTile;
      const int64_t i = w0 + r, key = k0 + c;
      const float p =
          key <= i && i < T
              ? expf(scratch[r * kLdF + c] * scale - rowLse[warp * kRows + r])
              : 0.0f;
      pOwn[r * kLd + c] = __float2bfloat16(p);
    }
    __syncwarp();
    timesTransposed(scratch, dyw, vTileS); // dP = dO_w V^T
    __syncwarp();
    for (int e = lane; e < kRows * kTile; e += 32) {
      const int r = e / kTile, c = e % kTile;
      const float p = __bfloat162float(pOwn[r * kLd + c]);
      pOwn[r * kLd + c] = __float2bfloat16(
          p * (scratch[r * kLdF + c] - rowD[warp * kRows + r]));
    }
    __syncwarp();
    accumulateProduct(dq, pOwn, kTileS); // dQ += dS K (scale at the end)
    __syncwarp();
  }

  // 3. dq rows of this warp.
  storeRows(dqkv + b * T * C3 + h * kHs, C3, dq, scratch, w0, T, scale, lane);
}

/// Whether every pointer is 16-byte aligned: stageRows' 16-byte loads (the
/// row strides, C and 3C elements with C = 64 NH, keep that alignment).
bool allAligned16(std::initializer_list<const void *> pointers) {
  for (const void *p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
      return false;
  return true;
}

Status checkTensorCoreShape(int64_t B, int64_t T, int64_t C, int64_t NH,
                            int &tiles, unsigned &blocks) {
  LOOM_CHECK(NH > 0 && C == NH * kFlashTensorCoreHeadSize,
             "tensor-core flash attention: C = "
                 << C << " over " << NH << " heads is not head size "
                 << kFlashTensorCoreHeadSize);
  const int64_t t = (T + kBlockRows - 1) / kBlockRows, n = t * B * NH;
  LOOM_CHECK(n < (int64_t(1) << 31),
             "flash attention: " << n << " blocks exceed CUDA's grid limit");
  tiles = static_cast<int>(t);
  blocks = static_cast<unsigned>(n);
  return Status::success();
}

} // namespace

Status flashAttentionForwardTensorCores(__nv_bfloat16 *out, float *lse,
                                        const __nv_bfloat16 *qkv, int64_t B,
                                        int64_t T, int64_t C, int64_t NH,
                                        cudaStream_t stream) {
  int tiles = 0;
  unsigned blocks = 0;
  LOOM_RETURN_IF_ERROR(checkTensorCoreShape(B, T, C, NH, tiles, blocks));
  const float scale = 1.0f / sqrtf(static_cast<float>(kHs));
  LOOM_LAUNCH(flashForwardTcKernel, blocks, kTc, stream, out, lse, qkv, T, C,
              NH, scale, tiles, allAligned16({qkv}));
  return Status::success();
}

Status flashAttentionBackwardTensorCores(__nv_bfloat16 *dqkv,
                                         const float *rowDot,
                                         const __nv_bfloat16 *dout,
                                         const __nv_bfloat16 *qkv,
                                         const float *lse, int64_t B,
                                         int64_t T, int64_t C, int64_t NH,
                                         cudaStream_t stream) {
  int tiles = 0;
  unsigned blocks = 0;
  LOOM_RETURN_IF_ERROR(checkTensorCoreShape(B, T, C, NH, tiles, blocks));
  const float scale = 1.0f / sqrtf(static_cast<float>(kHs));
  const bool vec = allAligned16({qkv, dout});
  LOOM_LAUNCH(flashBackwardKeyTcKernel, blocks, kTc, stream, dqkv, dout, qkv,
              lse, rowDot, T, C, NH, scale, tiles, vec);
  LOOM_LAUNCH(flashBackwardQueryTcKernel, blocks, kTc, stream, dqkv, dout, qkv,
              lse, rowDot, T, C, NH, scale, tiles, vec);
  return Status::success();
}

} // namespace loom::cuda
