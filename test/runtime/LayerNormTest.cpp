//===- LayerNormTest.cpp - LayerNorm tests ----------------------*- C++ -*-===//
#include "runtime/cpu/layernorm.h"

#include "TestUtil.h"

using namespace loom;
using namespace loom::test;

namespace {

TEST(LayerNorm, ForwardMatchesReference) {
  const int64_t N = 9, C = 130; // C not a multiple of the column block
  auto x = randomVector(N * C, 1, -3.0f, 5.0f); // non-zero mean on purpose
  auto w = randomVector(C, 2), b = randomVector(C, 3);
  std::vector<float> y(N * C), m(N), r(N), yRef(N * C), mRef(N), rRef(N);
  cpu::layernormForward(y.data(), m.data(), r.data(), x.data(), w.data(),
                        b.data(), N, C);
  cpu::layernormForwardReference(yRef.data(), mRef.data(), rRef.data(),
                                 x.data(), w.data(), b.data(), N, C);
  expectClose(y, yRef, 1e-4, 1e-5, "out");
  expectClose(m, mRef, 1e-5, 1e-6, "mean");
  expectClose(r, rRef, 1e-5, 1e-6, "rstd");
}

TEST(LayerNorm, BackwardMatchesReference) {
  const int64_t N = 7, C = 150;
  auto x = randomVector(N * C, 4), w = randomVector(C, 5),
       b = randomVector(C, 6), dy = randomVector(N * C, 7);
  std::vector<float> y(N * C), m(N), r(N);
  cpu::layernormForward(y.data(), m.data(), r.data(), x.data(), w.data(),
                        b.data(), N, C);
  auto dw = randomVector(C, 8), db = randomVector(C, 9);
  auto dwRef = dw, dbRef = db;
  std::vector<float> dx(N * C), dxRef(N * C);
  cpu::layernormBackward(dx.data(), dw.data(), db.data(), dy.data(), x.data(),
                         w.data(), m.data(), r.data(), N, C);
  cpu::layernormBackwardReference(dxRef.data(), dwRef.data(), dbRef.data(),
                                  dy.data(), x.data(), w.data(), m.data(),
                                  r.data(), N, C);
  expectClose(dx, dxRef, 1e-4, 1e-5, "dinp");
  expectClose(dw, dwRef, 1e-4, 1e-5, "dweight");
  expectClose(db, dbRef, 1e-4, 1e-5, "dbias");
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  const int64_t N = 3, C = 8;
  auto x = randomVector(N * C, 10), w = randomVector(C, 11),
       b = randomVector(C, 12), wl = randomVector(N * C, 13);
  std::vector<float> y(N * C), m(N), r(N);
  auto loss = [&]() {
    cpu::layernormForward(y.data(), m.data(), r.data(), x.data(), w.data(),
                          b.data(), N, C);
    return weightedSum(y, wl);
  };
  loss();
  std::vector<float> dx(N * C), dw(C, 0.0f), db(C, 0.0f);
  cpu::layernormBackward(dx.data(), dw.data(), db.data(), wl.data(), x.data(),
                         w.data(), m.data(), r.data(), N, C);
  expectGradientMatches(loss, x, dx, "layernorm dinp");
  expectGradientMatches(loss, w, dw, "layernorm dweight");
  expectGradientMatches(loss, b, db, "layernorm dbias");
}

TEST(LayerNorm, OutputIsNormalized) {
  const int64_t N = 4, C = 64;
  auto x = randomVector(N * C, 14, 10.0f, 20.0f);
  std::vector<float> w(C, 1.0f), b(C, 0.0f), y(N * C), m(N), r(N);
  cpu::layernormForward(y.data(), m.data(), r.data(), x.data(), w.data(),
                        b.data(), N, C);
  for (int64_t i = 0; i < N; ++i) {
    double mean = 0, var = 0;
    for (int64_t c = 0; c < C; ++c)
      mean += y[i * C + c];
    mean /= C;
    for (int64_t c = 0; c < C; ++c)
      var += (y[i * C + c] - mean) * (y[i * C + c] - mean);
    var /= C;
    EXPECT_NEAR(mean, 0.0, 1e-5);
    EXPECT_NEAR(var, 1.0, 1e-3); // eps shifts it slightly below 1
  }
}

TEST(LayerNorm, StatsEqualTheForwardsBitwise) {
  const int64_t N = 11, C = 70;
  auto x = randomVector(N * C, 21, -2.0f, 6.0f), w = randomVector(C, 22),
       b = randomVector(C, 23);
  std::vector<float> y(N * C), m(N), r(N), m2(N), r2(N);
  cpu::layernormForward(y.data(), m.data(), r.data(), x.data(), w.data(),
                        b.data(), N, C, 1e-5f);
  cpu::layernormStats(m2.data(), r2.data(), x.data(), N, C, 1e-5f);
  EXPECT_EQ(m, m2);
  EXPECT_EQ(r, r2);
}

} // namespace
