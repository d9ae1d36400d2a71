//===- CudaKernelTest.cpp - CUDA kernels against the CPU kernels ----------===//
//
// Each CUDA kernel on random inputs vs the CPU kernel of the same contract
// (runtime/cpu/*.h), fp32 with TF32 off, to round-off tolerances: the
// cuBLASLt GEMM and the copies here, the kernel launchers in
// CudaKernelCases.inc (which FP32KernelEmulationTest.cpp also runs on host
// threads). Skipped without a device.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "TestUtil.h"

#include "runtime/cpu/gemm.h"
#include "runtime/cpu/tensor_movement.h"
#include "runtime/core/communicator.h"
#include "runtime/cuda/convert.h"
#include "runtime/cuda/gemm.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/tensor_movement.h"
#include "runtime/cuda/vocab_parallel.h"

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
}

namespace kernels = ::loom::cuda;
#define LOOM_KERNEL_TEST(Name) TEST_F(CudaKernelTest, Name)
#include "CudaKernelCases.inc"
#undef LOOM_KERNEL_TEST
