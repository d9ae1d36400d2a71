//===- token_data.cpp - llm.c token file reader and writer ------*- C++ -*-===//
//
// The header is validated once at open; tokens are validated as they are read
// so that a multi-gigabyte file does not have to be scanned before step 0.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/token_data.h"

#include "runtime/core/sample_permutation.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <glob.h>
#include <unistd.h>

namespace loom {

namespace {

/// Writes little-endian bytes; the llm.c format is defined on little-endian
/// hosts, which every supported target is.
bool writeAll(std::FILE *f, const void *data, size_t bytes) {
  return std::fwrite(data, 1, bytes, f) == bytes;
}

bool isPattern(const std::string &path) {
  return path.find_first_of("*?[") != std::string::npos;
}

/// The files `pattern` names, sorted (glob(3)'s order); a plain path is
/// itself, so that opening it reports a missing file.
Status expandShards(const std::string &pattern,
                    std::vector<std::string> &paths) {
  paths.clear();
  if (!isPattern(pattern)) {
    paths.push_back(pattern);
    return Status::success();
  }
  glob_t found{};
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &found);
  for (size_t i = 0; rc == 0 && i < found.gl_pathc; ++i)
    paths.emplace_back(found.gl_pathv[i]);
  ::globfree(&found);
  LOOM_CHECK(rc != GLOB_NOMATCH,
             "no token file matches '"
                 << pattern
                 << "'; check the directory and the pattern (quote it so "
                    "that the shell does not expand it first)");
  LOOM_CHECK(rc == 0, "cannot list the token files matching '"
                          << pattern << "' (a directory on the way cannot be "
                          << "read, or memory ran out)");
  return Status::success();
}

} // namespace

Status writeTokenFile(const std::string &path,
                      const std::vector<int32_t> &tokens) {
  std::vector<uint16_t> packed(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    LOOM_CHECK(tokens[i] >= 0 && tokens[i] <= 65535,
               "cannot write token file '"
                   << path << "': token " << tokens[i] << " at position " << i
                   << " does not fit in uint16 (llm.c format version 1 stores "
                      "tokens as uint16; use a vocabulary below 65536)");
    packed[i] = static_cast<uint16_t>(tokens[i]);
  }
  LOOM_CHECK(tokens.size() <= static_cast<size_t>(INT32_MAX),
             "cannot write token file '"
                 << path << "': " << tokens.size()
                 << " tokens exceed the int32 count field; split the data");
  int32_t header[kTokenFileHeaderInts] = {};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());

  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE *f = std::fopen(tmp.c_str(), "wb");
  LOOM_CHECK(f, "cannot create '" << tmp << "': " << std::strerror(errno)
                                  << "; check that the directory exists and "
                                     "is writable");
  bool ok = writeAll(f, header, sizeof(header)) &&
            writeAll(f, packed.data(), packed.size() * sizeof(uint16_t));
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    LOOM_ERROR("cannot write '" << tmp << "' (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    LOOM_ERROR("cannot rename '" << tmp << "' to '" << path
                                 << "': " << std::strerror(err));
  }
  return Status::success();
}

Status TokenDataLoader::openShard(const std::string &path,
                                  const TokenDataConfig &config, Shard &shard) {
  const int64_t B = config.batchSize, T = config.seqLen;
  shard.path = path;
  shard.file = std::fopen(path.c_str(), "rb");
  LOOM_CHECK(shard.file, "cannot open token file '"
                             << path << "': " << std::strerror(errno)
                             << "; pass an existing llm.c .bin file "
                                "(e.g. produced by a tokenizer script)");

  // 1. Header.
  int32_t header[kTokenFileHeaderInts];
  size_t got =
      std::fread(header, sizeof(int32_t), kTokenFileHeaderInts, shard.file);
  LOOM_CHECK(got == static_cast<size_t>(kTokenFileHeaderInts),
             "token file '" << path << "' is too short for its header: "
                            << got * sizeof(int32_t) << " of "
                            << kTokenFileHeaderInts * sizeof(int32_t)
                            << " bytes; the file is truncated or not an llm.c "
                               "token file");
  LOOM_CHECK(header[0] == kTokenFileMagic,
             "token file '" << path << "' has bad magic " << header[0]
                            << " (expected " << kTokenFileMagic
                            << "); it is not an llm.c token file, or was "
                               "written in a different format");
  LOOM_CHECK(header[1] == kTokenFileVersion,
             "token file '" << path << "' has version " << header[1]
                            << ", but only version " << kTokenFileVersion
                            << " (uint16 tokens) is supported; re-export the "
                               "data with version 1");
  const int64_t count = header[2];
  LOOM_CHECK(count >= 0, "token file '" << path << "' declares a negative "
                                        << "token count " << count);

  // 2. Declared count vs actual size.
  LOOM_CHECK(std::fseek(shard.file, 0, SEEK_END) == 0,
             "cannot seek in token file '" << path << "'");
  long fileBytes = std::ftell(shard.file);
  const int64_t headerBytes = kTokenFileHeaderInts * sizeof(int32_t);
  const int64_t available = (fileBytes - headerBytes) / 2;
  LOOM_CHECK(count <= available,
             "token file '" << path << "' declares " << count
                            << " tokens but holds only " << available
                            << "; the file is truncated (re-create it)");

  // 3. Enough tokens for one global batch (inputs plus the shifted target);
  //    every shard, as llm.c asks, so that no shard is silently skipped.
  LOOM_CHECK(count - 1 >= B * T,
             "token file '" << path << "' has " << count
                            << " tokens, too few for one batch of " << B
                            << " x " << T << " (needs " << B * T + 1
                            << "); use a smaller batch or sequence length, "
                               "or more data");
  shard.count = count;
  return Status::success();
}

Status TokenDataLoader::open(const std::string &path,
                             const TokenDataConfig &config,
                             std::unique_ptr<TokenDataLoader> &out) {
  out.reset();
  const int64_t B = config.batchSize, T = config.seqLen;
  const int64_t D = config.dpSize;
  LOOM_CHECK(B > 0 && T > 0, "token data '" << path << "': batch size (" << B
                                            << ") and sequence length (" << T
                                            << ") must be positive");
  LOOM_CHECK(D > 0 && config.dpRank >= 0 && config.dpRank < D,
             "token data '" << path << "': data-parallel rank " << config.dpRank
                            << " is not in [0, " << D << ")");
  LOOM_CHECK(B % D == 0, "token data '"
                             << path << "': batch size " << B
                             << " is not divisible by the data-parallel size "
                             << D << "; choose a batch size that is a multiple "
                             << "of " << D);
  LOOM_CHECK(config.vocabSize >= 0,
             "token data '" << path << "': negative vocab size");

  std::vector<std::string> paths;
  LOOM_RETURN_IF_ERROR(expandShards(path, paths));
  std::unique_ptr<TokenDataLoader> loader(new TokenDataLoader());
  loader->path = path;
  loader->cfg = config;
  loader->shards.resize(paths.size());
  for (size_t i = 0; i < paths.size(); ++i) {
    Shard &shard = loader->shards[i];
    LOOM_RETURN_IF_ERROR(openShard(paths[i], config, shard));
    shard.firstBatch = loader->batches;
    shard.firstSequence = loader->sequences;
    loader->count += shard.count;
    loader->batches += (shard.count - 1) / (B * T);
    loader->sequences += (shard.count - 1) / T;
  }
  loader->buffer.resize(static_cast<size_t>(loader->localRows() * T + 1));
  out = std::move(loader);
  return Status::success();
}

TokenDataLoader::~TokenDataLoader() {
  for (Shard &shard : shards)
    if (shard.file)
      std::fclose(shard.file);
}

const TokenDataLoader::Shard &TokenDataLoader::shardOfBatch(int64_t b) const {
  auto next = std::upper_bound(
      shards.begin(), shards.end(), b,
      [](int64_t v, const Shard &shard) { return v < shard.firstBatch; });
  return *(next - 1);
}

const TokenDataLoader::Shard &
TokenDataLoader::shardOfSequence(int64_t s) const {
  auto next = std::upper_bound(
      shards.begin(), shards.end(), s,
      [](int64_t v, const Shard &shard) { return v < shard.firstSequence; });
  return *(next - 1);
}

Status TokenDataLoader::readTokens(const Shard &shard, int64_t first,
                                   int64_t n) {
  const int64_t headerBytes = kTokenFileHeaderInts * sizeof(int32_t);
  LOOM_CHECK(std::fseek(shard.file, static_cast<long>(headerBytes + first * 2),
                        SEEK_SET) == 0,
             "cannot seek to token " << first << " in '" << shard.path << "'");
  uint16_t *to = buffer.data();
  size_t got =
      std::fread(to, sizeof(uint16_t), static_cast<size_t>(n), shard.file);
  LOOM_CHECK(got == static_cast<size_t>(n),
             "short read in token file '"
                 << shard.path << "': wanted " << n << " tokens at position "
                 << first << ", got " << got << "; was the file modified while "
                 << "training?");
  if (cfg.vocabSize > 0) {
    for (int64_t i = 0; i < n; ++i)
      LOOM_CHECK(to[i] < cfg.vocabSize,
                 "token file '" << shard.path << "': token id " << to[i]
                                << " at position " << first + i
                                << " is >= vocab_size " << cfg.vocabSize
                                << "; the data was tokenized for a different "
                                   "vocabulary (check the tokenizer / model "
                                   "config)");
  }
  return Status::success();
}

Status TokenDataLoader::loadBatch(int64_t step, int32_t *inputs,
                                  int32_t *targets) {
  LOOM_CHECK(step >= 0, "token data '" << path << "': negative step " << step);
  const int64_t T = cfg.seqLen;
  const int64_t rows = localRows();
  if (!cfg.shuffle) {
    // This rank's rows are contiguous in the batch's shard, plus one token
    // for the last target.
    const int64_t batch = step % batches;
    const Shard &shard = shardOfBatch(batch);
    const int64_t batchOffset = (batch - shard.firstBatch) * cfg.batchSize * T;
    LOOM_RETURN_IF_ERROR(
        readTokens(shard, batchOffset + firstRow() * T, rows * T + 1));
    for (int64_t i = 0; i < rows * T; ++i) {
      inputs[i] = buffer[i];
      targets[i] = buffer[i + 1];
    }
    return Status::success();
  }
  // Shuffled: each row is a sequence of its own (T + 1 tokens), in the
  // order of its epoch's permutation of all shards' sequences; the
  // permutation is rebuilt only when a batch crosses into the next epoch.
  int64_t epoch = -1;
  SamplePermutation perm(sequences, cfg.shuffleSeed, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t position = step * cfg.batchSize + firstRow() + r;
    if (position / sequences != epoch) {
      epoch = position / sequences;
      perm = SamplePermutation(sequences, cfg.shuffleSeed, epoch);
    }
    const int64_t sequence = perm(position % sequences);
    const Shard &shard = shardOfSequence(sequence);
    LOOM_RETURN_IF_ERROR(
        readTokens(shard, (sequence - shard.firstSequence) * T, T + 1));
    for (int64_t t = 0; t < T; ++t) {
      inputs[r * T + t] = buffer[t];
      targets[r * T + t] = buffer[t + 1];
    }
  }
  return Status::success();
}

} // namespace loom
