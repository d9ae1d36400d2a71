//===- CudaGemmTest.cpp - cuBLASLt bf16 GEMMs against a CPU reference -----===//
//
// gemm.h's bf16 path (bf16 A/B, fp32 accumulation, bf16 or fp32 C, bias
// epilogue) against a double-precision reference on the same bf16-rounded
// inputs, for every transpose combination and shapes that are and are not
// multiples of the tensor-core tiles; the plan cache; and the argument
// errors. Skipped without a device.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "TestUtil.h"

#include "runtime/cuda/bf16_host.h"
#include "runtime/cuda/gemm.h"

#include <cmath>

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
}

} // namespace
