//===- BF16KernelEmulationTest.cpp - kernels_bf16.cu on the CPU -----------===//
//
// The source of runtime/cuda/kernels_bf16.cu (the CUDA backend's native
// bf16 kernels), compiled as C++ on CudaEmulation.h's host threads, against
// what the executor's staging computes on the CPU backend for the same
// instruction: cpu::CpuKernels' fp32 kernel on the widened bf16 inputs,
// bf16 outputs rounded to nearest even. Runs on every build, GPU or not.
//
// Tolerance (derived, not fitted): both sides compute in fp32 from the same
// inputs, in different summation orders, so their fp32 results differ by
// fp32 round-off (relative ~1e-6 of the values summed). Rounding those to
// bf16 either lands on the same bf16 value or, when they straddle a
// rounding boundary, on neighbours one bf16 ulp apart: at most 2^-7 |x|
// (bf16 keeps 8 significant bits, so an ulp is between 2^-8 and 2^-7 of the
// value). A bf16 output is therefore held to
//     |got - ref| <= 2^-7 |ref| + 1e-5 max|ref|,
// the second term for results near zero made by cancellation (layer norm
// and cross-entropy gradients). fp32 outputs (the loss, the sum of
// squares, AdamW's masters and moments) are held to fp32 round-off, 1e-5
// relative.
//
// Also reduce_members.cu (the NCCL allReduceAmong's device reduction)
// against the host path's arithmetic: the same bits.
//
// The .cu files are included inside namespace loom_emulated, so its functions
// do not collide with the real ones loom_cuda links in.
//
//===----------------------------------------------------------------------===//
#include "CudaEmulation.h"
#include "TestUtil.h"

#include "runtime/core/bfloat16.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/kernels_bf16.h"
#include "runtime/cuda/reduce_members.h"

#include <cmath>

namespace loom_emulated {
namespace loom {
using ::loom::Status;
namespace program = ::loom::program;
namespace cuda {
using ::loom::cuda::AdamWHyper;
using ::loom::cuda::FloatRef;
using ::loom::cuda::kMixedSumBlocks;
using ::loom::cuda::LayernormRowStatistics;
using ::loom::cuda::MixedSpan;
namespace launch = ::cuda_emulation::launch;
} // namespace cuda
} // namespace loom
#include "runtime/cuda/kernels_bf16.cu"
#include "runtime/cuda/reduce_members.cu"
} // namespace loom_emulated

using namespace loom;
using namespace loom::test;
namespace emulated = loom_emulated::loom::cuda;
using cuda::FloatRef;

namespace {

constexpr cudaStream_t kNoStream = nullptr;

/// A bf16 tensor: its storage and the exact fp32 values it holds.
struct BF16Tensor {
  std::vector<uint16_t> bits;
  std::vector<float> values;
  explicit BF16Tensor(int64_t n) : bits(n), values(n) {}
  BF16Tensor(const std::vector<float> &v) : bits(v.size()), values(v.size()) {
    floatsToBF16(bits.data(), v.data(), static_cast<int64_t>(v.size()));
    for (size_t i = 0; i < v.size(); ++i)
      values[i] = bf16ToFloat(bits[i]);
  }
  FloatRef ref() { return {bits.data(), true}; }
  /// The stored values, widened.
  std::vector<float> widened() const {
    std::vector<float> v(bits.size());
    for (size_t i = 0; i < bits.size(); ++i)
      v[i] = bf16ToFloat(bits[i]);
    return v;
  }
};

BF16Tensor randomBF16(int64_t n, uint32_t seed, float lo = -1, float hi = 1) {
  return BF16Tensor(randomVector(n, seed, lo, hi));
}

FloatRef f32(std::vector<float> &v) { return {v.data(), false}; }

/// What the staging stores into a bf16 buffer: the fp32 result rounded.
std::vector<float> rounded(const std::vector<float> &v) {
  return BF16Tensor(v).values;
}

/// The bf16 tolerance of the file comment.
void expectBF16Close(const BF16Tensor &got, const std::vector<float> &ref32,
                     const char *what) {
  const std::vector<float> ref = rounded(ref32), g = got.widened();
  ASSERT_EQ(g.size(), ref.size()) << what;
  double maxAbs = 0;
  for (float x : ref)
    maxAbs = std::max(maxAbs, std::fabs(static_cast<double>(x)));
  int bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double tol = std::ldexp(std::fabs(ref[i]), -7) + 1e-5 * maxAbs;
    if (!(std::fabs(static_cast<double>(g[i]) - ref[i]) <= tol) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: " << g[i] << " vs " << ref[i]
                    << " (tolerance " << tol << ")";
  }
}

void expectF32Close(const std::vector<float> &got,
                    const std::vector<float> &ref, const char *what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_NEAR(got[i], ref[i], 1e-5 * std::max(1.0f, std::fabs(ref[i])))
        << what << "[" << i << "]";
}

cpu::CpuKernels cpuKernels;

} // namespace

TEST(BF16KernelEmulation, AddBroadcastAndInPlaceAccumulation) {
  const int64_t outer = 5, inner = 70, n = outer * inner;
  BF16Tensor a = randomBF16(n, 1), b = randomBF16(inner, 2),
             same = randomBF16(n, 3);
  // Broadcast add into a fresh output.
  BF16Tensor out(n);
  ASSERT_TRUE(
      emulated::mixedAdd(out.ref(), a.ref(), b.ref(), n, inner, kNoStream)
          .ok());
  std::vector<float> ref(n);
  ASSERT_TRUE(cpuKernels
                  .addBroadcast(ref.data(), a.values.data(), b.values.data(),
                                outer, inner)
                  .ok());
  expectBF16Close(out, ref, "addBroadcast");
  // Gradient accumulation: out aliases the lhs (Add's in-place operand).
  std::vector<float> acc = a.values;
  ASSERT_TRUE(
      cpuKernels.add(acc.data(), acc.data(), same.values.data(), n).ok());
  ASSERT_TRUE(
      emulated::mixedAdd(a.ref(), a.ref(), same.ref(), n, n, kNoStream).ok());
  expectBF16Close(a, acc, "add in place");
  // A bf16 gradient added into an fp32 accumulator.
  std::vector<float> master = randomVector(n, 4), master0 = master;
  ASSERT_TRUE(
      emulated::mixedAdd(f32(master), f32(master), same.ref(), n, n, kNoStream)
          .ok());
  ASSERT_TRUE(
      cpuKernels.add(master0.data(), master0.data(), same.values.data(), n)
          .ok());
  expectF32Close(master, master0, "fp32 += bf16");
}

TEST(BF16KernelEmulation, PlainBF16AddsEightAtATime) {
  // A size 8 divides with 16-byte aligned operands takes the 8-wide kernel
  // (past one block of threads); each element is still its fp32 sum
  // rounded once: bit for bit the reference, fresh or in place.
  const int64_t n = 8 * 300;
  BF16Tensor a = randomBF16(n, 5), b = randomBF16(n, 6), out(n);
  for (BF16Tensor *t : {&a, &b, &out})
    ASSERT_EQ(reinterpret_cast<uintptr_t>(t->bits.data()) % 16, 0u);
  std::vector<uint16_t> want(n);
  for (int64_t i = 0; i < n; ++i)
    want[i] = floatToBF16(a.values[i] + b.values[i]);
  ASSERT_TRUE(
      emulated::mixedAdd(out.ref(), a.ref(), b.ref(), n, n, kNoStream).ok());
  EXPECT_EQ(out.bits, want);
  ASSERT_TRUE(
      emulated::mixedAdd(a.ref(), a.ref(), b.ref(), n, n, kNoStream).ok());
  EXPECT_EQ(a.bits, want);
}

TEST(BF16KernelEmulation, GeluEightAtATimeRoundsTheOneElementMath) {
  // bf16 in and out, a size 8 divides: the 8-wide kernels. Each result is
  // the one-element kernel's fp32 value (here with an fp32 output, which
  // takes that kernel) rounded once: equal bit for bit.
  const int64_t n = 8 * 300;
  BF16Tensor x = randomBF16(n, 31, -4, 4), dy = randomBF16(n, 32), y(n),
             dx(n);
  std::vector<float> y32(n), dx32(n);
  ASSERT_TRUE(emulated::mixedGeluForward(y.ref(), x.ref(), n, kNoStream).ok());
  ASSERT_TRUE(emulated::mixedGeluForward(f32(y32), x.ref(), n, kNoStream).ok());
  ASSERT_TRUE(
      emulated::mixedGeluBackward(dx.ref(), x.ref(), dy.ref(), n, kNoStream)
          .ok());
  ASSERT_TRUE(
      emulated::mixedGeluBackward(f32(dx32), x.ref(), dy.ref(), n, kNoStream)
          .ok());
  EXPECT_EQ(y.bits, BF16Tensor(y32).bits);
  EXPECT_EQ(dx.bits, BF16Tensor(dx32).bits);
}

TEST(BF16KernelEmulation, ReduceLeadingAndFill) {
  // Rows past two 128-row chunks (with a tail), columns past one block: 300
  // columns a thread each, 264 and 776 (multiples of 8) 8 a thread in
  // 16-byte loads, the last block part full.
  const int64_t outer = 300;
  for (const int64_t inner : {300, 264, 776}) {
    SCOPED_TRACE("inner " + std::to_string(inner));
    BF16Tensor x = randomBF16(outer * inner, 5), db(inner);
    std::vector<double> partials(emulated::rowChunks(outer) * inner);
    ASSERT_TRUE(emulated::mixedColumnSum(db.ref(), x.ref(), outer, inner,
                                         partials.data(), kNoStream)
                    .ok());
    std::vector<float> ref(inner);
    ASSERT_TRUE(
        cpuKernels.reduceLeading(ref.data(), x.values.data(), outer, inner)
            .ok());
    expectBF16Close(db, ref, "reduceLeading");
  }
  BF16Tensor filled(300);
  ASSERT_TRUE(emulated::mixedFill(filled.ref(), 0.1f, 300, kNoStream).ok());
  expectBF16Close(filled, std::vector<float>(300, 0.1f), "fill");
  EXPECT_EQ(filled.bits[299], floatToBF16(0.1f));
}

TEST(BF16KernelEmulation, GeluForwardAndBackward) {
  const int64_t n = 600;
  BF16Tensor x = randomBF16(n, 6, -4, 4), dout = randomBF16(n, 7), y(n), dx(n);
  ASSERT_TRUE(emulated::mixedGeluForward(y.ref(), x.ref(), n, kNoStream).ok());
  ASSERT_TRUE(
      emulated::mixedGeluBackward(dx.ref(), x.ref(), dout.ref(), n, kNoStream)
          .ok());
  std::vector<float> ry(n), rdx(n);
  ASSERT_TRUE(cpuKernels.geluForward(ry.data(), x.values.data(), n).ok());
  ASSERT_TRUE(
      cpuKernels
          .geluBackward(rdx.data(), x.values.data(), dout.values.data(), n)
          .ok());
  expectBF16Close(y, ry, "gelu");
  expectBF16Close(dx, rdx, "geluGrad");
  // In place (GeluGrad may write over its input).
  BF16Tensor inPlace = dout;
  ASSERT_TRUE(emulated::mixedGeluBackward(inPlace.ref(), x.ref(), inPlace.ref(),
                                          n, kNoStream)
                  .ok());
  expectBF16Close(inPlace, rdx, "geluGrad in place");
}

TEST(BF16KernelEmulation, EmbeddingRowsAndDeterministicGradient) {
  const int64_t V = 23, C = 300, N = 40;
  BF16Tensor table = randomBF16(V * C, 8), dout = randomBF16(N * C, 9);
  const auto ids = randomIds(N, V, 10);
  BF16Tensor out(N * C), dtable(V * C);
  ASSERT_TRUE(emulated::mixedEmbeddingForward(
                  out.ref(), ids.data(), table.ref(), N, 0, V, C, kNoStream)
                  .ok());
  std::vector<float> ref(N * C);
  ASSERT_TRUE(cpuKernels
                  .embeddingForward(ref.data(), ids.data(), table.values.data(),
                                    N, V, C)
                  .ok());
  EXPECT_EQ(out.widened(), ref); // a gather: exact
  // Vocab-parallel: rows [8, 16) of the table on this rank.
  BF16Tensor rows(std::vector<float>(table.values.begin() + 8 * C,
                                     table.values.begin() + 16 * C));
  ASSERT_TRUE(emulated::mixedEmbeddingForward(out.ref(), ids.data(), rows.ref(),
                                              N, 8, 8, C, kNoStream)
                  .ok());
  ASSERT_TRUE(cpuKernels
                  .embeddingForwardRows(ref.data(), ids.data(),
                                        rows.values.data(), N, V, 8, 8, C)
                  .ok());
  EXPECT_EQ(out.widened(), ref);
  // The gradient accumulates repeated ids in token order in fp32 and
  // rounds once; rows no token hits are zero (overwritten, not kept). Over
  // 2500 tokens (three chunks of the stable token list, ids repeating
  // across them; rows 21 and 22 never named) the sums are the CPU
  // kernel's, in its order: bit for bit once rounded.
  const int64_t NG = 2500;
  BF16Tensor doutG = randomBF16(NG * C, 28);
  auto idsG = randomIds(NG, 21, 29);
  dtable = randomBF16(V * C, 27);
  std::vector<int32_t> work(
      static_cast<size_t>(emulated::embeddingGradWorkspaceInts(NG, V)), -7);
  ASSERT_TRUE(emulated::mixedEmbeddingBackward(dtable.ref(), doutG.ref(),
                                               idsG.data(), NG, V, C,
                                               work.data(), kNoStream)
                  .ok());
  std::vector<float> rdt(V * C);
  ASSERT_TRUE(cpuKernels
                  .embeddingBackward(rdt.data(), doutG.values.data(),
                                     idsG.data(), NG, V, C)
                  .ok());
  EXPECT_EQ(dtable.bits, BF16Tensor(rdt).bits);
  // fp32 (the fp32 path's kernel too), where the order of the sums shows:
  // each row's tokens in position order, across the chunks, as the CPU.
  std::vector<float> dout32 = randomVector(NG * C, 30), dt32(V * C, -1.0f),
                     rdt32(V * C);
  ASSERT_TRUE(emulated::mixedEmbeddingBackward(f32(dt32), f32(dout32),
                                               idsG.data(), NG, V, C,
                                               work.data(), kNoStream)
                  .ok());
  ASSERT_TRUE(cpuKernels
                  .embeddingBackward(rdt32.data(), dout32.data(), idsG.data(),
                                     NG, V, C)
                  .ok());
  EXPECT_EQ(dt32, rdt32);
}

/// Layer norm forward and gradient of N x C against the CPU kernels.
static void checkLayerNorm(int64_t N, int64_t C) {
  const std::string shape =
      " (N " + std::to_string(N) + ", C " + std::to_string(C) + ")";
  BF16Tensor x = randomBF16(N * C, 11, -2, 3), w = randomBF16(C, 12),
             b = randomBF16(C, 13), dout = randomBF16(N * C, 14);
  BF16Tensor y(N * C), mean(N), rstd(N), dx(N * C), dw(C), dbias(C);
  std::vector<float> mean32(N), rstd32(N);
  const float eps = 1e-5f;
  ASSERT_TRUE(emulated::mixedLayernormForward(
                  y.ref(), mean.ref(), rstd.ref(), nullptr, nullptr, x.ref(),
                  w.ref(), b.ref(), N, C, eps, kNoStream)
                  .ok());
  std::vector<float> ry(N * C), rm(N), rr(N);
  ASSERT_TRUE(cpuKernels
                  .layernormForward(ry.data(), rm.data(), rr.data(),
                                    x.values.data(), w.values.data(),
                                    b.values.data(), N, C, eps)
                  .ok());
  expectBF16Close(y, ry, ("layernorm" + shape).c_str());
  expectBF16Close(mean, rm, ("mean" + shape).c_str());
  expectBF16Close(rstd, rr, ("rstd" + shape).c_str());
  // The gradient: fp32 statistics recomputed into workspace, then the
  // backward kernels (as CudaKernels runs a LayerNormGrad its one-pass
  // kernel does not take).
  ASSERT_TRUE(emulated::mixedLayernormForward(
                  {}, mean.ref(), rstd.ref(), mean32.data(), rstd32.data(),
                  x.ref(), w.ref(), {}, N, C, eps, kNoStream)
                  .ok());
  std::vector<float> partials(2 * emulated::rowChunks(N) * C);
  cuda::LayernormRowStatistics given;
  given.mean32 = mean32.data(), given.rstd32 = rstd32.data();
  ASSERT_TRUE(emulated::mixedLayernormBackward(
                  dx.ref(), dw.ref(), dbias.ref(), dout.ref(), x.ref(), w.ref(),
                  given, partials.data(), N, C, kNoStream)
                  .ok());
  // Where the one-pass kernel runs, it computes the statistics itself from
  // the rows it reads (no statistics kernel before it): the same bits
  // everywhere, and into the scratch buffers the forward's. The two-pass
  // kernels need the forward's, and say so.
  const bool onePass = emulated::layernormBackwardOnePass(
      N, C, dx.ref(), dout.ref(), x.ref(), w.ref());
  EXPECT_EQ(onePass, C % 8 == 0) << shape;
  BF16Tensor ownDx(N * C), ownDw(C), ownDb(C), ownMean(N), ownRstd(N);
  cuda::LayernormRowStatistics own;
  own.eps = eps, own.mean = ownMean.ref(), own.rstd = ownRstd.ref();
  const Status ownStatus = emulated::mixedLayernormBackward(
      ownDx.ref(), ownDw.ref(), ownDb.ref(), dout.ref(), x.ref(), w.ref(), own,
      partials.data(), N, C, kNoStream);
  if (onePass) {
    ASSERT_TRUE(ownStatus.ok()) << ownStatus.message();
    EXPECT_EQ(ownDx.bits, dx.bits) << "dinp, own statistics" << shape;
    EXPECT_EQ(ownDw.bits, dw.bits) << "dweight, own statistics" << shape;
    EXPECT_EQ(ownDb.bits, dbias.bits) << "dbias, own statistics" << shape;
    EXPECT_EQ(ownMean.bits, mean.bits) << "mean scratch" << shape;
    EXPECT_EQ(ownRstd.bits, rstd.bits) << "rstd scratch" << shape;
  } else {
    EXPECT_NE(ownStatus.message().find("needs the forward's fp32 statistics"),
              std::string::npos)
        << ownStatus.message();
  }
  // Half the forward's statistics is refused, whichever kernels run.
  cuda::LayernormRowStatistics half = given;
  half.rstd32 = nullptr;
  const Status halfStatus = emulated::mixedLayernormBackward(
      ownDx.ref(), ownDw.ref(), ownDb.ref(), dout.ref(), x.ref(), w.ref(), half,
      partials.data(), N, C, kNoStream);
  EXPECT_NE(halfStatus.message().find(
                onePass ? "give both fp32 statistics or neither"
                        : "needs the forward's fp32 statistics"),
            std::string::npos)
      << halfStatus.message() << shape;
  std::vector<float> rdx(N * C), rdw(C), rdb(C);
  ASSERT_TRUE(cpuKernels
                  .layernormGrad(rdx.data(), rdw.data(), rdb.data(),
                                 dout.values.data(), x.values.data(),
                                 w.values.data(), rm.data(), rr.data(), N, C,
                                 eps)
                  .ok());
  expectF32Close(mean32, rm, ("mean32" + shape).c_str());
  expectF32Close(rstd32, rr, ("rstd32" + shape).c_str());
  expectBF16Close(dx, rdx, ("layernormGrad dinp" + shape).c_str());
  expectBF16Close(dw, rdw, ("layernormGrad dweight" + shape).c_str());
  expectBF16Close(dbias, rdb, ("layernormGrad dbias" + shape).c_str());
}

TEST(BF16KernelEmulation, LayerNormForwardAndGradient) {
  // N past two 128-row chunks of the parameter gradients, with a tail.
  // C = 100 (not a multiple of 8): the two-pass gradient kernels; C = 264
  // and 768: the fused one-pass kernel (8-column groups: 33, so lane 0
  // holds two and the others one; 96, GPT-2's three per lane).
  for (int64_t C : {100, 264, 768})
    checkLayerNorm(260, C);
}

namespace {

bool sameBits(const BF16Tensor &a, const BF16Tensor &b) {
  return a.bits == b.bits;
}

} // namespace

TEST(BF16KernelEmulation, ResidualLayerNormKernelsGiveTheInstructionsBits) {
  // residual_norms.h's kernels against the two instructions' kernels
  // (mixedAdd, mixedLayernormForward / mixedLayernormBackward), bit for
  // bit: C = 264 (33 groups: lane 0 holds two) and 768 (GPT-2); N past two
  // 128-row chunks of the parameter gradients. Then with the sum over one
  // of the rows read (as the buffer planner lays some out).
  for (int64_t C : {264, 768}) {
    SCOPED_TRACE("C=" + std::to_string(C));
    const int64_t N = 260;
    const float eps = 1e-5f;
    BF16Tensor a = randomBF16(N * C, 31, -2, 2), b = randomBF16(N * C, 32),
               w = randomBF16(C, 33, 0.5f, 1.5f), bias = randomBF16(C, 34);
    // Forward, the instructions: s = a + b; y = LayerNorm(s).
    BF16Tensor s(N * C), y(N * C);
    std::vector<float> mean(N), rstd(N);
    ASSERT_TRUE(
        emulated::mixedAdd(s.ref(), a.ref(), b.ref(), N * C, N * C, kNoStream)
            .ok());
    ASSERT_TRUE(emulated::mixedLayernormForward(
                    y.ref(), f32(mean), f32(rstd), nullptr, nullptr, s.ref(),
                    w.ref(), bias.ref(), N, C, eps, kNoStream)
                    .ok());
    ASSERT_TRUE(emulated::residualLayernormFits(
        C, {s.ref(), y.ref(), a.ref(), b.ref(), w.ref(), bias.ref()}));
    BF16Tensor fusedS(N * C), fusedY(N * C);
    ASSERT_TRUE(emulated::residualAddLayernormForward(
                    fusedS.ref(), fusedY.ref(), a.ref(), b.ref(), w.ref(),
                    bias.ref(), N, C, eps, kNoStream)
                    .ok());
    EXPECT_TRUE(sameBits(fusedS, s)) << "the sum";
    EXPECT_TRUE(sameBits(fusedY, y)) << "the layer norm";
    BF16Tensor overA = a, overAY(N * C);
    ASSERT_TRUE(emulated::residualAddLayernormForward(
                    overA.ref(), overAY.ref(), overA.ref(), b.ref(), w.ref(),
                    bias.ref(), N, C, eps, kNoStream)
                    .ok());
    EXPECT_TRUE(sameBits(overA, s)) << "the sum over a";
    EXPECT_TRUE(sameBits(overAY, y)) << "the layer norm of the sum over a";

    // Backward, the instructions: dx, dw, db = LayerNormGrad(dy, s, w);
    // sum = dres + dx.
    BF16Tensor dy = randomBF16(N * C, 35), dres = randomBF16(N * C, 36);
    BF16Tensor dx(N * C), dw(C), db(C), sum(N * C);
    std::vector<float> partials(2 * emulated::rowChunks(N) * C);
    cuda::LayernormRowStatistics given;
    given.mean32 = mean.data(), given.rstd32 = rstd.data();
    ASSERT_TRUE(emulated::mixedLayernormBackward(
                    dx.ref(), dw.ref(), db.ref(), dy.ref(), s.ref(), w.ref(),
                    given, partials.data(), N, C, kNoStream)
                    .ok());
    ASSERT_TRUE(emulated::mixedAdd(sum.ref(), dres.ref(), dx.ref(), N * C,
                                   N * C, kNoStream)
                    .ok());
    // Given the forward's statistics, and computing them in the kernel (as
    // CudaKernels runs it).
    cuda::LayernormRowStatistics own;
    own.eps = eps;
    for (const cuda::LayernormRowStatistics *stats : {&given, &own}) {
      const std::string which = stats == &own ? ", own statistics" : "";
      BF16Tensor fusedSum(N * C), fusedDw(C), fusedDb(C);
      ASSERT_TRUE(emulated::layernormBackwardAddResidual(
                      fusedSum.ref(), fusedDw.ref(), fusedDb.ref(), dres.ref(),
                      dy.ref(), s.ref(), w.ref(), *stats, partials.data(), N, C,
                      kNoStream)
                      .ok());
      EXPECT_TRUE(sameBits(fusedSum, sum)) << "the gradient sum" << which;
      EXPECT_TRUE(sameBits(fusedDw, dw)) << "dweight" << which;
      EXPECT_TRUE(sameBits(fusedDb, db)) << "dbias" << which;
    }
    BF16Tensor overDy = dy, overDw(C), overDb(C);
    ASSERT_TRUE(emulated::layernormBackwardAddResidual(
                    overDy.ref(), overDw.ref(), overDb.ref(), dres.ref(),
                    overDy.ref(), s.ref(), w.ref(), own, partials.data(), N, C,
                    kNoStream)
                    .ok());
    EXPECT_TRUE(sameBits(overDy, sum)) << "the gradient sum over dout";
    EXPECT_TRUE(sameBits(overDw, dw)) << "dweight, the sum over dout";
  }
  // What the kernels do not take: a width that is no multiple of 8, an
  // operand 2 bytes off 16-byte alignment, an fp32 operand.
  BF16Tensor t = randomBF16(8 * 72, 37);
  EXPECT_FALSE(emulated::residualLayernormFits(36, {t.ref()}));
  EXPECT_FALSE(
      emulated::residualLayernormFits(64, {FloatRef{t.bits.data() + 1, true}}));
  std::vector<float> f(64);
  EXPECT_FALSE(emulated::residualLayernormFits(64, {f32(f)}));
  // Called anyway, they say so instead of launching.
  BF16Tensor o(8 * 36);
  const Status fwd = emulated::residualAddLayernormForward(
      o.ref(), o.ref(), t.ref(), t.ref(), t.ref(), t.ref(), 8, 36, 1e-5f,
      kNoStream);
  EXPECT_NE(fwd.message().find("residual Add + LayerNorm kernel takes "
                               "16-byte aligned bf16 rows of a multiple of 8 "
                               "columns up to 1024, got 36"),
            std::string::npos)
      << fwd.message();
  std::vector<float> stats(16), partials(2 * 36);
  cuda::LayernormRowStatistics given;
  given.mean32 = stats.data(), given.rstd32 = stats.data() + 8;
  const Status bwd = emulated::layernormBackwardAddResidual(
      o.ref(), o.ref(), o.ref(), t.ref(), t.ref(), t.ref(), t.ref(), given,
      partials.data(), 8, 36, kNoStream);
  EXPECT_NE(bwd.message().find("LayerNorm gradient + residual Add kernel "
                               "takes 16-byte aligned bf16 rows of a multiple "
                               "of 8 columns up to 1024, got 8 x 36"),
            std::string::npos)
      << bwd.message();
}

TEST(BF16KernelEmulation, SoftmaxForwardAndBackward) {
  const int64_t N = 6, C = 45;
  BF16Tensor x = randomBF16(N * C, 15, -3, 3), dout = randomBF16(N * C, 16);
  BF16Tensor y(N * C), dx(N * C);
  ASSERT_TRUE(
      emulated::mixedSoftmaxForward(y.ref(), x.ref(), N, C, kNoStream).ok());
  std::vector<float> ry(N * C), rdx(N * C);
  ASSERT_TRUE(cpuKernels.softmaxForward(ry.data(), x.values.data(), N, C).ok());
  expectBF16Close(y, ry, "softmax");
  // The backward reads the stored (rounded) probabilities, as staging does.
  const std::vector<float> yStored = y.widened();
  ASSERT_TRUE(emulated::mixedSoftmaxBackward(dx.ref(), dout.ref(), y.ref(), N,
                                             C, kNoStream)
                  .ok());
  ASSERT_TRUE(
      cpuKernels
          .softmaxBackward(rdx.data(), dout.values.data(), yStored.data(), N, C)
          .ok());
  expectBF16Close(dx, rdx, "softmaxGrad");
  // In place over the input.
  BF16Tensor inPlace = x;
  ASSERT_TRUE(emulated::mixedSoftmaxForward(inPlace.ref(), inPlace.ref(), N, C,
                                            kNoStream)
                  .ok());
  expectBF16Close(inPlace, ry, "softmax in place");
}

namespace {

/// Cross-entropy loss and gradient over N rows of V bf16 logits, the last
/// V - validV columns vocabulary padding, against the CPU kernels. V % 8 ==
/// 0 takes the block-per-row kernels (16-byte loads), any other V the
/// warp-per-row ones.
void expectCrossEntropyMatchesCpu(int64_t N, int64_t V, int64_t validV,
                                  uint32_t seed) {
  SCOPED_TRACE("N=" + std::to_string(N) + " V=" + std::to_string(V) +
               " validV=" + std::to_string(validV));
  BF16Tensor logits = randomBF16(N * V, seed, -4, 4);
  // A large logit in a late column of row 0: its running max grows late.
  logits = BF16Tensor([&] {
    std::vector<float> v = logits.values;
    v[validV - 1] = 30.0f;
    return v;
  }());
  const auto targets = randomIds(N, validV, seed + 1);
  std::vector<float> loss(1), losses(N), dloss = {0.75f};
  const double tokens = 4 * N; // this rank's share of 4x the tokens
  ASSERT_TRUE(emulated::mixedCrossEntropyForward(
                  f32(loss), losses.data(), logits.ref(), targets.data(), N, V,
                  validV, static_cast<float>(N / tokens), kNoStream)
                  .ok());
  std::vector<float> rloss(1), rlosses(N);
  ASSERT_TRUE(cpuKernels
                  .crossEntropyForward(rloss.data(), rlosses.data(),
                                       logits.values.data(), targets.data(), N,
                                       V, validV, tokens)
                  .ok());
  expectF32Close(loss, rloss, "loss");
  expectF32Close(losses, rlosses, "row losses");
  // The gradient over the logits' own bytes (CrossEntropyGrad may alias);
  // the padding columns hold garbage it must not read.
  BF16Tensor dlogits = logits;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = validV; c < V; ++c)
      dlogits.bits[n * V + c] = 0x7f80; // +inf
  ASSERT_TRUE(emulated::mixedCrossEntropyBackward(
                  dlogits.ref(), dlogits.ref(), targets.data(), N, V, validV,
                  f32(dloss), static_cast<float>(N / tokens), kNoStream)
                  .ok());
  std::vector<float> rd(N * V);
  ASSERT_TRUE(cpuKernels
                  .crossEntropyBackward(rd.data(), dloss.data(),
                                        logits.values.data(), targets.data(), N,
                                        V, validV, tokens)
                  .ok());
  expectBF16Close(dlogits, rd, "crossEntropyGrad");
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = validV; c < V; ++c)
      EXPECT_EQ(dlogits.bits[n * V + c], 0u) << "padding column " << c;
}

} // namespace

TEST(BF16KernelEmulation, CrossEntropyWithPaddingAndTokenShare) {
  expectCrossEntropyMatchesCpu(7, 50, 45, 17); // warp per row
  expectCrossEntropyMatchesCpu(5, 64, 45, 19); // block per row
  // More 8-column groups than the block has threads: each thread takes
  // several, and the gradient walks them back to front.
  expectCrossEntropyMatchesCpu(2, 8 * 512 * 2 + 16, 8 * 512 * 2 + 3, 21);
}

TEST(BF16KernelEmulation, CrossEntropyWithGradGivesTheTwoKernelsBits) {
  // cross_entropy_fusion.h: the fused kernel's loss, row losses and
  // gradient against mixedCrossEntropyForward then
  // mixedCrossEntropyBackward, bit for bit; with the gradient apart from the
  // logits and over them; a target outside the vocabulary gives a NaN row.
  struct Case {
    int64_t N, V, validV;
  };
  for (const Case &c :
       {Case{5, 64, 45}, Case{2, 8 * 512 * 2 + 16, 8 * 512 * 2 + 3},
        Case{3, 50304, 50257}}) {
    for (const bool inPlace : {false, true}) {
      SCOPED_TRACE("V=" + std::to_string(c.V) +
                   (inPlace ? " in place" : " apart"));
      const int64_t N = c.N, V = c.V, validV = c.validV;
      BF16Tensor logits = randomBF16(N * V, 31, -4, 4);
      std::vector<int32_t> targets = randomIds(N, validV, 32);
      targets[N - 1] = static_cast<int32_t>(validV); // padding: no target
      std::vector<float> dloss = {0.5f};
      const float lossScale = 0.25f, dlossScale = 0.25f;
      // 1. The two kernels.
      std::vector<float> loss(1), losses(N);
      ASSERT_TRUE(emulated::mixedCrossEntropyForward(
                      f32(loss), losses.data(), logits.ref(), targets.data(), N,
                      V, validV, lossScale, kNoStream)
                      .ok());
      BF16Tensor dlogits = logits;
      ASSERT_TRUE(emulated::mixedCrossEntropyBackward(
                      dlogits.ref(), logits.ref(), targets.data(), N, V, validV,
                      f32(dloss), dlossScale, kNoStream)
                      .ok());
      // 2. The fused one.
      BF16Tensor fusedLogits = logits, apart = logits;
      BF16Tensor &fusedGrad = inPlace ? fusedLogits : apart;
      std::vector<float> fusedLoss(1), fusedLosses(N);
      ASSERT_TRUE(emulated::crossEntropyWithGradFits(
          V, {fusedLogits.ref(), fusedGrad.ref()}));
      ASSERT_TRUE(emulated::mixedCrossEntropyWithGrad(
                      f32(fusedLoss), fusedLosses.data(), fusedGrad.ref(),
                      fusedLogits.ref(), targets.data(), N, V, validV,
                      lossScale, f32(dloss), dlossScale, kNoStream)
                      .ok());
      EXPECT_TRUE(std::isnan(fusedLosses[N - 1]));
      EXPECT_TRUE(std::isnan(fusedLoss[0]));
      for (int64_t n = 0; n + 1 < N; ++n)
        EXPECT_EQ(fusedLosses[n], losses[n]) << "row " << n; // exactly
      EXPECT_EQ(fusedGrad.bits, dlogits.bits);
    }
  }
  // A vocabulary that is not a multiple of 8 is refused, with the reason.
  BF16Tensor odd = randomBF16(2 * 50, 33);
  const std::vector<int32_t> targets = {1, 2};
  std::vector<float> loss(1), losses(2), dloss = {1.0f};
  EXPECT_FALSE(emulated::crossEntropyWithGradFits(50, {odd.ref()}));
  const Status s = emulated::mixedCrossEntropyWithGrad(
      f32(loss), losses.data(), odd.ref(), odd.ref(), targets.data(), 2, 50, 50,
      1.0f, f32(dloss), 1.0f, kNoStream);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("a multiple of 8"), std::string::npos)
      << s.message();
}

TEST(BF16KernelEmulation, CrossEntropyNaNLogitGivesNaN) {
  // fmaxf skips NaN, so a row max alone would hide one.
  for (const int64_t V : {50, 64}) {
    SCOPED_TRACE("V=" + std::to_string(V));
    const int64_t N = 2;
    BF16Tensor logits = randomBF16(N * V, 23);
    for (int64_t c = 8; c < 16; ++c)
      logits.bits[c] = 0x7fc0; // a whole 8-column group of row 0: NaN
    const std::vector<int32_t> targets = {1, 2};
    std::vector<float> loss(1), losses(N);
    ASSERT_TRUE(emulated::mixedCrossEntropyForward(f32(loss), losses.data(),
                                                   logits.ref(), targets.data(),
                                                   N, V, V, 1.0f, kNoStream)
                    .ok());
    EXPECT_TRUE(std::isnan(losses[0]));
    EXPECT_TRUE(std::isfinite(losses[1]));
    EXPECT_TRUE(std::isnan(loss[0]));
  }
}

TEST(BF16KernelEmulation, VocabParallelCrossEntropyPieces) {
  // This rank holds columns [40, 80) of an 80-column vocabulary whose last
  // 5 columns are padding; bf16 statistics, as the mixed-precision program
  // stores them.
  const int64_t N = 6, V = 40, offset = 40, validV = 75;
  BF16Tensor logits = randomBF16(N * V, 19, -3, 3);
  const auto targets = randomIds(N, validV, 20);
  BF16Tensor rowMax(N), sumExp(N), targetLogit(N), dlogits(N * V);
  std::vector<float> loss(1), dloss = {1.0f};
  ASSERT_TRUE(emulated::mixedCrossEntropyRowMax(rowMax.ref(), logits.ref(), N,
                                                V, offset, validV, kNoStream)
                  .ok());
  std::vector<float> rmax(N);
  ASSERT_TRUE(cpuKernels
                  .crossEntropyRowMax(rmax.data(), logits.values.data(), N, V,
                                      offset, validV)
                  .ok());
  EXPECT_EQ(rowMax.widened(), rounded(rmax)); // a max: exact
  const std::vector<float> maxStored = rowMax.widened();
  ASSERT_TRUE(emulated::mixedCrossEntropySums(
                  sumExp.ref(), targetLogit.ref(), logits.ref(), rowMax.ref(),
                  targets.data(), N, V, offset, validV, kNoStream)
                  .ok());
  std::vector<float> rsum(N), rtl(N);
  ASSERT_TRUE(cpuKernels
                  .crossEntropySums(rsum.data(), rtl.data(),
                                    logits.values.data(), maxStored.data(),
                                    targets.data(), N, V, offset, validV)
                  .ok());
  expectBF16Close(sumExp, rsum, "sumExp");
  EXPECT_EQ(targetLogit.widened(), rounded(rtl));
  const std::vector<float> sumStored = sumExp.widened(),
                           tlStored = targetLogit.widened();
  ASSERT_TRUE(emulated::mixedCrossEntropyFromSums(
                  f32(loss), rowMax.ref(), sumExp.ref(), targetLogit.ref(), N,
                  2.0 * N, kNoStream)
                  .ok());
  std::vector<float> rloss(1);
  ASSERT_TRUE(cpuKernels
                  .crossEntropyFromSums(rloss.data(), maxStored.data(),
                                        sumStored.data(), tlStored.data(), N,
                                        2.0 * N)
                  .ok());
  expectF32Close(loss, rloss, "loss from sums");
  ASSERT_TRUE(emulated::mixedCrossEntropySumsBackward(
                  dlogits.ref(), logits.ref(), rowMax.ref(), sumExp.ref(),
                  targets.data(), N, V, offset, validV, f32(dloss), 2.0 * N,
                  kNoStream)
                  .ok());
  std::vector<float> rd(N * V);
  ASSERT_TRUE(cpuKernels
                  .crossEntropySumsBackward(
                      rd.data(), dloss.data(), logits.values.data(),
                      maxStored.data(), sumStored.data(), targets.data(), N, V,
                      offset, validV, 2.0 * N)
                  .ok());
  expectBF16Close(dlogits, rd, "crossEntropySumsGrad");
}

TEST(BF16KernelEmulation, SumSquaresOverManyTensorsInGroupedLaunches) {
  // 70 tensors: two launches (64, then 6; GPT-2's 148 gradients take
  // three). Each tensor's kMixedSumBlocks partials must hold its own sum,
  // at its own place, whichever launch took it; bf16 and fp32 mixed. None
  // has more than 20 blocks' worth of values (256 each), so only those
  // blocks run, and the partials of the idle ones must be written as zeros
  // all the same (the workspace starts at -1 here).
  const int tensors = 70;
  std::vector<BF16Tensor> halves;
  std::vector<std::vector<float>> singles;
  std::vector<cuda::MixedSpan> spans;
  std::vector<BufferSpan> cpuSpans;
  std::vector<double> want(tensors);
  halves.reserve(tensors);
  singles.reserve(tensors);
  for (int t = 0; t < tensors; ++t) {
    const int64_t n = (t * 7919) % 5000 + (t % 10 == 0 ? 0 : 1);
    const float *values;
    if (t % 3 == 0) {
      singles.push_back(randomVector(n, 100 + t));
      spans.push_back({f32(singles.back()), n});
      values = singles.back().data();
    } else {
      halves.push_back(randomBF16(n, 100 + t));
      spans.push_back({halves.back().ref(), n});
      values = halves.back().values.data();
    }
    cpuSpans.push_back({values, n});
    for (int64_t i = 0; i < n; ++i)
      want[t] += double(values[i]) * values[i];
  }
  std::vector<float> sumSq(1), rsum(1);
  std::vector<double> partials(tensors * cuda::kMixedSumBlocks, -1.0);
  ASSERT_TRUE(
      emulated::mixedSumSquares(f32(sumSq), spans, partials.data(), kNoStream)
          .ok());
  for (int t = 0; t < tensors; ++t) {
    double got = 0;
    for (int b = 0; b < cuda::kMixedSumBlocks; ++b)
      got += partials[t * cuda::kMixedSumBlocks + b];
    EXPECT_NEAR(got, want[t], 1e-12 * std::max(1.0, want[t]))
        << "tensor " << t << " (" << spans[t].size << " values)";
    const int64_t busy = std::max<int64_t>(1, (spans[t].size + 255) / 256);
    for (int64_t b = busy; b < cuda::kMixedSumBlocks; ++b)
      ASSERT_EQ(partials[t * cuda::kMixedSumBlocks + b], 0.0)
          << "tensor " << t << " (" << spans[t].size << " values), idle block "
          << b;
  }
  ASSERT_TRUE(cpuKernels.sumSquares(rsum.data(), cpuSpans).ok());
  expectF32Close(sumSq, rsum, "sumSquares");
}

TEST(BF16KernelEmulation, SumSquaresClipAndAdamWOnFp32Masters) {
  // bf16 gradients of four tensors (one empty; the last fills every block
  // of its partials, past the final sum's first 256), fp32 masters and
  // moments.
  const int64_t big = 40000;
  BF16Tensor g0 = randomBF16(1000, 21), g1 = randomBF16(3, 22), g2(0),
             g3 = randomBF16(big, 26);
  std::vector<float> sumSq(1), norm(1), coef(1);
  std::vector<double> partials(4 * cuda::kMixedSumBlocks, -1.0);
  ASSERT_TRUE(emulated::mixedSumSquares(f32(sumSq),
                                        {{g0.ref(), 1000},
                                         {g1.ref(), 3},
                                         {g2.ref(), 0},
                                         {g3.ref(), big}},
                                        partials.data(), kNoStream)
                  .ok());
  std::vector<float> rsum(1);
  ASSERT_TRUE(cpuKernels
                  .sumSquares(rsum.data(), {{g0.values.data(), 1000},
                                            {g1.values.data(), 3},
                                            {nullptr, 0},
                                            {g3.values.data(), big}})
                  .ok());
  expectF32Close(sumSq, rsum, "sumSquares");
  ASSERT_TRUE(
      emulated::mixedClipCoef(f32(norm), f32(coef), f32(sumSq), 1.0, kNoStream)
          .ok());
  std::vector<float> rnorm(1), rcoef(1);
  ASSERT_TRUE(
      cpuKernels.clipCoef(rnorm.data(), rcoef.data(), rsum.data(), 1.0).ok());
  expectF32Close(norm, rnorm, "norm");
  expectF32Close(coef, rcoef, "coef");

  const int64_t n = 1000;
  std::vector<float> p = randomVector(n, 23),
                     m = randomVector(n, 24, -0.1f, 0.1f),
                     v = randomVector(n, 25, 0.0f, 0.01f);
  std::vector<float> rp = p, rm = m, rv = v;
  std::vector<float> lr = {3e-3f}, step = {4.0f};
  cuda::AdamWHyper h;
  h.weightDecay = 0.1;
  ASSERT_TRUE(emulated::mixedAdamW(f32(p), g0.ref(), f32(m), f32(v), n, f32(lr),
                                   f32(step), f32(coef), h, kNoStream)
                  .ok());
  AdamWHyperParams hyper;
  hyper.weightDecay = 0.1;
  ASSERT_TRUE(cpuKernels
                  .adamw(rp.data(), g0.values.data(), rm.data(), rv.data(), n,
                         lr.data(), step.data(), rcoef.data(), hyper)
                  .ok());
  expectF32Close(p, rp, "master");
  expectF32Close(m, rm, "m");
  expectF32Close(v, rv, "v");
}

TEST(BF16KernelEmulation, MemberOrderReductionGivesTheHostPathsBits) {
  // Three members' blocks side by side, reduced into the middle block (the
  // output may alias a block), f32 and bf16, each reduction: the host
  // path's loop (communicator.cpp) computes the same bits.
  const int64_t n = 3, count = 300;
  for (bool bf16 : {false, true})
    for (auto op : {program::Reduction::Sum, program::Reduction::Avg,
                    program::Reduction::Max, program::Reduction::Min}) {
      const std::vector<float> v = randomVector(n * count, 26);
      std::vector<float> all32 = v;
      BF16Tensor all16(v);
      std::vector<float> expect(count);
      for (int64_t i = 0; i < count; ++i) {
        auto value = [&](int64_t k) {
          return bf16 ? all16.values[k * count + i] : v[k * count + i];
        };
        float acc = value(0);
        for (int64_t k = 1; k < n; ++k)
          acc = op == program::Reduction::Max   ? std::max(acc, value(k))
                : op == program::Reduction::Min ? std::min(acc, value(k))
                                                : acc + value(k);
        if (op == program::Reduction::Avg)
          acc /= static_cast<float>(n);
        expect[i] = bf16 ? bf16ToFloat(floatToBF16(acc)) : acc;
      }
      void *base = bf16 ? static_cast<void *>(all16.bits.data())
                        : static_cast<void *>(all32.data());
      void *middle = static_cast<uint8_t *>(base) + count * (bf16 ? 2 : 4);
      ASSERT_TRUE(
          emulated::reduceMembers(middle, base, n, count, bf16, op, kNoStream)
              .ok());
      for (int64_t i = 0; i < count; ++i) {
        const float got =
            bf16 ? bf16ToFloat(all16.bits[count + i]) : all32[count + i];
        ASSERT_EQ(got, expect[i]) << (bf16 ? "bf16" : "f32") << " op "
                                  << static_cast<int>(op) << " [" << i << "]";
      }
    }
}

TEST(BF16KernelEmulation, MisalignedVectorAccessEndsTheRunAsOnTheGpu) {
  // A GPU refuses a 16-byte load from an address that is not a multiple of
  // 16 ("misaligned address"); an x86 host would read it. The kernels'
  // source is built with UBSan's alignment check (test/runtime/
  // CMakeLists.txt), so a vector path taken on an unaligned row ends the
  // emulated run too, here an 8-wide bf16 map two bytes off.
  struct Identity {
    float operator()(float x) const { return x; }
  };
  alignas(16) uint16_t in[24] = {}, out[24] = {};
  auto map = [&](const uint16_t *from) {
    cuda_emulation::runKernel(emulated::map1BF16x8Kernel<Identity>, 1, 32,
                              reinterpret_cast<uint4 *>(out),
                              reinterpret_cast<const uint4 *>(from), int64_t(2),
                              Identity{});
  };
  // (Re-run in a fresh process: earlier tests leave OpenMP threads behind.)
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  in[8] = 0x3F80; // 1.0
  map(in);
  EXPECT_EQ(out[8], 0x3F80);
  EXPECT_DEATH(map(in + 1), "misaligned address .* 'const struct uint4'");
}
