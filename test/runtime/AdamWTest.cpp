//===- AdamWTest.cpp - AdamW and gradient norm tests -----------*- C++ -*-===//
#include "runtime/cpu/adamw.h"

#include "TestUtil.h"

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

TEST(GradNorm, MatchesReferenceAndClipScale) {
  const int64_t n = 50001;
  auto g = randomVector(n, 5);
  double fast = cpu::gradNormSquared(g.data(), n);
  double ref = cpu::gradNormSquaredReference(g.data(), n);
  EXPECT_NEAR(fast, ref, 1e-9 * ref);
  std::vector<float> three = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(cpu::gradNormSquared(three.data(), 2), 25.0);
  EXPECT_FLOAT_EQ(cpu::clipScale(25.0, 1.0f), 0.2f);
  EXPECT_FLOAT_EQ(cpu::clipScale(25.0, 10.0f), 1.0f);
  EXPECT_FLOAT_EQ(cpu::clipScale(25.0, 0.0f), 1.0f);
}

TEST(GradNorm, ClipCoefficientFollowsTorch) {
  // torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), <= 1.
  EXPECT_FLOAT_EQ(cpu::clipCoefficient(5.0, 1.0), 1.0f / (5.0f + 1e-6f));
  EXPECT_EQ(cpu::clipCoefficient(0.5, 1.0), 1.0f);
  EXPECT_EQ(cpu::clipCoefficient(0.0, 1.0), 1.0f);
  EXPECT_EQ(cpu::clipCoefficient(1e9, 0.0), 1.0f); // clipping off
  EXPECT_EQ(cpu::clipCoefficient(1e9, -1.0), 1.0f);
}

} // namespace
