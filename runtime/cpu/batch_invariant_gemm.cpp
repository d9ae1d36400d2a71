//===- batch_invariant_gemm.cpp - A GEMM whose bits ignore the batch ------===//
#include "runtime/cpu/batch_invariant_gemm.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <omp.h>

namespace loom::cpu {

namespace {

// The blocking (GotoBLAS's): a task owns a run of rows [i0, i1) and a
// panel of columns; K is walked in blocks of kDepth. Each block packs the
// panel's slice of op(B) once for the whole run (kDepth x 256 floats, 256
// KiB: half a Zen 3 core's L2) as contiguous strips of a micro-tile's
// width, then goes down the run kChunkRows rows at a time, packing their
// slice of op(A) as slivers of a micro-tile's height (96 KiB). A
// micro-tile then reads its strip (16 KiB) and sliver from L1 / L2 at unit
// stride. Sums that span several blocks wait in `partial` as fp32, which
// is exactly what the register held: the sum is still one accumulator in
// k order. How rows are grouped into runs changes no bit.
constexpr int64_t kPanelCols = 256; // columns of op(B) a task covers
// Rows of op(A) packed at once: 16 slivers of 6, or 24 of 4.
constexpr int64_t kChunkRows = 96;
constexpr int64_t kDepth = 256; // k per packed block
// The schedule: the (chunk, panel) pairs in panel-major order are dealt
// out as kRunsPerThread contiguous runs per thread, so that a thread packs
// a panel's op(B) once for each run, not once for each chunk of 96 rows,
// and the runs still balance between threads under a dynamic schedule. A run
// stops at kMaxRunChunks chunks, which bounds `partial` (1536 x 256 floats).
constexpr int64_t kRunsPerThread = 8;
constexpr int64_t kMaxRunChunks = 16;

/// Eight floats, one register (AVX) or two (SSE2).
typedef float Float8 __attribute__((vector_size(32)));

struct Operands {
  bool transA, transB;
  int64_t M, N, K;
  float alpha;
  const float *A;
  int64_t lda;
  const float *B;
  int64_t ldb;
  float beta;
  float *C;
  int64_t ldc;
};

/// Floats that grow and are never cleared: a fresh std::vector per call
/// cost a large call's pages (faulted in and zeroed) every time, nearly
/// half the time of a 96 x 256 x 512 product on one thread.
class Scratch {
public:
  /// At least n floats, their values whatever was left there.
  float *atLeast(size_t n) {
    if (n > size_) {
      data_.reset(new float[n]);
      size_ = n;
    }
    return data_.get();
  }

private:
  std::unique_ptr<float[]> data_;
  size_t size_ = 0;
};

/// A thread's packing buffers, kept across its tasks and calls (OpenMP's
/// threads live on between parallel regions; a thread runs one call at a
/// time).
struct Buffers {
  Scratch packedB, packedA, partial;
};
thread_local Buffers threadBuffers;

/// Packs `kc` rows of kWidth floats: dst[k kWidth + x] is the source's
/// element (x, k) for x < n and zero past n. The source element (x, k) is
/// src[x ld + k] when `alongK` (its lines run along k: transposed while
/// packing, each line read at unit stride), else src[k ld + x].
template <int64_t kWidth>
__attribute__((always_inline)) inline void
packBlock(float *dst, const float *src, int64_t ld, bool alongK, int64_t n,
          int64_t kc) {
  if (n < kWidth)
    std::fill(dst, dst + kc * kWidth, 0.0f);
  if (alongK)
    for (int64_t x = 0; x < n; ++x)
      for (int64_t k = 0; k < kc; ++k)
        dst[k * kWidth + x] = src[x * ld + k];
  else if (n == kWidth) // fixed-size copies: vector moves, not memcpy calls
    for (int64_t k = 0; k < kc; ++k)
      std::memcpy(dst + k * kWidth, src + k * ld, sizeof(float) * kWidth);
  else
    for (int64_t k = 0; k < kc; ++k)
      std::memcpy(dst + k * kWidth, src + k * ld, sizeof(float) * n);
}

/// One task: rows [i0, i1) of C against the panel of columns [j0, j1).
/// Inlined into a caller per instruction set (below), so the compiler
/// vectorizes the micro-tile for it; kRows x kCols is the micro-tile.
template <int64_t kRows, int64_t kCols>
__attribute__((always_inline)) inline void
runTask(const Operands &o, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
        Buffers &buf) {
  static_assert(kChunkRows % kRows == 0, "a chunk is whole slivers");
  constexpr int64_t kVectors = kCols / 8;
  const int64_t rows = i1 - i0, cols = j1 - j0;
  const int64_t strips = (cols + kCols - 1) / kCols;
  const int64_t slivers = (rows + kRows - 1) / kRows; // of the whole run
  const int64_t depth = std::min(o.K, kDepth);
  float *packedB =
      buf.packedB.atLeast(static_cast<size_t>(strips * depth * kCols));
  float *packedA = buf.packedA.atLeast(static_cast<size_t>(
      std::min(slivers, kChunkRows / kRows) * depth * kRows));
  float *partials = o.K > kDepth ? buf.partial.atLeast(static_cast<size_t>(
                                       slivers * kRows * strips * kCols))
                                 : nullptr;
  // K = 0 still runs one (empty) block: C = beta C.
  for (int64_t k0 = 0; k0 < std::max<int64_t>(o.K, 1); k0 += kDepth) {
    const int64_t kc = std::min(kDepth, o.K - k0);
    const bool first = k0 == 0, last = k0 + kDepth >= o.K;
    // op(B)[k0 + k][c0 + c] at packedB[(s depth + k) kCols + c] for strip
    // s's columns from c0, once for every chunk of the run.
    for (int64_t s = 0; s < strips; ++s) {
      const int64_t c0 = j0 + s * kCols;
      packBlock<kCols>(packedB + s * depth * kCols,
                       o.transB ? o.B + c0 * o.ldb + k0 : o.B + k0 * o.ldb + c0,
                       o.ldb, /*alongK=*/o.transB, std::min(kCols, j1 - c0),
                       kc);
    }
    for (int64_t h0 = i0; h0 < i1; h0 += kChunkRows) {
      const int64_t h1 = std::min(i1, h0 + kChunkRows);
      const int64_t chunkSlivers = (h1 - h0 + kRows - 1) / kRows;
      // op(A)[r0 + r][k0 + k] at packedA[(q depth + k) kRows + r] for the
      // chunk's sliver q's rows from r0.
      for (int64_t q = 0; q < chunkSlivers; ++q) {
        const int64_t r0 = h0 + q * kRows;
        packBlock<kRows>(
            packedA + q * depth * kRows,
            o.transA ? o.A + k0 * o.lda + r0 : o.A + r0 * o.lda + k0, o.lda,
            /*alongK=*/!o.transA, std::min(kRows, h1 - r0), kc);
      }
      // A strip stays in L1 while every sliver of the chunk passes over it.
      for (int64_t s = 0; s < strips; ++s)
        for (int64_t q = 0; q < chunkSlivers; ++q) {
          // The micro-tile's sums in registers: GCC's vector types compile
          // to the task's instruction set (ymm with FMA, or pairs of xmm),
          // one lane per element, so each element is one sum in k order.
          Float8 acc[kRows][kVectors] = {};
          // Where the sums wait between blocks of k (one block: nowhere);
          // the run's sliver g = (h0 - i0) / kRows + q.
          const int64_t ldPartial = strips * kCols;
          const int64_t g = (h0 - i0) / kRows + q;
          float *partial =
              partials ? partials + (g * kRows * strips + s) * kCols : nullptr;
          if (!first)
            for (int64_t r = 0; r < kRows; ++r)
              std::memcpy(acc[r], partial + r * ldPartial, sizeof acc[r]);
          const float *a = packedA + q * depth * kRows;
          const float *b = packedB + s * depth * kCols;
          for (int64_t k = 0; k < kc; ++k, a += kRows, b += kCols) {
            Float8 bv[kVectors];
            for (int64_t v = 0; v < kVectors; ++v)
              std::memcpy(&bv[v], b + 8 * v, sizeof(Float8));
            for (int64_t r = 0; r < kRows; ++r)
              for (int64_t v = 0; v < kVectors; ++v)
                acc[r][v] += bv[v] * a[r];
          }
          if (!last) {
            for (int64_t r = 0; r < kRows; ++r)
              std::memcpy(partial + r * ldPartial, acc[r], sizeof acc[r]);
            continue;
          }
          // C = alpha sum + beta C, in vectors for whole and partial tiles
          // alike (an element's bits must not depend on which it fell in).
          const int64_t r0 = h0 + q * kRows, m = std::min(kRows, h1 - r0);
          const int64_t c0 = j0 + s * kCols, n = std::min(kCols, j1 - c0);
          // A whole tile's rows move in fixed-size copies (vector loads
          // and stores); a partial tile's through a zero-padded row.
          for (int64_t r = 0; r < m; ++r) {
            float *out = o.C + (r0 + r) * o.ldc + c0;
            Float8 result[kVectors];
            if (o.beta == 0.0f) {
              for (int64_t v = 0; v < kVectors; ++v)
                result[v] = o.alpha * acc[r][v];
            } else {
              float padded[kCols];
              const float *prior = out;
              if (n < kCols) {
                std::fill(std::copy(out, out + n, padded), padded + kCols,
                          0.0f);
                prior = padded;
              }
              for (int64_t v = 0; v < kVectors; ++v) {
                Float8 c;
                std::memcpy(&c, prior + 8 * v, sizeof c);
                result[v] = o.alpha * acc[r][v] + o.beta * c;
              }
            }
            if (n == kCols)
              std::memcpy(out, result, sizeof result);
            else
              std::memcpy(out, result, sizeof(float) * n);
          }
        }
    }
  }
}

// AVX2 + FMA: a row of 16 columns is two 8-wide registers, 6 rows twelve
// accumulators of the sixteen ymm. The baseline (SSE2) tile is 4 rows of 8
// columns, eight of its sixteen xmm. A machine runs one of them
// for every call, so its runs agree with each other. (The instruction set
// is the task's, not the parallel loop's: GCC compiles an OpenMP region's
// body as a function of its own, without its parent's target attribute.)
using TaskFn = void (*)(const Operands &, int64_t, int64_t, int64_t, int64_t,
                        Buffers &);

__attribute__((target("avx2,fma"))) void taskAvx2(const Operands &o, int64_t i0,
                                                  int64_t i1, int64_t j0,
                                                  int64_t j1, Buffers &buf) {
  runTask<6, 16>(o, i0, i1, j0, j1, buf);
}

void taskBaseline(const Operands &o, int64_t i0, int64_t i1, int64_t j0,
                  int64_t j1, Buffers &buf) {
  runTask<4, 8>(o, i0, i1, j0, j1, buf);
}

TaskFn chooseTask() {
  static const TaskFn task =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
          ? taskAvx2
          : taskBaseline;
  return task;
}

} // namespace

void batchInvariantGemm(bool transA, bool transB, int64_t M, int64_t N,
                        int64_t K, float alpha, const float *A, int64_t lda,
                        const float *B, int64_t ldb, float beta, float *C,
                        int64_t ldc) {
  if (M <= 0 || N <= 0)
    return;
  const Operands o{transA, transB, M,   N,    K, alpha, A,
                   lda,    B,      ldb, beta, C, ldc};
  const TaskFn task = chooseTask();
  const int64_t panels = (N + kPanelCols - 1) / kPanelCols;
  const int64_t chunks = (M + kChunkRows - 1) / kChunkRows;
  const int64_t pairs = panels * chunks; // (chunk, panel), panel-major
  const int64_t threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t runs = std::min(pairs, kRunsPerThread * threads);
  // Which thread runs a run changes nothing in it: the schedule is free.
#pragma omp parallel if (runs > 1 && !omp_in_parallel())
  {
    Buffers &buf = threadBuffers;
#pragma omp for schedule(dynamic, 1)
    for (int64_t run = 0; run < runs; ++run) {
      // The run's pairs [t, end), one task per panel it touches (and per
      // kMaxRunChunks of its chunks).
      const int64_t end = (run + 1) * pairs / runs;
      for (int64_t t = run * pairs / runs; t < end;) {
        const int64_t p = t / chunks, q = t % chunks;
        const int64_t n = std::min({end - t, chunks - q, kMaxRunChunks});
        task(o, q * kChunkRows, std::min(M, (q + n) * kChunkRows),
             p * kPanelCols, std::min(N, (p + 1) * kPanelCols), buf);
        t += n;
      }
    }
  }
}

} // namespace loom::cpu
