//===- GemmTest.cpp - GEMM and linear layer tests ---------------*- C++ -*-===//
#include "runtime/cpu/gemm.h"

#include "TestUtil.h"

#include <limits>

using namespace loom;
using namespace loom::test;

namespace {

TEST(Gemm, MatchesReferenceForAllTransposesWithPaddedStrides) {
  const int64_t M = 7, N = 9, K = 11, pad = 3;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      // Stored shapes: A is [M,K] or [K,M]; B is [K,N] or [N,K]; rows padded.
      const int64_t aRows = ta ? K : M, aCols = ta ? M : K;
      const int64_t bRows = tb ? N : K, bCols = tb ? K : N;
      const int64_t lda = aCols + pad, ldb = bCols + pad, ldc = N + pad;
      auto A = randomVector(aRows * lda, 1);
      auto B = randomVector(bRows * ldb, 2);
      auto C = randomVector(M * ldc, 3);
      auto Cref = C;
      cpu::gemm(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f,
                C.data(), ldc);
      cpu::gemmReference(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb,
                         0.25f, Cref.data(), ldc);
      expectClose(C, Cref, 1e-5, 1e-5,
                  "gemm ta=" + std::to_string(ta) +
                      " tb=" + std::to_string(tb));
    }
}

TEST(Gemm, BetaZeroIgnoresNaNInOutput) {
  const int64_t M = 4, N = 5, K = 3;
  auto A = randomVector(M * K, 4);
  auto B = randomVector(K * N, 5);
  std::vector<float> C(M * N, std::numeric_limits<float>::quiet_NaN());
  std::vector<float> Cref(M * N, std::numeric_limits<float>::quiet_NaN());
  cpu::gemm(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N, 0.0f,
            C.data(), N);
  cpu::gemmReference(false, false, M, N, K, 1.0f, A.data(), K, B.data(), N,
                     0.0f, Cref.data(), N);
  for (float c : C)
    EXPECT_FALSE(std::isnan(c));
  expectClose(C, Cref, 1e-5, 1e-6, "gemm beta=0");
}

TEST(Linear, ForwardMatchesReference) {
  const int64_t M = 6, K = 16, N = 24;
  auto inp = randomVector(M * K, 6), w = randomVector(K * N, 7),
       b = randomVector(N, 8);
  std::vector<float> out(M * N), ref(M * N);
  cpu::linearForward(out.data(), inp.data(), w.data(), b.data(), M, K, N);
  cpu::linearForwardReference(ref.data(), inp.data(), w.data(), b.data(), M, K,
                              N);
  expectClose(out, ref, 1e-5, 1e-5, "linear with bias");
  cpu::linearForward(out.data(), inp.data(), w.data(), nullptr, M, K, N);
  cpu::linearForwardReference(ref.data(), inp.data(), w.data(), nullptr, M, K,
                              N);
  expectClose(out, ref, 1e-5, 1e-5, "linear without bias");
}

TEST(Linear, BackwardMatchesReferenceAndAccumulates) {
  const int64_t M = 5, K = 8, N = 12;
  auto inp = randomVector(M * K, 9), w = randomVector(K * N, 10),
       dout = randomVector(M * N, 11);
  // Start the parameter gradients non-zero to check += semantics.
  auto dw = randomVector(K * N, 12), db = randomVector(N, 13);
  auto dwRef = dw, dbRef = db;
  std::vector<float> dinp(M * K, 99.0f), dinpRef(M * K);
  cpu::linearBackward(dinp.data(), dw.data(), db.data(), dout.data(),
                      inp.data(), w.data(), M, K, N);
  cpu::linearBackwardReference(dinpRef.data(), dwRef.data(), dbRef.data(),
                               dout.data(), inp.data(), w.data(), M, K, N);
  expectClose(dinp, dinpRef, 1e-5, 1e-5, "dinp");
  expectClose(dw, dwRef, 1e-5, 1e-5, "dweight");
  expectClose(db, dbRef, 1e-5, 1e-5, "dbias");
}

TEST(Linear, BackwardMatchesFiniteDifferences) {
  const int64_t M = 3, K = 4, N = 5;
  auto inp = randomVector(M * K, 14), w = randomVector(K * N, 15),
       b = randomVector(N, 16), wl = randomVector(M * N, 17);
  std::vector<float> out(M * N);
  auto loss = [&]() {
    cpu::linearForward(out.data(), inp.data(), w.data(), b.data(), M, K, N);
    return weightedSum(out, wl);
  };
  std::vector<float> dinp(M * K), dw(K * N, 0.0f), db(N, 0.0f);
  cpu::linearBackward(dinp.data(), dw.data(), db.data(), wl.data(), inp.data(),
                      w.data(), M, K, N);
  expectGradientMatches(loss, inp, dinp, "linear dinp");
  expectGradientMatches(loss, w, dw, "linear dweight");
  expectGradientMatches(loss, b, db, "linear dbias");
}

TEST(Linear, NullGradientsAreSkipped) {
  const int64_t M = 2, K = 3, N = 4;
  auto inp = randomVector(M * K, 18), w = randomVector(K * N, 19),
       dout = randomVector(M * N, 20);
  std::vector<float> dw(K * N, 0.0f), dwRef(K * N, 0.0f);
  cpu::linearBackward(nullptr, dw.data(), nullptr, dout.data(), inp.data(),
                      w.data(), M, K, N);
  cpu::linearBackwardReference(nullptr, dwRef.data(), nullptr, dout.data(),
                               inp.data(), w.data(), M, K, N);
  expectClose(dw, dwRef, 1e-5, 1e-6, "dweight only");
}

} // namespace
