//===- ExecutorTest.cpp - Executor against the CPU kernels ------*- C++ -*-===//
//
// Runs hand-built programs through loadProgramBytes + Executor and compares
// with the same computation done directly with the reference kernels; also
// data movement, in-place operands, sliced parameter init and checkpoints.
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"
#include "TestUtil.h"

#include "runtime/core/checkpoint.h"
#include "runtime/core/executor.h"
#include "runtime/core/param_init.h"
#include "runtime/core/safetensors.h"
#include "runtime/cpu/attention.h"
#include "runtime/cpu/cross_entropy.h"
#include "runtime/cpu/elementwise.h"
#include "runtime/cpu/embedding.h"
#include "runtime/cpu/gelu.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/layernorm.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

using namespace loom;
using namespace loom::test;

namespace {

/// Loads `p` and creates an executor for stage 0.
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

/// Random token ids in [0, vocab) for the tokens and targets buffers.
void fillTokens(Executor &ex, int64_t vocab, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0,
                                              static_cast<int32_t>(vocab) - 1);
  for (int32_t b : {ex.stage().tokens(), ex.stage().targets()}) {
    auto *ids = static_cast<int32_t *>(ex.bufferData(b));
    for (int64_t i = 0; i < ex.bufferNumel(b); ++i)
      ids[i] = dist(gen);
  }
}

std::vector<float> bufferValues(const Executor &ex, uint32_t b) {
  const auto *p = static_cast<const float *>(ex.bufferData(b));
  return std::vector<float>(p, p + ex.bufferNumel(b));
}

/// A parameter's values initialized directly (not through the executor).
std::vector<float> initDirect(const fb::ParamT &param, uint64_t seed) {
  ParamInitializer init;
  init.kind = param.init == fb::InitKind::Zeros ? ParamInitializer::Kind::Zeros
              : param.init == fb::InitKind::Ones
                  ? ParamInitializer::Kind::Ones
                  : ParamInitializer::Kind::Normal;
  init.std = static_cast<float>(param.init_std);
  int64_t n = 1;
  for (int64_t d : param.global_shape)
    n *= d;
  std::vector<float> out(n);
  EXPECT_TRUE(initParamSlice(out.data(), param.name, seed, init,
                             param.global_shape, param.slice_offset,
                             param.global_shape)
                  .ok());
  return out;
}

//===----------------------------------------------------------------------===//
// The mini GPT against the reference kernels
//===----------------------------------------------------------------------===//

TEST(Executor, MiniGptMatchesReferenceKernels) {
  const MiniGptDims d;
  auto p = miniGpt(d);
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*p, loaded, 1337);
  ASSERT_TRUE(ex);
  fillTokens(*ex, d.V, 5);
  Status s = ex->run();
  ASSERT_TRUE(s.ok()) << s.toString();
  float loss = 0;
  ASSERT_TRUE(ex->readLoss(loss).ok());

  // Parameters: the executor's values equal a direct init of each.
  std::map<std::string, std::vector<float>> w;
  for (const auto &param : p->stages[0]->params) {
    w[param->name] = initDirect(*param, 1337);
    ASSERT_EQ(bufferValues(*ex, param->buffer), w[param->name]) << param->name;
  }

  // The same forward with the reference kernels.
  const int64_t B = d.B, T = d.T, C = d.C, N = B * T;
  const auto *ids =
      static_cast<const int32_t *>(ex->bufferData(ex->stage().tokens()));
  const auto *tgt =
      static_cast<const int32_t *>(ex->bufferData(ex->stage().targets()));
  std::vector<float> emb(N * C), x(N * C), ln1(N * C), mean(N), rstd(N),
      qkv(N * 3 * C), att(N * C), probs(B * d.NH * T * T), proj(N * C),
      h1(N * C), ln2(N * C), fc(N * 4 * C), gl(N * 4 * C), mp(N * C), h2(N * C),
      lnf(N * C), logits(N * d.Vp);
  ASSERT_TRUE(cpu::embeddingForwardReference(emb.data(), ids,
                                             w["wte.weight"].data(), N, d.Vp, C)
                  .ok());
  cpu::addBroadcastReference(x.data(), emb.data(), w["wpe.weight"].data(), B,
                             T * C);
  cpu::layernormForwardReference(ln1.data(), mean.data(), rstd.data(), x.data(),
                                 w["h.0.ln_1.weight"].data(),
                                 w["h.0.ln_1.bias"].data(), N, C, 1e-5f);
  cpu::linearForwardReference(qkv.data(), ln1.data(),
                              w["h.0.attn.c_attn.weight"].data(),
                              w["h.0.attn.c_attn.bias"].data(), N, C, 3 * C);
  cpu::attentionForwardReference(att.data(), probs.data(), qkv.data(), B, T, C,
                                 d.NH);
  cpu::linearForwardReference(proj.data(), att.data(),
                              w["h.0.attn.c_proj.weight"].data(),
                              w["h.0.attn.c_proj.bias"].data(), N, C, C);
  for (int64_t i = 0; i < N * C; ++i)
    h1[i] = x[i] + proj[i];
  cpu::layernormForwardReference(ln2.data(), mean.data(), rstd.data(),
                                 h1.data(), w["h.0.ln_2.weight"].data(),
                                 w["h.0.ln_2.bias"].data(), N, C, 1e-5f);
  cpu::linearForwardReference(fc.data(), ln2.data(),
                              w["h.0.mlp.c_fc.weight"].data(),
                              w["h.0.mlp.c_fc.bias"].data(), N, C, 4 * C);
  cpu::geluForwardReference(gl.data(), fc.data(), N * 4 * C);
  cpu::linearForwardReference(mp.data(), gl.data(),
                              w["h.0.mlp.c_proj.weight"].data(),
                              w["h.0.mlp.c_proj.bias"].data(), N, 4 * C, C);
  for (int64_t i = 0; i < N * C; ++i)
    h2[i] = h1[i] + mp[i];
  cpu::layernormForwardReference(lnf.data(), mean.data(), rstd.data(),
                                 h2.data(), w["ln_f.weight"].data(),
                                 w["ln_f.bias"].data(), N, C, 1e-5f);
  cpu::gemmReference(false, true, N, d.Vp, C, 1.0f, lnf.data(), C,
                     w["wte.weight"].data(), C, 0.0f, logits.data(), d.Vp);
  float refLoss = 0;
  std::vector<float> refLosses(N);
  ASSERT_TRUE(cpu::crossEntropyForwardReference(
                  &refLoss, refLosses.data(), logits.data(), tgt, N, d.Vp, d.V)
                  .ok());

  const auto &ins = p->stages[0]->instructions;
  // The attention's output (its scratch holds no probabilities: the CPU
  // kernels keep them one row block at a time).
  expectClose(bufferValues(*ex, ins[4]->outputs[0]), att, 1e-4, 1e-6,
              "attention output");
  expectClose(bufferValues(*ex, ins[13]->outputs[0]), logits, 1e-4, 1e-5,
              "logits");
  expectClose(bufferValues(*ex, ins[14]->scratch[0]), refLosses, 1e-5, 1e-6,
              "per-token losses");
  EXPECT_NEAR(loss, refLoss, 1e-5 * std::fabs(refLoss)) << "mean loss";
  EXPECT_GT(loss, 1.0f); // a random model: about log(50) ~ 3.9

  // Deterministic: a second run gives the identical loss.
  ASSERT_TRUE(ex->run().ok());
  float again = 0;
  ASSERT_TRUE(ex->readLoss(again).ok());
  EXPECT_EQ(again, loss);
  // ln_2 and ln_f have no planned scratch: mean and rstd come from the
  // runtime's workspace (2 x 16 floats); everything else is in the arena.
  EXPECT_EQ(ex->peakTensorBytes(), ex->arenaBytes() + 2 * 16 * sizeof(float));
}

TEST(Executor, UnplannedScratchUsesWorkspace) {
  auto planned = miniGpt();
  auto unplanned = miniGpt();
  for (auto &ins : unplanned->stages[0]->instructions)
    ins->scratch.clear();
  fb::LoadedProgram l1, l2;
  auto a = makeExecutor(*planned, l1), b = makeExecutor(*unplanned, l2);
  ASSERT_TRUE(a && b);
  fillTokens(*a, 50, 9);
  fillTokens(*b, 50, 9);
  ASSERT_TRUE(a->run().ok());
  ASSERT_TRUE(b->run().ok());
  float la = 0, lb = 0;
  ASSERT_TRUE(a->readLoss(la).ok());
  ASSERT_TRUE(b->readLoss(lb).ok());
  EXPECT_EQ(la, lb);
  EXPECT_GT(b->peakTensorBytes(), b->arenaBytes());
}

TEST(Executor, TimingsAndKernelErrors) {
  auto p = miniGpt();
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*p, loaded);
  ASSERT_TRUE(ex);
  fillTokens(*ex, 50, 1);
  std::vector<InstructionTiming> timings;
  ASSERT_TRUE(ex->run(&timings).ok());
  ASSERT_EQ(timings.size(), 15u);
  for (size_t i = 0; i < timings.size(); ++i) {
    EXPECT_EQ(timings[i].index, i);
    EXPECT_LE(timings[i].startNs, timings[i].endNs);
  }
  // A token id beyond the (padded) table: the embedding kernel's error,
  // named after the instruction.
  static_cast<int32_t *>(ex->bufferData(ex->stage().tokens()))[3] = 64;
  Status s = ex->run();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("instruction #0 'wte' (Embedding)"),
            std::string::npos)
      << s.message();
  // A target in the vocabulary padding.
  static_cast<int32_t *>(ex->bufferData(ex->stage().tokens()))[3] = 1;
  static_cast<int32_t *>(ex->bufferData(ex->stage().targets()))[0] = 55;
  s = ex->run();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'loss' (CrossEntropy)"), std::string::npos)
      << s.message();
}

TEST(Executor, MissingStageAndLoss) {
  auto p = emptyProgram(1, 1, 4);
  StageBuilder s(*p->stages[0]);
  s.buffer("a", {4});
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*p, loaded);
  ASSERT_TRUE(ex);
  EXPECT_TRUE(ex->run().ok());
  float loss;
  EXPECT_NE(ex->readLoss(loss).message().find("no loss buffer"),
            std::string::npos);
  std::unique_ptr<Executor> other;
  Status st = Executor::create(loaded, 3, 1, other);
  EXPECT_NE(st.message().find("has no stage 3 (stages: 0)"), std::string::npos)
      << st.message();
}

//===----------------------------------------------------------------------===//
// Data movement and in-place operands
//===----------------------------------------------------------------------===//

TEST(Executor, MovementOps) {
  auto p = emptyProgram(1, 1, 4);
  StageBuilder s(*p->stages[0]);
  const uint32_t a = s.buffer("a", {2, 3, 4});
  const uint32_t t = s.buffer("t", {4, 2, 3});
  const uint32_t sl = s.buffer("sl", {4, 1, 3});
  const uint32_t cat = s.buffer("cat", {4, 3, 3});
  const uint32_t cp = s.buffer("cp", {36});
  const uint32_t ia = s.buffer("ia", {2, 3}, fb::DType::I32);
  const uint32_t it = s.buffer("it", {3, 2}, fb::DType::I32);
  s.op(fb::Opcode::Transpose, "t", {a}, {t}).permutation = {2, 0, 1};
  auto &slice = s.op(fb::Opcode::Slice, "sl", {t}, {sl});
  slice.dim = 1;
  slice.offset = 1;
  s.op(fb::Opcode::Concat, "cat", {t, sl}, {cat}).dim = 1;
  s.op(fb::Opcode::Copy, "cp", {cat}, {cp});
  s.op(fb::Opcode::Transpose, "it", {ia}, {it}).permutation = {1, 0};
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*p, loaded);
  ASSERT_TRUE(ex);
  auto *av = static_cast<float *>(ex->bufferData(a));
  for (int i = 0; i < 24; ++i)
    av[i] = static_cast<float>(i);
  auto *iav = static_cast<int32_t *>(ex->bufferData(ia));
  for (int i = 0; i < 6; ++i)
    iav[i] = 100 + i;
  ASSERT_TRUE(ex->run().ok());

  std::vector<float> tv = bufferValues(*ex, t), sv = bufferValues(*ex, sl),
                     cv = bufferValues(*ex, cat), pv = bufferValues(*ex, cp);
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 3; ++j) {
        const float want = av[(i * 3 + j) * 4 + k]; // t[k,i,j] = a[i,j,k]
        ASSERT_EQ(tv[(k * 2 + i) * 3 + j], want);
        ASSERT_EQ(cv[(k * 3 + i) * 3 + j], want);
        if (i == 1) {
          ASSERT_EQ(sv[k * 3 + j], want);
          ASSERT_EQ(cv[(k * 3 + 2) * 3 + j], want);
        }
      }
  EXPECT_EQ(pv, cv);
  const auto *itv = static_cast<const int32_t *>(ex->bufferData(it));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(itv[j * 2 + i], iav[i * 3 + j]);
}

TEST(Executor, LocalSliceOnOneRankCopies) {
  // Mesh x=1: the group has one member, so the local block is all of x (any
  // dtype), and nothing is communicated or counted.
  for (int64_t dim : {0, 1}) {
    auto p = emptyProgram(1, 1, 4);
    auto axis = std::make_unique<fb::MeshAxisT>();
    axis->name = "x";
    axis->size = 1;
    p->mesh.push_back(std::move(axis));
    StageBuilder s(*p->stages[0]);
    const uint32_t a = s.buffer("a", {2, 3});
    const uint32_t b = s.buffer("b", {2, 3});
    const uint32_t ia = s.buffer("ia", {3, 2}, fb::DType::I32);
    const uint32_t ib = s.buffer("ib", {3, 2}, fb::DType::I32);
    auto &f = s.op(fb::Opcode::LocalSlice, "ls", {a}, {b});
    f.axes = {0};
    f.dim = dim;
    auto &i = s.op(fb::Opcode::LocalSlice, "ils", {ia}, {ib});
    i.axes = {0};
    i.dim = dim;
    fb::LoadedProgram loaded;
    auto ex = makeExecutor(*p, loaded);
    ASSERT_TRUE(ex);
    auto *av = static_cast<float *>(ex->bufferData(a));
    auto *iav = static_cast<int32_t *>(ex->bufferData(ia));
    for (int k = 0; k < 6; ++k) {
      av[k] = 0.5f * static_cast<float>(k);
      iav[k] = 100 + k;
    }
    ASSERT_TRUE(ex->run().ok());
    EXPECT_EQ(bufferValues(*ex, b), bufferValues(*ex, a));
    const auto *ibv = static_cast<const int32_t *>(ex->bufferData(ib));
    for (int k = 0; k < 6; ++k)
      EXPECT_EQ(ibv[k], 100 + k);
    for (int64_t bytes : ex->communicator().stats().sentBytes)
      EXPECT_EQ(bytes, 0);
    for (int64_t calls : ex->communicator().stats().calls)
      EXPECT_EQ(calls, 0);
  }
}

TEST(Executor, InPlaceOperands) {
  // y = gelu(linear(x)) + b with outputs written over their inputs, versus
  // the same program with separate buffers.
  auto build = [](bool inPlace) {
    auto p = emptyProgram(1, 1, 4);
    StageBuilder s(*p->stages[0]);
    const uint32_t w = s.param("w", {8, 8});
    const uint32_t bias = s.param("b", {8});
    const uint32_t x = s.buffer("x", {4, 8});
    const uint32_t y = s.buffer("y", {4, 8});
    const uint32_t z = s.buffer("z", {4, 8});
    const uint32_t r = s.buffer("r", {4, 8});
    if (inPlace)
      for (uint32_t b : {y, z, r})
        p->stages[0]->buffers[b]->offset = p->stages[0]->buffers[x]->offset;
    s.op(fb::Opcode::Linear, "lin", {x, w}, {y}); // staged
    s.op(fb::Opcode::Gelu, "gelu", {y}, {z});     // exact alias
    s.op(fb::Opcode::Add, "add", {z, bias}, {r}); // alias of lhs
    return p;
  };
  std::vector<std::vector<float>> results;
  std::vector<uint64_t> peaks;
  for (bool inPlace : {false, true}) {
    auto p = build(inPlace);
    fb::LoadedProgram loaded;
    auto ex = makeExecutor(*p, loaded, 3);
    ASSERT_TRUE(ex);
    auto *x = static_cast<float *>(ex->bufferData(2));
    std::vector<float> xs = randomVector(32, 11);
    std::memcpy(x, xs.data(), 32 * sizeof(float));
    ASSERT_TRUE(ex->run().ok());
    results.push_back(bufferValues(*ex, 5));
    peaks.push_back(ex->peakTensorBytes() - ex->arenaBytes());
  }
  EXPECT_EQ(results[0], results[1]);
  EXPECT_EQ(peaks[0], 0u);
  EXPECT_GE(peaks[1], 32 * sizeof(float)); // the staged linear output
}

//===----------------------------------------------------------------------===//
// Parameters: sliced init and checkpoints
//===----------------------------------------------------------------------===//

TEST(Executor, SlicedParamInitEqualsRegionOfFullParam) {
  const std::vector<int64_t> global = {6, 10};
  auto full = emptyProgram(1, 1, 4);
  StageBuilder fs(*full->stages[0]);
  fs.param("h.0.mlp.c_fc.weight", global, fb::InitKind::Normal, 0.02);
  auto part = emptyProgram(1, 1, 4);
  StageBuilder ps(*part->stages[0]);
  ps.slicedParam("h.0.mlp.c_fc.weight", global, {2, 3}, {3, 5},
                 fb::InitKind::Normal, 0.02);
  fb::LoadedProgram lf, lp;
  auto ef = makeExecutor(*full, lf, 77), ep = makeExecutor(*part, lp, 77);
  ASSERT_TRUE(ef && ep);
  std::vector<float> fv = bufferValues(*ef, 0), pv = bufferValues(*ep, 0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j)
      ASSERT_EQ(pv[i * 5 + j], fv[(2 + i) * 10 + 3 + j]) << i << "," << j;
  EXPECT_NE(fv[0], 0.0f);

  // Loading a full checkpoint into the sliced program copies the region.
  const std::string path = ::testing::TempDir() + "/sliced.safetensors";
  ASSERT_TRUE(saveCheckpoint(*ef, path).ok());
  auto other = makeExecutor(*part, lp, 5); // different seed
  ASSERT_TRUE(other);
  ASSERT_NE(bufferValues(*other, 0), pv);
  Status s = loadCheckpoint(*other, path);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(bufferValues(*other, 0), pv);
  // Saving a sliced parameter from one rank is refused.
  s = saveCheckpoint(*other, path + ".2");
  EXPECT_NE(s.message().find("is sliced"), std::string::npos) << s.message();
  std::remove(path.c_str());
}

TEST(Executor, PaddedParamRows) {
  // A vocabulary padded from 5 to 8 rows (Param.unpadded_rows): the real
  // rows get the unpadded tensor's init values, the padding rows zero; the
  // checkpoint holds the 5 real rows, and loading it refills the padding
  // with zeros.
  auto unpadded = emptyProgram(1, 1, 4);
  StageBuilder us(*unpadded->stages[0]);
  us.param("wte.weight", {5, 4}, fb::InitKind::Normal, 0.02);
  auto padded = emptyProgram(1, 1, 4);
  StageBuilder ps(*padded->stages[0]);
  ps.param("wte.weight", {8, 4}, fb::InitKind::Normal, 0.02);
  padded->stages[0]->params[0]->unpadded_rows = 5;
  fb::LoadedProgram lu, lp;
  auto eu = makeExecutor(*unpadded, lu, 9), ep = makeExecutor(*padded, lp, 9);
  ASSERT_TRUE(eu && ep);
  std::vector<float> uv = bufferValues(*eu, 0), pv = bufferValues(*ep, 0);
  for (int i = 0; i < 8 * 4; ++i)
    ASSERT_EQ(pv[i], i < 5 * 4 ? uv[i] : 0.0f) << i;

  const std::string path = ::testing::TempDir() + "/padded.safetensors";
  ASSERT_TRUE(saveCheckpoint(*ep, path).ok());
  SafetensorsFile file;
  ASSERT_TRUE(readSafetensors(path, file).ok());
  ASSERT_TRUE(file.find("wte.weight"));
  EXPECT_EQ(file.find("wte.weight")->shape, (std::vector<int64_t>{5, 4}));
  // The unpadded program reads it as its own.
  auto other = makeExecutor(*unpadded, lu, 3);
  ASSERT_TRUE(other);
  ASSERT_TRUE(loadCheckpoint(*other, path).ok());
  EXPECT_EQ(bufferValues(*other, 0), uv);
  // The padded program loads it back with zero padding rows, even where
  // they held something else.
  auto back = makeExecutor(*padded, lp, 3);
  ASSERT_TRUE(back);
  std::fill_n(static_cast<float *>(back->bufferData(0)), 8 * 4, 7.0f);
  Status s = loadCheckpoint(*back, path);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(bufferValues(*back, 0), pv);
  // A tensor with the padded shape is refused: checkpoints hold real rows.
  SafetensorsFile paddedFile = file;
  paddedFile.tensors[0].shape = {8, 4};
  paddedFile.tensors[0].data.resize(8 * 4 * sizeof(float));
  ASSERT_TRUE(writeSafetensors(path, paddedFile).ok());
  s = loadCheckpoint(*back, path);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("has shape [8, 4] but the program expects [5, 4] "
                             "(its real rows; the program pads them to [8, "
                             "4])"),
            std::string::npos)
      << s.message();
  std::remove(path.c_str());
}

TEST(Executor, CheckpointRoundTrip) {
  auto p = miniGpt();
  fb::LoadedProgram l1, l2;
  auto a = makeExecutor(*p, l1, 1), b = makeExecutor(*p, l2, 2);
  ASSERT_TRUE(a && b);
  fillTokens(*a, 50, 4);
  fillTokens(*b, 50, 4);
  const std::string path = ::testing::TempDir() + "/mini.safetensors";
  ASSERT_TRUE(saveCheckpoint(*a, path).ok());

  SafetensorsFile file;
  ASSERT_TRUE(readSafetensors(path, file).ok());
  EXPECT_EQ(file.tensors.size(), p->stages[0]->params.size());
  EXPECT_EQ(file.metadata["format"], "pt");
  EXPECT_EQ(file.metadata["producer"], "loom");
  ASSERT_TRUE(file.find("h.0.attn.c_attn.weight"));
  EXPECT_EQ(file.find("h.0.attn.c_attn.weight")->shape,
            (std::vector<int64_t>{16, 48}));

  ASSERT_TRUE(a->run().ok());
  ASSERT_TRUE(b->run().ok());
  float la, lb;
  ASSERT_TRUE(a->readLoss(la).ok());
  ASSERT_TRUE(b->readLoss(lb).ok());
  EXPECT_NE(la, lb);
  Status s = loadCheckpoint(*b, path);
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_TRUE(b->run().ok());
  ASSERT_TRUE(b->readLoss(lb).ok());
  EXPECT_EQ(la, lb);

  // Missing tensor / wrong shape name the tensor.
  SafetensorsFile partial = file;
  partial.tensors.erase(partial.tensors.begin());
  const std::string bad = ::testing::TempDir() + "/bad.safetensors";
  ASSERT_TRUE(writeSafetensors(bad, partial).ok());
  s = loadCheckpoint(*b, bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("has no tensor '" + file.tensors[0].name + "'"),
            std::string::npos)
      << s.message();
  SafetensorsFile reshaped = file;
  for (auto &t : reshaped.tensors)
    if (t.name == "wpe.weight")
      t.shape = {16, 8};
  ASSERT_TRUE(writeSafetensors(bad, reshaped).ok());
  s = loadCheckpoint(*b, bad);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("'wpe.weight' has shape [16, 8] but the program "
                             "expects [8, 16]"),
            std::string::npos)
      << s.message();
  EXPECT_FALSE(loadCheckpoint(*b, "/nonexistent.safetensors").ok());

  // ParamStart::Loaded skips the init (every parameter is zero) for a
  // checkpoint to fill: then the same loss as the seeded executor that saved.
  fb::LoadedProgram l3;
  ASSERT_TRUE(fb::loadProgramBytes(serialize(*p), "test.loom", l3).ok());
  std::unique_ptr<Executor> c;
  ASSERT_TRUE(Executor::create(l3, 0, 1, c, nullptr, nullptr, nullptr,
                               Executor::ParamStart::Loaded)
                  .ok());
  for (const ParamView &v : c->params()) {
    const auto *w = static_cast<const float *>(c->bufferData(v.buffer));
    for (int64_t i = 0; i < c->bufferNumel(v.buffer); ++i)
      ASSERT_EQ(w[i], 0.0f) << v.name;
  }
  fillTokens(*c, 50, 4);
  ASSERT_TRUE(loadCheckpoint(*c, path).ok());
  float lc;
  ASSERT_TRUE(c->run().ok());
  ASSERT_TRUE(c->readLoss(lc).ok());
  EXPECT_EQ(lc, la);
  std::remove(path.c_str());
  std::remove(bad.c_str());
}

} // namespace
