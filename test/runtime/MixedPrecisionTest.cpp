//===- MixedPrecisionTest.cpp - bf16 storage with fp32 math -----*- C++ -*-===//
//
// The runtime half of mixed precision on hand-built programs (no compiler):
// the bf16 conversions (ties to even, NaN, infinities, overflow), Cast, an
// instruction staged through fp32 equal to the fp32 kernel on the rounded
// inputs then rounded, in-place accumulation into a bf16 buffer, AdamW on
// an fp32 master with a bf16 gradient followed by the Cast into the bf16
// parameter, parameter init and checkpoints with masters, the native-bf16
// hook, greedy sampling from bf16 logits, and a whole bf16 GPT training step
// next to the fp32 one.
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"
#include "TestUtil.h"

#include "runtime/core/bfloat16.h"
#include "runtime/core/checkpoint.h"
#include "runtime/core/executor.h"
#include "runtime/core/param_init.h"
#include "runtime/core/safetensors.h"
#include "runtime/core/sampler.h"
#include "runtime/cpu/adamw.h"
#include "runtime/cpu/cpu_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <unistd.h>

using namespace loom;
using namespace loom::test;

namespace {

uint16_t narrow(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return floatToBF16(f);
}

uint32_t bitsOf(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

std::vector<uint16_t> rounded(const std::vector<float> &v) {
  std::vector<uint16_t> out(v.size());
  floatsToBF16(out.data(), v.data(), static_cast<int64_t>(v.size()));
  return out;
}

std::vector<float> widened(const std::vector<uint16_t> &v) {
  std::vector<float> out(v.size());
  bf16ToFloats(out.data(), v.data(), static_cast<int64_t>(v.size()));
  return out;
}

/// Loads `p` and creates its executor (seed 7).
std::unique_ptr<Executor>
load(const fb::ProgramT &p, fb::LoadedProgram &loaded,
     std::unique_ptr<KernelBackend> kernels = nullptr) {
  Status s = fb::loadProgramBytes(serialize(p), "bf16.loom", loaded);
  EXPECT_TRUE(s.ok()) << s.toString();
  std::unique_ptr<Executor> ex;
  s = Executor::create(loaded, 0, 7, ex, nullptr, std::move(kernels));
  EXPECT_TRUE(s.ok()) << s.toString();
  return ex;
}

template <typename T>
void setBuffer(Executor &ex, uint32_t b, const std::vector<T> &v) {
  ASSERT_EQ(static_cast<int64_t>(v.size() * sizeof(T)),
            ex.bufferNumel(b) * fb::dtypeBytes(ex.bufferDType(b)));
  std::memcpy(ex.bufferData(b), v.data(), v.size() * sizeof(T));
}

/// Buffer b's bytes as T (none for a pipeline stash buffer, whose slot is
/// free between steps).
template <typename T> std::vector<T> getBuffer(const Executor &ex, uint32_t b) {
  if (!ex.bufferData(b))
    return {};
  std::vector<T> v(static_cast<size_t>(ex.bufferNumel(b) *
                                       fb::dtypeBytes(ex.bufferDType(b)) /
                                       static_cast<int64_t>(sizeof(T))));
  std::memcpy(v.data(), ex.bufferData(b), v.size() * sizeof(T));
  return v;
}

//===----------------------------------------------------------------------===//
// Conversions
//===----------------------------------------------------------------------===//

TEST(BF16Conversion, RoundsToNearestEvenAndKeepsSpecials) {
  // Ties go to the even neighbour, both ways; just above a tie rounds up.
  EXPECT_EQ(narrow(0x3f808000u), 0x3f80u); // 1 + 2^-8: tie, 0x3f80 is even
  EXPECT_EQ(narrow(0x3f818000u), 0x3f82u); // tie, 0x3f81 odd -> up
  EXPECT_EQ(narrow(0x3f808001u), 0x3f81u);
  EXPECT_EQ(narrow(0x3f807fffu), 0x3f80u);
  EXPECT_EQ(narrow(0xbf818000u), 0xbf82u); // sign does not matter
  // NaNs stay NaNs (never an infinity), sign and top payload kept.
  EXPECT_EQ(narrow(0x7f800001u), 0x7fc0u);
  EXPECT_EQ(narrow(0xffc12345u), 0xffc1u);
  EXPECT_TRUE(std::isnan(bf16ToFloat(narrow(0x7f800001u))));
  // Infinities and overflow.
  EXPECT_EQ(narrow(0x7f800000u), 0x7f80u);
  EXPECT_EQ(narrow(0xff800000u), 0xff80u);
  EXPECT_EQ(floatToBF16(std::numeric_limits<float>::max()), 0x7f80u);
  EXPECT_EQ(narrow(0x7f7f7fffu), 0x7f7fu); // largest finite bf16 stays
  EXPECT_EQ(narrow(0x7f7f8000u), 0x7f80u); // tie above it: odd -> infinity
  EXPECT_EQ(bf16ToFloat(0x7f7fu), 3.38953139e38f);
  // Zeros and subnormals.
  EXPECT_EQ(floatToBF16(-0.0f), 0x8000u);
  EXPECT_EQ(narrow(0x00000001u), 0x0000u);
  EXPECT_EQ(narrow(0x00008000u), 0x0000u);
  EXPECT_EQ(narrow(0x00018000u), 0x0002u);
  // Every bf16 widens exactly and narrows back to itself (a NaN to its
  // quiet form).
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = bf16ToFloat(h);
    EXPECT_EQ(bitsOf(f), b << 16);
    const bool nan = (b & 0x7fffu) > 0x7f80u;
    ASSERT_EQ(floatToBF16(f), nan ? (h | 0x0040u) : h) << std::hex << b;
  }
}

TEST(BF16Conversion, CpuKernelsMatchTheHostConversion) {
  std::vector<float> values = randomVector(100000, 3, -1e4f, 1e4f);
  std::mt19937 gen(5);
  for (int i = 0; i < 1000; ++i) {
    const uint32_t b = gen();
    float f;
    std::memcpy(&f, &b, 4);
    values.push_back(f); // NaNs, infinities, subnormals included
  }
  cpu::CpuKernels k;
  std::vector<uint16_t> out(values.size());
  ASSERT_TRUE(k.convertF32ToBF16(out.data(), values.data(),
                                 static_cast<int64_t>(values.size()))
                  .ok());
  EXPECT_EQ(out, rounded(values));
  std::vector<float> back(values.size());
  ASSERT_TRUE(k.convertBF16ToF32(back.data(), out.data(),
                                 static_cast<int64_t>(out.size()))
                  .ok());
  const std::vector<float> want = widened(out);
  EXPECT_EQ(0, std::memcmp(back.data(), want.data(), back.size() * 4));
}

//===----------------------------------------------------------------------===//
// Instructions
//===----------------------------------------------------------------------===//

TEST(MixedPrecisionExecutor, CastRoundTrip) {
  auto p = emptyProgram(1, 1, 2);
  StageBuilder s(*p->stages[0]);
  const uint32_t x = s.buffer("x", {4, 8});
  const uint32_t xb = s.buffer("x.bf16", {4, 8}, fb::DType::BF16);
  const uint32_t y = s.buffer("y", {4, 8});
  s.op(fb::Opcode::Cast, "narrow", {x}, {xb});
  s.op(fb::Opcode::Cast, "widen", {xb}, {y});
  fb::LoadedProgram loaded;
  auto ex = load(*p, loaded);
  ASSERT_TRUE(ex);
  std::vector<float> v = randomVector(32, 11, -3.0f, 3.0f);
  v[0] = std::numeric_limits<float>::quiet_NaN();
  v[1] = std::numeric_limits<float>::infinity();
  v[2] = std::numeric_limits<float>::max(); // past bf16's largest: rounds to inf
  v[3] = 3.3900e38f;
  setBuffer(*ex, x, v);
  ASSERT_TRUE(ex->run().ok());
  EXPECT_EQ(getBuffer<uint16_t>(*ex, xb), rounded(v));
  const std::vector<float> got = getBuffer<float>(*ex, y),
                           want = widened(rounded(v));
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4));
  EXPECT_EQ(ex->bf16StagingBytes(), 0u); // Cast converts itself
}

TEST(MixedPrecisionExecutor, StagedOpsEqualTheFp32KernelOnRoundedInputs) {
  // Linear, LayerNorm (bf16 statistics scratch) and an in-place Gelu, every
  // float operand bf16: each must equal the fp32 kernel run on the widened
  // inputs, its results rounded once.
  const int64_t M = 6, K = 16, N = 24;
  auto p = emptyProgram(1, 1, 2);
  StageBuilder s(*p->stages[0]);
  const auto BF = fb::DType::BF16;
  const uint32_t x = s.buffer("x", {M, K}, BF), w = s.buffer("w", {K, N}, BF),
                 b = s.buffer("b", {N}, BF), y = s.buffer("y", {M, N}, BF);
  const uint32_t g = s.buffer("ln.w", {N}, BF), bb = s.buffer("ln.b", {N}, BF);
  const uint32_t ln = s.buffer("ln", {M, N}, BF);
  const uint32_t mean = s.buffer("ln.mean", {M}, BF),
                 rstd = s.buffer("ln.rstd", {M}, BF);
  s.op(fb::Opcode::Linear, "linear", {x, w, b}, {y});
  s.op(fb::Opcode::LayerNorm, "ln", {y, g, bb}, {ln}, {mean, rstd}).epsilon =
      1e-5;
  s.op(fb::Opcode::Gelu, "gelu", {ln}, {ln});
  fb::LoadedProgram loaded;
  auto ex = load(*p, loaded);
  ASSERT_TRUE(ex);
  const auto xs = rounded(randomVector(M * K, 1)),
             ws = rounded(randomVector(K * N, 2)),
             bs = rounded(randomVector(N, 3)),
             gs = rounded(randomVector(N, 4, 0.5f, 1.5f)),
             bbs = rounded(randomVector(N, 5));
  setBuffer(*ex, x, xs);
  setBuffer(*ex, w, ws);
  setBuffer(*ex, b, bs);
  setBuffer(*ex, g, gs);
  setBuffer(*ex, bb, bbs);
  ASSERT_TRUE(ex->run().ok());

  cpu::CpuKernels k;
  std::vector<float> yf(M * N), lnf(M * N), meanf(M), rstdf(M);
  ASSERT_TRUE(k.linearForward(yf.data(), widened(xs).data(), widened(ws).data(),
                              widened(bs).data(), M, K, N)
                  .ok());
  const auto yb = rounded(yf);
  EXPECT_EQ(getBuffer<uint16_t>(*ex, y), yb);
  ASSERT_TRUE(k.layernormForward(lnf.data(), meanf.data(), rstdf.data(),
                                 widened(yb).data(), widened(gs).data(),
                                 widened(bbs).data(), M, N, 1e-5f)
                  .ok());
  EXPECT_EQ(getBuffer<uint16_t>(*ex, mean), rounded(meanf));
  EXPECT_EQ(getBuffer<uint16_t>(*ex, rstd), rounded(rstdf));
  std::vector<float> gelu(M * N);
  const std::vector<float> lnw = widened(rounded(lnf));
  ASSERT_TRUE(k.geluForward(gelu.data(), lnw.data(), M * N).ok());
  EXPECT_EQ(getBuffer<uint16_t>(*ex, ln), rounded(gelu));
  // Staging was allocated once, for the largest instruction: Linear's
  // x + w + b + y, or LayerNorm's y + w + b + out + mean + rstd, in fp32
  // slots of 64-byte multiples.
  auto slot = [](int64_t n) { return (n * 4 + 63) / 64 * 64; };
  const uint64_t linear = slot(M * K) + slot(K * N) + slot(N) + slot(M * N);
  const uint64_t norm = 2 * slot(M * N) + 2 * slot(N) + 2 * slot(M);
  EXPECT_EQ(ex->bf16StagingBytes(), std::max(linear, norm));
  EXPECT_EQ(ex->peakTensorBytes(), ex->arenaBytes() + ex->bf16StagingBytes());
}

TEST(MixedPrecisionExecutor, InPlaceAccumulationIntoABF16Buffer) {
  // grad += tmp with grad bf16 (the output aliasing the first input), three
  // times: each step is fp32 addition of the stored values, rounded once.
  const int64_t n = 257;
  auto p = emptyProgram(1, 1, 2);
  StageBuilder s(*p->stages[0]);
  const uint32_t grad = s.buffer("grad", {n}, fb::DType::BF16);
  const uint32_t tmp = s.buffer("tmp", {n}, fb::DType::BF16);
  const uint32_t bias = s.buffer("bias", {n}); // fp32 rhs, broadcast-free
  s.op(fb::Opcode::Add, "acc", {grad, tmp}, {grad});
  s.op(fb::Opcode::Add, "acc.f32", {grad, bias}, {grad});
  fb::LoadedProgram loaded;
  auto ex = load(*p, loaded);
  ASSERT_TRUE(ex);
  std::vector<uint16_t> g = rounded(randomVector(n, 8, -1.0f, 1.0f));
  const std::vector<uint16_t> t = rounded(randomVector(n, 9, -1e-2f, 1e-2f));
  const std::vector<float> c = randomVector(n, 10, -1e-3f, 1e-3f);
  setBuffer(*ex, grad, g);
  setBuffer(*ex, tmp, t);
  setBuffer(*ex, bias, c);
  for (int step = 0; step < 3; ++step) {
    ASSERT_TRUE(ex->run().ok());
    for (int64_t i = 0; i < n; ++i) {
      g[i] = floatToBF16(bf16ToFloat(g[i]) + bf16ToFloat(t[i]));
      g[i] = floatToBF16(bf16ToFloat(g[i]) + c[i]);
    }
    ASSERT_EQ(getBuffer<uint16_t>(*ex, grad), g) << "step " << step;
  }
  // The aliased output shares its input's slot: grad and tmp only.
  EXPECT_EQ(ex->bf16StagingBytes(), 2u * ((n * 4 + 63) / 64 * 64));
}

/// One bf16 parameter "w" [4, 8] with an fp32 master, a bf16 gradient and
/// the update the mixed-precision pass emits: SumSquares, ClipCoef, AdamW on
/// the master, Cast into the parameter.
std::unique_ptr<fb::ProgramT> masterUpdateProgram(double maxNorm) {
  auto p = emptyProgram(1, 1, 2);
  StageBuilder s(*p->stages[0]);
  const uint32_t w = s.param("w", {4, 8});
  s.stage.buffers[w]->dtype = fb::DType::BF16;
  const uint32_t grad = s.buffer("grad.w", {4, 8}, fb::DType::BF16);
  const uint32_t m = s.buffer("m.w", {4, 8}), v = s.buffer("v.w", {4, 8});
  const uint32_t master = s.buffer("master.w", {4, 8});
  auto &param = *s.stage.params[0];
  param.grad_buffer = static_cast<int32_t>(grad);
  param.m_buffer = static_cast<int32_t>(m);
  param.v_buffer = static_cast<int32_t>(v);
  param.master_buffer = static_cast<int32_t>(master);
  const uint32_t lr = s.buffer("lr", {}), step = s.buffer("step", {});
  const uint32_t sumsq = s.buffer("sumsq", {}), norm = s.buffer("norm", {}),
                 coef = s.buffer("coef", {});
  s.updateOp(fb::Opcode::SumSquares, "sum_squares", {grad}, {sumsq});
  s.updateOp(fb::Opcode::ClipCoef, "clip", {sumsq}, {norm, coef}).max_norm =
      maxNorm;
  auto &adamw =
      s.updateOp(fb::Opcode::AdamW, "adamw.w",
                 {master, grad, m, v, lr, step, coef}, {master, m, v});
  adamw.beta1 = 0.9;
  adamw.beta2 = 0.95;
  adamw.adam_eps = 1e-8;
  adamw.weight_decay = 0.1;
  s.updateOp(fb::Opcode::Cast, "cast.w", {master}, {w});
  s.stage.lr = static_cast<int32_t>(lr);
  s.stage.step = static_cast<int32_t>(step);
  s.stage.grad_norm = static_cast<int32_t>(norm);
  return p;
}

TEST(MixedPrecisionExecutor, AdamWOnTheMasterThenCastIntoTheParameter) {
  auto p = masterUpdateProgram(/*maxNorm=*/0.5);
  fb::LoadedProgram loaded;
  auto ex = load(*p, loaded);
  ASSERT_TRUE(ex);
  const ParamView &pv = ex->params()[0];
  ASSERT_EQ(pv.masterBuffer, 4);
  // Init: fp32 values by global index in the master, rounded in `w`.
  std::vector<float> master(32);
  ParamInitializer init;
  init.kind = ParamInitializer::Kind::Normal;
  init.std = 0.2f;
  ASSERT_TRUE(
      initParamSlice(master.data(), "w", 7, init, {4, 8}, {0, 0}, {4, 8}).ok());
  EXPECT_EQ(getBuffer<float>(*ex, 4), master);
  EXPECT_EQ(getBuffer<uint16_t>(*ex, pv.buffer), rounded(master));
  // Model state: 2 (w) + 2 (grad) + 4 (master) + 4 + 4 (moments) bytes per
  // parameter, the ZeRO paper's 16.
  EXPECT_EQ(ex->modelStateBytes(), 16 * 32);

  const std::vector<uint16_t> grad = rounded(randomVector(32, 12, -0.3f, 0.3f));
  setBuffer(*ex, static_cast<uint32_t>(pv.gradBuffer), grad);
  std::vector<float> m(32, 0.0f), v(32, 0.0f);
  for (int64_t step = 1; step <= 2; ++step) {
    ASSERT_TRUE(ex->runUpdate(step, 1e-2f).ok());
    // The same update in fp32 on the widened gradient.
    const std::vector<float> g = widened(grad);
    const double sumsq = cpu::sumSquares(g.data(), 32);
    const cpu::ClipCoefficient clip =
        cpu::clipCoefficient(static_cast<float>(sumsq), 0.5);
    cpu::AdamWConfig cfg;
    cfg.lr = 1e-2f;
    cfg.step = step;
    cfg.gradScale = clip.coef;
    cfg.beta1 = 0.9;
    cfg.beta2 = 0.95;
    cfg.eps = 1e-8;
    cfg.weightDecay = 0.1;
    cpu::adamwStep(master.data(), g.data(), m.data(), v.data(), 32, cfg);
    EXPECT_EQ(getBuffer<float>(*ex, 4), master) << "step " << step;
    EXPECT_EQ(getBuffer<float>(*ex, static_cast<uint32_t>(pv.mBuffer)), m);
    EXPECT_EQ(getBuffer<float>(*ex, static_cast<uint32_t>(pv.vBuffer)), v);
    EXPECT_EQ(getBuffer<uint16_t>(*ex, pv.buffer), rounded(master));
    float norm = 0;
    std::memcpy(&norm,
                ex->bufferData(static_cast<uint32_t>(ex->stage().grad_norm())),
                4);
    EXPECT_EQ(norm, clip.norm);
  }
}

//===----------------------------------------------------------------------===//
// Checkpoints
//===----------------------------------------------------------------------===//

std::string tempPath(const char *name) {
  return ::testing::TempDir() + "/loom-bf16-" + std::to_string(::getpid()) +
         "-" + name + ".safetensors";
}

TEST(MixedPrecisionCheckpoint,
     SavesTheMasterAndLoadsItRoundedIntoTheParameter) {
  auto p = masterUpdateProgram(1.0);
  fb::LoadedProgram loaded;
  auto ex = load(*p, loaded);
  ASSERT_TRUE(ex);
  const ParamView pv = ex->params()[0];
  setBuffer(*ex, static_cast<uint32_t>(pv.gradBuffer),
            rounded(randomVector(32, 13, -0.3f, 0.3f)));
  ASSERT_TRUE(ex->runUpdate(1, 3e-2f).ok());
  const std::vector<float> master = getBuffer<float>(*ex, 4);
  const std::vector<uint16_t> weights = getBuffer<uint16_t>(*ex, pv.buffer);
  ASSERT_EQ(weights, rounded(master));
  // Some master values must differ from their bf16 rounding, or the check
  // that the file holds the master would prove nothing.
  EXPECT_NE(widened(weights), master);

  const std::string path = tempPath("master");
  ASSERT_TRUE(saveCheckpoint(*ex, path, 1).ok());
  SafetensorsFile file;
  ASSERT_TRUE(readSafetensors(path, file).ok());
  const SafeTensor *w = file.find("w");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->dtype, DType::F32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{4, 8}));
  std::vector<float> saved;
  ASSERT_TRUE(toFloat32(*w, saved).ok());
  EXPECT_EQ(saved, master);
  ASSERT_TRUE(file.find(expAvgName("w")));

  // A fresh executor (another seed) loads the same state.
  std::unique_ptr<Executor> other;
  ASSERT_TRUE(Executor::create(loaded, 0, 99, other).ok());
  EXPECT_NE(getBuffer<float>(*other, 4), master);
  int64_t steps = 0;
  Status s = loadCheckpoint(*other, path, &steps);
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(steps, 1);
  EXPECT_EQ(getBuffer<float>(*other, 4), master);
  EXPECT_EQ(getBuffer<uint16_t>(*other, pv.buffer), weights);
  EXPECT_EQ(getBuffer<float>(*other, static_cast<uint32_t>(pv.mBuffer)),
            getBuffer<float>(*ex, static_cast<uint32_t>(pv.mBuffer)));
  std::remove(path.c_str());
}

TEST(MixedPrecisionCheckpoint, AnEvaluationsBF16WeightsRoundAtLoadWidenAtSave) {
  // A bf16 parameter without master (an inference copy).
  auto p = emptyProgram(1, 1, 2);
  StageBuilder s(*p->stages[0]);
  const uint32_t w = s.param("w", {3, 5});
  s.stage.buffers[w]->dtype = fb::DType::BF16;
  fb::LoadedProgram loaded;
  auto ex = load(*p, loaded);
  ASSERT_TRUE(ex);
  std::vector<float> init(15);
  ParamInitializer normal;
  normal.kind = ParamInitializer::Kind::Normal;
  normal.std = 0.2f;
  ASSERT_TRUE(
      initParamSlice(init.data(), "w", 7, normal, {3, 5}, {0, 0}, {3, 5}).ok());
  EXPECT_EQ(getBuffer<uint16_t>(*ex, w), rounded(init));

  const std::vector<float> values = randomVector(15, 21);
  SafetensorsFile file;
  file.addF32("w", {3, 5}, values.data());
  const std::string in = tempPath("eval-in"), out = tempPath("eval-out");
  ASSERT_TRUE(writeSafetensors(in, file).ok());
  ASSERT_TRUE(loadCheckpoint(*ex, in).ok());
  EXPECT_EQ(getBuffer<uint16_t>(*ex, w), rounded(values));
  ASSERT_TRUE(saveCheckpoint(*ex, out).ok());
  SafetensorsFile back;
  ASSERT_TRUE(readSafetensors(out, back).ok());
  std::vector<float> saved;
  ASSERT_TRUE(toFloat32(*back.find("w"), saved).ok());
  EXPECT_EQ(saved, widened(rounded(values)));
  std::remove(in.c_str());
  std::remove(out.c_str());
}

//===----------------------------------------------------------------------===//
// Whole programs
//===----------------------------------------------------------------------===//

/// The CPU kernels with SumSquares staged like every other opcode.
class StagedOnlyKernels final : public cpu::CpuKernels {
public:
  bool handlesBF16Natively(program::Opcode) const override { return false; }
};

struct TrainedRun {
  std::vector<float> losses, norms;
  std::vector<std::vector<uint8_t>> buffers;
  uint64_t staging = 0;
};

TrainedRun train(const fb::ProgramT &p, int steps,
                 std::unique_ptr<KernelBackend> kernels = nullptr) {
  TrainedRun run;
  fb::LoadedProgram loaded;
  auto ex = load(p, loaded, std::move(kernels));
  if (!ex)
    return run;
  const int64_t n = ex->localBatch() * ex->model().seq();
  const auto inputs = randomIds(n, ex->model().vocab_size(), 5);
  const auto targets = randomIds(n, ex->model().vocab_size(), 6);
  for (int64_t step = 1; step <= steps; ++step) {
    TrainStepResult r;
    Status s = ex->trainStep(inputs.data(), targets.data(), step, 1e-2f, r);
    EXPECT_TRUE(s.ok()) << s.toString();
    run.losses.push_back(r.loss);
    run.norms.push_back(r.gradNorm);
  }
  for (uint32_t b = 0; b < ex->numBuffers(); ++b)
    run.buffers.push_back(getBuffer<uint8_t>(*ex, b));
  run.staging = ex->bf16StagingBytes();
  return run;
}

TEST(MixedPrecisionTraining, BF16GptTracksTheFp32OneAndLearns) {
  MiniGptDims d;
  d.B = 4;
  MiniGptTrainOptions o;
  o.microbatches = 2;
  const auto fp32 = miniGptTrain(d, o);
  auto bf16 = miniGptTrain(d, o);
  makeMixedPrecision(*bf16);
  const TrainedRun a = train(*fp32, 8), b = train(*bf16, 8);
  ASSERT_EQ(b.losses.size(), 8u);
  for (size_t i = 0; i < a.losses.size(); ++i) {
    EXPECT_TRUE(std::isfinite(b.losses[i]));
    // bf16 keeps 8 bits of mantissa: about 0.4% per rounding.
    EXPECT_NEAR(b.losses[i], a.losses[i], 2e-2 * a.losses[i]) << "step " << i;
    EXPECT_NEAR(b.norms[i], a.norms[i], 5e-2 * a.norms[i]) << "step " << i;
  }
  EXPECT_LT(b.losses.back(), b.losses.front() - 0.1f);
  EXPECT_GT(b.staging, 0u);
}

TEST(MixedPrecisionTraining, NativeSumSquaresEqualsTheStagedOne) {
  // The CPU backend reads bf16 gradients in SumSquares itself (the
  // handlesBF16Natively hook); staged or native, every bit must agree, and
  // the native path needs no staging for all gradients at once.
  MiniGptDims d;
  auto p = miniGptTrain(d);
  makeMixedPrecision(*p);
  const TrainedRun native = train(*p, 3);
  const TrainedRun staged = train(*p, 3, std::make_unique<StagedOnlyKernels>());
  EXPECT_EQ(native.losses, staged.losses);
  EXPECT_EQ(native.norms, staged.norms);
  EXPECT_EQ(native.buffers, staged.buffers);
  EXPECT_LT(native.staging, staged.staging);
}

TEST(MixedPrecisionTraining, DataParallelBF16GradientsOnOneRank) {
  // The data-parallel program's AllReduce(avg) of bf16 gradients on a
  // single rank (SingleRankCommunicator): the same bits as without it.
  MiniGptDims d;
  auto plain = miniGptTrain(d);
  makeMixedPrecision(*plain);
  auto dp = miniGptTrain(d);
  makeDataParallel(*dp, 1);
  makeMixedPrecision(*dp);
  const TrainedRun a = train(*plain, 3), b = train(*dp, 3);
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.norms, b.norms);
}

TEST(MixedPrecisionTraining, BF16EvaluationRuns) {
  // A forward-only bf16 program (no masters): the loss is an f32 scalar
  // close to the fp32 program's from the same init.
  auto fp32 = miniGpt();
  auto bf16 = miniGpt();
  makeMixedPrecision(*bf16);
  float losses[2];
  int k = 0;
  for (const fb::ProgramT *p : {fp32.get(), bf16.get()}) {
    fb::LoadedProgram loaded;
    auto ex = load(*p, loaded);
    ASSERT_TRUE(ex);
    const int64_t n = ex->localBatch() * ex->model().seq();
    setBuffer(*ex, static_cast<uint32_t>(ex->stage().tokens()),
              randomIds(n, ex->model().vocab_size(), 5));
    setBuffer(*ex, static_cast<uint32_t>(ex->stage().targets()),
              randomIds(n, ex->model().vocab_size(), 6));
    ASSERT_TRUE(ex->run().ok());
    ASSERT_TRUE(ex->readLoss(losses[k++]).ok());
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-2 * losses[0]);
}

TEST(MixedPrecisionTraining, GreedySamplingReadsBF16Logits) {
  // A bf16 bigram model: the logits are bf16, the sampler widens the row
  // and takes the same argmax (ties to the lower id, padded columns never).
  const int64_t B = 2, T = 4, V = 7, Vp = 9;
  auto p = bigramLm(B, T, V, Vp);
  makeMixedPrecision(*p);
  fb::LoadedProgram loaded;
  auto ex = load(*p, loaded);
  ASSERT_TRUE(ex);
  ASSERT_EQ(ex->bufferDType(ex->params()[0].buffer), fb::DType::BF16);
  std::vector<uint16_t> table(static_cast<size_t>(Vp * Vp), 0);
  for (int64_t v = 0; v < Vp; ++v) {
    table[v * Vp + (v + 1) % V] = floatToBF16(1.0f);
    table[v * Vp + (v + 3) % V] = floatToBF16(1.0f);
    for (int64_t c = V; c < Vp; ++c)
      table[v * Vp + c] = floatToBF16(100.0f);
  }
  setBuffer(*ex, ex->params()[0].buffer, table);
  std::vector<int32_t> tokens = {2, 5};
  Status s = sampleTokens(*ex, tokens, 6);
  ASSERT_TRUE(s.ok()) << s.toString();
  std::vector<int32_t> expected = {2, 5};
  for (int i = 0; i < 6; ++i) {
    const int32_t v = expected.back();
    expected.push_back(std::min((v + 1) % 7, (v + 3) % 7));
  }
  EXPECT_EQ(tokens, expected);
}

} // namespace

TEST(MixedPrecisionTraining, BF16PipelineStageAtGpt2HeadSize) {
  // The CPU side of CudaExecutorTest.MixedPrecisionAtGpt2HeadSize: a bf16
  // pipeline stage with head size 64 and T past one flash tile trains (the
  // reference the device's native bf16 kernels are held to).
  MiniGptDims d;
  d.B = 2, d.T = 80, d.C = 128, d.NH = 2;
  MiniGptTrainOptions o;
  o.microbatches = 2;
  auto p = miniGptTrain(d, o);
  makeSingleChunkPipeline(*p);
  makeMixedPrecision(*p);
  const TrainedRun run = train(*p, 4);
  ASSERT_EQ(run.losses.size(), 4u);
  for (float l : run.losses)
    EXPECT_TRUE(std::isfinite(l));
  EXPECT_LT(run.losses.back(), run.losses.front());
}
