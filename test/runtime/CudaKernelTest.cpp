//===- CudaKernelTest.cpp - CUDA kernels against the CPU kernels ----------===//
//
// Each CUDA kernel launcher (kernels.cu, attention.cu, vocab_parallel.cu,
// transpose.cu, convert.cu), the cuBLASLt GEMM and the copies on random
// inputs vs the CPU kernel of the same contract (runtime/cpu/*.h), fp32
// with TF32 off, to round-off tolerances. Skipped without a device in
// loom-runtime-tests; loom-cuda-emulation-tests runs it on emulated devices.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "TestUtil.h"

#include "runtime/core/bfloat16.h"
#include "runtime/core/communicator.h"
#include "runtime/cpu/adamw.h"
#include "runtime/cpu/attention.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cross_entropy.h"
#include "runtime/cpu/elementwise.h"
#include "runtime/cpu/embedding.h"
#include "runtime/cpu/gelu.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/layernorm.h"
#include "runtime/cpu/softmax.h"
#include "runtime/cpu/tensor_movement.h"
#include "runtime/cuda/adamw_group.h"
#include "runtime/cuda/convert.h"
#include "runtime/cuda/gemm.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/kernels_bf16.h"
#include "runtime/cuda/tensor_movement.h"
#include "runtime/cuda/vocab_parallel.h"

#include <cstring>
#include <random>
#include <string>

using namespace loom;
using namespace loom::test;

class CudaKernelTest : public CudaTest {};

TEST_F(CudaKernelTest, GemmAllTransposes) {
  cuda::Gemm g;
  ASSERT_TRUE(cuda::Gemm::create(g).ok());
  const int64_t M = 37, N = 29, K = 53;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      auto A = randomVector(M * K, 1), B = randomVector(K * N, 2);
      auto C = randomVector(M * N, 3);
      const int64_t lda = ta ? M : K, ldb = tb ? K : N;
      std::vector<float> want = C;
      cpu::gemmReference(ta, tb, M, N, K, 0.5f, A.data(), lda, B.data(), ldb,
                         0.25f, want.data(), N);
      DeviceVector<float> dA(A), dB(B), dC(C);
      Status s = g.gemm(ta, tb, M, N, K, 0.5f, dA.get(), lda, dB.get(), ldb,
                        0.25f, dC.get(), N, stream);
      ASSERT_TRUE(s.ok()) << s.message();
      expectClose(dC.host(), want, 1e-5, 1e-5,
                  std::string("gemm ta=") + (ta ? "1" : "0") +
                      " tb=" + (tb ? "1" : "0"));
    }
}

TEST_F(CudaKernelTest, SliceConcatAndBlockPacking) {
  const std::vector<int64_t> shape{3, 8, 5};
  auto x = randomVector(3 * 8 * 5, 26), y = randomVector(3 * 2 * 5, 27);
  DeviceVector<float> dx(x), dy(y);
  const int64_t eb = sizeof(float);
  // Slice [2, 5) of dim 1, its gradient, concat along dim 1.
  std::vector<float> slice(3 * 3 * 5), grad(x.size()), cat(3 * 10 * 5),
      packed(x.size()), unpacked(x.size());
  cpu::sliceDim(slice.data(), x.data(), shape, 1, 2, 3, eb);
  cpu::sliceDimGrad(grad.data(), slice.data(), shape, 1, 2, 3, eb);
  cpu::concatDim(cat.data(), {x.data(), y.data()}, {8, 2}, {3, 10, 5}, 1, eb);
  packBlocks(packed.data(), x.data(), shape, 1, 4, eb);
  unpackBlocks(unpacked.data(), packed.data(), {3, 2, 5}, 1, 4, eb);
  DeviceVector<float> gs(slice.size()), gg(grad.size()), gc(cat.size()),
      gp(packed.size()), gu(unpacked.size());
  DeviceVector<float> ds(slice);
  ASSERT_TRUE(cuda::sliceDim(gs.get(), dx.get(), shape, 1, 2, 3, eb, stream)
                  .ok());
  ASSERT_TRUE(cuda::sliceDimGrad(gg.get(), ds.get(), shape, 1, 2, 3, eb,
                                 stream).ok());
  ASSERT_TRUE(cuda::concatDim(gc.get(), {dx.get(), dy.get()}, {8, 2},
                              {3, 10, 5}, 1, eb, stream).ok());
  ASSERT_TRUE(cuda::packBlocks(gp.get(), dx.get(), shape, 1, 4, eb, stream)
                  .ok());
  ASSERT_TRUE(cuda::unpackBlocks(gu.get(), gp.get(), {3, 2, 5}, 1, 4, eb,
                                 stream).ok());
  expectClose(gs.host(), slice, 0, 0, "slice");
  expectClose(gg.host(), grad, 0, 0, "slice grad");
  expectClose(gc.host(), cat, 0, 0, "concat");
  expectClose(gp.host(), packed, 0, 0, "pack blocks");
  expectClose(gu.host(), x, 0, 0, "unpack blocks");
  // A pitched 2-D copy (how a collective bucket's member blocks move):
  // three rows of 6 floats, 20 floats apart from x[12], into rows 7 floats
  // apart.
  std::vector<float> rows(3 * 7, 0.0f);
  cpu::copy2D(rows.data(), 7 * eb, x.data() + 12, 20 * eb, 6 * eb, 3);
  DeviceVector<float> gr(std::vector<float>(rows.size(), 0.0f));
  ASSERT_TRUE(cuda::copy2D(gr.get(), 7 * eb, dx.get() + 12, 20 * eb, 6 * eb,
                           3, stream)
                  .ok());
  expectClose(gr.host(), rows, 0, 0, "copy 2-D");
  EXPECT_EQ(rows[7], x[32]);
}

TEST_F(CudaKernelTest, AddBroadcastAndBackward) {
  const int64_t outer = 6, inner = 70;
  auto a = randomVector(outer * inner, 4), b = randomVector(inner, 5);
  std::vector<float> want(a.size()), dbWant(inner, 0.5f);
  cpu::addBroadcast(want.data(), a.data(), b.data(), outer, inner);
  cpu::addBroadcastBackward(dbWant.data(), a.data(), outer, inner, true);
  DeviceVector<float> da(a), dbv(b), out(a.size()), db(inner, 0.5f);
  ASSERT_TRUE(cuda::addBroadcast(out.get(), da.get(), dbv.get(), outer, inner,
                                 stream).ok());
  ASSERT_TRUE(cuda::addBroadcastBackward(db.get(), da.get(), outer, inner,
                                         true, stream).ok());
  expectClose(out.host(), want, 0, 0, "addBroadcast");
  expectClose(db.host(), dbWant, 1e-6, 1e-6, "addBroadcastBackward");
}

TEST_F(CudaKernelTest, Gelu) {
  const int64_t n = 1000;
  auto x = randomVector(n, 6, -4, 4), dy = randomVector(n, 7);
  std::vector<float> y(n), dx(n);
  cpu::geluForward(y.data(), x.data(), n);
  cpu::geluBackward(dx.data(), x.data(), dy.data(), n);
  DeviceVector<float> dxv(x), ddy(dy), out(n), din(n);
  ASSERT_TRUE(cuda::geluForward(out.get(), dxv.get(), n, stream).ok());
  ASSERT_TRUE(
      cuda::geluBackward(din.get(), dxv.get(), ddy.get(), n, stream).ok());
  expectClose(out.host(), y, 1e-5, 1e-6, "gelu");
  expectClose(din.host(), dx, 1e-5, 1e-6, "gelu backward");
}

TEST_F(CudaKernelTest, EmbeddingDeterministicBackward) {
  // Past two 1024-token chunks of the stable token list.
  const int64_t N = 2100, V = 11, C = 40;
  auto wte = randomVector(V * C, 8), dout = randomVector(N * C, 9);
  auto ids = randomIds(N, V, 10);
  std::vector<float> out(N * C), dwte(V * C, 0.0f);
  ASSERT_TRUE(cpu::embeddingForward(out.data(), ids.data(), wte.data(), N, V, C)
                  .ok());
  ASSERT_TRUE(cpu::embeddingBackward(dwte.data(), dout.data(), ids.data(), N,
                                     V, C).ok());
  DeviceVector<float> dw(wte), dd(dout), o(N * C), g(V * C, 0.0f);
  DeviceVector<int32_t> di(ids);
  ASSERT_TRUE(cuda::embeddingForward(o.get(), di.get(), dw.get(), N, V, C,
                                     stream).ok());
  DeviceVector<int32_t> work(
      static_cast<size_t>(cuda::embeddingGradWorkspaceInts(N, V)));
  ASSERT_TRUE(cuda::mixedEmbeddingBackward({g.get(), false}, {dd.get(), false},
                                           di.get(), N, V, C, work.get(),
                                           stream)
                  .ok());
  expectClose(o.host(), out, 0, 0, "embedding");
  // Tokens are added in order per column: bitwise equal to the CPU.
  expectClose(g.host(), dwte, 0, 0, "embedding backward");
}

TEST_F(CudaKernelTest, LayerNorm) {
  const int64_t N = 33, C = 96;
  auto x = randomVector(N * C, 11), w = randomVector(C, 12),
       b = randomVector(C, 13), dy = randomVector(N * C, 14);
  std::vector<float> y(N * C), mean(N), rstd(N), dx(N * C), dw(C, 0.f),
      db(C, 0.f);
  cpu::layernormForward(y.data(), mean.data(), rstd.data(), x.data(), w.data(),
                        b.data(), N, C);
  cpu::layernormBackward(dx.data(), dw.data(), db.data(), dy.data(), x.data(),
                         w.data(), mean.data(), rstd.data(), N, C);
  DeviceVector<float> dxv(x), dwv(w), dbv(b), ddy(dy), out(N * C), m(N), r(N),
      gx(N * C), gw(C, 0.f), gb(C, 0.f);
  ASSERT_TRUE(cuda::layernormForward(out.get(), m.get(), r.get(), dxv.get(),
                                     dwv.get(), dbv.get(), N, C, 1e-5f, stream)
                  .ok());
  ASSERT_TRUE(cuda::layernormBackward(gx.get(), gw.get(), gb.get(), ddy.get(),
                                      dxv.get(), dwv.get(), m.get(), r.get(),
                                      N, C, stream).ok());
  expectClose(out.host(), y, 1e-5, 1e-5, "layernorm");
  expectClose(r.host(), rstd, 1e-5, 1e-5, "layernorm rstd");
  expectClose(gx.host(), dx, 1e-4, 1e-5, "layernorm dinp");
  expectClose(gw.host(), dw, 1e-4, 1e-5, "layernorm dweight");
  expectClose(gb.host(), db, 1e-4, 1e-5, "layernorm dbias");
}

TEST_F(CudaKernelTest, Softmax) {
  const int64_t N = 17, C = 77;
  auto x = randomVector(N * C, 15, -5, 5), dy = randomVector(N * C, 16);
  std::vector<float> y(N * C), dx(N * C);
  cpu::softmaxForward(y.data(), x.data(), N, C);
  cpu::softmaxBackward(dx.data(), dy.data(), y.data(), N, C);
  DeviceVector<float> dxv(x), ddy(dy), out(N * C), g(N * C);
  ASSERT_TRUE(cuda::softmaxForward(out.get(), dxv.get(), N, C, stream).ok());
  DeviceVector<float> yv(y);
  ASSERT_TRUE(
      cuda::softmaxBackward(g.get(), ddy.get(), yv.get(), N, C, stream).ok());
  expectClose(out.host(), y, 1e-5, 1e-7, "softmax");
  expectClose(g.host(), dx, 1e-5, 1e-6, "softmax backward");
}

TEST_F(CudaKernelTest, CrossEntropyWithPadding) {
  const int64_t N = 24, V = 70, validV = 65;
  auto logits = randomVector(N * V, 17, -3, 3);
  auto targets = randomIds(N, static_cast<int32_t>(validV), 18);
  float loss = 0;
  std::vector<float> losses(N), dl(N * V);
  ASSERT_TRUE(cpu::crossEntropyForward(&loss, losses.data(), logits.data(),
                                       targets.data(), N, V, validV).ok());
  ASSERT_TRUE(cpu::crossEntropyBackward(dl.data(), logits.data(),
                                        targets.data(), N, V, validV, 0.5f)
                  .ok());
  DeviceVector<float> dlog(logits), mean(1), rows(N), g(N * V), seed(std::vector<float>{0.5f});
  DeviceVector<int32_t> dt(targets);
  ASSERT_TRUE(cuda::crossEntropyForward(mean.get(), rows.get(), dlog.get(),
                                        dt.get(), N, V, validV, 1.0f, stream)
                  .ok());
  ASSERT_TRUE(cuda::crossEntropyBackward(g.get(), dlog.get(), dt.get(), N, V,
                                         validV, seed.get(), 1.0f, stream)
                  .ok());
  expectClose(mean.host(), {loss}, 1e-5, 1e-6, "cross-entropy loss");
  expectClose(rows.host(), losses, 1e-5, 1e-6, "cross-entropy row losses");
  expectClose(g.host(), dl, 1e-5, 1e-7, "cross-entropy backward");
}

// The bf16 cross-entropy at GPT-2's padded vocabulary (50304 columns, 50257
// valid): kernels_bf16.cu's block-per-row kernels (16-byte loads, shuffles
// and barriers on the device) against the CPU kernels on the same bf16
// values, the gradient in place over the logits as CrossEntropyGrad runs.
// bf16 gradients are held to 2^-7 relative (one bf16 ulp, the rounding of
// nearly equal fp32 results) plus 1e-5 of the largest.
TEST_F(CudaKernelTest, BF16CrossEntropyAtGpt2Vocabulary) {
  const int64_t N = 48, V = 50304, validV = 50257;
  std::vector<float> logits = randomVector(N * V, 40, -6, 6);
  std::vector<uint16_t> bits(logits.size());
  floatsToBF16(bits.data(), logits.data(), N * V);
  for (int64_t i = 0; i < N * V; ++i)
    logits[i] = bf16ToFloat(bits[i]); // the values the device holds
  const auto targets = randomIds(N, static_cast<int32_t>(validV), 41);
  float loss = 0;
  std::vector<float> losses(N), dl(N * V);
  ASSERT_TRUE(cpu::crossEntropyForward(&loss, losses.data(), logits.data(),
                                       targets.data(), N, V, validV)
                  .ok());
  ASSERT_TRUE(cpu::crossEntropyBackward(dl.data(), logits.data(),
                                        targets.data(), N, V, validV, 0.5f)
                  .ok());
  DeviceVector<uint16_t> dLogits(bits);
  DeviceVector<float> dLoss(1), dRows(N), dSeed(std::vector<float>{0.5f});
  DeviceVector<int32_t> dTargets(targets);
  const cuda::FloatRef logitsRef{dLogits.get(), true};
  ASSERT_TRUE(cuda::mixedCrossEntropyForward({dLoss.get(), false}, dRows.get(),
                                             logitsRef, dTargets.get(), N, V,
                                             validV, 1.0f, stream)
                  .ok());
  ASSERT_TRUE(cuda::mixedCrossEntropyBackward(
                  logitsRef, logitsRef, dTargets.get(), N, V, validV,
                  {dSeed.get(), false}, 1.0f, stream)
                  .ok());
  expectClose(dLoss.host(), {loss}, 1e-5, 1e-6, "bf16 cross-entropy loss");
  expectClose(dRows.host(), losses, 1e-5, 1e-6, "bf16 row losses");
  const std::vector<uint16_t> gBits = dLogits.host();
  std::vector<float> got(gBits.size()), want(dl.size());
  for (size_t i = 0; i < gBits.size(); ++i)
    got[i] = bf16ToFloat(gBits[i]);
  floatsToBF16(bits.data(), dl.data(), N * V); // the reference, rounded
  float largest = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    want[i] = bf16ToFloat(bits[i]);
    largest = std::max(largest, std::fabs(want[i]));
  }
  expectClose(got, want, 1.0 / 128, 1e-5 * largest, "bf16 cross-entropy grad");
  // The loss and its gradient in one kernel (cross_entropy_fusion.h), in
  // place over a fresh copy of the logits: the two kernels' bits.
  floatsToBF16(bits.data(), logits.data(), N * V);
  DeviceVector<uint16_t> fLogits(bits);
  DeviceVector<float> fLoss(1), fRows(N);
  const cuda::FloatRef fRef{fLogits.get(), true};
  ASSERT_TRUE(cuda::crossEntropyWithGradFits(V, {fRef}));
  ASSERT_TRUE(cuda::mixedCrossEntropyWithGrad(
                  {fLoss.get(), false}, fRows.get(), fRef, fRef, dTargets.get(),
                  N, V, validV, 1.0f, {dSeed.get(), false}, 1.0f, stream)
                  .ok());
  EXPECT_EQ(fLoss.host(), dLoss.host());
  EXPECT_EQ(fRows.host(), dRows.host());
  EXPECT_EQ(fLogits.host(), gBits) << "the fused gradient's bits";
}

// The bias gradient of a bf16 GPT-2 MLP layer's first Linear (rows of 3072
// columns; 1000 of them, past seven 128-row chunks) through the 16-byte
// column-sum kernel on the device, against the CPU's sum of the same bf16
// values, rounded to bf16 (2^-7 relative).
TEST_F(CudaKernelTest, BF16BiasGradientInWideLoads) {
  const int64_t outer = 1000, inner = 3072;
  std::vector<float> x = randomVector(outer * inner, 42);
  std::vector<uint16_t> bits(x.size()), dbBits(inner);
  floatsToBF16(bits.data(), x.data(), outer * inner);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = bf16ToFloat(bits[i]);
  std::vector<float> want(inner);
  cpu::CpuKernels cpuKernels;
  ASSERT_TRUE(
      cpuKernels.reduceLeading(want.data(), x.data(), outer, inner).ok());
  DeviceVector<uint16_t> dX(bits), dDb(dbBits);
  DeviceVector<double> partials(cuda::rowChunks(outer) * inner);
  ASSERT_TRUE(cuda::mixedColumnSum({dDb.get(), true}, {dX.get(), true}, outer,
                                   inner, partials.get(), stream)
                  .ok());
  const std::vector<uint16_t> got = dDb.host();
  std::vector<float> gotF(inner);
  for (int64_t j = 0; j < inner; ++j)
    gotF[j] = bf16ToFloat(got[j]);
  expectClose(gotF, want, 1.0 / 128, 1e-5, "bf16 bias gradient");
}

TEST_F(CudaKernelTest, ResidualLayerNormKernelsGiveTheInstructionsBits) {
  // residual_norms.h's kernels on the device at GPT-2's width against the
  // two instructions' kernels (mixedAdd, then the layer norm or its
  // gradient, given the forward's statistics), bit for bit, and the
  // gradients with the statistics computed in their one-pass kernel, as
  // CudaKernels runs them (BF16KernelEmulation checks more shapes).
  const int64_t N = 300, C = 768;
  auto bf16Of = [](std::vector<float> v) {
    std::vector<uint16_t> bits(v.size());
    floatsToBF16(bits.data(), v.data(), static_cast<int64_t>(v.size()));
    return bits;
  };
  DeviceVector<uint16_t> a(bf16Of(randomVector(N * C, 51, -2, 2))),
      b(bf16Of(randomVector(N * C, 52))),
      w(bf16Of(randomVector(C, 53, 0.5f, 1.5f))),
      bias(bf16Of(randomVector(C, 54))), dy(bf16Of(randomVector(N * C, 55))),
      dres(bf16Of(randomVector(N * C, 56)));
  DeviceVector<uint16_t> s(N * C), y(N * C), fusedS(N * C), fusedY(N * C);
  DeviceVector<float> mean(N), rstd(N);
  auto bf = [](DeviceVector<uint16_t> &v) {
    return cuda::FloatRef{v.get(), true};
  };
  ASSERT_TRUE(cuda::mixedAdd(bf(s), bf(a), bf(b), N * C, N * C, stream).ok());
  ASSERT_TRUE(cuda::mixedLayernormForward(bf(y), {}, {}, mean.get(), rstd.get(),
                                          bf(s), bf(w), bf(bias), N, C, 1e-5f,
                                          stream)
                  .ok());
  ASSERT_TRUE(cuda::residualAddLayernormForward(bf(fusedS), bf(fusedY), bf(a),
                                                bf(b), bf(w), bf(bias), N, C,
                                                1e-5f, stream)
                  .ok());
  EXPECT_EQ(fusedS.host(), s.host()) << "the sum";
  EXPECT_EQ(fusedY.host(), y.host()) << "the layer norm";
  DeviceVector<uint16_t> dx(N * C), dw(C), db(C), sum(N * C), fusedSum(N * C),
      fusedDw(C), fusedDb(C);
  DeviceVector<float> partials(2 * cuda::rowChunks(N) * C);
  cuda::LayernormRowStatistics given, own;
  given.mean32 = mean.get(), given.rstd32 = rstd.get();
  own.eps = 1e-5f;
  ASSERT_TRUE(cuda::mixedLayernormBackward(bf(dx), bf(dw), bf(db), bf(dy),
                                           bf(s), bf(w), given, partials.get(),
                                           N, C, stream)
                  .ok());
  DeviceVector<uint16_t> ownDx(N * C), ownDw(C), ownDb(C);
  ASSERT_TRUE(cuda::mixedLayernormBackward(bf(ownDx), bf(ownDw), bf(ownDb),
                                           bf(dy), bf(s), bf(w), own,
                                           partials.get(), N, C, stream)
                  .ok());
  EXPECT_EQ(ownDx.host(), dx.host()) << "dinp, own statistics";
  EXPECT_EQ(ownDw.host(), dw.host()) << "dweight, own statistics";
  EXPECT_EQ(ownDb.host(), db.host()) << "dbias, own statistics";
  ASSERT_TRUE(
      cuda::mixedAdd(bf(sum), bf(dres), bf(dx), N * C, N * C, stream).ok());
  for (const cuda::LayernormRowStatistics *stats : {&given, &own}) {
    const char *which = stats == &own ? ", own statistics" : "";
    ASSERT_TRUE(cuda::layernormBackwardAddResidual(
                    bf(fusedSum), bf(fusedDw), bf(fusedDb), bf(dres), bf(dy),
                    bf(s), bf(w), *stats, partials.get(), N, C, stream)
                    .ok());
    EXPECT_EQ(fusedSum.host(), sum.host()) << "the gradient sum" << which;
    EXPECT_EQ(fusedDw.host(), dw.host()) << "dweight" << which;
    EXPECT_EQ(fusedDb.host(), db.host()) << "dbias" << which;
  }
}

TEST_F(CudaKernelTest, CausalAttention) {
  const int64_t B = 2, T = 37, C = 48, NH = 4;
  auto qkv = randomVector(B * T * 3 * C, 19), dout = randomVector(B * T * C, 20);
  std::vector<float> out(B * T * C), att(B * NH * T * T), dqkv(qkv.size());
  cpu::attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  cpu::attentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(), B,
                         T, C, NH);
  DeviceVector<float> dq(qkv), dd(dout), o(out.size()), a(att.size()),
      g(qkv.size()), dpre(att.size());
  ASSERT_TRUE(cuda::attentionForward(o.get(), a.get(), dq.get(), B, T, C, NH,
                                     stream).ok());
  ASSERT_TRUE(cuda::attentionBackward(g.get(), dd.get(), dq.get(), a.get(),
                                      dpre.get(), B, T, C, NH, stream)
                  .ok());
  expectClose(a.host(), att, 1e-5, 1e-6, "attention probabilities");
  expectClose(o.host(), out, 1e-5, 1e-5, "attention out");
  expectClose(g.host(), dqkv, 1e-4, 1e-5, "attention dqkv");
}

TEST_F(CudaKernelTest, SumSquaresClipAndAdamW) {
  auto g1 = randomVector(1000, 21), g2 = randomVector(77, 22);
  const float sum = cpu::sumSquares(
      {cpu::FloatSpan{g1.data(), 1000}, cpu::FloatSpan{g2.data(), 77}});
  const cpu::ClipCoefficient clip = cpu::clipCoefficient(sum, 1.0);
  DeviceVector<float> d1(g1), d2(g2), s(1), norm(1), coef(1);
  DeviceVector<double> partials(2 * cuda::kMixedSumBlocks);
  ASSERT_TRUE(cuda::mixedSumSquares(
                  {s.get(), false},
                  {{{d1.get(), false}, 1000}, {{d2.get(), false}, 77}},
                  partials.get(), stream)
                  .ok());
  ASSERT_TRUE(
      cuda::clipCoefficient(norm.get(), coef.get(), s.get(), 1.0, stream).ok());
  expectClose(s.host(), {sum}, 1e-6, 0, "sum of squares");
  expectClose(norm.host(), {clip.norm}, 1e-6, 0, "grad norm");
  expectClose(coef.host(), {clip.coef}, 1e-6, 0, "clip coefficient");

  const int64_t n = 1000;
  auto p = randomVector(n, 23), m = randomVector(n, 24, 0, 0.1f),
       v = randomVector(n, 25, 0, 0.01f);
  cpu::AdamWConfig cfg;
  cfg.lr = 3e-4f;
  cfg.step = 7;
  cfg.gradScale = clip.coef;
  std::vector<float> pw = p, mw = m, vw = v;
  cpu::adamwStep(pw.data(), g1.data(), mw.data(), vw.data(), n, cfg);
  DeviceVector<float> dp(p), dm(m), dv(v), lr(std::vector<float>{3e-4f}),
      step(std::vector<float>{7.0f});
  cuda::AdamWHyper hyper;
  ASSERT_TRUE(cuda::adamwStep(dp.get(), d1.get(), dm.get(), dv.get(), n,
                              lr.get(), step.get(), coef.get(), hyper, stream)
                  .ok());
  expectClose(dp.host(), pw, 1e-6, 1e-7, "adamw params");
  expectClose(dm.host(), mw, 1e-6, 1e-7, "adamw m");
  expectClose(dv.host(), vw, 1e-6, 1e-8, "adamw v");
}

// The grouped update (adamw_group.h) against the instructions one by one:
// AdamW (fp32 or bf16 gradients, the mixed kernel for the latter) and the
// Cast of the new master to bf16, bit for bit. 100 tensors take three
// launches (48 + 48 + 4); their sizes go from 0 and 1 element to more than
// the grid covers in one pass, packed side by side as in an arena.
TEST_F(CudaKernelTest, AdamWGroupMatchesTheInstructionsOneByOne) {
  const int64_t sizes[] = {1, 7, 768, 1000, 33, 0, 3000, 64, 2304, 5};
  const size_t count = 100, big = 6;
  std::vector<int64_t> offset(count + 1, 0);
  for (size_t j = 0; j < count; ++j)
    offset[j + 1] = offset[j] + (j == big ? 300000 : sizes[j % 10]);
  const int64_t total = offset[count];
  auto p = randomVector(total, 31), g = randomVector(total, 32),
       m = randomVector(total, 33, 0, 0.1f),
       v = randomVector(total, 34, 0, 0.01f);
  for (float &x : v)
    x = std::fabs(x);
  std::vector<uint16_t> gBF16(static_cast<size_t>(total));
  floatsToBF16(gBF16.data(), g.data(), total);
  DeviceVector<float> groupP(p), groupM(m), groupV(v), soloP(p), soloM(m),
      soloV(v), gradsF32(g);
  DeviceVector<uint16_t> gradsBF16(gBF16),
      groupCopy(static_cast<size_t>(total), 0),
      soloCopy(static_cast<size_t>(total), 0);
  DeviceVector<float> lr(std::vector<float>{3e-4f}),
      step(std::vector<float>{7.0f}), coef(std::vector<float>{0.625f});
  cuda::AdamWHyper hyper;
  hyper.beta2 = 0.95;
  std::vector<AdamWGroupMember> members;
  for (size_t j = 0; j < count; ++j) {
    const int64_t at = offset[j], n = offset[j + 1] - offset[j];
    AdamWGroupMember t;
    t.gradsBF16 = j % 2 == 1;
    t.params = groupP.get() + at;
    t.grads = t.gradsBF16 ? static_cast<const void *>(gradsBF16.get() + at)
                          : static_cast<const void *>(gradsF32.get() + at);
    t.m = groupM.get() + at;
    t.v = groupV.get() + at;
    t.bf16Params = j % 3 == 0 ? nullptr : groupCopy.get() + at;
    t.n = n;
    t.weightDecay = j % 4 == 0 ? 0.0 : 0.1;
    members.push_back(t);
    // The instructions one by one.
    cuda::AdamWHyper one = hyper;
    one.weightDecay = t.weightDecay;
    if (t.gradsBF16)
      ASSERT_TRUE(cuda::mixedAdamW(
                      {soloP.get() + at, false}, {gradsBF16.get() + at, true},
                      {soloM.get() + at, false}, {soloV.get() + at, false}, n,
                      {lr.get()}, {step.get()}, {coef.get()}, one, stream)
                      .ok());
    else
      ASSERT_TRUE(cuda::adamwStep(soloP.get() + at, gradsF32.get() + at,
                                  soloM.get() + at, soloV.get() + at, n,
                                  lr.get(), step.get(), coef.get(), one, stream)
                      .ok());
    if (t.bf16Params) {
      ASSERT_TRUE(cuda::convertF32ToBF16(soloCopy.get() + at, soloP.get() + at,
                                         n, stream)
                      .ok());
    }
  }
  Status s = cuda::adamwGroupStep(members.data(), members.size(), lr.get(),
                                  step.get(), coef.get(), hyper, stream);
  ASSERT_TRUE(s.ok()) << s.message();
  auto bitsOf = [](const std::vector<float> &x) {
    std::vector<uint32_t> bits(x.size());
    std::memcpy(bits.data(), x.data(), x.size() * sizeof(float));
    return bits;
  };
  EXPECT_EQ(bitsOf(groupP.host()), bitsOf(soloP.host()));
  EXPECT_EQ(bitsOf(groupM.host()), bitsOf(soloM.host()));
  EXPECT_EQ(bitsOf(groupV.host()), bitsOf(soloV.host()));
  EXPECT_EQ(groupCopy.host(), soloCopy.host());
  // It did update every tensor: the largest moved off its start, and a
  // member without a copy left its bytes alone.
  EXPECT_NE(bitsOf(groupP.host()), bitsOf(p));
  EXPECT_EQ(groupCopy.host()[static_cast<size_t>(offset[0])], 0);
  // And it is AdamW: within round-off of the CPU kernel on the largest.
  std::vector<float> pw(p.begin() + offset[big], p.begin() + offset[big + 1]),
      mw(m.begin() + offset[big], m.begin() + offset[big + 1]),
      vw(v.begin() + offset[big], v.begin() + offset[big + 1]);
  cpu::AdamWConfig cfg;
  cfg.lr = 3e-4f;
  cfg.step = 7;
  cfg.beta2 = 0.95;
  cfg.weightDecay = 0.1;
  cfg.gradScale = 0.625f;
  cpu::adamwStep(pw.data(), g.data() + offset[big], mw.data(), vw.data(),
                 offset[big + 1] - offset[big], cfg);
  const std::vector<float> all = groupP.host();
  expectClose(std::vector<float>(all.begin() + offset[big],
                                 all.begin() + offset[big + 1]),
              pw, 1e-6, 1e-7, "grouped adamw params vs cpu::adamwStep");
}

TEST_F(CudaKernelTest, EmbeddingRowsOfOneRank) {
  const int64_t N = 40, V = 96, C = 24, R = 32;
  auto ids = randomIds(N, V, 1);
  auto rows = randomVector(R * C, 2);
  for (int64_t begin : {int64_t(0), int64_t(32), int64_t(64)}) {
    std::vector<float> want(N * C);
    ASSERT_TRUE(cpu::embeddingForwardRows(want.data(), ids.data(), rows.data(),
                                          N, V, begin, R, C)
                    .ok());
    DeviceVector<int32_t> dIds(ids);
    DeviceVector<float> dRows(rows), out(N * C, 7.0f);
    ASSERT_TRUE(cuda::embeddingForwardRows(out.get(), dIds.get(), dRows.get(),
                                           N, begin, R, C, stream)
                    .ok());
    expectClose(out.host(), want, 0, 0,
                "embeddingForwardRows at " + std::to_string(begin));
  }
}

TEST_F(CudaKernelTest, VocabParallelCrossEntropy) {
  // Two ranks' blocks of a padded vocabulary: 80 columns each, 150 valid
  // (rank 1 has 70 valid columns and 10 of padding).
  const int64_t N = 37, V = 80, validV = 150;
  auto targets = randomIds(N, validV, 3);
  DeviceVector<int32_t> dTargets(targets);
  for (int64_t rank : {0, 1}) {
    const int64_t offset = rank * V;
    auto logits = randomVector(N * V, 10 + rank, -4, 4);
    std::vector<float> max(N), sum(N), tgt(N), grad(N * V);
    cpu::crossEntropyRowMax(max.data(), logits.data(), N, V, offset, validV);
    ASSERT_TRUE(cpu::crossEntropySums(sum.data(), tgt.data(), logits.data(),
                                      max.data(), targets.data(), N, V, offset,
                                      validV)
                    .ok());
    const double tokens = 2.0 * N;
    const float seed = 0.75f;
    const float want = cpu::crossEntropyFromSums(max.data(), sum.data(),
                                                 tgt.data(), N, tokens);
    ASSERT_TRUE(
        cpu::crossEntropySumsBackward(grad.data(), logits.data(), max.data(),
                                      sum.data(), targets.data(), N, V, offset,
                                      validV, static_cast<float>(seed / tokens))
            .ok());

    DeviceVector<float> dLogits(logits), dMax(N), dSum(N), dTgt(N), dLoss(1),
        dSeed(std::vector<float>{seed}), dGrad(N * V, 9.0f);
    ASSERT_TRUE(cuda::crossEntropyRowMax(dMax.get(), dLogits.get(), N, V,
                                         offset, validV, stream)
                    .ok());
    ASSERT_TRUE(cuda::crossEntropySums(dSum.get(), dTgt.get(), dLogits.get(),
                                       dMax.get(), dTargets.get(), N, V, offset,
                                       validV, stream)
                    .ok());
    ASSERT_TRUE(cuda::crossEntropyFromSums(dLoss.get(), dMax.get(), dSum.get(),
                                           dTgt.get(), N, tokens, stream)
                    .ok());
    ASSERT_TRUE(
        cuda::crossEntropySumsBackward(dGrad.get(), dLogits.get(), dMax.get(),
                                       dSum.get(), dTargets.get(), N, V, offset,
                                       validV, dSeed.get(), tokens, stream)
            .ok());
    const std::string at = " (rank " + std::to_string(rank) + ")";
    expectClose(dMax.host(), max, 0, 0, "rowMax" + at);
    expectClose(dSum.host(), sum, 1e-5, 1e-6, "sumExp" + at);
    expectClose(dTgt.host(), tgt, 0, 0, "targetLogit" + at);
    expectClose(dLoss.host(), {want}, 1e-6, 1e-6, "fromSums" + at);
    expectClose(dGrad.host(), grad, 1e-5, 1e-7, "sumsBackward" + at);
    // In place (dlogits == logits), as the executor runs it.
    ASSERT_TRUE(
        cuda::crossEntropySumsBackward(dLogits.get(), dLogits.get(), dMax.get(),
                                       dSum.get(), dTargets.get(), N, V, offset,
                                       validV, dSeed.get(), tokens, stream)
            .ok());
    expectClose(dLogits.host(), grad, 1e-5, 1e-7, "sumsBackward in place" + at);
  }
}

TEST_F(CudaKernelTest, TransposeEveryPermutationOfRank3AndElementSizes) {
  const std::vector<int64_t> shape = {3, 5, 7};
  const int64_t n = 3 * 5 * 7;
  std::vector<std::vector<int64_t>> perms = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                             {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  for (int64_t eb : {1, 2, 4, 8}) {
    std::vector<uint8_t> in(static_cast<size_t>(n * eb));
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = static_cast<uint8_t>(i * 31 + 7);
    for (const auto &perm : perms) {
      std::vector<uint8_t> want(in.size());
      cpu::transpose(want.data(), in.data(), shape, perm, eb);
      DeviceVector<uint8_t> dIn(in), dOut(in.size());
      ASSERT_TRUE(
          cuda::transpose(dOut.get(), dIn.get(), shape, perm, eb, stream).ok());
      EXPECT_EQ(dOut.host(), want)
          << "elemBytes " << eb << " perm " << perm[0] << perm[1] << perm[2];
    }
  }
  // A scalar (rank 0) is a one-element copy.
  DeviceVector<float> s(std::vector<float>{2.5f}), d(1);
  ASSERT_TRUE(cuda::transpose(d.get(), s.get(), {}, {}, 4, stream).ok());
  EXPECT_EQ(d.host(), std::vector<float>{2.5f});
}

TEST_F(CudaKernelTest, BF16ConversionsMatchTheCpuBitForBit) {
  // Every bf16 bit pattern widened, and fp32 values covering ties (both
  // parities), NaNs with payloads, infinities, overflow and subnormals
  // rounded: the device must give the CPU's bits (convert.cu).
  std::vector<uint16_t> every(65536);
  for (size_t i = 0; i < every.size(); ++i)
    every[i] = static_cast<uint16_t>(i);
  std::vector<float> want(every.size());
  cpu::CpuKernels cpuKernels;
  ASSERT_TRUE(
      cpuKernels.convertBF16ToF32(want.data(), every.data(), 65536).ok());
  DeviceVector<uint16_t> dEvery(every);
  DeviceVector<float> dWide(every.size());
  ASSERT_TRUE(
      cuda::convertBF16ToF32(dWide.get(), dEvery.get(), 65536, stream).ok());
  std::vector<float> got = dWide.host();
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4));

  std::vector<uint32_t> bits;
  std::mt19937 gen(3);
  for (int i = 0; i < 100000; ++i)
    bits.push_back(gen());
  for (uint32_t b :
       {0x3f808000u, 0x3f818000u, 0x7f7fffffu, 0xff7fffffu, 0x7f800000u,
        0x7f800001u, 0xffc12345u, 0x00000001u, 0x80008000u, 0x7f7f8000u})
    bits.push_back(b);
  std::vector<float> values(bits.size());
  std::memcpy(values.data(), bits.data(), bits.size() * 4);
  std::vector<uint16_t> wantNarrow(values.size());
  ASSERT_TRUE(cpuKernels
                  .convertF32ToBF16(wantNarrow.data(), values.data(),
                                    static_cast<int64_t>(values.size()))
                  .ok());
  DeviceVector<float> dValues(values);
  DeviceVector<uint16_t> dNarrow(values.size());
  ASSERT_TRUE(cuda::convertF32ToBF16(dNarrow.get(), dValues.get(),
                                     static_cast<int64_t>(values.size()),
                                     stream)
                  .ok());
  EXPECT_EQ(dNarrow.host(), wantNarrow);
}
