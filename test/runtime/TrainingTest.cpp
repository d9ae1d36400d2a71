//===- TrainingTest.cpp - Gradient opcodes and training steps ---*- C++ -*-===//
//
// The training half of the program contract through the executor: every
// gradient opcode of miniGptTrain() against the reference kernels, the whole
// backward against central differences of the loss, micro-batching against a
// single batch, SumSquares + ClipCoef + AdamW against hand-computed and
// reference values, the opcodes GPT-2 does not use (SoftmaxGrad, SliceGrad,
// Fill) on a small program, in-place and staged aliasing, and the
// learning-rate schedule.
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"
#include "TestUtil.h"

#include "runtime/core/executor.h"
#include "runtime/core/lr_schedule.h"
#include "runtime/core/param_init.h"
#include "runtime/cpu/adamw.h"
#include "runtime/cpu/attention.h"
#include "runtime/cpu/cross_entropy.h"
#include "runtime/cpu/elementwise.h"
#include "runtime/cpu/embedding.h"
#include "runtime/cpu/gelu.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/layernorm.h"
#include "runtime/cpu/softmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

using namespace loom;
using namespace loom::test;

namespace {

std::unique_ptr<Executor> makeExecutor(const fb::ProgramT &p,
                                       fb::LoadedProgram &loaded,
                                       uint64_t seed = 1337) {
  Status s = fb::loadProgramBytes(serialize(p), "train.loom", loaded);
  EXPECT_TRUE(s.ok()) << s.toString();
  if (!s.ok())
    return nullptr;
  std::unique_ptr<Executor> ex;
  s = Executor::create(loaded, 0, seed, ex);
  EXPECT_TRUE(s.ok()) << s.toString();
  return ex;
}

/// Index of the buffer named `name` in stage 0 of the loaded program.
uint32_t bufferNamed(const Executor &ex, const std::string &name) {
  const auto *buffers = ex.stage().buffers();
  for (uint32_t i = 0; i < buffers->size(); ++i)
    if (buffers->Get(i)->name()->str() == name)
      return i;
  ADD_FAILURE() << "no buffer " << name;
  return 0;
}

std::vector<float> values(const Executor &ex, uint32_t b) {
  const auto *p = static_cast<const float *>(ex.bufferData(b));
  return std::vector<float>(p, p + ex.bufferNumel(b));
}

std::vector<float> values(const Executor &ex, const std::string &name) {
  return values(ex, bufferNamed(ex, name));
}

void setValues(Executor &ex, uint32_t b, const std::vector<float> &v) {
  ASSERT_EQ(static_cast<int64_t>(v.size()), ex.bufferNumel(b));
  std::memcpy(ex.bufferData(b), v.data(), v.size() * sizeof(float));
}

const ParamView &param(const Executor &ex, const std::string &name) {
  for (const ParamView &p : ex.params())
    if (p.name == name)
      return p;
  ADD_FAILURE() << "no param " << name;
  return ex.params()[0];
}

void setIds(Executor &ex, int32_t b, const std::vector<int32_t> &ids) {
  ASSERT_EQ(static_cast<int64_t>(ids.size()), ex.bufferNumel(b));
  std::memcpy(ex.bufferData(b), ids.data(), ids.size() * sizeof(int32_t));
}

/// ||a - b|| / ||b||.
double relativeError(const std::vector<float> &a, const std::vector<float> &b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

//===----------------------------------------------------------------------===//
// miniGptTrain: each gradient opcode against the reference kernels
//===----------------------------------------------------------------------===//

TEST(Training, GradientOpcodesMatchReferenceKernels) {
  const MiniGptDims d;
  auto p = miniGptTrain(d);
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*p, loaded);
  ASSERT_TRUE(ex && ex->isTraining());
  const int64_t B = d.B, T = d.T, C = d.C, NH = d.NH, Vp = d.Vp, N = B * T;
  setIds(*ex, ex->stage().tokens(), randomIds(N, d.V, 3));
  setIds(*ex, ex->stage().targets(), randomIds(N, d.V, 4));
  // Stale gradients from an earlier pass must not leak into the outputs of
  // gradient ops (they overwrite); the Adds accumulate onto zeroed grads.
  ASSERT_TRUE(ex->zeroGradients().ok());
  Status s = ex->run();
  ASSERT_TRUE(s.ok()) << s.toString();

  // The reference backward from the executor's forward activations.
  auto v = [&](const std::string &name) { return values(*ex, name); };
  const auto *ids =
      static_cast<const int32_t *>(ex->bufferData(ex->stage().tokens()));
  const auto *tgt =
      static_cast<const int32_t *>(ex->bufferData(ex->stage().targets()));
  std::map<std::string, std::vector<float>> g; // expected param grads
  auto zeros = [](int64_t n) { return std::vector<float>(n, 0.0f); };
  // Loss head: dlogits, then the tied lm_head.
  auto dlogits = zeros(N * Vp);
  ASSERT_TRUE(cpu::crossEntropyBackwardReference(
                  dlogits.data(), v("logits").data(), tgt, N, Vp, d.V, 1.0f)
                  .ok());
  expectClose(v("d.logits"), dlogits, 1e-5, 1e-8, "d.logits");
  auto dlnf = zeros(N * C), dwte = zeros(Vp * C);
  cpu::gemmReference(false, false, N, C, Vp, 1.0f, dlogits.data(), Vp,
                     v("wte.weight").data(), C, 0.0f, dlnf.data(), C);
  cpu::gemmReference(true, false, Vp, C, N, 1.0f, dlogits.data(), Vp,
                     v("lnf").data(), C, 0.0f, dwte.data(), C);
  expectClose(v("d.lnf"), dlnf, 1e-4, 1e-7, "d.lnf");
  expectClose(v("dmatmul.wte.weight"), dwte, 1e-4, 1e-7, "dmatmul.wte");
  // LayerNorm backward with freshly computed statistics.
  auto lnGrad = [&](const std::string &layer, const std::vector<float> &dout,
                    const std::string &input) {
    auto x = v(input);
    std::vector<float> y(N * C), mean(N), rstd(N);
    auto w = v(layer + ".weight");
    cpu::layernormForwardReference(y.data(), mean.data(), rstd.data(), x.data(),
                                   w.data(), v(layer + ".bias").data(), N, C);
    auto dx = zeros(N * C), dw = zeros(C), db = zeros(C);
    cpu::layernormBackwardReference(dx.data(), dw.data(), db.data(),
                                    dout.data(), x.data(), w.data(),
                                    mean.data(), rstd.data(), N, C);
    g[layer + ".weight"] = dw;
    g[layer + ".bias"] = db;
    return dx;
  };
  auto linGrad = [&](const std::string &layer, const std::vector<float> &dout,
                     const std::string &input, int64_t K, int64_t Nout) {
    auto dx = zeros(N * K), dw = zeros(K * Nout), db = zeros(Nout);
    cpu::linearBackwardReference(dx.data(), dw.data(), db.data(), dout.data(),
                                 v(input).data(), v(layer + ".weight").data(),
                                 N, K, Nout);
    g[layer + ".weight"] = dw;
    g[layer + ".bias"] = db;
    return dx;
  };
  auto dh2 = lnGrad("ln_f", dlnf, "h2");
  expectClose(v("d.h2"), dh2, 1e-4, 1e-6, "d.h2");
  auto dgl = linGrad("h.0.mlp.c_proj", dh2, "gelu", 4 * C, C);
  auto dfc = zeros(N * 4 * C);
  cpu::geluBackwardReference(dfc.data(), v("fc").data(), dgl.data(), N * 4 * C);
  expectClose(v("d.fc"), dfc, 1e-4, 1e-6, "d.fc");
  auto dln2 = linGrad("h.0.mlp.c_fc", dfc, "ln2", C, 4 * C);
  auto dh1 = lnGrad("h.0.ln_2", dln2, "h1");
  for (int64_t i = 0; i < N * C; ++i)
    dh1[i] += dh2[i];
  expectClose(v("d.h1"), dh1, 1e-4, 1e-6, "d.h1");
  auto datt = linGrad("h.0.attn.c_proj", dh1, "att", C, C);
  std::vector<float> out(N * C), probs(B * NH * T * T);
  cpu::attentionForwardReference(out.data(), probs.data(), v("qkv").data(), B,
                                 T, C, NH);
  auto dqkv = zeros(N * 3 * C);
  cpu::attentionBackwardReference(dqkv.data(), datt.data(), v("qkv").data(),
                                  probs.data(), B, T, C, NH);
  expectClose(v("d.qkv"), dqkv, 1e-4, 1e-6, "d.qkv");
  auto dln1 = linGrad("h.0.attn.c_attn", dqkv, "ln1", C, 3 * C);
  auto dx = lnGrad("h.0.ln_1", dln1, "x");
  for (int64_t i = 0; i < N * C; ++i)
    dx[i] += dh1[i];
  expectClose(v("d.x"), dx, 1e-4, 1e-6, "d.x");
  auto dwpe = zeros(T * C);
  cpu::addBroadcastBackwardReference(dwpe.data(), dx.data(), B, T * C, false);
  g["wpe.weight"] = dwpe;
  ASSERT_TRUE(
      cpu::embeddingBackwardReference(dwte.data(), dx.data(), ids, N, Vp, C)
          .ok());
  g["wte.weight"] = dwte;

  ASSERT_EQ(g.size(), ex->params().size());
  for (const ParamView &pv : ex->params())
    expectClose(values(*ex, static_cast<uint32_t>(pv.gradBuffer)), g[pv.name],
                1e-4, 1e-6, "grad of " + pv.name);
}

//===----------------------------------------------------------------------===//
// The whole backward against finite differences
//===----------------------------------------------------------------------===//

TEST(Training, GradientsMatchFiniteDifferences) {
  // Seeding dloss with the row count makes the gradients those of the summed
  // per-token losses, which the forward writes in double-summable form (the
  // cross-entropy scratch), so the differences resolve small derivatives.
  MiniGptDims d;
  d.B = 1;
  d.T = 4;
  d.C = 8;
  d.NH = 2;
  d.V = 11;
  d.Vp = 16;
  MiniGptTrainOptions o;
  o.seed = static_cast<double>(d.B * d.T);
  auto p = miniGptTrain(d, o);
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*p, loaded, 5);
  ASSERT_TRUE(ex);
  setIds(*ex, ex->stage().tokens(), randomIds(d.B * d.T, d.V, 7));
  setIds(*ex, ex->stage().targets(), randomIds(d.B * d.T, d.V, 8));
  // Perturb LayerNorm weights / biases away from 1 / 0 so their gradients
  // are generic.
  for (const ParamView &pv : ex->params())
    if (pv.localShape.size() == 1) {
      auto w = randomVector(pv.localShape[0], 40 + pv.buffer, -0.5f, 1.5f);
      setValues(*ex, pv.buffer, w);
    }
  ASSERT_TRUE(ex->zeroGradients().ok());
  ASSERT_TRUE(ex->run().ok());
  const uint32_t lossesBuf = bufferNamed(*ex, "losses");
  auto loss = [&]() {
    EXPECT_TRUE(ex->run().ok());
    double sum = 0;
    for (float l : values(*ex, lossesBuf))
      sum += l;
    return sum;
  };
  // Every run() accumulates into the gradients again: read them all first.
  std::map<std::string, std::vector<float>> grads;
  for (const ParamView &pv : ex->params())
    grads[pv.name] = values(*ex, static_cast<uint32_t>(pv.gradBuffer));
  for (const ParamView &pv : ex->params()) {
    const auto &grad = grads[pv.name];
    std::vector<float> x = values(*ex, pv.buffer);
    // The checker perturbs x; mirror it into the arena before each loss.
    auto lossOfX = [&]() {
      setValues(*ex, pv.buffer, x);
      return loss();
    };
    expectGradientMatches(lossOfX, x, grad, "d loss / d " + pv.name, 1e-2f,
                          2e-2, 2e-3, 12);
    setValues(*ex, pv.buffer, x);
  }
}

//===----------------------------------------------------------------------===//
// Training steps
//===----------------------------------------------------------------------===//

TEST(Training, MicrobatchesGiveTheSameGradientsAsOneBatch) {
  MiniGptDims d;
  d.B = 4;
  const int64_t n = d.B * d.T;
  const auto inputs = randomIds(n, d.V, 11), targets = randomIds(n, d.V, 12);
  std::map<int64_t, std::vector<std::vector<float>>> grads;
  std::map<int64_t, TrainStepResult> results;
  for (int64_t M : {1, 2, 4}) {
    MiniGptTrainOptions o;
    o.microbatches = M;
    auto p = miniGptTrain(d, o);
    fb::LoadedProgram loaded;
    auto ex = makeExecutor(*p, loaded, 21);
    ASSERT_TRUE(ex);
    EXPECT_EQ(ex->bufferNumel(ex->stage().tokens()), n / M);
    TrainStepResult r;
    Status s = ex->trainStep(inputs.data(), targets.data(), 1, 1e-2f, r);
    ASSERT_TRUE(s.ok()) << s.toString();
    results[M] = r;
    for (const ParamView &pv : ex->params()) {
      grads[M].push_back(values(*ex, static_cast<uint32_t>(pv.gradBuffer)));
    }
  }
  for (int64_t M : {2, 4}) {
    EXPECT_NEAR(results[M].loss, results[1].loss, 1e-6 * results[1].loss) << M;
    EXPECT_NEAR(results[M].gradNorm, results[1].gradNorm,
                1e-6 * results[1].gradNorm)
        << M;
    for (size_t k = 0; k < grads[1].size(); ++k) {
      EXPECT_LE(relativeError(grads[M][k], grads[1][k]), 1e-6)
          << "M=" << M << " param #" << k;
    }
  }
}

TEST(Training, PipelineStageRunsItsActionsLikeTheStep) {
  // A one-chunk pipeline stage (forward, stash of the logits, backward per
  // micro-batch, then the update) trains exactly as the plain step.
  MiniGptDims d;
  d.B = 4;
  const int64_t n = d.B * d.T;
  const auto inputs = randomIds(n, d.V, 31), targets = randomIds(n, d.V, 32);
  MiniGptTrainOptions o;
  o.microbatches = 2;
  std::vector<TrainStepResult> results;
  std::vector<std::vector<float>> weights;
  for (bool pipelined : {false, true}) {
    auto p = miniGptTrain(d, o);
    if (pipelined)
      makeSingleChunkPipeline(*p);
    fb::LoadedProgram loaded;
    auto ex = makeExecutor(*p, loaded, 21);
    ASSERT_TRUE(ex);
    EXPECT_EQ(ex->isPipelined(), pipelined);
    TrainStepResult r;
    for (int64_t step = 1; step <= 2; ++step) {
      Status s = ex->trainStep(inputs.data(), targets.data(), step, 1e-2f, r);
      ASSERT_TRUE(s.ok()) << s.toString();
    }
    results.push_back(r);
    weights.push_back(values(*ex, ex->params().front().buffer));
    if (pipelined) {
      EXPECT_GT(r.pipelineNs, 0);
    }
  }
  EXPECT_EQ(results[1].loss, results[0].loss);
  EXPECT_EQ(results[1].gradNorm, results[0].gradNorm);
  EXPECT_EQ(weights[1], weights[0]);
}

TEST(Training, ForwardOnlyPipelineStageEvaluatesLikeTheStep) {
  // An evaluation's one-chunk pipeline stage (forward actions only, no
  // update) reports the loss the training step computes before its first
  // update, on the same weights and batch; a training stage refuses it.
  MiniGptDims d;
  d.B = 4;
  const int64_t n = d.B * d.T;
  const auto inputs = randomIds(n, d.V, 41), targets = randomIds(n, d.V, 42);
  MiniGptTrainOptions o;
  o.microbatches = 2;
  auto trained = miniGptTrain(d, o);
  fb::LoadedProgram trainedLoaded;
  auto step = makeExecutor(*trained, trainedLoaded, 21);
  ASSERT_TRUE(step);
  TrainStepResult expected;
  ASSERT_TRUE(
      step->trainStep(inputs.data(), targets.data(), 1, 1e-2f, expected).ok());
  TrainStepResult refused;
  EXPECT_FALSE(
      step->evaluatePipelined(inputs.data(), targets.data(), refused).ok());

  auto p = miniGptTrain(d, o);
  makeForwardOnlyPipeline(*p);
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*p, loaded, 21);
  ASSERT_TRUE(ex);
  EXPECT_TRUE(ex->isPipelined());
  EXPECT_FALSE(ex->isTraining());
  TrainStepResult r;
  Status s = ex->evaluatePipelined(inputs.data(), targets.data(), r);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(r.loss, expected.loss);
  EXPECT_TRUE(std::isnan(r.gradNorm));
  EXPECT_GT(r.pipelineNs, 0);
}

TEST(Training, TrainStepUpdateMatchesReferenceAdamW) {
  const MiniGptDims d;
  MiniGptTrainOptions o;
  o.maxNorm = 0.05; // small enough that clipping is active
  auto p = miniGptTrain(d, o);
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*p, loaded, 9);
  ASSERT_TRUE(ex);
  const int64_t n = d.B * d.T;
  const auto inputs = randomIds(n, d.V, 13), targets = randomIds(n, d.V, 14);
  std::map<std::string, std::vector<float>> before;
  for (const ParamView &pv : ex->params())
    before[pv.name] = values(*ex, pv.buffer);

  // The step's loss is the forward before the update.
  setIds(*ex, ex->stage().tokens(), inputs);
  setIds(*ex, ex->stage().targets(), targets);
  ASSERT_TRUE(ex->run().ok());
  float forward = 0;
  ASSERT_TRUE(ex->readLoss(forward).ok());
  TrainStepResult r;
  const float lr = 3e-3f;
  Status s = ex->trainStep(inputs.data(), targets.data(), 1, lr, r);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(r.loss, forward);

  double sumSquares = 0;
  for (const ParamView &pv : ex->params()) {
    auto g = values(*ex, static_cast<uint32_t>(pv.gradBuffer));
    sumSquares += cpu::sumSquaresReference(g.data(), g.size());
  }
  // SumSquares writes the f32 rounding of the double sum; ClipCoef's norm
  // is its square root.
  const float sumsq = values(*ex, "grad_sum_squares")[0];
  EXPECT_TRUE(std::isfinite(sumsq));
  EXPECT_NEAR(sumsq, sumSquares, 1e-6 * sumSquares);
  EXPECT_EQ(r.gradNorm, static_cast<float>(std::sqrt(double(sumsq))));
  const double norm = std::sqrt(sumSquares);
  EXPECT_NEAR(r.gradNorm, norm, 1e-6 * norm);
  EXPECT_EQ(values(*ex, "grad_norm")[0], r.gradNorm);
  const float coef = values(*ex, "clip_coef")[0];
  EXPECT_NEAR(coef, 0.05 / (norm + 1e-6), 1e-6);
  EXPECT_LT(coef, 1.0f);
  EXPECT_EQ(values(*ex, "lr")[0], lr);
  EXPECT_EQ(values(*ex, "step")[0], 1.0f);
  for (const auto &pp : p->stages[0]->params) {
    const ParamView &pv = param(*ex, pp->name);
    auto w = before[pv.name];
    auto g = values(*ex, static_cast<uint32_t>(pv.gradBuffer));
    std::vector<float> m(w.size(), 0.0f), v(w.size(), 0.0f);
    cpu::AdamWConfig cfg;
    cfg.lr = lr;
    cfg.beta1 = 0.9;
    cfg.beta2 = 0.95;
    cfg.eps = 1e-8;
    cfg.weightDecay = pp->decay ? 0.1 : 0.0;
    cfg.step = 1;
    cfg.gradScale = coef;
    cpu::adamwStepReference(w.data(), g.data(), m.data(), v.data(), w.size(),
                            cfg);
    expectClose(values(*ex, pv.buffer), w, 1e-5, 1e-7, "param " + pv.name);
    expectClose(values(*ex, static_cast<uint32_t>(pv.mBuffer)), m, 1e-5, 1e-9,
                "m " + pv.name);
    expectClose(values(*ex, static_cast<uint32_t>(pv.vBuffer)), v, 1e-5, 1e-12,
                "v " + pv.name);
  }

  // A second step starts from zeroed gradients (not accumulated over steps).
  TrainStepResult r2;
  ASSERT_TRUE(ex->trainStep(inputs.data(), targets.data(), 2, lr, r2).ok());
  EXPECT_LT(r2.loss, r.loss);
  EXPECT_EQ(values(*ex, "step")[0], 2.0f);
}

/// One parameter [2] with its optimizer and no forward: the update alone.
std::unique_ptr<fb::ProgramT> adamwOnly(double maxNorm) {
  auto p = emptyProgram(1, 1, 2);
  StageBuilder s(*p->stages[0]);
  s.param("w", {1, 2});
  addTrainingBuffers(s);
  addOptimizer(s, maxNorm, /*weightDecay=*/0.1);
  return p;
}

TEST(Training, ClipCoefIsOneWhenTheNormIsBelowMaxNorm) {
  // norm 5 < max_norm 10: the update is AdamW on the unscaled gradient.
  auto p = adamwOnly(10.0);
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*p, loaded);
  ASSERT_TRUE(ex);
  const ParamView &pv = ex->params()[0];
  std::vector<float> w = {1.0f, -2.0f}, g = {3.0f, 4.0f}, m(2, 0.0f),
                     v(2, 0.0f);
  setValues(*ex, pv.buffer, w);
  setValues(*ex, static_cast<uint32_t>(pv.gradBuffer), g);
  ASSERT_TRUE(ex->runUpdate(1, 0.1f).ok());
  EXPECT_EQ(values(*ex, "grad_sum_squares")[0], 25.0f);
  EXPECT_EQ(values(*ex, "grad_norm")[0], 5.0f);
  EXPECT_EQ(values(*ex, "clip_coef")[0], 1.0f);
  cpu::AdamWConfig cfg;
  cfg.lr = 0.1f;
  cfg.beta1 = 0.9;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-8;
  cfg.weightDecay = 0.1;
  cfg.step = 1;
  cpu::adamwStepReference(w.data(), g.data(), m.data(), v.data(), 2, cfg);
  expectClose(values(*ex, pv.buffer), w, 1e-6, 1e-7, "w");
  expectClose(values(*ex, static_cast<uint32_t>(pv.mBuffer)), m, 1e-6, 1e-9,
              "m");
}

TEST(Training, AdamWStepMatchesHandComputedValues) {
  auto p = adamwOnly(1.0);
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*p, loaded);
  ASSERT_TRUE(ex);
  const ParamView &pv = ex->params()[0];
  setValues(*ex, pv.buffer, {1.0f, -2.0f});
  setValues(*ex, static_cast<uint32_t>(pv.gradBuffer), {3.0f, 4.0f});
  Status s = ex->runUpdate(1, 0.1f);
  ASSERT_TRUE(s.ok()) << s.toString();
  // norm 5 -> coef = 1 / (5 + 1e-6): g' = (0.6, 0.8). Step 1 bias
  // corrections make the Adam direction sign(g') * |g'| / (|g'| + eps):
  //   w = w * (1 - lr * wd) - lr * sign(g') = (0.99 - 0.1, -1.98 - 0.1).
  EXPECT_EQ(values(*ex, "grad_sum_squares")[0], 25.0f);
  EXPECT_EQ(values(*ex, "grad_norm")[0], 5.0f);
  EXPECT_FLOAT_EQ(values(*ex, "clip_coef")[0], 1.0f / 5.000001f);
  auto w = values(*ex, pv.buffer);
  EXPECT_NEAR(w[0], 0.89, 1e-6);
  EXPECT_NEAR(w[1], -2.08, 1e-6);
  // m = (1 - b1) g' and v = (1 - b2) g'^2 with b1 = 0.9, b2 = 0.95.
  auto m = values(*ex, static_cast<uint32_t>(pv.mBuffer));
  auto v = values(*ex, static_cast<uint32_t>(pv.vBuffer));
  EXPECT_NEAR(m[0], 0.06, 1e-7);
  EXPECT_NEAR(m[1], 0.08, 1e-7);
  EXPECT_NEAR(v[0], 0.018, 1e-7); // g' carries the 1e-6 of the coefficient
  EXPECT_NEAR(v[1], 0.032, 1e-7);

  // Without clipping (max_norm 0) and at step 2 the bias corrections differ:
  // compare with the reference on the same state.
  auto p2 = adamwOnly(0.0);
  fb::LoadedProgram loaded2;
  auto ex2 = makeExecutor(*p2, loaded2);
  ASSERT_TRUE(ex2);
  const ParamView &pv2 = ex2->params()[0];
  setValues(*ex2, pv2.buffer, w);
  setValues(*ex2, static_cast<uint32_t>(pv2.mBuffer), m);
  setValues(*ex2, static_cast<uint32_t>(pv2.vBuffer), v);
  setValues(*ex2, static_cast<uint32_t>(pv2.gradBuffer), {-1.0f, 0.5f});
  ASSERT_TRUE(ex2->runUpdate(2, 0.01f).ok());
  EXPECT_EQ(values(*ex2, "clip_coef")[0], 1.0f);
  // Clipping off still reports the norm.
  EXPECT_EQ(values(*ex2, "grad_sum_squares")[0], 1.25f);
  EXPECT_EQ(values(*ex2, "grad_norm")[0], static_cast<float>(std::sqrt(1.25)));
  std::vector<float> g = {-1.0f, 0.5f};
  cpu::AdamWConfig cfg;
  cfg.lr = 0.01f;
  cfg.beta1 = 0.9;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-8;
  cfg.weightDecay = 0.1;
  cfg.step = 2;
  cpu::adamwStepReference(w.data(), g.data(), m.data(), v.data(), 2, cfg);
  expectClose(values(*ex2, pv2.buffer), w, 1e-6, 1e-7, "w after step 2");
  expectClose(values(*ex2, static_cast<uint32_t>(pv2.mBuffer)), m, 1e-6, 1e-9,
              "m after step 2");

  // The update rejects a step scalar the runtime did not set.
  Status bad = ex2->runUpdate(0, 0.01f);
  EXPECT_FALSE(bad.ok());
}

//===----------------------------------------------------------------------===//
// Opcodes GPT-2 does not use, and aliasing
//===----------------------------------------------------------------------===//

TEST(Training, SoftmaxGradSliceGradFillAndAliasing) {
  auto p = emptyProgram(1, 1, 2);
  StageBuilder s(*p->stages[0]);
  const int64_t R = 3, C = 5;
  const uint32_t y = s.buffer("y", {R, C}), dy = s.buffer("dy", {R, C});
  const uint32_t dx = s.buffer("dx", {R, C});
  const uint32_t wide = s.buffer("wide", {R, 9});
  const uint32_t fillF = s.buffer("fill.f32", {4});
  const uint32_t fillI = s.buffer("fill.i32", {2, 2}, fb::DType::I32);
  const uint32_t red = s.buffer("reduced", {C}), all = s.buffer("all", {});
  const uint32_t gx = s.buffer("gelu.x", {R, C}),
                 gd = s.buffer("gelu.d", {R, C});
  const uint32_t sd = s.buffer("softmax.d", {R, C});
  const uint32_t lx = s.buffer("lin.x", {R, 4}), lw = s.buffer("lin.w", {4, C});
  const uint32_t ldx = s.buffer("lin.dx", {R, 4}),
                 ldw = s.buffer("lin.dw", {4, C});
  s.op(fb::Opcode::SoftmaxGrad, "softmax.grad", {dy, y}, {dx});
  s.op(fb::Opcode::SliceGrad, "slice.grad", {dy}, {wide}).dim = 1;
  s.stage.instructions.back()->offset = 3;
  s.op(fb::Opcode::Fill, "fill.f", {}, {fillF}).value = -2.5;
  s.op(fb::Opcode::Fill, "fill.i", {}, {fillI}).value = 7;
  s.op(fb::Opcode::ReduceLeading, "reduce", {dy}, {red});
  s.op(fb::Opcode::ReduceLeading, "reduce.all", {dy}, {all});
  // LinearGrad without a bias gradient.
  s.op(fb::Opcode::LinearGrad, "lin.grad", {dy, lx, lw}, {ldx, ldw});
  // In place: GeluGrad over its dout (element-wise, allowed) ...
  s.op(fb::Opcode::GeluGrad, "gelu.grad", {gd, gx}, {gd});
  // ... and SoftmaxGrad over its dout (row-wise: the executor stages it).
  s.op(fb::Opcode::SoftmaxGrad, "softmax.grad.inplace", {sd, y}, {sd});
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*p, loaded);
  ASSERT_TRUE(ex);
  EXPECT_FALSE(ex->isTraining());
  auto x = randomVector(R * C, 50, -2, 2);
  std::vector<float> yv(R * C);
  cpu::softmaxForwardReference(yv.data(), x.data(), R, C);
  const auto dyv = randomVector(R * C, 51),
             gxv = randomVector(R * C, 52, -3, 3),
             gdv = randomVector(R * C, 53), lxv = randomVector(R * 4, 54),
             lwv = randomVector(4 * C, 55);
  setValues(*ex, y, yv);
  setValues(*ex, dy, dyv);
  setValues(*ex, gx, gxv);
  setValues(*ex, gd, gdv);
  setValues(*ex, sd, dyv);
  setValues(*ex, lx, lxv);
  setValues(*ex, lw, lwv);
  setValues(*ex, wide, std::vector<float>(R * 9, 42.0f)); // overwritten
  Status st = ex->run();
  ASSERT_TRUE(st.ok()) << st.toString();

  std::vector<float> dxRef(R * C);
  cpu::softmaxBackwardReference(dxRef.data(), dyv.data(), yv.data(), R, C);
  expectClose(values(*ex, dx), dxRef, 1e-5, 1e-7, "SoftmaxGrad");
  expectClose(values(*ex, sd), dxRef, 1e-5, 1e-7, "SoftmaxGrad in place");
  auto w = values(*ex, wide);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < 9; ++c)
      EXPECT_EQ(w[r * 9 + c], c >= 3 && c < 3 + C ? dyv[r * C + c - 3] : 0.0f)
          << r << "," << c;
  EXPECT_EQ(values(*ex, fillF), std::vector<float>(4, -2.5f));
  const auto *ints = static_cast<const int32_t *>(ex->bufferData(fillI));
  EXPECT_EQ(std::vector<int32_t>(ints, ints + 4), std::vector<int32_t>(4, 7));
  std::vector<float> redRef(C), allRef(1);
  cpu::addBroadcastBackwardReference(redRef.data(), dyv.data(), R, C, false);
  cpu::addBroadcastBackwardReference(allRef.data(), dyv.data(), R * C, 1,
                                     false);
  expectClose(values(*ex, red), redRef, 1e-6, 1e-7, "ReduceLeading");
  expectClose(values(*ex, all), allRef, 1e-6, 1e-6, "ReduceLeading to scalar");
  std::vector<float> ldxRef(R * 4), ldwRef(4 * C, 0.0f);
  cpu::linearBackwardReference(ldxRef.data(), ldwRef.data(), nullptr,
                               dyv.data(), lxv.data(), lwv.data(), R, 4, C);
  expectClose(values(*ex, ldx), ldxRef, 1e-5, 1e-7, "LinearGrad dinput");
  expectClose(values(*ex, ldw), ldwRef, 1e-5, 1e-7, "LinearGrad dweight");
  std::vector<float> gRef(R * C);
  cpu::geluBackwardReference(gRef.data(), gxv.data(), gdv.data(), R * C);
  expectClose(values(*ex, gd), gRef, 1e-5, 1e-7, "GeluGrad in place");

  // Gradient outputs overwrite: a second run gives the same values (the
  // LinearGrad weight gradient does not accumulate).
  setValues(*ex, gd, gdv);
  setValues(*ex, sd, dyv);
  ASSERT_TRUE(ex->run().ok());
  expectClose(values(*ex, ldw), ldwRef, 1e-5, 1e-7, "LinearGrad dweight again");
}

TEST(Training, MatmulGradWithoutTranspose) {
  auto p = emptyProgram(1, 1, 2);
  StageBuilder s(*p->stages[0]);
  const int64_t M = 6, K = 4, N = 3;
  const uint32_t l = s.buffer("lhs", {2, 3, K}), r = s.buffer("rhs", {K, N});
  const uint32_t dout = s.buffer("dout", {2, 3, N});
  const uint32_t dl = s.buffer("dlhs", {2, 3, K}),
                 dr = s.buffer("drhs", {K, N});
  s.op(fb::Opcode::MatmulGrad, "mm.grad", {dout, l, r}, {dl, dr});
  fb::LoadedProgram loaded;
  auto ex = makeExecutor(*p, loaded);
  ASSERT_TRUE(ex);
  auto lv = randomVector(M * K, 60), rv = randomVector(K * N, 61),
       dv = randomVector(M * N, 62);
  setValues(*ex, l, lv);
  setValues(*ex, r, rv);
  setValues(*ex, dout, dv);
  ASSERT_TRUE(ex->run().ok());
  std::vector<float> dlRef(M * K), drRef(K * N);
  cpu::gemmReference(false, true, M, K, N, 1.0f, dv.data(), N, rv.data(), N,
                     0.0f, dlRef.data(), K);
  cpu::gemmReference(true, false, K, N, M, 1.0f, lv.data(), K, dv.data(), N,
                     0.0f, drRef.data(), N);
  expectClose(values(*ex, dl), dlRef, 1e-5, 1e-7, "dlhs");
  expectClose(values(*ex, dr), drRef, 1e-5, 1e-7, "drhs");
}

//===----------------------------------------------------------------------===//
// Learning-rate schedule
//===----------------------------------------------------------------------===//

TEST(LrSchedule, WarmupThenCosineOrConstant) {
  LrSchedule s;
  s.lr = 1.0;
  s.minLr = 0.1;
  s.warmup = 4;
  s.totalSteps = 14;
  s.kind = LrSchedule::Kind::Cosine;
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(1), 0.5);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);    // p = 0: the peak
  EXPECT_NEAR(s.at(9), 0.55, 1e-12); // p = 1/2: half way
  EXPECT_DOUBLE_EQ(s.at(14), 0.1);   // p = 1: the floor
  EXPECT_DOUBLE_EQ(s.at(100), 0.1);  // clamped beyond the span
  EXPECT_NEAR(s.at(6), 0.1 + 0.45 * (1 + std::cos(M_PI * 0.2)), 1e-12);
  for (int64_t k = 5; k < 14; ++k)
    EXPECT_LT(s.at(k), s.at(k - 1)) << k;
  s.kind = LrSchedule::Kind::Constant;
  EXPECT_DOUBLE_EQ(s.at(2), 0.75);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);
  EXPECT_DOUBLE_EQ(s.at(1000), 1.0);
  // No warmup; a span shorter than the warmup divides by max(1, S - W).
  LrSchedule c;
  c.lr = 2.0;
  c.totalSteps = 2;
  EXPECT_DOUBLE_EQ(c.at(0), 2.0);
  EXPECT_DOUBLE_EQ(c.at(1), 1.0);
  EXPECT_DOUBLE_EQ(c.at(2), 0.0);
  c.warmup = 5;
  EXPECT_DOUBLE_EQ(c.at(5), 2.0);
  EXPECT_DOUBLE_EQ(c.at(6), 0.0);
}

TEST(LrSchedule, LinearAndWarmupStableDecay) {
  LrSchedule s;
  s.lr = 1.0;
  s.minLr = 0.2;
  s.warmup = 2;
  s.totalSteps = 12; // 10 steps after warmup
  s.kind = LrSchedule::Kind::Linear;
  EXPECT_DOUBLE_EQ(s.at(0), 0.5);
  EXPECT_DOUBLE_EQ(s.at(2), 1.0);
  EXPECT_NEAR(s.at(7), 0.6, 1e-12); // p = 1/2
  EXPECT_DOUBLE_EQ(s.at(12), 0.2);
  EXPECT_DOUBLE_EQ(s.at(50), 0.2);
  // WSD, the last 40% decaying: stable through step 2 + 6, then linear.
  s.kind = LrSchedule::Kind::WSD;
  s.decayFraction = 0.4;
  EXPECT_DOUBLE_EQ(s.at(1), 1.0);
  for (int64_t k = 2; k <= 8; ++k)
    EXPECT_DOUBLE_EQ(s.at(k), 1.0) << k;
  EXPECT_NEAR(s.at(9), 0.8, 1e-12);  // d = 1/4
  EXPECT_NEAR(s.at(10), 0.6, 1e-12); // d = 1/2
  EXPECT_DOUBLE_EQ(s.at(12), 0.2);
  EXPECT_DOUBLE_EQ(s.at(40), 0.2);
  // All of it decaying is the linear schedule.
  s.decayFraction = 1.0;
  LrSchedule linear = s;
  linear.kind = LrSchedule::Kind::Linear;
  for (int64_t k = 0; k <= 14; ++k)
    EXPECT_NEAR(s.at(k), linear.at(k), 1e-12) << k;
  LrSchedule::Kind kind;
  for (const char *name : {"constant", "cosine", "linear", "wsd"}) {
    ASSERT_TRUE(LrSchedule::parse(name, kind)) << name;
    EXPECT_STREQ(LrSchedule::name(kind), name);
  }
  EXPECT_FALSE(LrSchedule::parse("WSD", kind));
}

} // namespace
