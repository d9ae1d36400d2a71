//===- CudaGemmTest.cpp - cuBLASLt bf16 GEMMs against a CPU reference -----===//
//
// gemm.h's bf16 path (bf16 A/B, fp32 accumulation, bf16 or fp32 C, bias
// epilogue) against a double-precision reference on the same bf16-rounded
// inputs, for every transpose combination and shapes that are and are not
// multiples of the tensor-core tiles; the GELU epilogues (gelu_epilogues.h)
// against the model's GELU and its slope, the bias-gradient epilogue against
// column sums, and what they decline; the plan cache; and the argument
// errors. Skipped without a device.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "TestUtil.h"

#include "runtime/cuda/bf16_host.h"
#include "runtime/cuda/gemm.h"

#include <cmath>
#include <functional>

using namespace loom;
using namespace loom::test;

namespace {

class CudaGemmTest : public CudaTest {};

/// Row-major C = alpha op(A) op(B) + beta C0 + bias, in double.
std::vector<float> referenceGemm(bool transA, bool transB, int64_t M, int64_t N,
                                 int64_t K, float alpha,
                                 const std::vector<float> &A, int64_t lda,
                                 const std::vector<float> &B, int64_t ldb,
                                 float beta, const std::vector<float> &C0,
                                 const std::vector<float> &bias) {
  std::vector<float> C(static_cast<size_t>(M * N));
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        const double a = transA ? A[k * lda + i] : A[i * lda + k];
        const double b = transB ? B[j * ldb + k] : B[k * ldb + j];
        acc += a * b;
      }
      double c = alpha * acc + beta * static_cast<double>(C0[i * N + j]);
      if (!bias.empty())
        c += bias[j];
      C[i * N + j] = static_cast<float>(c);
    }
  return C;
}

struct Shape {
  int64_t M, N, K;
};

TEST_F(CudaGemmTest, Bf16MatchesCpuOnRoundedInputs) {
  cuda::Gemm gemm;
  ASSERT_TRUE(cuda::Gemm::create(gemm).ok());
  // Tile multiples, odd sizes, and the GPT-2 head's odd vocabulary width.
  for (Shape s : {Shape{64, 128, 96}, Shape{37, 53, 71}, Shape{16, 257, 64}})
    for (bool transA : {false, true})
      for (bool transB : {false, true})
        for (bool withBias : {false, true}) {
          const int64_t M = s.M, N = s.N, K = s.K;
          const int64_t lda = transA ? M : K, ldb = transB ? K : N;
          const std::string what =
              std::to_string(M) + "x" + std::to_string(N) + "x" +
              std::to_string(K) + (transA ? " A^T" : "") +
              (transB ? " B^T" : "") + (withBias ? " +bias" : "");
          auto A = cuda::roundedToBf16(randomVector(M * K, 1));
          auto B = cuda::roundedToBf16(randomVector(K * N, 2));
          auto C0 = randomVector(M * N, 3);
          auto biasF = withBias ? cuda::roundedToBf16(randomVector(N, 4))
                                : std::vector<float>{};
          DeviceVector<uint16_t> dA(cuda::bf16Bits(A)), dB(cuda::bf16Bits(B));
          auto *a = reinterpret_cast<const __nv_bfloat16 *>(dA.get());
          auto *b = reinterpret_cast<const __nv_bfloat16 *>(dB.get());

          // fp32 output, beta = 0.5 on a non-zero C, fp32 bias.
          DeviceVector<float> dC(C0), dBias32(withBias ? biasF
                                                       : std::vector<float>(1));
          ASSERT_TRUE(gemm.gemmBf16(transA, transB, M, N, K, 1.5f, a, lda, b,
                                    ldb, 0.5f, dC.get(), N,
                                    withBias ? dBias32.get() : nullptr, stream)
                          .ok())
              << what;
          expectClose(dC.host(),
                      referenceGemm(transA, transB, M, N, K, 1.5f, A, lda, B,
                                    ldb, 0.5f, C0, biasF),
                      1e-5, 1e-4, "bf16 -> fp32 " + what);

          // bf16 output (bias bf16): one bf16 rounding of the fp32 result.
          DeviceVector<uint16_t> dC16(static_cast<size_t>(M * N)),
              dBias16(withBias ? cuda::bf16Bits(biasF)
                               : std::vector<uint16_t>(1));
          ASSERT_TRUE(
              gemm.gemmBf16(transA, transB, M, N, K, 1.0f, a, lda, b, ldb,
                            0.0f,
                            reinterpret_cast<__nv_bfloat16 *>(dC16.get()), N,
                            withBias ? reinterpret_cast<const __nv_bfloat16 *>(
                                           dBias16.get())
                                     : nullptr,
                            stream)
                  .ok())
              << what;
          const std::vector<float> zero(static_cast<size_t>(M * N), 0.0f);
          const std::vector<float> got = cuda::floatsFromBf16(dC16.host());
          const std::vector<float> want = referenceGemm(
              transA, transB, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, zero, biasF);
          expectClose(got, want, 1.0 / 128, 1e-3, "bf16 -> bf16 " + what);
          if (HasFailure() && withBias) {
            // Diagnosis: how far the result is from an epilogue that rounds
            // the product to bf16 before adding the bias (two roundings).
            auto product = cuda::roundedToBf16(
                referenceGemm(transA, transB, M, N, K, 1.0f, A, lda, B, ldb,
                              0.0f, zero, {}));
            double worstOne = 0, worstTwo = 0;
            for (size_t i = 0; i < got.size(); ++i) {
              const float two = cuda::roundedToBf16(
                  {product[i] + biasF[i % static_cast<size_t>(N)]})[0];
              worstOne = std::max(worstOne, double(std::fabs(got[i] - want[i])));
              worstTwo = std::max(worstTwo, double(std::fabs(got[i] - two)));
            }
            ADD_FAILURE() << what << ": max |got - fp32 result| " << worstOne
                          << ", max |got - bf16(bf16(A B) + bias)| "
                          << worstTwo;
            return;
          }
        }
}

TEST_F(CudaGemmTest, PlansAreCachedPerShape) {
  cuda::Gemm gemm;
  ASSERT_TRUE(cuda::Gemm::create(gemm).ok());
  DeviceVector<float> A(64 * 32, 1.0f), B(32 * 16, 1.0f), C(64 * 16);
  for (int rep = 0; rep < 3; ++rep)
    ASSERT_TRUE(gemm.gemm(false, false, 64, 16, 32, 1.0f, A.get(), 32, B.get(),
                          16, 0.0f, C.get(), 16, stream)
                    .ok());
  EXPECT_EQ(gemm.planCount(), 1u);
  ASSERT_TRUE(gemm.gemm(false, false, 32, 16, 32, 1.0f, A.get(), 32, B.get(),
                        16, 0.0f, C.get(), 16, stream)
                  .ok());
  EXPECT_EQ(gemm.planCount(), 2u);
  expectClose(C.host(), std::vector<float>(64 * 16, 32.0f), 0, 0,
              "ones x ones");
}

TEST_F(CudaGemmTest, RefusesWhatCuBlasLtCannotDo) {
  cuda::Gemm gemm;
  ASSERT_TRUE(cuda::Gemm::create(gemm).ok());
  DeviceVector<float> A(16 * 16), B(16 * 16), C(16 * 16), bias(32);
  cuda::GemmArgs g;
  g.M = g.N = g.K = 16;
  g.A = A.get(), g.lda = 16, g.B = B.get(), g.ldb = 16, g.C = C.get(),
  g.ldc = 16;
  g.outputType = cuda::GemmType::BF16; // fp32 inputs, bf16 output
  Status s = gemm.matmul(g, stream);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("fp32 inputs need an fp32 output"),
            std::string::npos)
      << s.message();
  g.outputType = cuda::GemmType::F32;
  g.bias = bias.get() + 1; // 4-byte aligned only
  s = gemm.matmul(g, stream);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not 16-byte aligned"), std::string::npos)
      << s.message();
  // A leading dimension below the rows: cuBLASLt refuses the layout or
  // offers no algorithm (a plan remembered as none: the second call says
  // the same), and tryMatmul leaves it to the caller with nothing run.
  g.bias = nullptr;
  g.lda = 8;
  for (int call = 0; call < 2; ++call) {
    s = gemm.matmul(g, stream);
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(s.message().find("cuBLASLt has no algorithm for a fp32 -> "
                                 "fp32 16x16x16 GEMM (lda 8") !=
                    std::string::npos ||
                s.message().find("failed: status") != std::string::npos)
        << s.message();
  }
  DeviceVector<float> untouched(16 * 16, 7.0f);
  g.C = untouched.get();
  bool ran = true;
  const Status t = gemm.tryMatmul(g, stream, ran);
  EXPECT_TRUE(!t.ok() || !ran) << t.message();
  for (float v : untouched.host())
    ASSERT_EQ(v, 7.0f);
}

} // namespace

namespace {

/// GPT-2's GELU (tanh approximation) and its slope, in double.
double geluReference(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
double geluSlopeReference(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  const double t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) +
         0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * 0.044715 * x * x);
}

__nv_bfloat16 *bf16Ptr(DeviceVector<uint16_t> &v) {
  return reinterpret_cast<__nv_bfloat16 *>(v.get());
}

/// A bf16 weight gradient C [16, 24] = A^T B over 32 rows (A [32, 16], B
/// [32, 24]) with B's column sums into `bias` [24]: the bias-gradient
/// epilogue's small case.
cuda::GemmArgs smallWeightGradient(DeviceVector<uint16_t> &A,
                                   DeviceVector<uint16_t> &B,
                                   DeviceVector<uint16_t> &C,
                                   DeviceVector<uint16_t> &bias) {
  cuda::GemmArgs g;
  g.transA = true;
  g.M = 16, g.N = 24, g.K = 32;
  g.A = A.get(), g.lda = 16, g.B = B.get(), g.ldb = 24;
  g.C = C.get(), g.ldc = 24;
  g.inputType = g.outputType = cuda::GemmType::BF16;
  g.biasGradient = bias.get();
  return g;
}

/// An edit of a GEMM's arguments that an epilogue cannot take, and the
/// words matmul's error must hold.
struct DeclineCase {
  const char *what;
  std::function<void(cuda::GemmArgs &)> edit;
  const char *message;
};

/// Each case's edit of `base`: tryMatmul leaves it to the caller (nothing
/// enqueued, `ran` false) and matmul says why.
template <size_t N>
void expectEachDeclined(cuda::Gemm &gemm, cudaStream_t stream,
                        const cuda::GemmArgs &base,
                        const DeclineCase (&cases)[N]) {
  for (const DeclineCase &c : cases) {
    cuda::GemmArgs a = base;
    c.edit(a);
    bool ran = true;
    ASSERT_TRUE(gemm.tryMatmul(a, stream, ran).ok()) << c.what;
    EXPECT_FALSE(ran) << c.what;
    const Status s = gemm.matmul(a, stream);
    EXPECT_FALSE(s.ok()) << c.what;
    EXPECT_NE(s.message().find(c.message), std::string::npos)
        << c.what << ": " << s.message();
  }
}

} // namespace

TEST_F(CudaGemmTest, GeluEpiloguesApplyTheModelsGeluToTheFp32Product) {
  // gelu_epilogues.h's two GEMMs at an MLP's shapes (bf16, C = 4 x 18):
  // forward pre = x w + b and act = gelu(pre), backward dpre = (dact w^T)
  // * gelu'(pre), each held to one bf16 rounding of the double reference.
  cuda::Gemm gemm;
  ASSERT_TRUE(cuda::Gemm::create(gemm).ok());
  const int64_t M = 48, C = 72, H = 40; // rows, model width, hidden width
  const auto x = cuda::roundedToBf16(randomVector(M * C, 21, -2, 2));
  const auto w = cuda::roundedToBf16(randomVector(C * H, 22, -0.3f, 0.3f));
  const auto b = cuda::roundedToBf16(randomVector(H, 23));
  DeviceVector<uint16_t> dX(cuda::bf16Bits(x)), dW(cuda::bf16Bits(w)),
      dB(cuda::bf16Bits(b)), dPre(static_cast<size_t>(M * H)),
      dAct(static_cast<size_t>(M * H));
  cuda::GemmArgs fwd;
  fwd.M = M, fwd.N = H, fwd.K = C;
  fwd.A = dX.get(), fwd.lda = C, fwd.B = dW.get(), fwd.ldb = H;
  fwd.C = dAct.get(), fwd.ldc = H;
  fwd.inputType = fwd.outputType = cuda::GemmType::BF16;
  fwd.bias = dB.get();
  fwd.activation = cuda::GemmActivation::Gelu;
  fwd.aux = dPre.get(), fwd.ldaux = H;
  bool ran = false;
  ASSERT_TRUE(gemm.tryMatmul(fwd, stream, ran).ok());
  ASSERT_TRUE(ran);
  const std::vector<float> zero(static_cast<size_t>(M * H), 0.0f);
  const std::vector<float> pre =
      referenceGemm(false, false, M, H, C, 1.0f, x, C, w, H, 0.0f, zero, b);
  std::vector<float> act(pre.size());
  for (size_t i = 0; i < pre.size(); ++i)
    act[i] = static_cast<float>(geluReference(pre[i]));
  expectClose(cuda::floatsFromBf16(dPre.host()), pre, 1.0 / 128, 1e-3,
              "GELU_AUX_BIAS pre-activation");
  expectClose(cuda::floatsFromBf16(dAct.host()), act, 1.0 / 128, 1e-3,
              "GELU_AUX_BIAS gelu(pre)");
  // An evaluation's: the same GELU, the pre-activation not kept.
  DeviceVector<uint16_t> dActOnly(static_cast<size_t>(M * H));
  cuda::GemmArgs only = fwd;
  only.C = dActOnly.get();
  only.activation = cuda::GemmActivation::GeluOnly;
  only.aux = nullptr, only.ldaux = 0;
  ASSERT_TRUE(gemm.tryMatmul(only, stream, ran).ok());
  ASSERT_TRUE(ran);
  expectClose(cuda::floatsFromBf16(dActOnly.host()), act, 1.0 / 128, 1e-3,
              "GELU_BIAS gelu(pre)");

  // Backward through the second linear (act [M,H] w2 [H,C]): dpre [M,H] =
  // (dy [M,C] w2^T) * gelu'(pre), pre as the forward stored it.
  const auto w2 = cuda::roundedToBf16(randomVector(H * C, 24, -0.3f, 0.3f));
  const auto dy = cuda::roundedToBf16(randomVector(M * C, 25));
  const auto storedPre = cuda::floatsFromBf16(dPre.host());
  DeviceVector<uint16_t> dW2(cuda::bf16Bits(w2)), dDy(cuda::bf16Bits(dy)),
      dDpre(static_cast<size_t>(M * H));
  cuda::GemmArgs bwd;
  bwd.transB = true;
  bwd.M = M, bwd.N = H, bwd.K = C;
  bwd.A = dDy.get(), bwd.lda = C, bwd.B = dW2.get(), bwd.ldb = C;
  bwd.C = dDpre.get(), bwd.ldc = H;
  bwd.inputType = bwd.outputType = cuda::GemmType::BF16;
  bwd.activation = cuda::GemmActivation::GeluGrad;
  bwd.aux = dPre.get(), bwd.ldaux = H;
  ASSERT_TRUE(gemm.tryMatmul(bwd, stream, ran).ok());
  ASSERT_TRUE(ran);
  std::vector<float> dpre =
      referenceGemm(false, true, M, H, C, 1.0f, dy, C, w2, C, 0.0f, zero, {});
  for (size_t i = 0; i < dpre.size(); ++i)
    dpre[i] = static_cast<float>(dpre[i] * geluSlopeReference(storedPre[i]));
  expectClose(cuda::floatsFromBf16(dDpre.host()), dpre, 1.0 / 128, 1e-3,
              "DGELU dpre");
  EXPECT_FALSE(HasFailure());
}

TEST_F(CudaGemmTest, GeluEpiloguesDeclineWhatCuBlasLtRules) {
  // tryMatmul leaves them to the caller (nothing enqueued, `ran` false);
  // matmul says why.
  cuda::Gemm gemm;
  ASSERT_TRUE(cuda::Gemm::create(gemm).ok());
  DeviceVector<uint16_t> A(16 * 32, 0), B(32 * 24, 0), C(16 * 24, 0x3f80),
      aux(16 * 32 + 8, 0);
  cuda::GemmArgs g;
  g.M = 16, g.N = 24, g.K = 32;
  g.A = A.get(), g.lda = 32, g.B = B.get(), g.ldb = 24;
  g.C = C.get(), g.ldc = 24;
  g.inputType = g.outputType = cuda::GemmType::BF16;
  g.activation = cuda::GemmActivation::Gelu;
  g.aux = aux.get(), g.ldaux = 24;
  const DeclineCase cases[] = {
      {"no aux", [](cuda::GemmArgs &a) { a.aux = nullptr; },
       "needs its pre-activation matrix"},
      {"aux 2 bytes off", [&](cuda::GemmArgs &a) { a.aux = bf16Ptr(aux) + 1; },
       "not 16-byte aligned"},
      {"ldaux 28", [](cuda::GemmArgs &a) { a.ldaux = 28; },
       "not a multiple of 8"},
      {"ldaux below N", [](cuda::GemmArgs &a) { a.ldaux = 16; },
       "not a multiple of 8 at least N"},
      {"gradient with a bias",
       [&](cuda::GemmArgs &a) {
         a.activation = cuda::GemmActivation::GeluGrad;
         a.bias = aux.get();
       },
       "takes no bias"},
      {"GELU only, with aux",
       [](cuda::GemmArgs &a) { a.activation = cuda::GemmActivation::GeluOnly; },
       "keeps no pre-activation"},
  };
  expectEachDeclined(gemm, stream, g, cases);
  // Nothing ran: C still holds its ones.
  for (uint16_t bits : C.host())
    ASSERT_EQ(bits, 0x3f80);
}

TEST_F(CudaGemmTest, BiasGradientEpilogueSumsTheOutputGradient) {
  // A linear layer's weight gradient dweight [C, H] = x^T dout over M rows,
  // with the bias gradient (dout's column sums) written by the same GEMM
  // (cuBLASLt's BGRADA, the LinearGrad of cuda_kernels_bf16.cpp): both
  // held to the double reference, for a bf16 and an fp32 output. M is no
  // multiple of a tensor-core tile, so partial tiles add to the sums too.
  cuda::Gemm gemm;
  ASSERT_TRUE(cuda::Gemm::create(gemm).ok());
  const int64_t M = 200, C = 40, H = 72;
  const auto x = cuda::roundedToBf16(randomVector(M * C, 31));
  const auto dout = cuda::roundedToBf16(randomVector(M * H, 32));
  DeviceVector<uint16_t> dX(cuda::bf16Bits(x)), dOut(cuda::bf16Bits(dout));
  const std::vector<float> zero(static_cast<size_t>(C * H), 0.0f);
  const std::vector<float> dweight =
      referenceGemm(true, false, C, H, M, 1.0f, x, C, dout, H, 0.0f, zero, {});
  std::vector<float> dbias(static_cast<size_t>(H));
  for (int64_t j = 0; j < H; ++j) {
    double sum = 0;
    for (int64_t i = 0; i < M; ++i)
      sum += dout[i * H + j];
    dbias[j] = static_cast<float>(sum);
  }
  cuda::GemmArgs g;
  g.transA = true;
  g.M = C, g.N = H, g.K = M;
  g.A = dX.get(), g.lda = C, g.B = dOut.get(), g.ldb = H;
  g.inputType = cuda::GemmType::BF16;
  g.ldc = H;
  for (cuda::GemmType out : {cuda::GemmType::BF16, cuda::GemmType::F32}) {
    const bool bf16 = out == cuda::GemmType::BF16;
    const std::string what = bf16 ? "bf16 output" : "fp32 output";
    // Filled with NaN: everything compared below was written.
    DeviceVector<uint16_t> cBf16(static_cast<size_t>(C * H), 0x7fc0),
        biasBf16(static_cast<size_t>(H), 0x7fc0);
    DeviceVector<float> cF32(static_cast<size_t>(C * H), NAN),
        biasF32(static_cast<size_t>(H), NAN);
    cuda::GemmArgs a = g;
    a.outputType = out;
    a.C = bf16 ? static_cast<void *>(cBf16.get()) : cF32.get();
    a.biasGradient = bf16 ? static_cast<void *>(biasBf16.get()) : biasF32.get();
    bool ran = false;
    ASSERT_TRUE(gemm.tryMatmul(a, stream, ran).ok()) << what;
    ASSERT_TRUE(ran) << what;
    // bf16: one rounding of an fp32 sum; fp32: fp32 accumulation of M
    // terms of magnitude <= 1.
    const double rtol = bf16 ? 1.0 / 128 : 1e-5, atol = bf16 ? 1e-3 : 1e-4;
    expectClose(bf16 ? cuda::floatsFromBf16(cBf16.host()) : cF32.host(),
                dweight, rtol, atol, what + " dweight");
    expectClose(bf16 ? cuda::floatsFromBf16(biasBf16.host()) : biasF32.host(),
                dbias, rtol, atol, what + " dbias");
  }
  EXPECT_FALSE(HasFailure());
}

TEST_F(CudaGemmTest, BiasGradientEpilogueDeclinesWhatItCannotDo) {
  // tryMatmul leaves these to the caller's column-sum kernel (nothing
  // enqueued, `ran` false); matmul says why.
  cuda::Gemm gemm;
  ASSERT_TRUE(cuda::Gemm::create(gemm).ok());
  DeviceVector<uint16_t> A(32 * 16, 0), B(32 * 24, 0), C(16 * 24, 0x3f80),
      bias(24 + 8, 0x3f80), aux(16 * 24, 0);
  cuda::GemmArgs g = smallWeightGradient(A, B, C, bias);
  const DeclineCase cases[] = {
      {"2 bytes off",
       [&](cuda::GemmArgs &a) { a.biasGradient = bf16Ptr(bias) + 1; },
       "bias gradient is not 16-byte aligned"},
      {"with a bias", [&](cuda::GemmArgs &a) { a.bias = aux.get(); },
       "takes no bias and no activation"},
      {"with a GELU",
       [&](cuda::GemmArgs &a) {
         a.activation = cuda::GemmActivation::Gelu;
         a.aux = aux.get(), a.ldaux = 24;
       },
       "takes no bias and no activation"},
      {"alpha 2", [](cuda::GemmArgs &a) { a.alpha = 2.0f; },
       "needs alpha 1 and beta 0"},
      {"beta 1", [](cuda::GemmArgs &a) { a.beta = 1.0f; },
       "needs alpha 1 and beta 0"},
  };
  expectEachDeclined(gemm, stream, g, cases);
  // Nothing ran: C and the bias gradient still hold their ones.
  for (uint16_t bits : C.host())
    ASSERT_EQ(bits, 0x3f80);
  for (uint16_t bits : bias.host())
    ASSERT_EQ(bits, 0x3f80);
}

TEST_F(CudaGemmTest, AnEpilogueRefusedWhenCalledRunsAnotherWay) {
  // cublasLtMatmul may refuse an algorithm its heuristic offered. For an
  // epilogue the caller can do without, tryMatmul then declines (nothing
  // enqueued), for that shape from then on, instead of failing the run;
  // the plain GEMM still runs. Only the emulated library can be told to
  // refuse (LOOM_EMULATED_CUBLASLT_REFUSE, an epilogue's value).
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  if (std::string(prop.name).find("CudaEmulation") == std::string::npos)
    GTEST_SKIP() << "needs the emulated cuBLASLt, which can be told to refuse";
  cuda::Gemm gemm;
  ASSERT_TRUE(cuda::Gemm::create(gemm).ok());
  const uint16_t kOne = 0x3f80, kThirtyTwo = 0x4200; // bf16 1 and 32
  DeviceVector<uint16_t> A(32 * 16, kOne), B(32 * 24, kOne), C(16 * 24, 0),
      bias(24, 0);
  cuda::GemmArgs g = smallWeightGradient(A, B, C, bias);
  ASSERT_EQ(setenv("LOOM_EMULATED_CUBLASLT_REFUSE", "256", 1), 0); // BGRADA
  bool ran = true;
  const Status refused = gemm.tryMatmul(g, stream, ran);
  unsetenv("LOOM_EMULATED_CUBLASLT_REFUSE");
  ASSERT_TRUE(refused.ok()) << refused.message();
  EXPECT_FALSE(ran);
  // Remembered for the shape, though the library would take it now.
  ran = true;
  ASSERT_TRUE(gemm.tryMatmul(g, stream, ran).ok());
  EXPECT_FALSE(ran);
  const Status s = gemm.matmul(g, stream);
  EXPECT_NE(s.message().find("cuBLASLt has no algorithm"), std::string::npos)
      << s.message();
  for (uint16_t bits : C.host())
    ASSERT_EQ(bits, 0);
  for (uint16_t bits : bias.host())
    ASSERT_EQ(bits, 0);
  // Without the epilogue: the GEMM of ones over K = 32.
  g.biasGradient = nullptr;
  ASSERT_TRUE(gemm.matmul(g, stream).ok());
  for (uint16_t bits : C.host())
    ASSERT_EQ(bits, kThirtyTwo);
}
