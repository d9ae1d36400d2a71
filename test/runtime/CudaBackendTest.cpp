//===- CudaBackendTest.cpp - CUDA kernels added for the executor seam -----===//
//
// The kernels written when the executor gained its KernelBackend seam, each
// against the CPU kernel of the same contract: vocab-parallel embedding rows
// and cross entropy (vocab_parallel.cu), transpose (transpose.cu), and the
// cuda::CudaKernels methods that do more than forward one call (linear with
// bias, layer-norm and attention gradients with recomputed statistics, loss
// scaling for split tokens, overlapping copies). Skipped without a device.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "TestUtil.h"

#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/cross_entropy.h"
#include "runtime/cpu/embedding.h"
#include "runtime/cpu/tensor_movement.h"
#include "runtime/cuda/convert.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_memory.h"
#include "runtime/cuda/tensor_movement.h"
#include "runtime/cuda/vocab_parallel.h"

#include <cstring>
#include <random>

using namespace loom;
using namespace loom::test;

namespace {

class CudaBackendTest : public CudaTest {};

std::vector<int32_t> idsBelow(int64_t n, int32_t limit, uint32_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::mt19937 gen(seed);
  for (auto &t : ids)
    t = static_cast<int32_t>(gen() % limit);
  return ids;
}

TEST_F(CudaBackendTest, EmbeddingRowsOfOneRank) {
  const int64_t N = 40, V = 96, C = 24, R = 32;
  auto ids = idsBelow(N, V, 1);
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

TEST_F(CudaBackendTest, VocabParallelCrossEntropy) {
  // Two ranks' blocks of a padded vocabulary: 80 columns each, 150 valid
  // (rank 1 has 70 valid columns and 10 of padding).
  const int64_t N = 37, V = 80, validV = 150;
  auto targets = idsBelow(N, validV, 3);
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

TEST_F(CudaBackendTest, TransposeEveryPermutationOfRank3AndElementSizes) {
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

TEST_F(CudaBackendTest, BF16ConversionsMatchTheCpuBitForBit) {
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
  auto targets = idsBelow(rows, validV, 27);
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
