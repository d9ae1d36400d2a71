//===- SamplerTest.cpp - Greedy byte-level sampling -------------*- C++ -*-===//
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
  const Status s = sampleGreedy(*ex, tokens, 10);
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
  ASSERT_TRUE(sampleGreedy(*ex, same, 0).ok());
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
  const Status s = sampleGreedy(*ex, tokens, count);
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

  // sampleGreedy checks its input too.
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*bigramLm(1, 4, 7, 7), loaded);
  ASSERT_TRUE(ex);
  std::vector<int32_t> empty;
  EXPECT_FALSE(sampleGreedy(*ex, empty, 1).ok());
  std::vector<int32_t> big = {7};
  s = sampleGreedy(*ex, big, 1);
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
    EXPECT_FALSE(sampleGreedy(*ex, tokens, 1).ok());
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

TEST(Sampler, RenderTokens) {
  EXPECT_EQ(renderTokens({'a', ' ', '~', '\n', '\t', 0, 7, 0x7F, 0x80, 0xFF,
                          256, 50000, -1}),
            "a ~\n\t????????");
  EXPECT_EQ(renderTokens({}), "");
}

} // namespace
