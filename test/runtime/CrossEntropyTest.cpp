//===- CrossEntropyTest.cpp - Fused softmax + cross entropy -----*- C++ -*-===//
#include "runtime/cpu/cross_entropy.h"

#include "TestUtil.h"

using namespace loom;
using namespace loom::test;

namespace {

TEST(CrossEntropy, ForwardMatchesReference) {
  const int64_t N = 6, V = 50;
  auto logits = randomVector(N * V, 1, -4.0f, 4.0f);
  std::vector<int32_t> tgt = {0, 49, 7, 7, 23, 1};
  float mean = 0, meanRef = 0;
  std::vector<float> losses(N), lossesRef(N);
  ASSERT_TRUE(cpu::crossEntropyForward(&mean, losses.data(), logits.data(),
                                       tgt.data(), N, V, V)
                  .ok());
  ASSERT_TRUE(cpu::crossEntropyForwardReference(&meanRef, lossesRef.data(),
                                                logits.data(), tgt.data(), N, V,
                                                V)
                  .ok());
  expectClose(losses, lossesRef, 1e-5, 1e-6, "per-token loss");
  EXPECT_NEAR(mean, meanRef, 1e-5);
  double avg = 0;
  for (float l : lossesRef)
    avg += l;
  EXPECT_NEAR(meanRef, avg / N, 1e-5);
}

TEST(CrossEntropy, UniformLogitsGiveLogV) {
  const int64_t N = 2, V = 10;
  std::vector<float> logits(N * V, 3.0f);
  std::vector<int32_t> tgt = {4, 9};
  float mean = 0;
  ASSERT_TRUE(cpu::crossEntropyForward(&mean, nullptr, logits.data(),
                                       tgt.data(), N, V, V)
                  .ok());
  EXPECT_NEAR(mean, std::log(10.0), 1e-6);
}

TEST(CrossEntropy, PaddedVocabIsExcluded) {
  // The padded problem (V = 12, validV = 9) must equal the unpadded one on the
  // first 9 columns, whatever the padding columns hold.
  const int64_t N = 4, V = 12, validV = 9;
  auto logits = randomVector(N * V, 2, -3.0f, 3.0f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = validV; c < V; ++c)
      logits[n * V + c] = 50.0f; // would dominate if included
  std::vector<float> compact(N * validV);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < validV; ++c)
      compact[n * validV + c] = logits[n * V + c];
  std::vector<int32_t> tgt = {0, 8, 3, 5};
  float padded = 0, unpadded = 0;
  ASSERT_TRUE(cpu::crossEntropyForward(&padded, nullptr, logits.data(),
                                       tgt.data(), N, V, validV)
                  .ok());
  ASSERT_TRUE(cpu::crossEntropyForward(&unpadded, nullptr, compact.data(),
                                       tgt.data(), N, validV, validV)
                  .ok());
  EXPECT_NEAR(padded, unpadded, 1e-6);

  std::vector<float> dPadded(N * V, 123.0f), dCompact(N * validV), dRef(N * V);
  ASSERT_TRUE(cpu::crossEntropyBackward(dPadded.data(), logits.data(),
                                        tgt.data(), N, V, validV, 1.0f)
                  .ok());
  ASSERT_TRUE(cpu::crossEntropyBackward(dCompact.data(), compact.data(),
                                        tgt.data(), N, validV, validV, 1.0f)
                  .ok());
  ASSERT_TRUE(cpu::crossEntropyBackwardReference(dRef.data(), logits.data(),
                                                 tgt.data(), N, V, validV, 1.0f)
                  .ok());
  expectClose(dPadded, dRef, 1e-5, 1e-7, "padded dlogits vs reference");
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < validV; ++c)
      EXPECT_NEAR(dPadded[n * V + c], dCompact[n * validV + c], 1e-7);
    for (int64_t c = validV; c < V; ++c)
      EXPECT_EQ(dPadded[n * V + c], 0.0f);
  }
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  const int64_t N = 3, V = 8, validV = 6;
  auto logits = randomVector(N * V, 3, -2.0f, 2.0f);
  std::vector<int32_t> tgt = {5, 0, 2};
  const float dloss = 1.7f;
  auto loss = [&]() {
    float mean = 0;
    EXPECT_TRUE(cpu::crossEntropyForward(&mean, nullptr, logits.data(),
                                         tgt.data(), N, V, validV)
                    .ok());
    return static_cast<double>(mean) * dloss;
  };
  std::vector<float> dlogits(N * V);
  ASSERT_TRUE(cpu::crossEntropyBackward(dlogits.data(), logits.data(),
                                        tgt.data(), N, V, validV, dloss)
                  .ok());
  expectGradientMatches(loss, logits, dlogits, "dlogits", 1e-2f, 1e-2, 2e-4);
}

TEST(CrossEntropy, BackwardInPlace) {
  const int64_t N = 4, V = 10;
  auto logits = randomVector(N * V, 4);
  std::vector<int32_t> tgt = {1, 2, 3, 4};
  std::vector<float> separate(N * V);
  ASSERT_TRUE(cpu::crossEntropyBackward(separate.data(), logits.data(),
                                        tgt.data(), N, V, V, 1.0f)
                  .ok());
  ASSERT_TRUE(cpu::crossEntropyBackward(logits.data(), logits.data(),
                                        tgt.data(), N, V, V, 1.0f)
                  .ok());
  expectClose(logits, separate, 1e-6, 1e-8, "in-place dlogits");
}

TEST(CrossEntropy, RejectsBadTargetsAndVocab) {
  const int64_t N = 2, V = 8;
  std::vector<float> logits(N * V, 0.0f), d(N * V);
  float mean;
  std::vector<int32_t> tooBig = {1, 6}; // 6 >= validV = 6 (a padding column)
  Status s = cpu::crossEntropyForward(&mean, nullptr, logits.data(),
                                      tooBig.data(), N, V, 6);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("target 6 at row 1"), std::string::npos)
      << s.toString();
  std::vector<int32_t> negative = {-1, 0};
  EXPECT_FALSE(cpu::crossEntropyBackward(d.data(), logits.data(),
                                         negative.data(), N, V, V, 1.0f)
                   .ok());
  std::vector<int32_t> ok = {0, 1};
  EXPECT_FALSE(cpu::crossEntropyForward(&mean, nullptr, logits.data(),
                                        ok.data(), N, V, V + 1)
                   .ok());
  EXPECT_FALSE(cpu::crossEntropyForward(&mean, nullptr, logits.data(),
                                        ok.data(), N, V, 0)
                   .ok());
}

// Megatron's vocab-parallel cross-entropy: the logits' columns split over
// `shards` ranks (the last one holding padding columns), each reduced to a
// row maximum and sums, combined as the all-reduces would (max, then sum),
// give the fused kernel's loss and, shard by shard, its gradient.
TEST(CrossEntropy, VocabShardsCombineToFused) {
  const int64_t N = 5, shards = 3, V = 8, full = V * shards, validV = 21;
  auto logits = randomVector(N * full, 3, -5.0f, 5.0f);
  std::vector<int32_t> tgt = {0, 20, 7, 8, 15};
  float fused = 0;
  ASSERT_TRUE(cpu::crossEntropyForward(&fused, nullptr, logits.data(),
                                       tgt.data(), N, full, validV)
                  .ok());
  std::vector<float> dfused(N * full);
  ASSERT_TRUE(cpu::crossEntropyBackward(dfused.data(), logits.data(),
                                        tgt.data(), N, full, validV, 1.0f)
                  .ok());

  // Each rank's block of columns, contiguous as the partitioner lays it out.
  std::vector<std::vector<float>> block(shards, std::vector<float>(N * V));
  for (int64_t r = 0; r < shards; ++r)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < V; ++c)
        block[r][n * V + c] = logits[n * full + r * V + c];
  std::vector<float> rowMax(N, -INFINITY), sumExp(N, 0.0f), target(N, 0.0f);
  for (int64_t r = 0; r < shards; ++r) {
    std::vector<float> m(N);
    cpu::crossEntropyRowMax(m.data(), block[r].data(), N, V, r * V, validV);
    for (int64_t n = 0; n < N; ++n)
      rowMax[n] = std::fmax(rowMax[n], m[n]); // all-reduce max
  }
  for (int64_t r = 0; r < shards; ++r) {
    std::vector<float> s(N), t(N);
    ASSERT_TRUE(cpu::crossEntropySums(s.data(), t.data(), block[r].data(),
                                      rowMax.data(), tgt.data(), N, V, r * V,
                                      validV)
                    .ok());
    for (int64_t n = 0; n < N; ++n) {
      sumExp[n] += s[n]; // all-reduce sum
      target[n] += t[n];
    }
  }
  const float loss = cpu::crossEntropyFromSums(rowMax.data(), sumExp.data(),
                                               target.data(), N, double(N));
  EXPECT_NEAR(loss, fused, 1e-5);

  for (int64_t r = 0; r < shards; ++r) {
    std::vector<float> d(N * V), want(N * V);
    ASSERT_TRUE(cpu::crossEntropySumsBackward(
                    d.data(), block[r].data(), rowMax.data(), sumExp.data(),
                    tgt.data(), N, V, r * V, validV, 1.0f / N)
                    .ok());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < V; ++c)
        want[n * V + c] = dfused[n * full + r * V + c];
    expectClose(d, want, 1e-6, 1e-5, "dlogits of a vocabulary shard");
  }

  // A target outside the vocabulary is an error, as for the fused kernel.
  std::vector<int32_t> bad = {0, 21, 0, 0, 0};
  std::vector<float> s(N), t(N);
  EXPECT_FALSE(cpu::crossEntropySums(s.data(), t.data(), block[0].data(),
                                     rowMax.data(), bad.data(), N, V, 0,
                                     validV)
                   .ok());
}

} // namespace
