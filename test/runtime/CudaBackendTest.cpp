//===- CudaBackendTest.cpp - CUDA kernels added for the executor seam -----===//
//
// The cuda::CudaKernels methods that do more than forward one call (linear
// with bias, layer-norm gradients with recomputed statistics, loss scaling
// for split tokens, overlapping copies), each against the CPU backend, and
// CudaMemory's pinned upload ring. (The kernels added with the executor's
// KernelBackend seam, vocab_parallel.cu, transpose.cu and convert.cu, are
// in CudaKernelCases.inc.) Skipped without a device.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "TestUtil.h"

#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_memory.h"

#include <cstring>

using namespace loom;
using namespace loom::test;

namespace {

class CudaBackendTest : public CudaTest {};

TEST_F(CudaBackendTest, CudaKernelsMatchCpuKernels) {
  std::unique_ptr<cuda::CudaKernels> gpu;
  ASSERT_TRUE(cuda::CudaKernels::create(stream, gpu).ok());
  cpu::CpuKernels host;

  // Linear with bias: cuBLASLt then the bias row.
  const int64_t M = 12, K = 20, N = 9;
  auto x = randomVector(M * K, 20), w = randomVector(K * N, 21),
       b = randomVector(N, 22);
  std::vector<float> want(M * N);
  ASSERT_TRUE(
      host.linearForward(want.data(), x.data(), w.data(), b.data(), M, K, N)
          .ok());
  DeviceVector<float> dx(x), dw(w), db(b), out(M * N);
  ASSERT_TRUE(
      gpu->linearForward(out.get(), dx.get(), dw.get(), db.get(), M, K, N)
          .ok());
  expectClose(out.host(), want, 1e-5, 1e-5, "linearForward");

  // Layer-norm gradient: statistics recomputed, dweight / dbias overwritten
  // (the device outputs start as garbage).
  const int64_t R = 10, C = 40;
  auto in = randomVector(R * C, 23), g = randomVector(C, 24),
       dy = randomVector(R * C, 25);
  std::vector<float> dIn(R * C), dG(C, 3.0f), dB(C, 3.0f), mean(R), rstd(R);
  ASSERT_TRUE(host.layernormGrad(dIn.data(), dG.data(), dB.data(), dy.data(),
                                 in.data(), g.data(), mean.data(), rstd.data(),
                                 R, C, 1e-5f)
                  .ok());
  DeviceVector<float> ddy(dy), dinp(in), dg(g), ddIn(R * C), ddG(C, 3.0f),
      ddB(C, 3.0f), dMean(R), dRstd(R);
  ASSERT_TRUE(gpu->layernormGrad(ddIn.get(), ddG.get(), ddB.get(), ddy.get(),
                                 dinp.get(), dg.get(), dMean.get(), dRstd.get(),
                                 R, C, 1e-5f)
                  .ok());
  expectClose(ddIn.host(), dIn, 1e-4, 1e-5, "layernormGrad dinp");
  expectClose(ddG.host(), dG, 1e-4, 1e-5, "layernormGrad dweight");
  expectClose(ddB.host(), dB, 1e-4, 1e-5, "layernormGrad dbias");

  // Cross entropy over a token share (tokens = 4N), no losses scratch.
  const int64_t rows = 16, V = 50, validV = 45;
  auto logits = randomVector(rows * V, 26, -3, 3);
  auto targets = randomIds(rows, validV, 27);
  float loss = 0;
  ASSERT_TRUE(host.crossEntropyForward(&loss, nullptr, logits.data(),
                                       targets.data(), rows, V, validV,
                                       4.0 * rows)
                  .ok());
  DeviceVector<float> dl(logits), dLoss(1);
  DeviceVector<int32_t> dt(targets);
  ASSERT_TRUE(gpu->crossEntropyForward(dLoss.get(), nullptr, dl.get(), dt.get(),
                                       rows, V, validV, 4.0 * rows)
                  .ok());
  expectClose(dLoss.host(), {loss}, 1e-5, 1e-6, "crossEntropyForward share");

  // Overlapping copy (memmove semantics) through the workspace.
  std::vector<float> buf = randomVector(100, 28), moved = buf;
  std::memmove(moved.data() + 10, moved.data(), 80 * sizeof(float));
  DeviceVector<float> dbuf(buf);
  ASSERT_TRUE(gpu->copy(dbuf.get() + 10, dbuf.get(), 80 * sizeof(float)).ok());
  expectClose(dbuf.host(), moved, 0, 0, "overlapping copy");
}

} // namespace

TEST_F(CudaBackendTest, CopyInReusesHostBytesAtOnceThroughThePinnedRing) {
  // copyIn returns without waiting for the stream; the caller overwrites
  // its host array right away (as the executor does with token rows), many
  // times over, so the pinned ring wraps and grows (one upload larger than
  // the initial 1 MiB). Every device block must hold what the host array
  // held at its call.
  cuda::CudaMemory mem(stream);
  const int64_t blocks = 600, small = 4096; // ints: 16 KiB each
  const int64_t big = 512 * 1024;           // 2 MiB: the ring grows
  uint8_t *dev = nullptr;
  const uint64_t total = (blocks * small + big) * sizeof(int32_t);
  ASSERT_TRUE(mem.allocate(total, dev).ok());
  std::vector<int32_t> host(static_cast<size_t>(big));
  auto *d = reinterpret_cast<int32_t *>(dev);
  for (int64_t b = 0; b < blocks; ++b) {
    for (int64_t i = 0; i < small; ++i)
      host[i] = static_cast<int32_t>(b * 7919 + i);
    ASSERT_TRUE(
        mem.copyIn(d + b * small, host.data(), small * sizeof(int32_t)).ok());
    if (b == blocks / 2) {
      for (int64_t i = 0; i < big; ++i)
        host[i] = static_cast<int32_t>(-i);
      ASSERT_TRUE(
          mem.copyIn(d + blocks * small, host.data(), big * sizeof(int32_t))
              .ok());
    }
  }
  EXPECT_GE(mem.pinnedStagingBytes(), static_cast<uint64_t>(big * 4));
  std::vector<int32_t> back(static_cast<size_t>(blocks * small + big));
  ASSERT_TRUE(mem.copyOut(back.data(), dev, total).ok());
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t i = 0; i < small; i += 97)
      ASSERT_EQ(back[b * small + i], static_cast<int32_t>(b * 7919 + i))
          << "block " << b << " element " << i;
  for (int64_t i = 0; i < big; i += 101)
    ASSERT_EQ(back[blocks * small + i], static_cast<int32_t>(-i));
  mem.release(dev, total);
}
