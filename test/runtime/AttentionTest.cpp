//===- AttentionTest.cpp - Causal multi-head attention tests ----*- C++ -*-===//
#include "runtime/cpu/attention.h"

#include "TestUtil.h"

#include <algorithm>
#include <cmath>

using namespace loom;
using namespace loom::test;

namespace {

TEST(Attention, ForwardMatchesReference) {
  const int64_t B = 2, T = 9, C = 24, NH = 3;
  auto qkv = randomVector(B * T * 3 * C, 1, -2.0f, 2.0f);
  std::vector<float> out(B * T * C), att(B * NH * T * T, -1.0f);
  std::vector<float> outRef(B * T * C), attRef(B * NH * T * T);
  cpu::attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  cpu::attentionForwardReference(outRef.data(), attRef.data(), qkv.data(), B, T,
                                 C, NH);
  expectClose(out, outRef, 1e-5, 1e-6, "attention out");
  expectClose(att, attRef, 1e-5, 1e-7, "attention probabilities");
  // Each probability row sums to one over the causal prefix; the rest is 0.
  for (int64_t r = 0; r < B * NH * T; ++r) {
    const int64_t t = r % T;
    double sum = 0;
    for (int64_t t2 = 0; t2 < T; ++t2) {
      if (t2 > t) {
        EXPECT_EQ(att[r * T + t2], 0.0f);
      }
      sum += att[r * T + t2];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

// The log-sum-exp row statistics (loom.attention's lse result) are
// log sum_{k<=t} exp(scale q_t . k_k) in double, with and without the
// probabilities kept, across row blocks (T > 32), and leave the output as it
// was without them.
TEST(Attention, LogSumExpMatchesDoubleReference) {
  const int64_t B = 2, T = 41, C = 24, NH = 3, hs = C / NH;
  auto qkv = randomVector(B * T * 3 * C, 11, -2.0f, 2.0f);
  std::vector<float> out(B * T * C), outPlain(B * T * C), att(B * NH * T * T),
      lse(B * NH * T, -1.0f), lse2(B * NH * T, -1.0f);
  cpu::attentionForward(out.data(), nullptr, qkv.data(), B, T, C, NH,
                        lse.data());
  cpu::attentionForward(outPlain.data(), att.data(), qkv.data(), B, T, C, NH,
                        lse2.data());
  EXPECT_EQ(lse, lse2);
  cpu::attentionForward(outPlain.data(), nullptr, qkv.data(), B, T, C, NH);
  EXPECT_EQ(out, outPlain);
  const double scale = 1.0 / std::sqrt(double(hs));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        double maxv = -INFINITY;
        std::vector<double> s(t + 1);
        for (int64_t k = 0; k <= t; ++k) {
          double dot = 0;
          for (int64_t i = 0; i < hs; ++i)
            dot += double(qkv[(b * T + t) * 3 * C + h * hs + i]) *
                   qkv[(b * T + k) * 3 * C + C + h * hs + i];
          s[k] = dot * scale;
          maxv = std::max(maxv, s[k]);
        }
        double sum = 0;
        for (double v : s)
          sum += std::exp(v - maxv);
        EXPECT_NEAR(lse[(b * NH + h) * T + t], maxv + std::log(sum), 1e-5)
            << "b " << b << " h " << h << " t " << t;
      }
}

TEST(Attention, FirstTokenAttendsOnlyToItself) {
  const int64_t B = 1, T = 4, C = 8, NH = 2;
  auto qkv = randomVector(B * T * 3 * C, 2);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  cpu::attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int64_t c = 0; c < C; ++c) // out[0] == v[0]
    EXPECT_NEAR(out[c], qkv[2 * C + c], 1e-6);
}

TEST(Attention, IsCausal) {
  const int64_t B = 2, T = 8, C = 16, NH = 4, C3 = 3 * C;
  auto qkv = randomVector(B * T * C3, 3);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  cpu::attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  // Change q, k and v of token 5 in batch row 1.
  const int64_t tChanged = 5;
  auto qkv2 = qkv;
  for (int64_t c = 0; c < C3; ++c)
    qkv2[(1 * T + tChanged) * C3 + c] += 0.5f;
  std::vector<float> out2(B * T * C), att2(B * NH * T * T);
  cpu::attentionForward(out2.data(), att2.data(), qkv2.data(), B, T, C, NH);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      bool mayChange = b == 1 && t >= tChanged;
      double diff = 0;
      for (int64_t c = 0; c < C; ++c)
        diff += std::fabs(out[(b * T + t) * C + c] - out2[(b * T + t) * C + c]);
      if (mayChange)
        EXPECT_GT(diff, 0.0) << "b=" << b << " t=" << t;
      else
        EXPECT_EQ(diff, 0.0) << "b=" << b << " t=" << t;
    }
}

TEST(Attention, BackwardMatchesReference) {
  const int64_t B = 2, T = 7, C = 12, NH = 2;
  auto qkv = randomVector(B * T * 3 * C, 4), dout = randomVector(B * T * C, 5);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  cpu::attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  std::vector<float> dqkv(qkv.size(), 7.0f), dqkvRef(qkv.size());
  cpu::attentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T,
                         C, NH);
  cpu::attentionBackwardReference(dqkvRef.data(), dout.data(), qkv.data(),
                                  att.data(), B, T, C, NH);
  expectClose(dqkv, dqkvRef, 1e-4, 1e-6, "dqkv");
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  const int64_t B = 1, T = 5, C = 8, NH = 2;
  auto qkv = randomVector(B * T * 3 * C, 6), wl = randomVector(B * T * C, 7);
  std::vector<float> out(B * T * C), att(B * NH * T * T);
  auto loss = [&]() {
    cpu::attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return weightedSum(out, wl);
  };
  loss();
  std::vector<float> dqkv(qkv.size());
  cpu::attentionBackward(dqkv.data(), wl.data(), qkv.data(), att.data(), B, T,
                         C, NH);
  expectGradientMatches(loss, qkv, dqkv, "attention dqkv", 1e-3f, 1e-2, 1e-3,
                        1000);
}

TEST(Attention, ProbsEqualTheForwardsBitwise) {
  const int64_t B = 2, T = 7, C = 12, NH = 3;
  auto qkv = randomVector(B * T * 3 * C, 31);
  std::vector<float> out(B * T * C), att(B * NH * T * T),
      att2(B * NH * T * T, 5.0f);
  cpu::attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  cpu::attentionProbs(att2.data(), qkv.data(), B, T, C, NH);
  EXPECT_EQ(att, att2);
}

// T spans several query blocks of the sgemm kernels (and a partial last
// one), with more heads than threads: the blocked causal products, the
// per-head parallel loop and the masked zeros are all exercised.
TEST(Attention, MultiBlockForwardBackwardMatchReference) {
  const int64_t B = 2, T = 70, C = 48, NH = 4;
  auto qkv = randomVector(B * T * 3 * C, 41, -2.0f, 2.0f);
  auto dout = randomVector(B * T * C, 42);
  std::vector<float> out(B * T * C, -3.0f), att(B * NH * T * T, -1.0f);
  std::vector<float> outRef(B * T * C), attRef(B * NH * T * T);
  cpu::attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  cpu::attentionForwardReference(outRef.data(), attRef.data(), qkv.data(), B, T,
                                 C, NH);
  expectClose(out, outRef, 1e-5, 1e-6, "attention out");
  expectClose(att, attRef, 1e-5, 1e-7, "attention probabilities");
  for (int64_t r = 0; r < B * NH * T; ++r)
    for (int64_t t2 = r % T + 1; t2 < T; ++t2)
      ASSERT_EQ(att[r * T + t2], 0.0f) << "row " << r << " col " << t2;
  std::vector<float> att2(att.size(), 9.0f);
  cpu::attentionProbs(att2.data(), qkv.data(), B, T, C, NH);
  EXPECT_EQ(att, att2);
  std::vector<float> dqkv(qkv.size(), 7.0f), dqkvRef(qkv.size());
  cpu::attentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T,
                         C, NH);
  cpu::attentionBackwardReference(dqkvRef.data(), dout.data(), qkv.data(),
                                  att.data(), B, T, C, NH);
  expectClose(dqkv, dqkvRef, 1e-4, 1e-6, "dqkv");
}

// What the runtime runs keeps no [B, NH, T, T] tensor: the forward without
// `att` (row blocks in a thread's scratch) and attentionGrad (each head's
// probabilities recomputed into a thread's buffer) give bit for bit what
// the forward with `att` and attentionProbs + attentionBackward give, over
// several query blocks and a partial last one.
TEST(Attention, WithoutProbabilityTensorBitwiseEqual) {
  const int64_t B = 2, T = 70, C = 48, NH = 4;
  auto qkv = randomVector(B * T * 3 * C, 43, -2.0f, 2.0f);
  auto dout = randomVector(B * T * C, 44);
  std::vector<float> out(B * T * C, -3.0f), att(B * NH * T * T, -1.0f);
  std::vector<float> streamed(B * T * C, 5.0f);
  cpu::attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  cpu::attentionForward(streamed.data(), nullptr, qkv.data(), B, T, C, NH);
  EXPECT_EQ(streamed, out);
  std::vector<float> dqkv(qkv.size(), 7.0f), fused(qkv.size(), 8.0f);
  cpu::attentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T,
                         C, NH);
  cpu::attentionGrad(fused.data(), dout.data(), qkv.data(), B, T, C, NH);
  EXPECT_EQ(fused, dqkv);
}

} // namespace
