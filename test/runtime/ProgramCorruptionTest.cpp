//===- ProgramCorruptionTest.cpp - Corrupt program files --------*- C++ -*-===//
//
// A corrupt program file must give an error Status, never a crash or a hang.
// Three kinds of damage to valid files:
//   1. truncations at many lengths (caught by the envelope),
//   2. single bit flips anywhere (caught by magic / version / size /
//      checksum),
//   3. every single bit flip of the payload with the checksum recomputed, so
//      the damage reaches the FlatBuffers verifier and the semantic checks;
//      variants that still verify must load cleanly, and a sample of them
//      initialize and run cleanly.
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"

#include "runtime/core/executor.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

using namespace loom;
using namespace loom::test;

namespace {

/// The valid programs the variants start from.
std::vector<std::string> validFiles() {
  std::vector<std::string> files;
  files.push_back(serialize(*miniGpt()));
  // Data movement and rank-0 buffers.
  auto p = emptyProgram(1, 4, 8);
  StageBuilder s(*p->stages[0]);
  const uint32_t a = s.buffer("a", {2, 3, 4});
  const uint32_t t = s.buffer("t", {4, 2, 3});
  const uint32_t sl = s.buffer("sl", {4, 1, 3});
  const uint32_t cat = s.buffer("cat", {4, 3, 3});
  const uint32_t cp = s.buffer("cp", {36});
  s.buffer("scalar", {});
  s.op(fb::Opcode::Transpose, "t", {a}, {t}).permutation = {2, 0, 1};
  auto &slice = s.op(fb::Opcode::Slice, "sl", {t}, {sl});
  slice.dim = 1;
  slice.offset = 1;
  s.op(fb::Opcode::Concat, "cat", {t, sl}, {cat}).dim = 1;
  s.op(fb::Opcode::Copy, "cp", {cat}, {cp});
  s.op(fb::Opcode::Softmax, "sm", {cp}, {cp});
  files.push_back(serialize(*p));
  return files;
}

/// Loads `bytes`; when it verifies and `run` is set, creates an executor,
/// fills the token buffers with valid ids and runs once. Returns the load
/// status (a run may fail too, e.g. a flipped vocab size rejects the targets,
/// but must not crash).
Status loadAndRun(const std::string &bytes, bool run, int *ran) {
  fb::LoadedProgram loaded;
  Status s = fb::loadProgramBytes(bytes, "corrupt.loom", loaded);
  if (!s.ok() || !run)
    return s;
  std::unique_ptr<Executor> ex;
  Status c = Executor::create(loaded, loaded.root()->stages()->Get(0)->index(),
                              1337, ex);
  if (!c.ok())
    return Status::success(); // e.g. an enormous arena: a clean error
  for (int32_t b : {ex->stage().tokens(), ex->stage().targets()}) {
    if (b < 0)
      continue;
    auto *ids = static_cast<int32_t *>(ex->bufferData(b));
    for (int64_t i = 0; i < ex->bufferNumel(b); ++i)
      ids[i] = static_cast<int32_t>(i % 7);
  }
  (void)ex->run();
  ++*ran;
  return Status::success();
}

TEST(ProgramCorruption, Truncations) {
  int variants = 0;
  for (const std::string &good : validFiles()) {
    std::vector<size_t> lengths = {0,  1,  4,  7,  8,  9,  12, 15, 16,
                                   20, 24, 31, 32, 33, 36, 40, 48, 64};
    for (size_t k = 1; k <= 24; ++k)
      lengths.push_back(good.size() * k / 25);
    lengths.push_back(good.size() - 8);
    lengths.push_back(good.size() - 1);
    for (size_t n : lengths) {
      if (n >= good.size())
        continue;
      fb::LoadedProgram loaded;
      Status s =
          fb::loadProgramBytes(good.substr(0, n), "truncated.loom", loaded);
      ASSERT_FALSE(s.ok()) << "length " << n;
      EXPECT_TRUE(s.message().find("truncated") != std::string::npos ||
                  s.message().find("not a Loom program") != std::string::npos)
          << s.message();
      ++variants;
    }
  }
  EXPECT_GE(variants, 60);
}

TEST(ProgramCorruption, BitFlipsFailTheEnvelope) {
  int variants = 0;
  for (const std::string &good : validFiles()) {
    // Every header bit, and 128 payload bits spread over the file.
    std::vector<size_t> bits;
    for (size_t b = 0; b < 32 * 8; ++b)
      bits.push_back(b);
    const size_t payloadBits = (good.size() - 32) * 8;
    for (size_t k = 0; k < 128; ++k)
      bits.push_back(32 * 8 + payloadBits * k / 128);
    for (size_t bit : bits) {
      std::string bad = good;
      bad[bit / 8] = static_cast<char>(bad[bit / 8] ^ (1 << (bit % 8)));
      fb::LoadedProgram loaded;
      Status s = fb::loadProgramBytes(bad, "flipped.loom", loaded);
      ASSERT_FALSE(s.ok()) << "bit " << bit;
      ++variants;
    }
  }
  EXPECT_GE(variants, 60);
}

TEST(ProgramCorruption, BitFlipsBehindTheChecksum) {
  int rejected = 0, malformed = 0, semantic = 0, loaded = 0, ran = 0;
  for (const std::string &good : validFiles()) {
    const std::string payload = good.substr(32);
    for (size_t bit = 0; bit < payload.size() * 8; ++bit) {
      std::string p = payload;
      p[bit / 8] = static_cast<char>(p[bit / 8] ^ (1 << (bit % 8)));
      const std::string bad = fb::encodeProgramFile(
          reinterpret_cast<const uint8_t *>(p.data()), p.size());
      // Every variant is loaded; every 64th that still verifies also runs
      // (running all of them would take a minute).
      Status s = loadAndRun(bad, false, &ran);
      if (s.ok()) {
        if (loaded++ % 64 == 0) {
          EXPECT_TRUE(loadAndRun(bad, true, &ran).ok());
        }
        continue;
      }
      ++rejected;
      if (s.message().find("malformed") != std::string::npos ||
          s.message().find("not a Loom program FlatBuffer") !=
              std::string::npos)
        ++malformed;
      else
        ++semantic;
    }
  }
  // Both layers behind the envelope see damage; the rest still verifies
  // (names, float values, padding) and ran without crashing.
  EXPECT_GE(rejected, 60);
  EXPECT_GT(malformed, 0);
  EXPECT_GT(semantic, 0);
  EXPECT_GT(loaded, 0);
  RecordProperty("rejected", rejected);
  RecordProperty("loaded_and_ran", ran);
  std::printf("[corruption] %d rejected (%d by the FlatBuffers verifier, %d "
              "by semantic checks), %d still valid (%d ran)\n",
              rejected, malformed, semantic, loaded, ran);
}

TEST(ProgramCorruption, TrainingProgramBitFlips) {
  // One bit per payload byte (rotating through the bit positions) of a
  // training program; every 32nd variant that still verifies runs a whole
  // training step: a verified program never crashes the executor.
  MiniGptTrainOptions o;
  o.microbatches = 2;
  const std::string payload = serialize(*miniGptTrain({}, o)).substr(32);
  int rejected = 0, loaded = 0, ran = 0;
  for (size_t byte = 0; byte < payload.size(); ++byte) {
    std::string p = payload;
    p[byte] = static_cast<char>(p[byte] ^ (1 << (byte % 8)));
    const std::string bad = fb::encodeProgramFile(
        reinterpret_cast<const uint8_t *>(p.data()), p.size());
    fb::LoadedProgram program;
    if (!fb::loadProgramBytes(bad, "flipped.loom", program).ok()) {
      ++rejected;
      continue;
    }
    if (loaded++ % 32 != 0)
      continue;
    std::unique_ptr<Executor> ex;
    if (!Executor::create(program, program.root()->stages()->Get(0)->index(),
                          1337, ex)
             .ok())
      continue;
    const auto &model = ex->model();
    std::vector<int32_t> ids(static_cast<size_t>(
        std::min<int64_t>(model.batch() * model.seq(), 1 << 20)));
    for (size_t k = 0; k < ids.size(); ++k)
      ids[k] = static_cast<int32_t>(k % 7);
    if (ex->isTraining() &&
        static_cast<int64_t>(ids.size()) == model.batch() * model.seq()) {
      TrainStepResult r;
      (void)ex->trainStep(ids.data(), ids.data(), 1, 1e-3f, r);
    } else {
      (void)ex->run();
    }
    ++ran;
  }
  EXPECT_GT(rejected, 100);
  EXPECT_GT(ran, 10);
  std::printf("[corruption] training program: %d rejected, %d still valid "
              "(%d ran)\n",
              rejected, loaded, ran);
}

TEST(ProgramCorruption, MixedPrecisionProgramBitFlips) {
  // A bf16 training program (bf16 tensors, fp32 masters, Cast): one bit in
  // every third payload byte; variants that still verify run a training
  // step. Flipped dtypes, master indices and Cast operands must be caught
  // by the verifier or run cleanly, never crash the staging.
  MiniGptTrainOptions o;
  o.microbatches = 2;
  auto p = miniGptTrain({}, o);
  makeMixedPrecision(*p);
  const std::string payload = serialize(*p).substr(32);
  int rejected = 0, loaded = 0, ran = 0;
  for (size_t byte = 0; byte < payload.size(); byte += 3) {
    std::string bad = payload;
    bad[byte] = static_cast<char>(bad[byte] ^ (1 << (byte % 8)));
    fb::LoadedProgram program;
    if (!fb::loadProgramBytes(
             fb::encodeProgramFile(
                 reinterpret_cast<const uint8_t *>(bad.data()), bad.size()),
             "flipped-bf16.loom", program)
             .ok()) {
      ++rejected;
      continue;
    }
    if (loaded++ % 16 != 0)
      continue;
    std::unique_ptr<Executor> ex;
    if (!Executor::create(program, program.root()->stages()->Get(0)->index(),
                          1337, ex)
             .ok())
      continue;
    const auto &model = ex->model();
    const int64_t n = model.batch() * model.seq();
    if (!ex->isTraining() || n > (1 << 20))
      continue;
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (size_t k = 0; k < ids.size(); ++k)
      ids[k] = static_cast<int32_t>(k % 7);
    TrainStepResult r;
    (void)ex->trainStep(ids.data(), ids.data(), 1, 1e-3f, r);
    ++ran;
  }
  EXPECT_GT(rejected, 50);
  EXPECT_GT(ran, 5);
  std::printf("[corruption] bf16 training program: %d rejected, %d still "
              "valid (%d ran)\n",
              rejected, loaded, ran);
}

} // namespace
