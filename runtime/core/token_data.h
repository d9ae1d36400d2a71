//===- token_data.h - llm.c token file reader and writer --------*- C++ -*-===//
//
// Token files are the llm.c format: a header of 256 int32 (magic 20240520,
// version 1, token count at [2], the rest zero) followed by `count` uint16
// tokens. Training step s of a global batch of B rows by T tokens reads B*T+1
// contiguous tokens at offset (s mod nb)*B*T, nb = (count-1)/(B*T); row r's
// inputs are tokens [off+r*T, off+r*T+T) and its targets the same shifted by
// one. Data-parallel rank d of D takes rows [d*B/D, (d+1)*B/D), so the union
// over ranks is exactly the single-rank batch.
//
// A data set larger than one file's int32 count (or split for convenience,
// as llm.c's fineweb_train_000001.bin ...) is a list of shards named by a
// glob pattern, read in sorted order as llm.c's dataloader does: the shards'
// batches follow one another (batch b of the set is batch b - first_i of the
// shard i holding it; no batch spans two shards), and a shuffled epoch
// orders every sequence of every shard.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_TOKEN_DATA_H
#define LOOM_RUNTIME_CORE_TOKEN_DATA_H

#include "runtime/core/status.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace loom {

/// Magic number in header[0] of an llm.c token file.
constexpr int32_t kTokenFileMagic = 20240520;
/// Version in header[1] of an llm.c token file (uint16 tokens).
constexpr int32_t kTokenFileVersion = 1;
/// Number of int32 entries in the header.
constexpr int64_t kTokenFileHeaderInts = 256;

/// Writes `tokens` as an llm.c token file at `path` (atomically: temporary
/// file, then rename). Errors when a token is outside [0, 65535] or the file
/// cannot be written.
Status writeTokenFile(const std::string &path,
                      const std::vector<int32_t> &tokens);

/// Configuration of a TokenDataLoader.
struct TokenDataConfig {
  /// Global batch size in rows (all data-parallel ranks together).
  int64_t batchSize = 0;
  /// Sequence length in tokens.
  int64_t seqLen = 0;
  /// Every token must be < vocabSize (the model's real vocabulary, not the
  /// padded one). 0 disables the check.
  int64_t vocabSize = 0;
  /// This rank's position on the data-parallel axis, and the axis size.
  int64_t dpRank = 0;
  int64_t dpSize = 1;
  /// --shuffle: row r of batch s is sequence perm_e(p mod ns) of the file,
  /// p = s * batchSize + r, e = p / ns, ns = (count - 1) / seqLen
  /// sequences of seqLen tokens (+1 for the last target) at multiples of
  /// seqLen, perm_e the SamplePermutation of epoch e under shuffleSeed:
  /// every sequence once per epoch, a new order each epoch.
  bool shuffle = false;
  uint64_t shuffleSeed = 0;
};

/// Reads batches of an llm.c token file for one data-parallel rank. Only the
/// rows this rank owns are read from disk, one batch at a time, so files larger
/// than memory are fine.
class TokenDataLoader {
public:
  /// Opens `path` -- one token file, or a glob pattern (`*`, `?`, `[...]`)
  /// naming shards, read in sorted order -- and validates every file's header
  /// against `config`. On error `out` is left empty and the Status names the
  /// file, the problem and a fix.
  static Status open(const std::string &path, const TokenDataConfig &config,
                     std::unique_ptr<TokenDataLoader> &out);

  ~TokenDataLoader();
  TokenDataLoader(const TokenDataLoader &) = delete;
  TokenDataLoader &operator=(const TokenDataLoader &) = delete;

  /// Number of tokens the headers declare, all shards together.
  int64_t tokenCount() const { return count; }
  /// Number of distinct global batches before the reader wraps around.
  int64_t numBatches() const { return batches; }
  /// Number of sequences a shuffled epoch orders: the sum over shards of
  /// (count - 1) / seqLen.
  int64_t numSequences() const { return sequences; }
  /// Number of files read (1 unless `path` was a pattern).
  int64_t numShards() const { return static_cast<int64_t>(shards.size()); }
  /// Rows this rank receives per batch (batchSize / dpSize).
  int64_t localRows() const { return cfg.batchSize / cfg.dpSize; }
  /// First global row owned by this rank.
  int64_t firstRow() const { return cfg.dpRank * localRows(); }

  /// Reads global batch `step` (taken modulo numBatches(); shuffled: the
  /// rows of TokenDataConfig::shuffle) and writes this rank's localRows() x
  /// seqLen inputs and targets (row-major int32).
  /// Errors on a read failure or a token >= vocabSize (naming its position).
  Status loadBatch(int64_t step, int32_t *inputs, int32_t *targets);

private:
  TokenDataLoader() = default;

  /// One file of the data set, and where its batches and sequences start
  /// among the set's.
  struct Shard {
    std::string path;
    std::FILE *file = nullptr;
    int64_t count = 0;
    int64_t firstBatch = 0;
    int64_t firstSequence = 0;
  };
  /// Opens and validates one file (header, size, one batch's tokens).
  static Status openShard(const std::string &path, const TokenDataConfig &cfg,
                          Shard &shard);
  /// The shard holding the set's batch `b` (sequence `s`), by its starts.
  const Shard &shardOfBatch(int64_t b) const;
  const Shard &shardOfSequence(int64_t s) const;

  std::string path;
  TokenDataConfig cfg;
  std::vector<Shard> shards;
  int64_t count = 0;
  int64_t batches = 0;
  int64_t sequences = 0;
  std::vector<uint16_t> buffer;
  /// Reads `n` tokens from token `first` of `shard` into buffer[0...] and
  /// checks them against the vocabulary.
  Status readTokens(const Shard &shard, int64_t first, int64_t n);
};

} // namespace loom

#endif // LOOM_RUNTIME_CORE_TOKEN_DATA_H
