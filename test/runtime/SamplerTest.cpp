//===- SamplerTest.cpp - Byte-level sampling --------------------*- C++ -*-===//
//
// A bigram program whose table makes the next token known checks the
// generated ids, the argmax's vocabulary restriction and tie-breaking; the
// 1-layer GPT checks the sliding context window against forwards run through
// the executor directly (with the padding and the other rows filled with
// random ids, which causal attention must ignore); and the errors.
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"

#include "runtime/core/executor.h"
#include "runtime/core/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

using namespace loom;
using namespace loom::test;

namespace {

std::unique_ptr<Executor> makeExecutor(const fb::ProgramT &p,
                                       fb::LoadedProgram &loaded,
                                       uint64_t seed = 1337) {
  Status s = fb::loadProgramBytes(serialize(p), "test.loom", loaded);
  EXPECT_TRUE(s.ok()) << s.toString();
  if (!s.ok())
    return nullptr;
  std::unique_ptr<Executor> ex;
  s = Executor::create(loaded, 0, seed, ex);
  EXPECT_TRUE(s.ok()) << s.toString();
  return ex;
}

/// Sets the bigram table: after token v, logit 1 at (v + 1) % V and at
/// (v + 3) % V (a tie: the lower id wins), 0 elsewhere among the first V
/// columns, and a large logit in the padded columns (never chosen).
void setSuccessorTable(Executor &ex, int64_t V, int64_t Vp) {
  auto *w = static_cast<float *>(ex.bufferData(ex.params()[0].buffer));
  std::fill(w, w + Vp * Vp, 0.0f);
  for (int64_t v = 0; v < Vp; ++v) {
    w[v * Vp + (v + 1) % V] = 1.0f;
    w[v * Vp + (v + 3) % V] = 1.0f;
    for (int64_t c = V; c < Vp; ++c)
      w[v * Vp + c] = 100.0f;
  }
}

TEST(Sampler, BigramFollowsTheTableIgnoresPaddedColumnsAndBreaksTiesLow) {
  const int64_t B = 3, T = 4, V = 7, Vp = 9;
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*bigramLm(B, T, V, Vp), loaded);
  ASSERT_TRUE(ex);
  setSuccessorTable(*ex, V, Vp);
  SamplerLayout layout;
  ASSERT_TRUE(findSamplerLayout(*ex, layout).ok());
  EXPECT_EQ(layout.batch, B);
  EXPECT_EQ(layout.seq, T);
  EXPECT_EQ(layout.paddedVocab, Vp);
  EXPECT_EQ(layout.vocab, V);
  EXPECT_EQ(layout.tokens, static_cast<uint32_t>(ex->stage().tokens()));

  std::vector<int32_t> tokens = {2, 5};
  const Status s = sampleTokens(*ex, tokens, 10);
  ASSERT_TRUE(s.ok()) << s.toString();
  // next(v) = min((v+1) % 7, (v+3) % 7): 5 -> min(6, 1) = 1, 1 -> 2, ...
  std::vector<int32_t> expected = {2, 5};
  for (int i = 0; i < 10; ++i) {
    const int32_t v = expected.back();
    expected.push_back(std::min((v + 1) % 7, (v + 3) % 7));
  }
  EXPECT_EQ(tokens, expected);
  EXPECT_EQ(tokens[2], 1); // the tie at 5
  for (int32_t t : tokens)
    EXPECT_LT(t, V);

  // Zero new tokens leaves the prompt alone.
  std::vector<int32_t> same = {3};
  ASSERT_TRUE(sampleTokens(*ex, same, 0).ok());
  EXPECT_EQ(same, std::vector<int32_t>{3});
}

TEST(Sampler, MiniGptMatchesDirectForwardsOverASlidingWindow) {
  MiniGptDims d; // B 2, T 8, V 50, Vp 64
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*miniGpt(d), loaded, 11);
  ASSERT_TRUE(ex);
  std::vector<int32_t> tokens = {3, 14, 15, 9, 26};
  const std::vector<int32_t> prompt = tokens;
  const int64_t count = 12; // passes T: the window slides
  const Status s = sampleTokens(*ex, tokens, count);
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_EQ(tokens.size(), prompt.size() + count);
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), tokens.begin()));

  // Reference: each step's context in row 0, random ids everywhere else.
  std::mt19937 gen(5);
  std::uniform_int_distribution<int32_t> dist(0, static_cast<int32_t>(d.V) - 1);
  auto *ids = static_cast<int32_t *>(ex->bufferData(ex->stage().tokens()));
  auto *tgt = static_cast<int32_t *>(ex->bufferData(ex->stage().targets()));
  const fb::Instruction *ce = ex->stage().instructions()->Get(14);
  ASSERT_EQ(ce->opcode(), fb::Opcode::CrossEntropy);
  const uint32_t logitsBuffer = ce->inputs()->Get(0);
  const auto *logits = static_cast<const float *>(ex->bufferData(logitsBuffer));
  std::vector<int32_t> seq = prompt;
  std::set<int32_t> distinct;
  for (int64_t n = 0; n < count; ++n) {
    const int64_t L = std::min<int64_t>(seq.size(), d.T);
    for (int64_t i = 0; i < d.B * d.T; ++i) {
      ids[i] = dist(gen);
      tgt[i] = dist(gen);
    }
    std::copy(seq.end() - L, seq.end(), ids);
    ASSERT_TRUE(ex->run().ok());
    const float *row = logits + (L - 1) * d.Vp;
    const int32_t best =
        static_cast<int32_t>(std::max_element(row, row + d.V) - row);
    seq.push_back(best);
    distinct.insert(best);
  }
  EXPECT_EQ(tokens, seq);
  EXPECT_GT(distinct.size(), 1u) << "the check is weak: one token repeats";
}

TEST(Sampler, PromptTokensAndErrors) {
  std::vector<int32_t> tokens;
  ASSERT_TRUE(promptTokens("Hi\n", 128, tokens).ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{'H', 'i', '\n'}));
  ASSERT_TRUE(promptTokens("\xC3\xA9", 256, tokens).ok());
  EXPECT_EQ(tokens, (std::vector<int32_t>{0xC3, 0xA9}));

  Status s = promptTokens("", 128, tokens);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the prompt is empty; pass --prompt TEXT"),
            std::string::npos)
      << s.message();
  s = promptTokens("ab", 50, tokens);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("prompt byte 0 is 0x61 (token 97), outside the "
                             "model's vocabulary of 50 tokens"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("bytes are below 50"), std::string::npos);
  s = promptTokens("ok\xC3", 128, tokens);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("prompt byte 2 is 0xC3"), std::string::npos)
      << s.message();

  // sampleTokens checks its input too.
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*bigramLm(1, 4, 7, 7), loaded);
  ASSERT_TRUE(ex);
  std::vector<int32_t> empty;
  EXPECT_FALSE(sampleTokens(*ex, empty, 1).ok());
  std::vector<int32_t> big = {7};
  s = sampleTokens(*ex, big, 1);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("outside the vocabulary of 7"), std::string::npos);
}

TEST(Sampler, ProgramsThatCannotBeSampled) {
  SamplerLayout layout;
  {
    fb::LoadedProgram loaded;
    MiniGptDims d;
    auto ex = makeExecutor(*miniGptTrain(d), loaded);
    ASSERT_TRUE(ex);
    Status s = findSamplerLayout(*ex, layout);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.message(),
              "sampling needs an eval program: compile without --train");
    std::vector<int32_t> tokens = {1};
    EXPECT_FALSE(sampleTokens(*ex, tokens, 1).ok());
    EXPECT_EQ(tokens.size(), 1u);
  }
  {
    // No CrossEntropy: no logits.
    auto p = bigramLm(1, 4, 7, 7);
    p->stages[0]->instructions.pop_back();
    p->stages[0]->loss = -1;
    fb::LoadedProgram loaded;
    auto ex = makeExecutor(*p, loaded);
    ASSERT_TRUE(ex);
    Status s = findSamplerLayout(*ex, layout);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("has no CrossEntropy instruction"),
              std::string::npos)
        << s.message();
  }
  {
    // No tokens buffer (a later pipeline stage).
    auto p = bigramLm(1, 4, 7, 7);
    p->stages[0]->tokens = -1;
    fb::LoadedProgram loaded;
    auto ex = makeExecutor(*p, loaded);
    ASSERT_TRUE(ex);
    Status s = findSamplerLayout(*ex, layout);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("has no tokens buffer"), std::string::npos)
        << s.message();
  }
}

TEST(Sampler, GreedyChoiceIgnoresNaNAndBreaksTiesLow) {
  const SamplingConfig greedy;
  const float nan = std::nanf("");
  const std::vector<float> a{0.5f, 2.f, 2.f, -1.f};
  EXPECT_EQ(chooseToken(a.data(), 4, greedy, 0), 1);
  const std::vector<float> b{nan, -3.f, nan, -2.f};
  EXPECT_EQ(chooseToken(b.data(), 4, greedy, 0), 3);
  const std::vector<float> c{nan, nan};
  EXPECT_EQ(chooseToken(c.data(), 2, greedy, 0), 0);
  // A vanishing temperature is the argmax; so is top-k 1.
  SamplingConfig cold;
  cold.temperature = 1e-6;
  SamplingConfig top1;
  top1.temperature = 5.0;
  top1.topK = 1;
  for (uint64_t n = 0; n < 100; ++n) {
    EXPECT_EQ(chooseToken(a.data(), 3, cold, n) == 1 ||
                  chooseToken(a.data(), 3, cold, n) == 2,
              true);
    EXPECT_EQ(chooseToken(b.data(), 4, top1, n), 3);
  }
}

TEST(Sampler, TokenLogProbIsTheLogSoftmax) {
  // Large logits: the maximum is subtracted before exp.
  const std::vector<float> logits{1000.f, 1001.f, 998.f, 1001.f};
  double total = 0;
  for (int32_t t = 0; t < 4; ++t)
    total += std::exp(tokenLogProb(logits.data(), 4, t));
  EXPECT_NEAR(total, 1.0, 1e-12);
  const double z = std::log(std::exp(-1.0) + 2.0 + std::exp(-3.0));
  EXPECT_NEAR(tokenLogProb(logits.data(), 4, 1), -z, 1e-12);
  EXPECT_NEAR(tokenLogProb(logits.data(), 4, 2), -3.0 - z, 1e-12);
  // Only the first `vocab` columns count; NaN logits are left out and have
  // no probability.
  const float nan = std::nanf("");
  const std::vector<float> padded{0.f, 0.f, nan, 50.f};
  EXPECT_DOUBLE_EQ(tokenLogProb(padded.data(), 2, 0), std::log(0.5));
  EXPECT_DOUBLE_EQ(tokenLogProb(padded.data(), 3, 1), std::log(0.5));
  EXPECT_EQ(tokenLogProb(padded.data(), 3, 2),
            -std::numeric_limits<double>::infinity());
}

/// How often each id is drawn over `draws` draws.
std::vector<double> frequencies(const std::vector<float> &logits,
                                const SamplingConfig &c, int draws) {
  std::vector<double> f(logits.size(), 0.0);
  for (int n = 0; n < draws; ++n)
    f[chooseToken(logits.data(), static_cast<int64_t>(logits.size()), c,
                  static_cast<uint64_t>(n))] += 1.0 / draws;
  return f;
}

TEST(Sampler, DrawsFollowTheTemperedSoftmaxOverTheTopK) {
  // 40000 draws: a frequency's standard deviation is at most 0.0025, so
  // 0.01 is 4 of them (the draws are a fixed function of the seed, so the
  // test cannot flake).
  const std::vector<float> logits{0.f, 1.f, 2.f, 0.5f, -1.f};
  const int draws = 40000;
  auto softmax = [&](double t, const std::vector<int> &allowed) {
    std::vector<double> p(logits.size(), 0.0);
    double total = 0;
    for (int v : allowed)
      total += p[v] = std::exp(logits[v] / t);
    for (double &x : p)
      x /= total;
    return p;
  };
  for (double t : {0.5, 0.8, 1.0, 2.0}) {
    SamplingConfig c;
    c.temperature = t;
    c.seed = 42;
    const auto want = softmax(t, {0, 1, 2, 3, 4});
    const auto got = frequencies(logits, c, draws);
    for (size_t v = 0; v < logits.size(); ++v)
      EXPECT_NEAR(got[v], want[v], 0.01) << "temperature " << t << " id " << v;
    // Top-2: ids 2 and 1 only, in the softmax's ratio.
    c.topK = 2;
    const auto want2 = softmax(t, {1, 2});
    const auto got2 = frequencies(logits, c, draws);
    for (size_t v = 0; v < logits.size(); ++v)
      EXPECT_NEAR(got2[v], want2[v], 0.01) << "top-2, temperature " << t;
    EXPECT_EQ(got2[0] + got2[3] + got2[4], 0.0);
  }
  // Logits equal to the k-th stay in (nanoGPT's top_k): three ties, k = 2.
  SamplingConfig c;
  c.temperature = 1.0;
  c.topK = 2;
  const auto tied = frequencies({1.f, 3.f, 3.f, 3.f, 0.f}, c, draws);
  for (int v : {1, 2, 3})
    EXPECT_NEAR(tied[v], 1.0 / 3, 0.01);
  EXPECT_EQ(tied[0] + tied[4], 0.0);
}

TEST(Sampler, DrawsDependOnTheSeedAndTheIndexAlone) {
  std::vector<float> logits(64);
  for (size_t v = 0; v < logits.size(); ++v)
    logits[v] = static_cast<float>(std::sin(static_cast<double>(v)));
  SamplingConfig a;
  a.temperature = 1.0;
  SamplingConfig b = a;
  b.seed = a.seed + 1;
  std::vector<int32_t> first, again, other;
  for (uint64_t n = 0; n < 200; ++n) {
    first.push_back(chooseToken(logits.data(), 64, a, n));
    other.push_back(chooseToken(logits.data(), 64, b, n));
  }
  for (uint64_t n = 0; n < 200; ++n)
    again.push_back(chooseToken(logits.data(), 64, a, n));
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
  EXPECT_GT(std::set<int32_t>(first.begin(), first.end()).size(), 20u);
}

TEST(Sampler, SamplingConfigErrorsNameTheFlag) {
  SamplingConfig c;
  c.temperature = -1;
  Status s = checkSamplingConfig(c);
  EXPECT_NE(s.message().find("--temperature must be a finite number >= 0"),
            std::string::npos)
      << s.message();
  c.temperature = std::nan("");
  EXPECT_FALSE(checkSamplingConfig(c).ok());
  c.temperature = 0;
  c.topK = 5;
  s = checkSamplingConfig(c);
  EXPECT_NE(s.message().find("sampling is greedy without a temperature"),
            std::string::npos)
      << s.message();
  c.temperature = 0.8;
  EXPECT_TRUE(checkSamplingConfig(c).ok());
}

TEST(Sampler, RenderTokens) {
  EXPECT_EQ(renderTokens({'a', ' ', '~', '\n', '\t', 0, 7, 0x7F, 0x80, 0xFF,
                          256, 50000, -1}),
            "a ~\n\t????????");
  EXPECT_EQ(renderTokens({}), "");
}

} // namespace
