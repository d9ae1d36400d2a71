//===- batch_invariant_gemm.cpp - A GEMM whose bits ignore the batch ------===//
#include "runtime/cpu/batch_invariant_gemm.h"

#include <algorithm>
#include <cstring>
#include <omp.h>
#include <vector>

namespace loom::cpu {

namespace {

constexpr int64_t kPanelCols = 256; // columns of op(B) packed at once
constexpr int64_t kTaskRows = 96; // rows of op(A) a task covers: 16 x 6, 24 x 4

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

/// One task: rows [i0, i1) of C against columns [j0, j1). `packedB` and
/// `packedA` are the thread's buffers. Inlined into a caller per
/// instruction set (below), so the compiler vectorizes the micro-tile for
/// it; kCols is the micro-tile's width.
template <int64_t kRows, int64_t kCols>
__attribute__((always_inline)) inline void
runTask(const Operands &o, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
        std::vector<float> &packedB, std::vector<float> &packedA) {
  const int64_t K = o.K, cols = j1 - j0;
  const int64_t width = (cols + kCols - 1) / kCols * kCols;
  // op(B)[k][j0 + j] at packedB[k * width + j], zero past `cols`.
  packedB.assign(static_cast<size_t>(K * width), 0.0f);
  for (int64_t k = 0; k < K; ++k) {
    float *row = packedB.data() + k * width;
    if (o.transB)
      for (int64_t j = 0; j < cols; ++j)
        row[j] = o.B[(j0 + j) * o.ldb + k];
    else
      std::copy(o.B + k * o.ldb + j0, o.B + k * o.ldb + j1, row);
  }
  packedA.resize(static_cast<size_t>(K * kRows));
  for (int64_t i = i0; i < i1; i += kRows) {
    const int64_t rows = std::min(kRows, i1 - i);
    // op(A)[i + r][k] at packedA[k * kRows + r], zero past `rows`.
    for (int64_t k = 0; k < K; ++k)
      for (int64_t r = 0; r < kRows; ++r)
        packedA[k * kRows + r] = r >= rows  ? 0.0f
                                 : o.transA ? o.A[k * o.lda + i + r]
                                            : o.A[(i + r) * o.lda + k];
    for (int64_t j = 0; j < width; j += kCols) {
      // The micro-tile's sums in registers: GCC's vector types compile to
      // the task's instruction set (ymm with FMA, or pairs of xmm), one
      // lane per element, so each element is still one sum in k order.
      constexpr int64_t kVectors = kCols / 8;
      Float8 acc[kRows][kVectors] = {};
      const float *a = packedA.data();
      const float *b = packedB.data() + j;
      for (int64_t k = 0; k < K; ++k, a += kRows, b += width) {
        Float8 bv[kVectors];
        for (int64_t v = 0; v < kVectors; ++v)
          std::memcpy(&bv[v], b + 8 * v, sizeof(Float8));
        for (int64_t r = 0; r < kRows; ++r)
          for (int64_t v = 0; v < kVectors; ++v)
            acc[r][v] += bv[v] * a[r];
      }
      const int64_t n = std::min(kCols, cols - j);
      for (int64_t r = 0; r < rows; ++r) {
        float sums[kCols];
        std::memcpy(sums, acc[r], sizeof sums);
        float *out = o.C + (i + r) * o.ldc + j0 + j;
        for (int64_t c = 0; c < n; ++c)
          out[c] = o.beta == 0.0f ? o.alpha * sums[c]
                                  : o.alpha * sums[c] + o.beta * out[c];
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
                        std::vector<float> &, std::vector<float> &);

__attribute__((target("avx2,fma"))) void
taskAvx2(const Operands &o, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
         std::vector<float> &packedB, std::vector<float> &packedA) {
  runTask<6, 16>(o, i0, i1, j0, j1, packedB, packedA);
}

void taskBaseline(const Operands &o, int64_t i0, int64_t i1, int64_t j0,
                  int64_t j1, std::vector<float> &packedB,
                  std::vector<float> &packedA) {
  runTask<4, 8>(o, i0, i1, j0, j1, packedB, packedA);
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
  const int64_t chunks = (M + kTaskRows - 1) / kTaskRows;
  const int64_t tasks = panels * chunks;
  // Which thread runs a task changes nothing in it: the schedule is free.
#pragma omp parallel if (tasks > 1 && !omp_in_parallel())
  {
    std::vector<float> packedB, packedA;
#pragma omp for schedule(dynamic, 1)
    for (int64_t t = 0; t < tasks; ++t) {
      const int64_t p = t / chunks, q = t % chunks;
      task(o, q * kTaskRows, std::min(M, (q + 1) * kTaskRows), p * kPanelCols,
           std::min(N, (p + 1) * kPanelCols), packedB, packedA);
    }
  }
}

} // namespace loom::cpu
