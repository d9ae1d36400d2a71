//===- TokenDataTest.cpp - llm.c token file tests --------------*- C++ -*-===//
#include "runtime/core/sample_permutation.h"
#include "runtime/core/token_data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <unistd.h>

using namespace loom;

namespace {

std::string tempPath(const std::string &name) {
  return testing::TempDir() + "loom_tokens_" + std::to_string(::getpid()) +
         "_" + name;
}

/// Writes raw header ints followed by raw uint16 tokens (for corrupt files).
void writeRaw(const std::string &path, const std::vector<int32_t> &header,
              const std::vector<uint16_t> &tokens) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char *>(header.data()),
          header.size() * sizeof(int32_t));
  f.write(reinterpret_cast<const char *>(tokens.data()),
          tokens.size() * sizeof(uint16_t));
}

std::vector<int32_t> iota(int64_t n, int32_t mod = 50000) {
  std::vector<int32_t> t(n);
  for (int64_t i = 0; i < n; ++i)
    t[i] = static_cast<int32_t>((i * 37 + 11) % mod);
  return t;
}

TEST(TokenData, BatchesFollowTheLlmcLayoutAndWrap) {
  const std::string path = tempPath("layout.bin");
  const int64_t B = 4, T = 8, count = 100; // nb = 99 / 32 = 3
  auto tokens = iota(count);
  ASSERT_TRUE(writeTokenFile(path, tokens).ok());
  TokenDataConfig cfg;
  cfg.batchSize = B;
  cfg.seqLen = T;
  cfg.vocabSize = 50257;
  std::unique_ptr<TokenDataLoader> loader;
  Status s = TokenDataLoader::open(path, cfg, loader);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(loader->tokenCount(), count);
  EXPECT_EQ(loader->numBatches(), 3);
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int64_t step : {0, 1, 2, 3, 7}) {
    ASSERT_TRUE(loader->loadBatch(step, in.data(), tg.data()).ok());
    const int64_t off = (step % 3) * B * T;
    for (int64_t r = 0; r < B; ++r)
      for (int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(in[r * T + t], tokens[off + r * T + t]);
        ASSERT_EQ(tg[r * T + t], tokens[off + r * T + t + 1]);
      }
  }
  std::remove(path.c_str());
}

TEST(TokenData, DataParallelRanksTakeContiguousRows) {
  const std::string path = tempPath("dp.bin");
  const int64_t B = 6, T = 5, D = 3;
  auto tokens = iota(200);
  ASSERT_TRUE(writeTokenFile(path, tokens).ok());
  TokenDataConfig cfg;
  cfg.batchSize = B;
  cfg.seqLen = T;
  std::unique_ptr<TokenDataLoader> full;
  ASSERT_TRUE(TokenDataLoader::open(path, cfg, full).ok());
  std::vector<int32_t> in(B * T), tg(B * T);
  ASSERT_TRUE(full->loadBatch(4, in.data(), tg.data()).ok());
  for (int64_t d = 0; d < D; ++d) {
    TokenDataConfig rc = cfg;
    rc.dpRank = d;
    rc.dpSize = D;
    std::unique_ptr<TokenDataLoader> rank;
    ASSERT_TRUE(TokenDataLoader::open(path, rc, rank).ok());
    ASSERT_EQ(rank->localRows(), 2);
    std::vector<int32_t> rin(2 * T), rtg(2 * T);
    ASSERT_TRUE(rank->loadBatch(4, rin.data(), rtg.data()).ok());
    for (int64_t i = 0; i < 2 * T; ++i) {
      EXPECT_EQ(rin[i], in[d * 2 * T + i]);
      EXPECT_EQ(rtg[i], tg[d * 2 * T + i]);
    }
  }
  std::remove(path.c_str());
}

TEST(SamplePermutation, IsABijectionThatDependsOnSeedAndEpoch) {
  for (int64_t n : {1, 2, 3, 5, 64, 1000, 4097}) {
    SamplePermutation p(n, 7, 0);
    std::vector<int64_t> seen(n, 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = p(i);
      ASSERT_GE(j, 0) << n;
      ASSERT_LT(j, n) << n;
      ++seen[j];
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), n) << n;
  }
  auto order = [](uint64_t seed, int64_t epoch) {
    SamplePermutation p(1000, seed, epoch);
    std::vector<int64_t> o;
    for (int64_t i = 0; i < 1000; ++i)
      o.push_back(p(i));
    return o;
  };
  EXPECT_EQ(order(7, 3), order(7, 3));
  EXPECT_NE(order(7, 3), order(7, 4));
  EXPECT_NE(order(7, 3), order(8, 3));
  std::vector<int64_t> identity(1000);
  for (int64_t i = 0; i < 1000; ++i)
    identity[i] = i;
  EXPECT_NE(order(7, 0), identity);
}

TEST(TokenData, ShuffledEpochsReadEverySequenceOnce) {
  // Token i is i / T, so a row's inputs name its sequence and its last
  // target the next one. 37 sequences: epochs end inside batches of 4.
  const std::string path = tempPath("shuffle.bin");
  const int64_t B = 4, T = 8, ns = 37;
  std::vector<int32_t> tokens(ns * T + 1);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int32_t>(i / T);
  ASSERT_TRUE(writeTokenFile(path, tokens).ok());
  TokenDataConfig cfg;
  cfg.batchSize = B;
  cfg.seqLen = T;
  cfg.shuffle = true;
  cfg.shuffleSeed = 1337;
  std::unique_ptr<TokenDataLoader> loader;
  ASSERT_TRUE(TokenDataLoader::open(path, cfg, loader).ok());
  EXPECT_EQ(loader->numSequences(), ns);
  // Three epochs of sequences, batch by batch.
  const int64_t steps = (3 * ns + B - 1) / B;
  std::vector<int64_t> order;
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int64_t s = 0; s < steps; ++s) {
    ASSERT_TRUE(loader->loadBatch(s, in.data(), tg.data()).ok());
    for (int64_t r = 0; r < B; ++r) {
      const int32_t seq = in[r * T];
      for (int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(in[r * T + t], seq);
        ASSERT_EQ(tg[r * T + t], t + 1 < T ? seq : seq + 1);
      }
      order.push_back(seq);
    }
  }
  std::vector<std::vector<int64_t>> epochs;
  for (int64_t e = 0; e < 3; ++e) {
    std::vector<int64_t> epoch(order.begin() + e * ns,
                               order.begin() + (e + 1) * ns);
    std::vector<int64_t> sorted = epoch;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t j = 0; j < ns; ++j)
      ASSERT_EQ(sorted[j], j) << "epoch " << e << " misses sequence " << j;
    epochs.push_back(epoch);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);

  // Data-parallel ranks read exactly the single-rank batch's rows; another
  // seed is another order.
  const int64_t D = 2;
  for (int64_t s : {0, 9, 18}) {
    ASSERT_TRUE(loader->loadBatch(s, in.data(), tg.data()).ok());
    for (int64_t d = 0; d < D; ++d) {
      TokenDataConfig rc = cfg;
      rc.dpRank = d;
      rc.dpSize = D;
      std::unique_ptr<TokenDataLoader> rank;
      ASSERT_TRUE(TokenDataLoader::open(path, rc, rank).ok());
      std::vector<int32_t> rin(B / D * T), rtg(B / D * T);
      ASSERT_TRUE(rank->loadBatch(s, rin.data(), rtg.data()).ok());
      for (int64_t i = 0; i < B / D * T; ++i) {
        ASSERT_EQ(rin[i], in[d * B / D * T + i]);
        ASSERT_EQ(rtg[i], tg[d * B / D * T + i]);
      }
    }
  }
  TokenDataConfig other = cfg;
  other.shuffleSeed = 1;
  std::unique_ptr<TokenDataLoader> reseeded;
  ASSERT_TRUE(TokenDataLoader::open(path, other, reseeded).ok());
  std::vector<int64_t> otherOrder;
  for (int64_t s = 0; s < steps; ++s) {
    ASSERT_TRUE(reseeded->loadBatch(s, in.data(), tg.data()).ok());
    for (int64_t r = 0; r < B; ++r)
      otherOrder.push_back(in[r * T]);
  }
  EXPECT_NE(otherOrder, order);
  std::remove(path.c_str());
}

/// Opens `path` with B x T (and D) and returns the error message ("" if ok).
std::string openError(const std::string &path, int64_t B, int64_t T,
                      int64_t vocab = 0, int64_t D = 1) {
  TokenDataConfig cfg;
  cfg.batchSize = B;
  cfg.seqLen = T;
  cfg.vocabSize = vocab;
  cfg.dpSize = D;
  std::unique_ptr<TokenDataLoader> loader;
  Status s = TokenDataLoader::open(path, cfg, loader);
  EXPECT_EQ(s.ok(), loader != nullptr);
  return s.ok() ? "" : s.message();
}

TEST(TokenData, ClearErrorsForBadFiles) {
  const std::string missing = tempPath("missing.bin");
  std::string e = openError(missing, 1, 4);
  EXPECT_NE(e.find("cannot open"), std::string::npos) << e;
  EXPECT_NE(e.find(missing), std::string::npos) << e;

  const std::string shortHdr = tempPath("short.bin");
  writeRaw(shortHdr, {kTokenFileMagic, 1, 10}, {});
  e = openError(shortHdr, 1, 4);
  EXPECT_NE(e.find("too short for its header"), std::string::npos) << e;

  std::vector<int32_t> header(256, 0);
  std::vector<uint16_t> toks(50, 3);
  const std::string badMagic = tempPath("magic.bin");
  header[0] = 12345;
  header[1] = 1;
  header[2] = 50;
  writeRaw(badMagic, header, toks);
  e = openError(badMagic, 1, 4);
  EXPECT_NE(e.find("bad magic 12345"), std::string::npos) << e;

  const std::string badVersion = tempPath("version.bin");
  header[0] = kTokenFileMagic;
  header[1] = 2;
  writeRaw(badVersion, header, toks);
  e = openError(badVersion, 1, 4);
  EXPECT_NE(e.find("version 2"), std::string::npos) << e;

  const std::string truncated = tempPath("truncated.bin");
  header[1] = 1;
  header[2] = 51;
  writeRaw(truncated, header, toks);
  e = openError(truncated, 1, 4);
  EXPECT_NE(e.find("declares 51 tokens but holds only 50"), std::string::npos)
      << e;

  const std::string small = tempPath("small.bin");
  ASSERT_TRUE(writeTokenFile(small, iota(32)).ok());
  e = openError(small, 4, 8); // needs 33
  EXPECT_NE(e.find("too few for one batch"), std::string::npos) << e;
  EXPECT_EQ(openError(small, 3, 8), "");

  e = openError(small, 3, 8, 0, 2);
  EXPECT_NE(e.find("not divisible by the data-parallel size 2"),
            std::string::npos)
      << e;

  for (const auto &p : {shortHdr, badMagic, badVersion, truncated, small})
    std::remove(p.c_str());
}

TEST(TokenData, TokenOutsideVocabNamesPositionAndId) {
  const std::string path = tempPath("vocab.bin");
  auto tokens = iota(41, 100);
  tokens[13] = 60000;
  ASSERT_TRUE(writeTokenFile(path, tokens).ok());
  TokenDataConfig cfg;
  cfg.batchSize = 2;
  cfg.seqLen = 10; // batch 0 covers tokens 0..20
  cfg.vocabSize = 50257;
  std::unique_ptr<TokenDataLoader> loader;
  ASSERT_TRUE(TokenDataLoader::open(path, cfg, loader).ok());
  std::vector<int32_t> in(20), tg(20);
  Status s = loader->loadBatch(0, in.data(), tg.data());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("token id 60000 at position 13"),
            std::string::npos)
      << s.toString();
  EXPECT_TRUE(loader->loadBatch(1, in.data(), tg.data()).ok());
  std::remove(path.c_str());
}

TEST(TokenData, WriterRejectsTokensBeyondUint16) {
  Status s = writeTokenFile(tempPath("never.bin"), {1, 70000});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("70000 at position 1"), std::string::npos);
}

TEST(TokenData, WriterProducesTheLlmcHeader) {
  const std::string path = tempPath("header.bin");
  ASSERT_TRUE(writeTokenFile(path, {5, 6, 7}).ok());
  std::ifstream f(path, std::ios::binary);
  std::vector<int32_t> header(256);
  f.read(reinterpret_cast<char *>(header.data()), 1024);
  uint16_t toks[3];
  f.read(reinterpret_cast<char *>(toks), 6);
  ASSERT_TRUE(f.good());
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 3);
  EXPECT_EQ(toks[2], 7);
  f.get();
  EXPECT_TRUE(f.eof());
  std::remove(path.c_str());
}

} // namespace
