//===- BatchInvariantGemmTest.cpp - A GEMM whose bits ignore the batch ----===//
//
// runtime/cpu/batch_invariant_gemm.h's promise, bit for bit: an element of
// C is the same whichever rows and columns the call around it covers, at
// whatever offset, on however many threads, inside a parallel region or
// not. (OpenBLAS 0.3.21 fails the first of these on AMD Zen: see the
// header.) And the GEMM contract itself, against the double reference.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/batch_invariant_gemm.h"
#include "runtime/cpu/gemm.h"

#include "TestUtil.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <omp.h>
#include <tuple>

using namespace loom;
using namespace loom::test;

namespace {

/// Op(A) [M, K] and op(B) [K, N] stored as the transposes say, rows of
/// A padded by 3 floats.
struct Problem {
  bool ta, tb;
  int64_t M, N, K, lda, ldb;
  std::vector<float> A, B;
  Problem(bool ta, bool tb, int64_t M, int64_t N, int64_t K)
      : ta(ta), tb(tb), M(M), N(N), K(K), lda((ta ? M : K) + 3),
        ldb(tb ? K : N), A(randomVector((ta ? K : M) * lda, 11)),
        B(randomVector((tb ? N : K) * ldb, 12)) {}
  /// Rows [r0, r0 + m) and columns [c0, c0 + n) of op(A) op(B), as their
  /// own call; with `beta`, alpha = 0.75 and C = beta * (C's element index
  /// in the full product) before (the accumulate path).
  std::vector<float> block(int64_t r0, int64_t m, int64_t c0, int64_t n,
                           float beta = 0.0f) const {
    std::vector<float> C(static_cast<size_t>(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        C[i * n + j] = static_cast<float>((r0 + i) * N + c0 + j) * 1e-3f;
    const float *a = ta ? A.data() + r0 : A.data() + r0 * lda;
    const float *b = tb ? B.data() + c0 * ldb : B.data() + c0;
    cpu::batchInvariantGemm(ta, tb, m, n, K, beta == 0.0f ? 1.0f : 0.75f, a,
                            lda, b, ldb, beta, C.data(), n);
    return C;
  }
  /// op(A)[i][k] and op(B)[k][j].
  float a(int64_t i, int64_t k) const {
    return ta ? A[k * lda + i] : A[i * lda + k];
  }
  float b(int64_t k, int64_t j) const {
    return tb ? B[j * ldb + k] : B[k * ldb + j];
  }
};

bool sameBits(const std::vector<float> &full, int64_t ldFull, int64_t r0,
              int64_t c0, const std::vector<float> &part, int64_t m,
              int64_t n) {
  for (int64_t i = 0; i < m; ++i)
    if (std::memcmp(full.data() + (r0 + i) * ldFull + c0, part.data() + i * n,
                    sizeof(float) * n) != 0)
      return false;
  return true;
}

TEST(BatchInvariantGemm, AnElementIsTheSameWhateverTheCallAroundIt) {
  // N = 300 crosses a 256-column panel; M = 203 crosses 96-row tasks and
  // leaves partial micro-tiles; K = 70 is one packed block of k, K = 600
  // three (the sums wait between them), and beta != 0 takes the
  // accumulate path.
  for (const auto &[ta, tb, K, beta] :
       std::vector<std::tuple<bool, bool, int64_t, float>>{
           {false, false, 70, 0.0f},
           {false, true, 70, 0.0f},
           {true, false, 70, 0.0f},
           {true, true, 70, 0.0f},
           {false, true, 600, 0.0f},
           {true, false, 600, 0.5f},
           {false, false, 70, 0.5f}}) {
    SCOPED_TRACE("ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                 " K=" + std::to_string(K) + " beta=" + std::to_string(beta));
    const Problem p(ta, tb, 203, 300, K);
    const std::vector<float> full = p.block(0, p.M, 0, p.N, beta);
    // Rows: single rows, odd counts, at offsets that move a row to every
    // position of a micro-tile and across tasks.
    for (int64_t m : {1, 2, 5, 7, 32, 97, 150})
      for (int64_t r0 : {0, 1, 3, 5, 50, 53}) {
        if (r0 + m > p.M)
          continue;
        EXPECT_TRUE(
            sameBits(full, p.N, r0, 0, p.block(r0, m, 0, p.N, beta), m, p.N))
            << m << " rows from " << r0;
      }
    // Columns: inside a micro-tile, across tiles and across panels.
    for (int64_t n : {1, 3, 9, 17, 100, 257})
      for (int64_t c0 : {0, 1, 7, 15, 40}) {
        if (c0 + n > p.N)
          continue;
        EXPECT_TRUE(
            sameBits(full, p.N, 0, c0, p.block(0, p.M, c0, n, beta), p.M, n))
            << n << " columns from " << c0;
      }
  }
}

/// The header's promise itself, bit for bit: element (i, j) of op(A) op(B)
/// is the sum acc = acc + a[i][k] b[k][j] for k = 0, 1, ..., K-1 from 0 in
/// one fp32 accumulator -- fused (one rounding, std::fma) where the machine
/// runs the FMA micro-tile, a product then a sum on baseline x86-64.
/// Returns how many of the elements in `rows` x `cols` of C differ.
int64_t elementsNotSummedInKOrder(const Problem &p, const std::vector<float> &C,
                                  const std::vector<int64_t> &rows,
                                  const std::vector<int64_t> &cols) {
  const bool fused =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  int64_t differ = 0;
  for (int64_t i : rows)
    for (int64_t j : cols) {
      volatile float acc = 0.0f; // no contraction but the one asked for
      for (int64_t k = 0; k < p.K; ++k) {
        if (fused) {
          acc = std::fma(p.a(i, k), p.b(k, j), acc);
        } else {
          volatile float product = p.a(i, k) * p.b(k, j);
          acc = acc + product;
        }
      }
      differ += std::memcmp(&C[i * p.N + j], const_cast<float *>(&acc),
                            sizeof(float)) != 0;
    }
  return differ;
}

std::vector<int64_t> zeroTo(int64_t n) {
  std::vector<int64_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    all[i] = i;
  return all;
}

// K = 700 spans three packed blocks of k.
TEST(BatchInvariantGemm, EachElementIsOneFp32SumInKOrder) {
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      SCOPED_TRACE("ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
      const Problem p(ta, tb, 37, 45, 700);
      EXPECT_EQ(elementsNotSummedInKOrder(p, p.block(0, p.M, 0, p.N),
                                          zeroTo(p.M), zeroTo(p.N)),
                0)
          << "of " << p.M * p.N << " elements";
    }
}

// A thread takes the 96-row chunks of a 256-column panel in runs, packing
// the panel's op(B) once a run and keeping a run's sums between blocks of
// k. On one thread (the longest runs): 17 chunks by 3 panels, whose runs
// of 6 or 7 chunks cross from one panel into the next; and 140 chunks of
// one panel, whose runs of 17 or 18 are cut at 16. K = 300 is two blocks.
TEST(BatchInvariantGemm, LongRunsOfRowsStillSumEachElementInKOrder) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Problem wide(false, false, 1600, 600, 300);
  // Every row; the columns at the edges of micro-tiles and panels.
  EXPECT_EQ(elementsNotSummedInKOrder(
                wide, wide.block(0, wide.M, 0, wide.N), zeroTo(wide.M),
                {0, 15, 16, 255, 256, 257, 511, 512, 599}),
            0);
  const Problem tall(true, true, 140 * 96, 8, 300);
  EXPECT_EQ(elementsNotSummedInKOrder(tall, tall.block(0, tall.M, 0, tall.N),
                                      zeroTo(tall.M), zeroTo(tall.N)),
            0);
  omp_set_num_threads(saved);
}

TEST(BatchInvariantGemm, ThreadsAndParallelRegionsChangeNoBit) {
  const Problem p(false, true, 300, 520, 96);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const std::vector<float> one = p.block(0, p.M, 0, p.N);
  omp_set_num_threads(3);
  const std::vector<float> three = p.block(0, p.M, 0, p.N);
  omp_set_num_threads(saved);
  EXPECT_EQ(std::memcmp(one.data(), three.data(), one.size() * 4), 0);
  // Called from inside a parallel region (as the attention kernel's heads
  // do), it runs on the calling thread: the same bits.
  std::vector<float> nested;
#pragma omp parallel num_threads(2)
  {
#pragma omp single
    nested = p.block(0, p.M, 0, p.N);
  }
  EXPECT_EQ(std::memcmp(one.data(), nested.data(), one.size() * 4), 0);
}

TEST(BatchInvariantGemm, KeepsTheGemmContract) {
  const int64_t M = 13, N = 21, K = 300, ldc = N + 2;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      const Problem p(ta, tb, M, N, K);
      auto C = randomVector(M * ldc, 13);
      auto ref = C;
      cpu::batchInvariantGemm(ta, tb, M, N, K, 0.5f, p.A.data(), p.lda,
                              p.B.data(), p.ldb, 0.25f, C.data(), ldc);
      cpu::gemmReference(ta, tb, M, N, K, 0.5f, p.A.data(), p.lda, p.B.data(),
                         p.ldb, 0.25f, ref.data(), ldc);
      expectClose(C, ref, 1e-5, 1e-5,
                  "ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
    }
  // beta = 0 ignores C (NaN too); K = 0 leaves beta * C.
  const Problem p(false, false, 5, 6, 4);
  std::vector<float> C(30, std::numeric_limits<float>::quiet_NaN());
  cpu::batchInvariantGemm(false, false, 5, 6, 4, 1.0f, p.A.data(), p.lda,
                          p.B.data(), p.ldb, 0.0f, C.data(), 6);
  for (float c : C)
    EXPECT_FALSE(std::isnan(c));
  std::vector<float> D(30, 2.0f);
  cpu::batchInvariantGemm(false, false, 5, 6, 0, 1.0f, p.A.data(), p.lda,
                          p.B.data(), p.ldb, 0.5f, D.data(), 6);
  for (float d : D)
    EXPECT_EQ(d, 1.0f);
}

} // namespace
