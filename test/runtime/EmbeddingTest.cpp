//===- EmbeddingTest.cpp - Token embedding tests ----------------*- C++ -*-===//
#include "runtime/cpu/embedding.h"

#include "TestUtil.h"

using namespace loom;
using namespace loom::test;

namespace {

TEST(Embedding, ForwardGathersRows) {
  const int64_t V = 11, C = 70, N = 6;
  auto wte = randomVector(V * C, 1);
  std::vector<int32_t> idx = {3, 0, 10, 3, 7, 3};
  std::vector<float> out(N * C), ref(N * C);
  ASSERT_TRUE(
      cpu::embeddingForward(out.data(), idx.data(), wte.data(), N, V, C).ok());
  ASSERT_TRUE(cpu::embeddingForwardReference(ref.data(), idx.data(), wte.data(),
                                             N, V, C)
                  .ok());
  EXPECT_EQ(out, ref);
  for (int64_t c = 0; c < C; ++c)
    EXPECT_EQ(out[2 * C + c], wte[10 * C + c]);
}

TEST(Embedding, BackwardScatterAddsRepeatedTokensDeterministically) {
  const int64_t V = 9, C = 130, N = 40;
  auto dout = randomVector(N * C, 2);
  std::vector<int32_t> idx(N);
  for (int64_t n = 0; n < N; ++n)
    idx[n] = static_cast<int32_t>((n * 7) % 4); // many repeats of 0..3
  auto dwte = randomVector(V * C, 3); // accumulates into existing values
  auto dwteRef = dwte;
  ASSERT_TRUE(
      cpu::embeddingBackward(dwte.data(), dout.data(), idx.data(), N, V, C)
          .ok());
  ASSERT_TRUE(cpu::embeddingBackwardReference(dwteRef.data(), dout.data(),
                                              idx.data(), N, V, C)
                  .ok());
  // Same summation order as the serial reference: bit-identical.
  EXPECT_EQ(dwte, dwteRef);
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  const int64_t V = 5, C = 4, N = 6;
  auto wte = randomVector(V * C, 4), wl = randomVector(N * C, 5);
  std::vector<int32_t> idx = {1, 4, 1, 0, 2, 1};
  std::vector<float> out(N * C);
  auto loss = [&]() {
    EXPECT_TRUE(
        cpu::embeddingForward(out.data(), idx.data(), wte.data(), N, V, C)
            .ok());
    return weightedSum(out, wl);
  };
  std::vector<float> dwte(V * C, 0.0f);
  ASSERT_TRUE(
      cpu::embeddingBackward(dwte.data(), wl.data(), idx.data(), N, V, C).ok());
  expectGradientMatches(loss, wte, dwte, "dwte");
}

TEST(Embedding, OutOfRangeIndexIsAnError) {
  const int64_t V = 4, C = 3;
  std::vector<float> wte(V * C, 1.0f), out(2 * C, -5.0f), dwte(V * C, 0.0f);
  std::vector<int32_t> idx = {2, 4};
  Status s = cpu::embeddingForward(out.data(), idx.data(), wte.data(), 2, V, C);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("token id 4 at position 1"), std::string::npos)
      << s.toString();
  EXPECT_EQ(out[0], -5.0f) << "nothing is written on error";
  std::vector<int32_t> neg = {-3, 0};
  EXPECT_FALSE(
      cpu::embeddingBackward(dwte.data(), out.data(), neg.data(), 2, V, C)
          .ok());
  for (float d : dwte)
    EXPECT_EQ(d, 0.0f);
}

} // namespace
