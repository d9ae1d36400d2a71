//===- AdamWTest.cpp - AdamW, sum of squares, clip coefficient --*- C++ -*-===//
#include "runtime/cpu/adamw.h"

#include "TestUtil.h"

#include <algorithm>
#include <cmath>

using namespace loom;
using namespace loom::test;

namespace {

TEST(AdamW, TwoStepsMatchTorchAdamW) {
  // Expected values are torch.optim.AdamW(lr=0.1, betas=(0.9, 0.999),
  // eps=1e-8, weight_decay=0.1) in float64. Step 1 by hand for element 0:
  // p = 1 * (1 - 0.1*0.1) = 0.99; m = 0.05, v = 0.00025; m^ = 0.5, v^ = 0.25;
  // p -= 0.1 * 0.5 / (0.5 + 1e-8)  ->  0.89.
  std::vector<float> p = {1.0f, -2.0f, 0.5f}, m(3, 0.0f), v(3, 0.0f);
  cpu::AdamWConfig cfg;
  cfg.lr = 0.1;
  cfg.beta1 = 0.9;
  cfg.beta2 = 0.999;
  cfg.eps = 1e-8;
  cfg.weightDecay = 0.1;
  std::vector<float> g1 = {0.5f, -1.0f, 0.0f}, g2 = {-0.25f, 3.0f, 1e-3f};
  cfg.step = 1;
  cpu::adamwStep(p.data(), g1.data(), m.data(), v.data(), 3, cfg);
  EXPECT_NEAR(p[0], 0.89, 1e-6);
  EXPECT_NEAR(p[1], -1.88, 1e-6);
  EXPECT_NEAR(p[2], 0.495, 1e-6);
  cfg.step = 2;
  cpu::adamwStep(p.data(), g2.data(), m.data(), v.data(), 3, cfg);
  EXPECT_NEAR(p[0], 0.8544662986878463, 1e-6);
  EXPECT_NEAR(p[1], -1.9106189840987442, 1e-6);
  EXPECT_NEAR(p[2], 0.41563736973368987, 1e-6);
  EXPECT_NEAR(m[0], 0.02, 1e-7);
  EXPECT_NEAR(m[1], 0.21, 1e-7);
  EXPECT_NEAR(v[0], 0.00031225, 1e-9);
  EXPECT_NEAR(v[1], 0.009999, 1e-9);
}

TEST(AdamW, MatchesReferenceWithGradScale) {
  const int64_t n = 100000; // large enough to take the threaded path
  auto p = randomVector(n, 1), g = randomVector(n, 2);
  auto m = randomVector(n, 3, -0.1f, 0.1f), v = randomVector(n, 4, 0.0f, 0.01f);
  auto pRef = p, mRef = m, vRef = v;
  cpu::AdamWConfig cfg;
  cfg.lr = 3e-4;
  cfg.step = 7;
  cfg.gradScale = 0.5f;
  cpu::adamwStep(p.data(), g.data(), m.data(), v.data(), n, cfg);
  cpu::adamwStepReference(pRef.data(), g.data(), mRef.data(), vRef.data(), n,
                          cfg);
  expectClose(p, pRef, 1e-6, 1e-7, "params");
  expectClose(m, mRef, 1e-6, 1e-8, "m");
  expectClose(v, vRef, 1e-6, 1e-9, "v");
}

TEST(SumSquares, MatchesReference) {
  const int64_t n = 50001; // several chunks: the threaded path
  auto g = randomVector(n, 5);
  double fast = cpu::sumSquares(g.data(), n);
  double ref = cpu::sumSquaresReference(g.data(), n);
  EXPECT_TRUE(std::isfinite(fast));
  EXPECT_NEAR(fast, ref, 1e-12 * ref);
  std::vector<float> three = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(cpu::sumSquares(three.data(), 2), 25.0);
  EXPECT_EQ(cpu::sumSquares(three.data(), 0), 0.0);
}

TEST(SumSquares, OverTensorsIsOneRoundingOfTheDoubleSum) {
  // The SumSquares kernel: every tensor in double, one rounding to f32 at
  // the end, against a naive double loop over all elements.
  auto a = randomVector(70000, 6), b = randomVector(3, 7, -100.0f, 100.0f);
  std::vector<float> empty;
  const std::vector<cpu::FloatSpan> tensors = {
      {a.data(), static_cast<int64_t>(a.size())},
      {empty.data(), 0},
      {b.data(), static_cast<int64_t>(b.size())}};
  double naive = 0.0;
  for (const std::vector<float> *t : {&a, &b})
    for (float x : *t)
      naive += static_cast<double>(x) * x;
  const float got = cpu::sumSquares(tensors);
  EXPECT_TRUE(std::isfinite(got));
  EXPECT_NEAR(got, naive, 1e-6 * naive);
  EXPECT_EQ(got, static_cast<float>(cpu::sumSquares(a.data(), a.size()) +
                                    cpu::sumSquares(b.data(), b.size())));
  std::vector<float> three = {3.0f, 4.0f};
  EXPECT_EQ(cpu::sumSquares({{three.data(), 2}}), 25.0f);
}

TEST(ClipCoef, FollowsTorch) {
  // torch.nn.utils.clip_grad_norm_: norm = sqrt(sumsq),
  // coef = min(1, max_norm / (norm + 1e-6)).
  const cpu::ClipCoefficient active = cpu::clipCoefficient(25.0f, 1.0);
  EXPECT_EQ(active.norm, 5.0f);
  EXPECT_FLOAT_EQ(active.coef, 1.0f / (5.0f + 1e-6f));
  EXPECT_LT(active.coef, 1.0f);
  // Inactive: the norm is below max_norm (or zero gradients).
  const cpu::ClipCoefficient inactive = cpu::clipCoefficient(0.25f, 1.0);
  EXPECT_EQ(inactive.norm, 0.5f);
  EXPECT_EQ(inactive.coef, 1.0f);
  EXPECT_EQ(cpu::clipCoefficient(0.0f, 1.0).coef, 1.0f);
  EXPECT_EQ(cpu::clipCoefficient(0.0f, 1.0).norm, 0.0f);
  // max_norm <= 0 turns clipping off; the norm is still reported.
  for (double off : {0.0, -1.0}) {
    const cpu::ClipCoefficient c = cpu::clipCoefficient(1e18f, off);
    EXPECT_EQ(c.coef, 1.0f) << off;
    EXPECT_FLOAT_EQ(c.norm, 1e9f) << off;
  }
  // Against the naive formula in double over a range of sums and clips.
  for (float sumsq : {1e-8f, 0.3f, 1.0f, 7.5f, 1234.5f, 3e12f})
    for (double maxNorm : {1e-3, 0.5, 1.0, 2.5, 1e7}) {
      const double norm = std::sqrt(static_cast<double>(sumsq));
      const float coef =
          static_cast<float>(std::min(1.0, maxNorm / (norm + 1e-6)));
      const cpu::ClipCoefficient c = cpu::clipCoefficient(sumsq, maxNorm);
      EXPECT_TRUE(std::isfinite(c.norm) && std::isfinite(c.coef));
      EXPECT_EQ(c.norm, static_cast<float>(norm)) << sumsq << " " << maxNorm;
      EXPECT_EQ(c.coef, coef) << sumsq << " " << maxNorm;
      EXPECT_LE(c.coef, 1.0f);
      EXPECT_GT(c.coef, 0.0f);
    }
}

} // namespace
