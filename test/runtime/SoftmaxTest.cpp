//===- SoftmaxTest.cpp - Row softmax tests ----------------------*- C++ -*-===//
#include "runtime/cpu/softmax.h"

#include "TestUtil.h"

using namespace loom;
using namespace loom::test;

namespace {

TEST(Softmax, ForwardMatchesReference) {
  const int64_t N = 5, C = 33;
  auto x = randomVector(N * C, 1, -5.0f, 5.0f);
  std::vector<float> y(N * C), yRef(N * C);
  cpu::softmaxForward(y.data(), x.data(), N, C);
  cpu::softmaxForwardReference(yRef.data(), x.data(), N, C);
  expectClose(y, yRef, 1e-5, 1e-7, "softmax");
}

TEST(Softmax, LargeLogitsDoNotOverflow) {
  std::vector<float> x = {1000.0f, 1001.0f, 999.0f, -1000.0f};
  std::vector<float> y(4);
  cpu::softmaxForward(y.data(), x.data(), 1, 4);
  double sum = 0;
  for (float v : y) {
    EXPECT_TRUE(std::isfinite(v));
    sum += v;
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
  EXPECT_NEAR(y[1], 0.6652409f, 1e-6);
}

TEST(Softmax, BackwardMatchesReferenceAndFiniteDifferences) {
  const int64_t N = 3, C = 7;
  auto x = randomVector(N * C, 2, -2.0f, 2.0f), wl = randomVector(N * C, 3);
  std::vector<float> y(N * C), dx(N * C), dxRef(N * C);
  cpu::softmaxForward(y.data(), x.data(), N, C);
  cpu::softmaxBackward(dx.data(), wl.data(), y.data(), N, C);
  cpu::softmaxBackwardReference(dxRef.data(), wl.data(), y.data(), N, C);
  expectClose(dx, dxRef, 1e-5, 1e-7, "softmax backward");
  auto loss = [&]() {
    cpu::softmaxForward(y.data(), x.data(), N, C);
    return weightedSum(y, wl);
  };
  expectGradientMatches(loss, x, dx, "softmax dinp", 1e-3f, 1e-2, 2e-4);
}

} // namespace
