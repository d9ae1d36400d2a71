//===- ParamInitTest.cpp - Partition-independent init tests -----*- C++ -*-===//
#include "runtime/core/param_init.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace loom;

namespace {

ParamInitializer normal(float std) {
  ParamInitializer init;
  init.kind = ParamInitializer::Kind::Normal;
  init.std = std;
  return init;
}

TEST(ParamInit, RangesAgreeWithTheFullTensor) {
  const int64_t n = 1000;
  std::vector<float> full(n), part(300);
  initNormal(full.data(), "h.0.attn.c_attn.weight", 42, 0.02f, 0, n);
  initNormal(part.data(), "h.0.attn.c_attn.weight", 42, 0.02f, 517, 300);
  for (int64_t i = 0; i < 300; ++i)
    ASSERT_EQ(part[i], full[517 + i]) << i;
}

TEST(ParamInit, SliceEqualsRegionOfFullTensor) {
  // A [6, 10, 12] tensor sliced as a tensor-parallel rank would see it.
  const std::vector<int64_t> shape = {6, 10, 12};
  std::vector<float> full(6 * 10 * 12);
  ASSERT_TRUE(initParamSlice(full.data(), "wte", 7, normal(1.0f), shape,
                             {0, 0, 0}, shape)
                  .ok());
  const std::vector<int64_t> off = {2, 3, 4}, size = {3, 5, 6};
  std::vector<float> shard(3 * 5 * 6);
  Status s =
      initParamSlice(shard.data(), "wte", 7, normal(1.0f), shape, off, size);
  ASSERT_TRUE(s.ok()) << s.toString();
  for (int64_t i = 0; i < size[0]; ++i)
    for (int64_t j = 0; j < size[1]; ++j)
      for (int64_t k = 0; k < size[2]; ++k)
        ASSERT_EQ(shard[(i * size[1] + j) * size[2] + k],
                  full[((off[0] + i) * 10 + off[1] + j) * 12 + off[2] + k]);

  // Column shards of a 2-D weight reassemble to the full tensor.
  const std::vector<int64_t> w = {8, 6};
  std::vector<float> whole(48), left(24), right(24);
  ASSERT_TRUE(initParamSlice(whole.data(), "c_fc.weight", 1, normal(0.02f), w,
                             {0, 0}, w)
                  .ok());
  ASSERT_TRUE(initParamSlice(left.data(), "c_fc.weight", 1, normal(0.02f), w,
                             {0, 0}, {8, 3})
                  .ok());
  ASSERT_TRUE(initParamSlice(right.data(), "c_fc.weight", 1, normal(0.02f), w,
                             {0, 3}, {8, 3})
                  .ok());
  for (int64_t r = 0; r < 8; ++r)
    for (int64_t c = 0; c < 3; ++c) {
      EXPECT_EQ(left[r * 3 + c], whole[r * 6 + c]);
      EXPECT_EQ(right[r * 3 + c], whole[r * 6 + 3 + c]);
    }
}

TEST(ParamInit, NormalStatistics) {
  const int64_t n = 1000000;
  std::vector<float> x(n);
  initNormal(x.data(), "stats", 1234, 0.02f, 0, n);
  double mean = 0, sq = 0;
  for (float v : x)
    mean += v;
  mean /= n;
  for (float v : x)
    sq += (v - mean) * (v - mean);
  double std = std::sqrt(sq / n);
  // Standard error of the mean is 0.02/1000; allow 5 sigma.
  EXPECT_NEAR(mean, 0.0, 1e-4);
  EXPECT_NEAR(std, 0.02, 0.02 * 5e-3);
  // Neighbouring elements are uncorrelated.
  double corr = 0;
  for (int64_t i = 0; i + 1 < n; ++i)
    corr += static_cast<double>(x[i]) * x[i + 1];
  corr /= (n - 1) * 0.02 * 0.02;
  EXPECT_NEAR(corr, 0.0, 5e-3);
}

TEST(ParamInit, NamesAndSeedsGiveDifferentStreams) {
  const int64_t n = 64;
  std::vector<float> a(n), b(n), c(n), a2(n);
  initNormal(a.data(), "h.0.mlp.c_fc.weight", 1, 1.0f, 0, n);
  initNormal(b.data(), "h.1.mlp.c_fc.weight", 1, 1.0f, 0, n);
  initNormal(c.data(), "h.0.mlp.c_fc.weight", 2, 1.0f, 0, n);
  initNormal(a2.data(), "h.0.mlp.c_fc.weight", 1, 1.0f, 0, n);
  EXPECT_EQ(a, a2);
  int sameB = 0, sameC = 0;
  for (int64_t i = 0; i < n; ++i) {
    sameB += a[i] == b[i];
    sameC += a[i] == c[i];
  }
  EXPECT_EQ(sameB, 0);
  EXPECT_EQ(sameC, 0);
}

TEST(ParamInit, ZerosOnesAndUniform) {
  std::vector<float> z(10, 5.0f), o(10), u(10000);
  ParamInitializer zeros, ones, uni;
  ones.kind = ParamInitializer::Kind::Ones;
  uni.kind = ParamInitializer::Kind::Uniform;
  uni.low = -0.5f;
  uni.high = 0.25f;
  ASSERT_TRUE(initParamSlice(z.data(), "b", 0, zeros, {10}, {0}, {10}).ok());
  ASSERT_TRUE(
      initParamSlice(o.data(), "ln.weight", 0, ones, {10}, {0}, {10}).ok());
  ASSERT_TRUE(
      initParamSlice(u.data(), "u", 3, uni, {10000}, {0}, {10000}).ok());
  for (float v : z)
    EXPECT_EQ(v, 0.0f);
  for (float v : o)
    EXPECT_EQ(v, 1.0f);
  double mean = 0;
  for (float v : u) {
    EXPECT_GE(v, -0.5f);
    EXPECT_LE(v, 0.25f);
    mean += v;
  }
  EXPECT_NEAR(mean / u.size(), -0.125, 0.01);
}

TEST(ParamInit, BadSlicesAreErrors) {
  std::vector<float> buf(100);
  Status s =
      initParamSlice(buf.data(), "w", 0, normal(1.0f), {4, 4}, {0, 2}, {4, 3});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("leaves the tensor"), std::string::npos)
      << s.toString();
  EXPECT_NE(s.message().find("'w'"), std::string::npos);
  EXPECT_FALSE(
      initParamSlice(buf.data(), "w", 0, normal(1.0f), {4, 4}, {0}, {4}).ok());
  EXPECT_FALSE(
      initParamSlice(buf.data(), "w", 0, normal(1.0f), {4, 4}, {-1, 0}, {2, 2})
          .ok());
}

TEST(ParamInit, ScalarParameter) {
  float v = 0, ref = 0;
  ASSERT_TRUE(initParamSlice(&v, "scalar", 9, normal(1.0f), {}, {}, {}).ok());
  initNormal(&ref, "scalar", 9, 1.0f, 0, 1);
  EXPECT_EQ(v, ref);
}

} // namespace
