//===- GeluTest.cpp - GELU (tanh) tests -------------------------*- C++ -*-===//
#include "runtime/cpu/gelu.h"

#include "TestUtil.h"

using namespace loom;
using namespace loom::test;

namespace {

TEST(Gelu, ForwardMatchesReferenceAndKnownValues) {
  auto x = randomVector(1000, 1, -6.0f, 6.0f);
  std::vector<float> y(x.size()), yRef(x.size());
  cpu::geluForward(y.data(), x.data(), x.size());
  cpu::geluForwardReference(yRef.data(), x.data(), x.size());
  expectClose(y, yRef, 1e-5, 1e-6, "gelu");
  // torch.nn.functional.gelu(torch.tensor([1.0, -1.0]), approximate="tanh")
  float in[2] = {1.0f, -1.0f}, out[2];
  cpu::geluForward(out, in, 2);
  EXPECT_NEAR(out[0], 0.8411920f, 1e-6);
  EXPECT_NEAR(out[1], -0.1588080f, 1e-6);
}

TEST(Gelu, BackwardMatchesReferenceAndFiniteDifferences) {
  auto x = randomVector(200, 2, -4.0f, 4.0f), dy = randomVector(200, 3);
  std::vector<float> dx(x.size()), dxRef(x.size()), y(x.size());
  cpu::geluBackward(dx.data(), x.data(), dy.data(), x.size());
  cpu::geluBackwardReference(dxRef.data(), x.data(), dy.data(), x.size());
  expectClose(dx, dxRef, 1e-5, 1e-6, "gelu backward");
  auto loss = [&]() {
    cpu::geluForward(y.data(), x.data(), x.size());
    return weightedSum(y, dy);
  };
  expectGradientMatches(loss, x, dx, "gelu dinp");
}

// Large enough for the parallel, vectorized path (and a partial chunk), over
// the whole range where gelu is not 0 or x to float precision, plus the
// saturated tails. Relative error stays at the ulp level.
TEST(Gelu, LargeInputsMatchReferenceClosely) {
  const int64_t n = 100003;
  auto x = randomVector(n, 4, -12.0f, 12.0f), dy = randomVector(n, 5);
  x[0] = 0.0f, x[1] = -100.0f, x[2] = 100.0f, x[3] = -10.3f, x[4] = 10.3f;
  x[5] = 1e-30f, x[6] = -1e-30f, x[7] = -1e6f, x[8] = 1e6f;
  std::vector<float> y(n), yRef(n), dx(n), dxRef(n);
  cpu::geluForward(y.data(), x.data(), n);
  cpu::geluForwardReference(yRef.data(), x.data(), n);
  // Absolute floor: in the far negative tail (gelu < 1e-9) the float
  // argument u itself carries relative error |u| ulp.
  expectClose(y, yRef, 2e-6, 1e-12, "gelu");
  cpu::geluBackward(dx.data(), x.data(), dy.data(), n);
  cpu::geluBackwardReference(dxRef.data(), x.data(), dy.data(), n);
  // gelu' crosses 0 near x = -0.75 (cancellation): absolute floor 1e-7.
  expectClose(dx, dxRef, 2e-6, 1e-7, "gelu backward");
  // In place, as the executor may call it.
  cpu::geluForward(x.data(), x.data(), n);
  EXPECT_EQ(x, y);
  // Saturation: gelu(x) = x for large x, exactly 0 for very negative x.
  float big[4] = {1e30f, -1e30f, 3e38f, -3e38f}, out[4];
  cpu::geluForward(out, big, 4);
  EXPECT_EQ(out[0], 1e30f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 3e38f);
  EXPECT_EQ(out[3], 0.0f);
}

} // namespace
