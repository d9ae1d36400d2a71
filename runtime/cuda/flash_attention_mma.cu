//===- flash_attention_mma.cu - Tensor-core bf16 flash attention ----------===//
//
// See flash_attention_mma.h. Every kernel runs 4 warps (128 threads; 8 for
// FlashTcOccupancy::WideBlocks); a block owns 16 rows a warp (32 in the
// TallWarps forward: two row tiles, each fragment read from a streamed tile
// serving both) of one (b, h) head (queries in the forward and in dQ, keys
// in dK/dV), and streams the other side in tiles of 64 rows through shared
// memory: each tile serves every warp of the block, so wider blocks read
// the streamed side from L2 half as often per product. Per warp, row tile
// and streamed tile, with every product an mma.sync over 16 x 64 register
// tiles (mma.cuh):
//
//   forward   S = Q_w K^T; the online softmax in base 2: P = 2^(S' - m)
//             with S' = S scale log2(e), masked, against the running row
//             max m, the row sum l and O rescaled by 2^(m_old - m);
//             O += P V
//   dK/dV     S^T = K_w Q^T, P^T = 2^(S'^T - lse'), dV_w += P^T dO,
//             dP^T = V_w dO^T, dS^T = P^T (dP^T - D), dK_w += dS^T Q
//   dQ        S = Q_w K^T, P, dP = dO_w V^T, dS = P (dP - D), dQ_w += dS K
//
// The warp's own 16 x 64 operand (Q_w, K_w, V_w, dO_w) stays in A
// fragments for the whole kernel; S, P, dP and dS live in accumulator
// registers and become the next product's A fragments in place (lane
// 4g + t holds rows g and g + 8, columns 2t and 2t + 1 of each 8-column
// block). B operands come from shared tiles through ldmatrix, four
// registers per instruction: a product with X^T reads X's row-major tile,
// a product with X the same tile transposed by ldmatrix .trans, so one
// copy of each tile serves both. Tiles have a padded row stride (kLd) so
// the 8 rows an ldmatrix phase reads fall in distinct banks.
//
// The streamed tiles are double-buffered: cp.async (async_copy.cuh) brings
// tile i + 1 into one buffer while the warps compute on tile i in the
// other, so global-memory latency hides behind the products instead of
// stalling the block at every tile.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/flash_attention_mma.h"

#include "runtime/cuda/async_copy.cuh"
#include "runtime/cuda/check.h"
#include "runtime/cuda/launch.cuh"
#include "runtime/cuda/mma.cuh"

#include <cmath>
#include <cstdint>
#include <initializer_list>

namespace loom::cuda {
namespace {

constexpr int kHs = 64;           // head size
constexpr int kRows = 16;         // rows per warp (one mma tile's M)
constexpr int kTile = 64;         // streamed rows per tile
constexpr int kLd = kHs + 8;      // bf16 row stride of shared tiles
constexpr int kSteps = kHs / 16;  // k-steps of 16 over a 64-wide operand
constexpr int kBlocks8 = kHs / 8; // 8-column mma tiles across 64 columns
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kTile == kHs, "one 64 x 64 tile shape for every shared operand");

/// Threads and rows of a block of `warps` warps.
__host__ __device__ constexpr int threadsOf(int warps) { return 32 * warps; }
__host__ __device__ constexpr int blockRowsOf(int warps) {
  return kRows * warps;
}

/// A warp's 16 x 64 bf16 operand as the A fragments of its four k-steps.
using FragsA = uint32_t[kSteps][4];
/// A warp's 16 x 64 fp32 tile as the accumulators of eight 16 x 8 tiles.
using Accs = float[kBlocks8][4];

/// Issues the copies of tile[r][d] (row stride kLd) = src[(r0 + r) *
/// stride + d] for the 64 rows from r0, zero past T; all threads of the
/// block take part (any number), 16 bytes each per copy, eight consecutive
/// threads per 128-byte row. With `vec` (src and stride keep 16-byte alignment)
/// they are cp.async copies that land by the caller's async_copy::wait; without
/// it, element by element before returning.
__device__ inline void stageRows(__nv_bfloat16 *tile, const __nv_bfloat16 *src,
                                 int64_t stride, int64_t r0, int64_t T,
                                 bool vec) {
  constexpr int kVec = 8;                   // bf16 per 16 bytes
  constexpr int kChunksPerRow = kHs / kVec; // 16-byte chunks of a row
  for (int e = threadIdx.x; e < kTile * kChunksPerRow;
       e += static_cast<int>(blockDim.x)) {
    const int r = e / kChunksPerRow, d = (e % kChunksPerRow) * kVec;
    const int64_t row = r0 + r;
    const bool valid = row < T;
    __nv_bfloat16 *dst = tile + r * kLd + d;
    if (vec) {
      async_copy::copy16(dst, valid ? src + row * stride + d : src, valid);
    } else {
#pragma unroll
      for (int i = 0; i < kVec; ++i)
        dst[i] = valid ? src[row * stride + d + i] : __float2bfloat16(0.0f);
    }
  }
}

/// stageRows for key/value tile [k0, k0 + 64) of a head (its columns of
/// qkv from `head`, row stride 3C) into kTile and vTile.
__device__ inline void stageKeysValues(__nv_bfloat16 *kTile,
                                       __nv_bfloat16 *vTile,
                                       const __nv_bfloat16 *head, int64_t C,
                                       int64_t k0, int64_t T, bool vec) {
  stageRows(kTile, head + C, 3 * C, k0, T, vec);
  stageRows(vTile, head + 2 * C, 3 * C, k0, T, vec);
}

/// Rows [16 i, 16 i + 16) of a staged tile as A fragments.
__device__ inline void loadOwnRows(FragsA &a, const __nv_bfloat16 *tile, int i,
                                   int g, int t) {
  const __nv_bfloat16 *top = tile + (i * kRows + g) * kLd + 2 * t;
  const __nv_bfloat16 *bottom = top + 8 * kLd;
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    a[s][0] = mma::load2(top + 16 * s);
    a[s][1] = mma::load2(bottom + 16 * s);
    a[s][2] = mma::load2(top + 16 * s + 8);
    a[s][3] = mma::load2(bottom + 16 * s + 8);
  }
}

/// The warp's kR row tiles of 16 (rows [16 (kR warp + j), + 16) for tile
/// j) of the block's 16 kR kWarps rows from r0 of `a` (row stride strideA;
/// and of `b` into fb when it is not null) as A fragments fa[j] (fb[j]):
/// rows [r0, r0 + 64) must be staged in aTile (bTile) and landed; taller
/// blocks stage each further 64 rows there in turn (every copy the block
/// issued before lands too). Ends with the tiles free again for warps that
/// had their rows (all of them, in a block of 64 rows).
template <int kWarps, int kR = 1>
__device__ inline void
loadBlockRows(FragsA *fa, __nv_bfloat16 *aTile, const __nv_bfloat16 *a,
              int64_t strideA, FragsA *fb, __nv_bfloat16 *bTile,
              const __nv_bfloat16 *b, int64_t strideB, int64_t r0, int64_t T,
              bool vec, int warp, int g, int t) {
  constexpr int kRowTilesPerStage = kTile / kRows;
  for (int part = 0; part < kWarps * kR / kRowTilesPerStage; ++part) {
    if (part > 0) {
      __syncthreads(); // the previous part's warps have their rows
      stageRows(aTile, a, strideA, r0 + part * kTile, T, vec);
      if (fb)
        stageRows(bTile, b, strideB, r0 + part * kTile, T, vec);
      async_copy::commit();
      async_copy::wait<0>();
      __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < kR; ++j) {
      const int rowTile = kR * warp + j; // of the block
      if (rowTile / kRowTilesPerStage == part) {
        loadOwnRows(fa[j], aTile, rowTile % kRowTilesPerStage, g, t);
        if (fb)
          loadOwnRows(fb[j], bTile, rowTile % kRowTilesPerStage, g, t);
      }
    }
  }
}

/// acc[r] += A_r x^T for the warp's kR operands A_r (16 x 64 each) and a
/// staged [64][64] tile x, each B fragment read from x once for all kR:
/// S = Q K^T, S^T = K Q^T, dP = dO V^T, dP^T = V dO^T.
template <int kR>
__device__ inline void timesTransposedRows(Accs *acc, const FragsA *a,
                                           const __nv_bfloat16 *x, int lane) {
#pragma unroll
  for (int n = 0; n < kBlocks8; ++n) {
    // Column n of B is row 8n + g of x. Matrix j of one ldmatrix is
    // columns [8j, 8j + 8) of rows 8n..8n + 7 (lane 8j + r gives row r),
    // so it yields b0, b1 of k-steps 0 and 1, the second of k-steps 2, 3.
    const __nv_bfloat16 *row = x + (8 * n + lane % 8) * kLd + 8 * (lane / 8);
    uint32_t b[2][4];
    mma::loadMatrices(b[0], row);
    mma::loadMatrices(b[1], row + 32);
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int s = 0; s < kSteps; ++s)
        mma::bf16m16n8k16(acc[r][n], a[r][s], b[s / 2][2 * (s % 2)],
                          b[s / 2][2 * (s % 2) + 1]);
  }
}
__device__ inline void timesTransposed(Accs &acc, const FragsA &a,
                                       const __nv_bfloat16 *x, int lane) {
  timesTransposedRows<1>(&acc, &a, x, lane);
}

/// acc[r] += A_r X for the warp's kR operands A_r (16 x 64 each) and a
/// staged [64][64] tile X read transposed by ldmatrix, once for all kR:
/// O += P V, dV += P^T dO, dK += dS^T Q, dQ += dS K.
template <int kR>
__device__ inline void timesRows(Accs *acc, const FragsA *a,
                                 const __nv_bfloat16 *x, int lane) {
#pragma unroll
  for (int s = 0; s < kSteps; ++s)
#pragma unroll
    for (int n = 0; n < kBlocks8; n += 2) {
      // Matrix j = lane / 8 holds rows 16s + 8 (j % 2) .. + 7 and columns
      // 8 (n + j / 2) .. + 7 of X: transposed, b0 and b1 of 8-column tiles
      // n and n + 1 at k-step s.
      const int j = lane / 8;
      const __nv_bfloat16 *row =
          x + (16 * s + 8 * (j % 2) + lane % 8) * kLd + 8 * (n + j / 2);
      uint32_t b[4];
      mma::loadMatricesTransposed(b, row);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        mma::bf16m16n8k16(acc[r][n], a[r][s], b[0], b[1]);
        mma::bf16m16n8k16(acc[r][n + 1], a[r][s], b[2], b[3]);
      }
    }
}
__device__ inline void times(Accs &acc, const FragsA &a, const __nv_bfloat16 *x,
                             int lane) {
  timesRows<1>(&acc, &a, x, lane);
}

/// The A fragments (bf16) of a 16 x 64 tile held as accumulators: k-step s
/// is 8-column tiles 2s and 2s + 1, element for element (mma.cuh).
__device__ inline void accumulatorsAsA(FragsA &a, const Accs &c) {
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    a[s][0] = mma::packBf16(c[2 * s][0], c[2 * s][1]);
    a[s][1] = mma::packBf16(c[2 * s][2], c[2 * s][3]);
    a[s][2] = mma::packBf16(c[2 * s + 1][0], c[2 * s + 1][1]);
    a[s][3] = mma::packBf16(c[2 * s + 1][2], c[2 * s + 1][3]);
  }
}

__device__ inline void zero(Accs &acc) {
#pragma unroll
  for (int n = 0; n < kBlocks8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      acc[n][i] = 0.0f;
}

/// Rows row[0], row[1] (the lane's g and g + 8) of acc times `scale` into
/// dst (row stride `stride`), rows from T on skipped.
__device__ inline void storeRows(__nv_bfloat16 *dst, int64_t stride,
                                 const Accs &acc, const int64_t (&row)[2],
                                 int64_t T, float scale, int t) {
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    if (row[half] >= T)
      continue;
    __nv_bfloat16 *out = dst + row[half] * stride + 2 * t;
#pragma unroll
    for (int n = 0; n < kBlocks8; ++n) {
      out[8 * n] = __float2bfloat16(acc[n][2 * half] * scale);
      out[8 * n + 1] = __float2bfloat16(acc[n][2 * half + 1] * scale);
    }
  }
}

/// Column (within a 64-wide tile) of accumulator element i of 8-column
/// tile n in lane 4g + t.
__device__ inline int columnOf(int n, int i, int t) {
  return 8 * n + 2 * t + (i & 1);
}

/// Where the calling thread works: its warp, its lane's quad coordinates
/// (g = lane / 4, t = lane % 4), the block's head (b, hd) and its
/// `blockRows` rows from r0 (tile `tile` of the head), the warp's
/// `warpRows` from w0.
struct Place {
  int warp, lane, g, t;
  int64_t bh, b, hd, r0, w0;
};
__device__ inline Place placeOf(int64_t tile, int64_t bh, int64_t NH,
                                int blockRows, int warpRows = kRows) {
  Place p;
  p.warp = threadIdx.x / 32;
  p.lane = threadIdx.x % 32;
  p.g = p.lane / 4;
  p.t = threadIdx.x % 4;
  p.bh = bh;
  p.b = bh / NH;
  p.hd = bh % NH;
  p.r0 = tile * blockRows;
  p.w0 = p.r0 + p.warp * warpRows;
  return p;
}

//===----------------------------------------------------------------------===//
// Forward
//===----------------------------------------------------------------------===//

/// One key tile's online-softmax step for a 16-row tile of queries (rows
/// row[0], row[1] of the lane) from w0: S (scores, from Q K^T) becomes P in
/// base 2 against the running row max m, with O rescaled and the lane's row
/// sums l updated. Keys after a row or past T are masked; a tile whose keys
/// all follow the rows changes nothing (alpha = 1, P = 0), bit for bit.
__device__ inline void onlineSoftmaxTile(Accs &s, Accs &o, float (&m)[2],
                                         float (&l)[2], const int64_t (&row)[2],
                                         int64_t k0, int64_t w0, int64_t T,
                                         float scaleLog2, int t) {
  // Scores in base 2, -inf for keys after the row or past T (only tiles
  // that reach past the first row or past T hold any).
  const bool masked = k0 + kTile - 1 > w0 || k0 + kTile > T;
  float tileMax[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < kBlocks8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t key = k0 + columnOf(n, i, t);
      float v = s[n][i] * scaleLog2;
      if (masked && (key > row[i >> 1] || key >= T))
        v = -INFINITY;
      s[n][i] = v;
      tileMax[i >> 1] = fmaxf(tileMax[i >> 1], v);
    }
  float alpha[2], base[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const float mNew = fmaxf(m[half], launch::quadMax(tileMax[half]));
    // A row with no key yet (m = -inf) has nothing to rescale.
    base[half] = mNew == -INFINITY ? 0.0f : mNew;
    alpha[half] = exp2f(m[half] - base[half]);
    m[half] = mNew;
  }
  float sum[2] = {0.0f, 0.0f};
#pragma unroll
  for (int n = 0; n < kBlocks8; ++n)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float p = exp2f(s[n][i] - base[i >> 1]);
      s[n][i] = p;
      sum[i >> 1] += p;
      o[n][i] *= alpha[i >> 1];
    }
  l[0] = l[0] * alpha[0] + sum[0];
  l[1] = l[1] * alpha[1] + sum[1];
}

/// blockIdx.x = bh * tiles + (tiles - 1 - tile): queries [tile*R, +R) of
/// head bh, R = 16 kR kWarps, kR tiles of 16 rows a warp (kR = 2: each K
/// and V fragment read from shared memory serves two products, as in
/// FlashAttention-2's 128-row blocks of 4 warps). Compiled to fit
/// kMinBlocks blocks per SM (launch bounds; 0 leaves the registers to
/// ptxas), as the backward kernels.
template <int kWarps, int kMinBlocks, int kR = 1>
__global__ void __launch_bounds__(threadsOf(kWarps), kMinBlocks)
    flashForwardTcKernel(__nv_bfloat16 *out, float *lse,
                         const __nv_bfloat16 *qkv, int64_t T, int64_t C,
                         int64_t NH, float scaleLog2, int tiles, bool vec) {
  // Key and value tiles, double-buffered: tile i in buffer i % 2 while
  // tile i + 1's copies land in the other.
  __shared__ __align__(16) __nv_bfloat16 kTiles[2][kTile * kLd];
  __shared__ __align__(16) __nv_bfloat16 vTiles[2][kTile * kLd];
  // The last query tiles see the most keys: they start first, so the
  // grid's tail is short blocks.
  constexpr int kWarpRows = kRows * kR;
  constexpr int kBlockRows = kWarpRows * kWarps;
  const Place at = placeOf(tiles - 1 - blockIdx.x % tiles, blockIdx.x / tiles,
                           NH, kBlockRows, kWarpRows);
  const int warp = at.warp, lane = at.lane, g = at.g, t = at.t;
  const int64_t bh = at.bh, q0 = at.r0, w0 = at.w0, C3 = 3 * C;
  const __nv_bfloat16 *head = qkv + at.b * T * C3 + at.hd * kHs;
  const int64_t lastRow = min(T, q0 + kBlockRows) - 1;

  // 1. Q_w as A fragments (staged through buffer 1, free until key tile
  //    1), with key tile 0 already on its way.
  stageRows(vTiles[1], head, C3, q0, T, vec);
  async_copy::commit();
  stageKeysValues(kTiles[0], vTiles[0], head, C, 0, T, vec);
  async_copy::commit();
  async_copy::wait<1>();
  __syncthreads();
  FragsA q[kR];
  loadBlockRows<kWarps, kR>(q, vTiles[1], head, C3, nullptr, nullptr, nullptr,
                            0, q0, T, vec, warp, g, t);

  // 2. Key tiles up to the block's last query. Row tile j's lane rows are
  //    row[j][0] = w0 + 16 j + g and row[j][1] = w0 + 16 j + g + 8: their
  //    running max m (base 2), the lane's part of the row sum l, and O.
  int64_t row[kR][2];
  float m[kR][2], l[kR][2];
  Accs o[kR];
#pragma unroll
  for (int j = 0; j < kR; ++j) {
    row[j][0] = w0 + kRows * j + g;
    row[j][1] = row[j][0] + 8;
    m[j][0] = m[j][1] = -INFINITY;
    l[j][0] = l[j][1] = 0.0f;
    zero(o[j]);
  }
  int buf = 0;
  for (int64_t k0 = 0; k0 <= lastRow; k0 += kTile, buf ^= 1) {
    // Every warp is done with the other buffer (the previous tile, or Q):
    // the next tile's copies go there, and land while this one computes.
    __syncthreads();
    if (k0 + kTile <= lastRow)
      stageKeysValues(kTiles[buf ^ 1], vTiles[buf ^ 1], head, C, k0 + kTile, T,
                      vec);
    async_copy::commit();
    async_copy::wait<1>(); // this tile's copies (all but the next tile's)
    __syncthreads();
    // A tile whose keys all follow the warp's rows changes nothing (in a
    // wide block, the top warps' last tile): skipped, warp by warp.
    if (k0 > w0 + kWarpRows - 1 || w0 >= T)
      continue;
    Accs s[kR];
#pragma unroll
    for (int j = 0; j < kR; ++j)
      zero(s[j]);
    timesTransposedRows<kR>(s, q, kTiles[buf], lane); // S = Q_w K^T
    FragsA p[kR];
#pragma unroll
    for (int j = 0; j < kR; ++j) {
      onlineSoftmaxTile(s[j], o[j], m[j], l[j], row[j], k0, w0 + kRows * j, T,
                        scaleLog2, t);
      accumulatorsAsA(p[j], s[j]);
    }
    timesRows<kR>(o, p, vTiles[buf], lane); // O += P V
  }

  // 3. out = O / l and lse = (m + log2 l) ln 2 for the lane's rows.
  __nv_bfloat16 *outHead = out + at.b * T * C + at.hd * kHs;
#pragma unroll
  for (int j = 0; j < kR; ++j)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float rowSum = launch::quadSum(l[j][half]);
      if (row[j][half] >= T)
        continue;
      const float inv = 1.0f / rowSum;
      __nv_bfloat16 *dst = outHead + row[j][half] * C + 2 * t;
#pragma unroll
      for (int n = 0; n < kBlocks8; ++n) {
        dst[8 * n] = __float2bfloat16(o[j][n][2 * half] * inv);
        dst[8 * n + 1] = __float2bfloat16(o[j][n][2 * half + 1] * inv);
      }
      if (t == 0)
        lse[bh * T + row[j][half]] = (m[j][half] + log2f(rowSum)) / kLog2e;
    }
}

//===----------------------------------------------------------------------===//
// Backward
//===----------------------------------------------------------------------===//

/// blockIdx.x = bh * tiles + tile: keys [tile*R, +R) of head bh, R = 16
/// kWarps (the first key tiles see the most queries, and start first);
/// writes their dk and dv.
template <int kWarps, int kMinBlocks>
__global__ void __launch_bounds__(threadsOf(kWarps), kMinBlocks)
    flashBackwardKeyTcKernel(__nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                             const __nv_bfloat16 *qkv, const float *lse,
                             const float *rowDot, int64_t T, int64_t C,
                             int64_t NH, float scale, int tiles, bool vec) {
  // Query-side tiles (Q, dO, lse, D), double-buffered as in the forward.
  __shared__ __align__(16) __nv_bfloat16 qTiles[2][kTile * kLd];
  __shared__ __align__(16) __nv_bfloat16 dyTiles[2][kTile * kLd];
  __shared__ __align__(16) float lseTiles[2][kTile], dTiles[2][kTile];
  const Place at =
      placeOf(blockIdx.x % tiles, blockIdx.x / tiles, NH, blockRowsOf(kWarps));
  const int warp = at.warp, lane = at.lane, g = at.g, t = at.t;
  const int64_t bh = at.bh, k0 = at.r0, w0 = at.w0, C3 = 3 * C;
  const __nv_bfloat16 *head = qkv + at.b * T * C3 + at.hd * kHs;
  const __nv_bfloat16 *dyHead = dout + at.b * T * C + at.hd * kHs;
  const float scaleLog2 = scale * kLog2e;

  // Issues the copies of query tile [q0, q0 + 64) into buffer `buf`.
  auto stageQueries = [&](int64_t q0, int buf) {
    stageRows(qTiles[buf], head, C3, q0, T, vec);
    stageRows(dyTiles[buf], dyHead, C, q0, T, vec);
    if (threadIdx.x < kTile) {
      const int64_t q = q0 + threadIdx.x;
      const bool valid = q < T;
      const int64_t index = valid ? bh * T + q : 0;
      async_copy::copy4(&lseTiles[buf][threadIdx.x], lse + index, valid);
      async_copy::copy4(&dTiles[buf][threadIdx.x], rowDot + index, valid);
    }
  };

  // 1. K_w and V_w as A fragments (staged through buffer 1, free until
  //    query tile 1), with query tile 0 (the block's first key) on its way.
  stageKeysValues(qTiles[1], dyTiles[1], head, C, k0, T, vec);
  async_copy::commit();
  stageQueries(k0, 0);
  async_copy::commit();
  async_copy::wait<1>();
  __syncthreads();
  FragsA kw, vw;
  loadBlockRows<kWarps>(&kw, qTiles[1], head + C, C3, &vw, dyTiles[1],
                        head + 2 * C, C3, k0, T, vec, warp, g, t);
  Accs dk, dv;
  zero(dk);
  zero(dv);
  const int64_t key[2] = {w0 + g, w0 + g + 8};

  // 2. Query tiles from the block's first key on (earlier queries do not
  //    see these keys).
  int buf = 0;
  for (int64_t t0 = k0; t0 < T; t0 += kTile, buf ^= 1) {
    __syncthreads(); // every warp is done with the other buffer
    if (t0 + kTile < T)
      stageQueries(t0 + kTile, buf ^ 1);
    async_copy::commit();
    async_copy::wait<1>(); // this tile's copies
    // The lse to base 2, by the thread that copied it.
    if (threadIdx.x < kTile)
      lseTiles[buf][threadIdx.x] *= kLog2e;
    __syncthreads();
    // A tile whose queries all precede the warp's keys adds nothing (in a
    // wide block, the bottom warps' first tile): skipped, warp by warp.
    if (t0 + kTile - 1 < w0 || w0 >= T)
      continue;
    const __nv_bfloat16 *qTile = qTiles[buf], *dyTile = dyTiles[buf];
    const float *lseTile = lseTiles[buf], *dTile = dTiles[buf];
    // P^T (16 keys x 64 queries), zero where the query precedes the key
    // or is past T (only tiles that start before the warp's last key or
    // reach past T hold any).
    Accs s;
    zero(s);
    timesTransposed(s, kw, qTile, lane); // S^T = K_w Q^T
    const bool masked = t0 < w0 + kRows - 1 || t0 + kTile > T;
#pragma unroll
    for (int n = 0; n < kBlocks8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int c = columnOf(n, i, t);
        const int64_t q = t0 + c;
        s[n][i] = masked && (q < key[i >> 1] || q >= T)
                      ? 0.0f
                      : exp2f(s[n][i] * scaleLog2 - lseTile[c]);
      }
    FragsA a;
    accumulatorsAsA(a, s);
    times(dv, a, dyTile, lane); // dV += P^T dO
    Accs dp;
    zero(dp);
    timesTransposed(dp, vw, dyTile, lane); // dP^T = V_w dO^T
#pragma unroll
    for (int n = 0; n < kBlocks8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        dp[n][i] = s[n][i] * (dp[n][i] - dTile[columnOf(n, i, t)]);
    accumulatorsAsA(a, dp);
    times(dk, a, qTile, lane); // dK += dS^T Q (scale at the end)
  }

  // 3. dk and dv rows of this lane.
  __nv_bfloat16 *dkHead = dqkv + at.b * T * C3 + C + at.hd * kHs;
  storeRows(dkHead, C3, dk, key, T, scale, t);
  storeRows(dkHead + C, C3, dv, key, T, 1.0f, t);
}

/// blockIdx.x = bh * tiles + (tiles - 1 - tile): queries [tile*R, +R) of
/// head bh, R = 16 kWarps; writes their dq.
template <int kWarps, int kMinBlocks>
__global__ void __launch_bounds__(threadsOf(kWarps), kMinBlocks)
    flashBackwardQueryTcKernel(__nv_bfloat16 *dqkv, const __nv_bfloat16 *dout,
                               const __nv_bfloat16 *qkv, const float *lse,
                               const float *rowDot, int64_t T, int64_t C,
                               int64_t NH, float scale, int tiles, bool vec) {
  // Key and value tiles, double-buffered as in the forward.
  __shared__ __align__(16) __nv_bfloat16 kTiles[2][kTile * kLd];
  __shared__ __align__(16) __nv_bfloat16 vTiles[2][kTile * kLd];
  constexpr int kBlockRows = blockRowsOf(kWarps);
  const Place at = placeOf(tiles - 1 - blockIdx.x % tiles, blockIdx.x / tiles,
                           NH, kBlockRows); // longest first, as in the forward
  const int warp = at.warp, lane = at.lane, g = at.g, t = at.t;
  const int64_t bh = at.bh, q0 = at.r0, w0 = at.w0, C3 = 3 * C;
  const __nv_bfloat16 *head = qkv + at.b * T * C3 + at.hd * kHs;
  const __nv_bfloat16 *dyHead = dout + at.b * T * C + at.hd * kHs;
  const float scaleLog2 = scale * kLog2e;

  // 1. Q_w and dO_w as A fragments (staged through buffer 1, free until
  //    key tile 1, with key tile 0 on its way); the lane's rows' lse (base
  //    2) and D.
  stageRows(kTiles[1], head, C3, q0, T, vec);
  stageRows(vTiles[1], dyHead, C, q0, T, vec);
  async_copy::commit();
  stageKeysValues(kTiles[0], vTiles[0], head, C, 0, T, vec);
  async_copy::commit();
  async_copy::wait<1>();
  __syncthreads();
  FragsA qw, dyw;
  loadBlockRows<kWarps>(&qw, kTiles[1], head, C3, &dyw, vTiles[1], dyHead, C,
                        q0, T, vec, warp, g, t);
  const int64_t row[2] = {w0 + g, w0 + g + 8};
  float rowLse[2], rowD[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    rowLse[half] = row[half] < T ? lse[bh * T + row[half]] * kLog2e : 0.0f;
    rowD[half] = row[half] < T ? rowDot[bh * T + row[half]] : 0.0f;
  }
  Accs dq;
  zero(dq);

  // 2. Key tiles up to the block's last query row.
  const int64_t lastRow = min(T, q0 + kBlockRows) - 1;
  int buf = 0;
  for (int64_t k0 = 0; k0 <= lastRow; k0 += kTile, buf ^= 1) {
    __syncthreads(); // every warp is done with the other buffer
    if (k0 + kTile <= lastRow)
      stageKeysValues(kTiles[buf ^ 1], vTiles[buf ^ 1], head, C, k0 + kTile, T,
                      vec);
    async_copy::commit();
    async_copy::wait<1>(); // this tile's copies
    __syncthreads();
    // As in the forward: a tile of keys after all the warp's rows adds
    // nothing.
    if (k0 > w0 + kRows - 1 || w0 >= T)
      continue;
    Accs s;
    zero(s);
    timesTransposed(s, qw, kTiles[buf], lane); // S = Q_w K^T
    const bool masked = k0 + kTile - 1 > w0 || k0 + kTile > T;
#pragma unroll
    for (int n = 0; n < kBlocks8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t k = k0 + columnOf(n, i, t);
        s[n][i] = masked && (k > row[i >> 1] || k >= T)
                      ? 0.0f
                      : exp2f(s[n][i] * scaleLog2 - rowLse[i >> 1]);
      }
    Accs dp;
    zero(dp);
    timesTransposed(dp, dyw, vTiles[buf], lane); // dP = dO_w V^T
#pragma unroll
    for (int n = 0; n < kBlocks8; ++n)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        dp[n][i] = s[n][i] * (dp[n][i] - rowD[i >> 1]);
    FragsA a;
    accumulatorsAsA(a, dp);
    times(dq, a, kTiles[buf], lane); // dQ += dS K (scale at the end)
  }

  // 3. dq rows of this lane.
  storeRows(dqkv + at.b * T * C3 + at.hd * kHs, C3, dq, row, T, scale, t);
}

/// Whether every pointer is 16-byte aligned: stageRows' 16-byte loads (the
/// row strides, C and 3C elements with C = 64 NH, keep that alignment).
bool allAligned16(std::initializer_list<const void *> pointers) {
  for (const void *p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
      return false;
  return true;
}

/// The grid of a tensor-core kernel launched in `occupancy`: blocks of
/// `warps` warps (16 rowTiles rows each), `tiles` blocks per head, `blocks`
/// in all.
struct TcGrid {
  bool wide = false;
  int warps = 4, rowTiles = 1, tiles = 0;
  unsigned blocks = 0;
};
/// The shape a backward kernel runs in for `occupancy`: they have no
/// TallWarps build (their accumulators leave no registers for a second row
/// tile).
FlashTcOccupancy backwardShape(FlashTcOccupancy occupancy) {
  return occupancy == FlashTcOccupancy::TallWarps
             ? FlashTcOccupancy::FewestSpills
             : occupancy;
}

Status gridOf(FlashTcOccupancy occupancy, int64_t B, int64_t T, int64_t C,
              int64_t NH, TcGrid &grid) {
  LOOM_CHECK(NH > 0 && C == NH * kFlashTensorCoreHeadSize,
             "tensor-core flash attention: C = " << C << " over " << NH
                                                 << " heads is not head size "
                                                 << kFlashTensorCoreHeadSize);
  grid.wide = occupancy == FlashTcOccupancy::WideBlocks;
  grid.warps = grid.wide ? 8 : 4;
  grid.rowTiles = occupancy == FlashTcOccupancy::TallWarps ? 2 : 1;
  const int64_t blockRows = blockRowsOf(grid.warps) * grid.rowTiles;
  const int64_t t = (T + blockRows - 1) / blockRows, n = t * B * NH;
  LOOM_CHECK(n < (int64_t(1) << 31),
             "flash attention: " << n << " blocks exceed CUDA's grid limit");
  grid.tiles = static_cast<int>(t);
  grid.blocks = static_cast<unsigned>(n);
  return Status::success();
}

} // namespace

Status flashAttentionForwardTensorCores(__nv_bfloat16 *out, float *lse,
                                        const __nv_bfloat16 *qkv, int64_t B,
                                        int64_t T, int64_t C, int64_t NH,
                                        cudaStream_t stream,
                                        FlashTcOccupancy occupancy) {
  TcGrid grid;
  LOOM_RETURN_IF_ERROR(gridOf(occupancy, B, T, C, NH, grid));
  const float scaleLog2 = kLog2e / sqrtf(static_cast<float>(kHs));
  // Wide blocks of 256 threads at 2 a SM: 128 registers, as MoreBlocks'.
  auto *kernel =
      grid.wide                                   ? flashForwardTcKernel<8, 2>
      : occupancy == FlashTcOccupancy::MoreBlocks ? flashForwardTcKernel<4, 4>
      : occupancy == FlashTcOccupancy::TallWarps ? flashForwardTcKernel<4, 2, 2>
                                                 : flashForwardTcKernel<4, 0>;
  LOOM_LAUNCH(kernel, grid.blocks, threadsOf(grid.warps), stream, out, lse, qkv,
              T, C, NH, scaleLog2, grid.tiles, allAligned16({qkv}));
  return Status::success();
}

namespace {

/// The backward kernels' common signature (flashBackwardKeyTcKernel,
/// flashBackwardQueryTcKernel).
using BackwardKernel = void (*)(__nv_bfloat16 *, const __nv_bfloat16 *,
                                const __nv_bfloat16 *, const float *,
                                const float *, int64_t, int64_t, int64_t, float,
                                int, bool);

/// Launches one backward kernel over the grid of `grid`.
Status launchBackward(BackwardKernel kernel, const TcGrid &grid,
                      __nv_bfloat16 *dqkv, const float *rowDot,
                      const __nv_bfloat16 *dout, const __nv_bfloat16 *qkv,
                      const float *lse, int64_t T, int64_t C, int64_t NH,
                      cudaStream_t stream) {
  LOOM_LAUNCH(kernel, grid.blocks, threadsOf(grid.warps), stream, dqkv, dout,
              qkv, lse, rowDot, T, C, NH, 1.0f / sqrtf(static_cast<float>(kHs)),
              grid.tiles, allAligned16({qkv, dout}));
  return Status::success();
}

} // namespace

Status flashBackwardKeysTensorCores(__nv_bfloat16 *dqkv, const float *rowDot,
                                    const __nv_bfloat16 *dout,
                                    const __nv_bfloat16 *qkv, const float *lse,
                                    int64_t B, int64_t T, int64_t C, int64_t NH,
                                    cudaStream_t stream,
                                    FlashTcOccupancy occupancy) {
  TcGrid grid;
  LOOM_RETURN_IF_ERROR(gridOf(backwardShape(occupancy), B, T, C, NH, grid));
  // dK/dV keeps its 8 warps per SM either way (2 blocks of 4, or 1 of 8; 3
  // of 4 would leave it 168 registers for 248 live).
  return launchBackward(grid.wide ? flashBackwardKeyTcKernel<8, 0>
                                  : flashBackwardKeyTcKernel<4, 0>,
                        grid, dqkv, rowDot, dout, qkv, lse, T, C, NH, stream);
}

Status flashBackwardQueriesTensorCores(
    __nv_bfloat16 *dqkv, const float *rowDot, const __nv_bfloat16 *dout,
    const __nv_bfloat16 *qkv, const float *lse, int64_t B, int64_t T, int64_t C,
    int64_t NH, cudaStream_t stream, FlashTcOccupancy occupancy) {
  const FlashTcOccupancy shape = backwardShape(occupancy);
  TcGrid grid;
  LOOM_RETURN_IF_ERROR(gridOf(shape, B, T, C, NH, grid));
  return launchBackward(grid.wide ? flashBackwardQueryTcKernel<8, 0>
                        : shape == FlashTcOccupancy::MoreBlocks
                            ? flashBackwardQueryTcKernel<4, 3>
                            : flashBackwardQueryTcKernel<4, 0>,
                        grid, dqkv, rowDot, dout, qkv, lse, T, C, NH, stream);
}

Status flashAttentionBackwardTensorCores(
    __nv_bfloat16 *dqkv, const float *rowDot, const __nv_bfloat16 *dout,
    const __nv_bfloat16 *qkv, const float *lse, int64_t B, int64_t T, int64_t C,
    int64_t NH, cudaStream_t stream, FlashTcShapes shapes) {
  // Qualified, so argument-dependent lookup of FlashTcOccupancy does not
  // also find the real kernels where the tests emulate these.
  LOOM_RETURN_IF_ERROR(cuda::flashBackwardKeysTensorCores(
      dqkv, rowDot, dout, qkv, lse, B, T, C, NH, stream, shapes.keys));
  return cuda::flashBackwardQueriesTensorCores(
      dqkv, rowDot, dout, qkv, lse, B, T, C, NH, stream, shapes.queries);
}

} // namespace loom::cuda
