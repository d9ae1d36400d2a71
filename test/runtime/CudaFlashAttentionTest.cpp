//===- CudaFlashAttentionTest.cpp - Tiled attention against the CPU -------===//
//
// flash_attention.cu against runtime/cpu/attention.h for several
// (B, T, NH, hs): T below, at and past the tile sizes, hs padded up to a
// compiled size (48 -> 64) and GPT-2's 64. fp32 checks out, the log-sum-exp
// and dqkv; bf16 checks the same on bf16-rounded inputs with bf16
// tolerances. Then CudaKernels' Attention / AttentionGrad with either kernel
// (LOOM_CUDA_ATTENTION), including the gradient scratch that does not fit
// the [B,NH,T,T] buffer, and every tensor-core launch shape giving the same
// bits. The LOOM_CUDA_ATTENTION parser needs no device.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "TestUtil.h"

#include "runtime/cpu/attention.h"
#include "runtime/cuda/bf16_host.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/flash_attention.h"
#include "runtime/cuda/flash_shape_tuning.h"

#include <cmath>

using namespace loom;
using namespace loom::test;

namespace {

class CudaFlashAttentionTest : public CudaTest {};

struct Case {
  int64_t B, T, NH, hs;
  std::string name() const {
    return "B" + std::to_string(B) + " T" + std::to_string(T) + " NH" +
           std::to_string(NH) + " hs" + std::to_string(hs);
  }
};

const Case kCases[] = {{2, 37, 3, 16},  {1, 64, 2, 64},  {2, 100, 4, 64},
                       {1, 130, 2, 32}, {1, 71, 2, 128}, {2, 50, 2, 48},
                       {1, 1, 2, 64},   {1, 1024, 1, 64}};

/// lse[b,h,t] = log sum_{k<=t} exp(scale q_t . k_k), in double.
std::vector<float> referenceLse(const std::vector<float> &qkv, const Case &c) {
  const int64_t C = c.NH * c.hs, C3 = 3 * C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.hs));
  std::vector<float> lse(static_cast<size_t>(c.B * c.NH * c.T));
  std::vector<double> s(static_cast<size_t>(c.T));
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.NH; ++h)
      for (int64_t t = 0; t < c.T; ++t) {
        double mx = -INFINITY;
        for (int64_t k = 0; k <= t; ++k) {
          double acc = 0;
          for (int64_t d = 0; d < c.hs; ++d)
            acc += static_cast<double>(qkv[(b * c.T + t) * C3 + h * c.hs + d]) *
                   qkv[(b * c.T + k) * C3 + C + h * c.hs + d];
          s[k] = acc * scale;
          mx = std::max(mx, s[k]);
        }
        double sum = 0;
        for (int64_t k = 0; k <= t; ++k)
          sum += std::exp(s[k] - mx);
        lse[(b * c.NH + h) * c.T + t] = static_cast<float>(mx + std::log(sum));
      }
  return lse;
}

/// The CPU kernels' out and dqkv for `c`.
void cpuAttention(const std::vector<float> &qkv, const std::vector<float> &dout,
                  const Case &c, std::vector<float> &out,
                  std::vector<float> &dqkv, std::vector<float> *lse = nullptr) {
  const int64_t C = c.NH * c.hs;
  std::vector<float> att(static_cast<size_t>(c.B * c.NH * c.T * c.T));
  out.assign(static_cast<size_t>(c.B * c.T * C), 0.0f);
  dqkv.assign(static_cast<size_t>(c.B * c.T * 3 * C), 0.0f);
  if (lse)
    lse->assign(static_cast<size_t>(c.B * c.NH * c.T), 0.0f);
  cpu::attentionForward(out.data(), att.data(), qkv.data(), c.B, c.T, C, c.NH,
                        lse ? lse->data() : nullptr);
  cpu::attentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(), c.B,
                         c.T, C, c.NH);
}

/// |a - b| <= tol * max|b| element-wise: bf16 errors scale with the tensor's
/// magnitude, not each element's.
void expectCloseToScale(const std::vector<float> &a, const std::vector<float> &b,
                        double tol, const std::string &what) {
  double scale = 0;
  for (float x : b)
    scale = std::max(scale, static_cast<double>(std::fabs(x)));
  expectClose(a, b, 0, tol * std::max(scale, 1e-3), what);
}

TEST_F(CudaFlashAttentionTest, Fp32MatchesCpuKernels) {
  for (const Case &c : kCases) {
    const int64_t C = c.NH * c.hs, rows = c.B * c.NH * c.T;
    auto qkv = randomVector(c.B * c.T * 3 * C, 11);
    auto dout = randomVector(c.B * c.T * C, 12);
    std::vector<float> out, dqkv;
    cpuAttention(qkv, dout, c, out, dqkv);

    DeviceVector<float> dQkv(qkv), dDout(dout), dOut(out.size(), 9.0f),
        dLse(rows, 9.0f), dRowDot(rows), dDqkv(dqkv.size(), 9.0f);
    ASSERT_TRUE(cuda::flashAttentionForward(dOut.get(), dLse.get(), dQkv.get(),
                                            c.B, c.T, C, c.NH, stream)
                    .ok())
        << c.name();
    ASSERT_TRUE(cuda::flashAttentionBackward(
                    dDqkv.get(), dRowDot.get(), dDout.get(), dQkv.get(),
                    dOut.get(), dLse.get(), c.B, c.T, C, c.NH, stream)
                    .ok())
        << c.name();
    expectClose(dOut.host(), out, 1e-4, 2e-5, "flash out " + c.name());
    expectClose(dLse.host(), referenceLse(qkv, c), 1e-5, 1e-5,
                "flash lse " + c.name());
    expectClose(dDqkv.host(), dqkv, 1e-4, 1e-4, "flash dqkv " + c.name());
  }
}

TEST_F(CudaFlashAttentionTest, Bf16MatchesCpuKernelsOnRoundedInputs) {
  for (const Case &c : kCases) {
    const int64_t C = c.NH * c.hs, rows = c.B * c.NH * c.T;
    auto qkv = cuda::roundedToBf16(randomVector(c.B * c.T * 3 * C, 21));
    auto dout = cuda::roundedToBf16(randomVector(c.B * c.T * C, 22));
    std::vector<float> out, dqkv;
    cpuAttention(qkv, dout, c, out, dqkv);

    DeviceVector<uint16_t> dQkv(cuda::bf16Bits(qkv)), dDout(cuda::bf16Bits(dout)),
        dOut(out.size()), dDqkv(dqkv.size());
    DeviceVector<float> dLse(rows), dRowDot(rows);
    auto bf = [](DeviceVector<uint16_t> &v) {
      return reinterpret_cast<__nv_bfloat16 *>(v.get());
    };
    ASSERT_TRUE(cuda::flashAttentionForward(bf(dOut), dLse.get(), bf(dQkv), c.B,
                                            c.T, C, c.NH, stream)
                    .ok())
        << c.name();
    ASSERT_TRUE(cuda::flashAttentionBackward(bf(dDqkv), dRowDot.get(),
                                             bf(dDout), bf(dQkv), bf(dOut),
                                             dLse.get(), c.B, c.T, C, c.NH,
                                             stream)
                    .ok())
        << c.name();
    // |error| <= 2^-9 (max|v| + |out|): out is rounded once to bf16, and
    // the tensor-core kernels (hs 64) round each probability to bf16 before
    // P V (sum_k |dp_k v_k| <= 2^-9 max|v| with v in [-1, 1)).
    expectClose(cuda::floatsFromBf16(dOut.host()), out, 1.0 / 256, 2.5e-3,
                "bf16 flash out " + c.name());
    expectClose(dLse.host(), referenceLse(qkv, c), 1e-5, 1e-5,
                "bf16 flash lse " + c.name());
    // dqkv also sees the bf16-rounded out (through D = dout . out) and, on
    // tensor cores, bf16-rounded P and dS.
    expectCloseToScale(cuda::floatsFromBf16(dDqkv.host()), dqkv, 2e-2,
                       "bf16 flash dqkv " + c.name());
  }
}

// Training times the tensor-core kernels' launch shapes and keeps each
// kernel's fastest (flash_shape_tuning.h), which is only sound if every
// shape computes the same bits on the device too: out, lse and dqkv of each
// shape and of mixed shapes equal the default's (T = 200: a 128-row block
// and a tail of 72 rows, masked and skipped tiles in every shape).
TEST_F(CudaFlashAttentionTest, EveryTensorCoreShapeGivesTheSameBits) {
  const Case c{2, 200, 2, 64};
  const int64_t C = c.NH * c.hs, rows = c.B * c.NH * c.T;
  DeviceVector<uint16_t> dQkv(
      cuda::bf16Bits(randomVector(c.B * c.T * 3 * C, 31))),
      dDout(cuda::bf16Bits(randomVector(c.B * c.T * C, 32)));
  auto bf = [](DeviceVector<uint16_t> &v) {
    return reinterpret_cast<__nv_bfloat16 *>(v.get());
  };
  struct Bits {
    std::vector<uint16_t> out, dqkv;
    std::vector<float> lse;
  };
  auto run = [&](cuda::FlashTcShapes shapes) {
    DeviceVector<uint16_t> dOut(c.B * c.T * C), dDqkv(c.B * c.T * 3 * C);
    DeviceVector<float> dLse(rows), dRowDot(rows);
    EXPECT_TRUE(cuda::flashAttentionForward(bf(dOut), dLse.get(), bf(dQkv), c.B,
                                            c.T, C, c.NH, stream, shapes)
                    .ok());
    EXPECT_TRUE(cuda::flashAttentionBackward(
                    bf(dDqkv), dRowDot.get(), bf(dDout), bf(dQkv), bf(dOut),
                    dLse.get(), c.B, c.T, C, c.NH, stream, shapes)
                    .ok());
    return Bits{dOut.host(), dDqkv.host(), dLse.host()};
  };
  using Shape = cuda::FlashTcOccupancy;
  const Bits want = run(cuda::FlashTcShapes{});
  const cuda::FlashTcShapes others[] = {
      cuda::FlashTcShapes::all(Shape::MoreBlocks),
      cuda::FlashTcShapes::all(Shape::WideBlocks),
      cuda::FlashTcShapes::all(Shape::TallWarps),
      {Shape::TallWarps, Shape::WideBlocks, Shape::MoreBlocks},
      {Shape::WideBlocks, Shape::FewestSpills, Shape::WideBlocks}};
  for (const cuda::FlashTcShapes &shapes : others) {
    SCOPED_TRACE(std::string("forward ") +
                 cuda::flashShapeName(shapes.forward) + ", dK/dV " +
                 cuda::flashShapeName(shapes.keys) + ", dQ " +
                 cuda::flashShapeName(shapes.queries));
    const Bits got = run(shapes);
    EXPECT_EQ(got.out, want.out);
    EXPECT_EQ(got.dqkv, want.dqkv);
    ASSERT_EQ(got.lse.size(), want.lse.size());
    for (size_t i = 0; i < want.lse.size(); ++i)
      ASSERT_EQ(got.lse[i], want.lse[i]) << "lse " << i;
  }
}

TEST_F(CudaFlashAttentionTest, KernelsChooseFlashOrNaive) {
  std::unique_ptr<cuda::CudaKernels> gpu;
  ASSERT_TRUE(cuda::CudaKernels::create(stream, gpu).ok());
  // {T, hs}: the gradient's out|lse|D fits the [B,NH,T,T] scratch at T=40,
  // not at T=8 (hs + 2 > T: the workspace is used).
  for (const Case &c : {Case{2, 40, 2, 16}, Case{2, 8, 2, 16}})
    for (auto kernel :
         {cuda::AttentionKernel::Flash, cuda::AttentionKernel::Naive}) {
      gpu->setAttentionKernel(kernel);
      const std::string what =
          c.name() +
          (kernel == cuda::AttentionKernel::Flash ? " flash" : " naive");
      const int64_t C = c.NH * c.hs;
      auto qkv = randomVector(c.B * c.T * 3 * C, 31);
      auto dout = randomVector(c.B * c.T * C, 32);
      std::vector<float> out, dqkv, lse;
      cpuAttention(qkv, dout, c, out, dqkv, &lse);
      DeviceVector<float> dQkv(qkv), dDout(dout), dOut(out.size()),
          dLse(lse.size(), 7.0f), dAtt(c.B * c.NH * c.T * c.T, 5.0f),
          dDqkv(dqkv.size(), 9.0f);
      // The forward with its log-sum-exp output (loom.attention's lse).
      ASSERT_TRUE(gpu->attentionForward(dOut.get(), dLse.get(), dAtt.get(),
                                        dQkv.get(), c.B, c.T, C, c.NH)
                      .ok())
          << what;
      expectClose(dOut.host(), out, 1e-4, 2e-5, "out " + what);
      expectClose(dLse.host(), lse, 1e-5, 1e-5, "lse " + what);
      // The gradient re-running the forward, then from the saved one.
      ASSERT_TRUE(gpu->attentionGrad(dDqkv.get(), dDout.get(), dQkv.get(),
                                     nullptr, nullptr, dAtt.get(), c.B, c.T, C,
                                     c.NH)
                      .ok())
          << what;
      expectClose(dDqkv.host(), dqkv, 1e-4, 1e-4, "dqkv " + what);
      DeviceVector<float> dDqkvSaved(dqkv.size(), 9.0f);
      ASSERT_TRUE(gpu->attentionGrad(dDqkvSaved.get(), dDout.get(), dQkv.get(),
                                     dOut.get(), dLse.get(), dAtt.get(), c.B,
                                     c.T, C, c.NH)
                      .ok())
          << what;
      expectClose(dDqkvSaved.host(), dqkv, 1e-4, 1e-4,
                  "dqkv from the saved forward " + what);
    }
}

TEST_F(CudaFlashAttentionTest, RefusesUnsupportedHeadSize) {
  DeviceVector<float> buf(3 * 4 * 160);
  Status s = cuda::flashAttentionForward(buf.get(), buf.get(), buf.get(), 1, 2,
                                         160, 1, stream);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("LOOM_CUDA_ATTENTION=naive"), std::string::npos)
      << s.message();
}

// No device needed: how LOOM_CUDA_ATTENTION is read.
TEST(CudaAttentionChoice, ParsesTheEnvironmentValue) {
  cuda::AttentionKernel k = cuda::AttentionKernel::Naive;
  ASSERT_TRUE(cuda::parseAttentionKernel(nullptr, k).ok());
  EXPECT_EQ(k, cuda::AttentionKernel::Flash);
  ASSERT_TRUE(cuda::parseAttentionKernel("naive", k).ok());
  EXPECT_EQ(k, cuda::AttentionKernel::Naive);
  ASSERT_TRUE(cuda::parseAttentionKernel("", k).ok());
  EXPECT_EQ(k, cuda::AttentionKernel::Flash);
  ASSERT_TRUE(cuda::parseAttentionKernel("flash", k).ok());
  EXPECT_EQ(k, cuda::AttentionKernel::Flash);
  Status s = cuda::parseAttentionKernel("fast", k);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("LOOM_CUDA_ATTENTION='fast'"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("flash"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("naive"), std::string::npos) << s.message();
}

} // namespace
