//===- TokenDataTest.cpp - llm.c token file tests ---------------*- C++ -*-===//
#include "runtime/core/sample_permutation.h"
#include "runtime/core/token_data.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
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

/// A fresh directory for a test's shards.
std::string shardDir(const std::string &name) {
  const std::string dir = tempPath(name);
  std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
  return dir;
}

TEST(TokenData, ShardsFollowOneAnotherInSortedOrder) {
  // Three shards of 2, 1 and 3 batches of 4 x 8 (with spare tokens that no
  // batch reads), written out of order: the set reads them sorted.
  const std::string dir = shardDir("shards");
  const int64_t B = 4, T = 8, BT = B * T;
  const std::vector<int64_t> counts{2 * BT + 6, BT + 1, 3 * BT + 1};
  const std::vector<std::string> names{"train_000.bin", "train_001.bin",
                                       "train_002.bin"};
  std::vector<std::vector<int32_t>> shards;
  for (size_t i = 0; i < counts.size(); ++i)
    shards.push_back(iota(counts[i], 1000 + 100 * static_cast<int32_t>(i)));
  for (int i : {2, 0, 1})
    ASSERT_TRUE(writeTokenFile(dir + "/" + names[i], shards[i]).ok());
  ASSERT_TRUE(writeTokenFile(dir + "/other.bin", iota(BT + 1)).ok());
  TokenDataConfig cfg;
  cfg.batchSize = B;
  cfg.seqLen = T;
  cfg.vocabSize = 2000;
  std::unique_ptr<TokenDataLoader> loader;
  Status s = TokenDataLoader::open(dir + "/train_*.bin", cfg, loader);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(loader->numShards(), 3);
  EXPECT_EQ(loader->numBatches(), 6);
  EXPECT_EQ(loader->tokenCount(), counts[0] + counts[1] + counts[2]);
  EXPECT_EQ(loader->numSequences(),
            (counts[0] - 1) / T + (counts[1] - 1) / T + (counts[2] - 1) / T);
  // Batch b: (shard, its batch); 6 and 8 wrap to 0 and 2.
  const std::vector<std::pair<int, int64_t>> where{{0, 0}, {0, 1}, {1, 0},
                                                   {2, 0}, {2, 1}, {2, 2}};
  std::vector<int32_t> in(BT), tg(BT);
  for (int64_t step : {0, 1, 2, 3, 4, 5, 6, 8}) {
    ASSERT_TRUE(loader->loadBatch(step, in.data(), tg.data()).ok());
    const auto [shard, batch] = where[step % 6];
    for (int64_t i = 0; i < BT; ++i) {
      ASSERT_EQ(in[i], shards[shard][batch * BT + i]) << step << " " << i;
      ASSERT_EQ(tg[i], shards[shard][batch * BT + i + 1]) << step << " " << i;
    }
  }
  // Data-parallel ranks split each shard's batch as they split a file's.
  for (int64_t d = 0; d < 2; ++d) {
    TokenDataConfig rc = cfg;
    rc.dpRank = d;
    rc.dpSize = 2;
    std::unique_ptr<TokenDataLoader> rank;
    ASSERT_TRUE(TokenDataLoader::open(dir + "/train_*.bin", rc, rank).ok());
    std::vector<int32_t> rin(BT / 2), rtg(BT / 2);
    ASSERT_TRUE(rank->loadBatch(2, rin.data(), rtg.data()).ok());
    for (int64_t i = 0; i < BT / 2; ++i) {
      EXPECT_EQ(rin[i], shards[1][d * BT / 2 + i]);
      EXPECT_EQ(rtg[i], shards[1][d * BT / 2 + i + 1]);
    }
  }
  // A plain path is one file, even among shards.
  ASSERT_TRUE(TokenDataLoader::open(dir + "/" + names[1], cfg, loader).ok());
  EXPECT_EQ(loader->numShards(), 1);
  EXPECT_EQ(loader->numBatches(), 1);
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(TokenData, ShuffledEpochsReadEveryShardsSequencesOnce) {
  // Token values are unique over the set (shard i holds i*1000 + position),
  // so a row's first input names its shard and sequence.
  const std::string dir = shardDir("shuffled_shards");
  const int64_t B = 4, T = 8;
  const std::vector<int64_t> sequencesPerShard{5, 11, 7}; // 23: mid-batch
  int64_t ns = 0;
  for (size_t i = 0; i < sequencesPerShard.size(); ++i) {
    std::vector<int32_t> tokens(sequencesPerShard[i] * T + 1);
    for (size_t k = 0; k < tokens.size(); ++k)
      tokens[k] = static_cast<int32_t>(1000 * i + k);
    ASSERT_TRUE(
        writeTokenFile(dir + "/part" + std::to_string(i) + ".bin", tokens)
            .ok());
    ns += sequencesPerShard[i];
  }
  TokenDataConfig cfg;
  cfg.batchSize = B;
  cfg.seqLen = T;
  cfg.shuffle = true;
  cfg.shuffleSeed = 7;
  std::unique_ptr<TokenDataLoader> loader;
  ASSERT_TRUE(TokenDataLoader::open(dir + "/part?.bin", cfg, loader).ok());
  ASSERT_EQ(loader->numSequences(), ns);
  std::vector<int32_t> in(B * T), tg(B * T), order;
  for (int64_t step = 0; step * B < 2 * ns; ++step) {
    ASSERT_TRUE(loader->loadBatch(step, in.data(), tg.data()).ok());
    for (int64_t r = 0; r < B; ++r) {
      const int32_t first = in[r * T];
      ASSERT_EQ(first % 1000 % T, 0) << "row " << r << " of step " << step;
      for (int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(in[r * T + t], first + t);
        ASSERT_EQ(tg[r * T + t], first + t + 1);
      }
      order.push_back(first);
    }
  }
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<int32_t> seen(order.begin() + epoch * ns,
                              order.begin() + (epoch + 1) * ns);
    std::sort(seen.begin(), seen.end());
    std::vector<int32_t> all;
    for (size_t i = 0; i < sequencesPerShard.size(); ++i)
      for (int64_t q = 0; q < sequencesPerShard[i]; ++q)
        all.push_back(static_cast<int32_t>(1000 * i + q * T));
    EXPECT_EQ(seen, all) << "epoch " << epoch;
  }
  // The shards' sequences are interleaved, not read shard after shard.
  std::vector<int32_t> firstEpoch(order.begin(), order.begin() + ns);
  EXPECT_FALSE(std::is_sorted(firstEpoch.begin(), firstEpoch.end()));
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(TokenData, ClearErrorsForBadShards) {
  const std::string dir = shardDir("bad_shards");
  std::string e = openError(dir + "/train_*.bin", 1, 4);
  EXPECT_NE(e.find("no token file matches '" + dir + "/train_*.bin'"),
            std::string::npos)
      << e;
  ASSERT_TRUE(writeTokenFile(dir + "/train_0.bin", iota(100)).ok());
  ASSERT_TRUE(writeTokenFile(dir + "/train_1.bin", iota(20)).ok());
  EXPECT_EQ(openError(dir + "/train_*.bin", 2, 8), ""); // 17 tokens a batch
  e = openError(dir + "/train_*.bin", 4, 8);
  EXPECT_NE(e.find("'" + dir +
                   "/train_1.bin' has 20 tokens, too few for one "
                   "batch"),
            std::string::npos)
      << e;
  std::vector<int32_t> header(256, 0);
  header[0] = 4242;
  writeRaw(dir + "/train_2.bin", header, std::vector<uint16_t>(50, 1));
  e = openError(dir + "/train_*.bin", 2, 8);
  EXPECT_NE(e.find("'" + dir + "/train_2.bin' has bad magic 4242"),
            std::string::npos)
      << e;
  std::system(("rm -rf '" + dir + "'").c_str());
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
