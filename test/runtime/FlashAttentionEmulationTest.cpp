//===- FlashAttentionEmulationTest.cpp - flash_attention.cu on the CPU ----===//
//
// The source of runtime/cuda/flash_attention.cu and flash_attention_mma.cu
// (bf16 at head size 64: tensor cores), compiled as C++ on CudaEmulation.h's
// host threads, against the CPU attention kernels: the tiling, causal masks,
// zero-padding of the head size, tails of T that are not a tile multiple,
// the online softmax, the FlashAttention-2 backward and the barrier
// placement are checked on every build, GPU or not (the same comparisons
// run on a device in CudaFlashAttentionTest).
//
// The .cu is included inside namespace loom_emulated, so its functions do
// not collide with the real ones loom_cuda links in.
//
//===----------------------------------------------------------------------===//
#include "CudaEmulation.h"
#include "TestUtil.h"

#include "runtime/cpu/attention.h"
#include "runtime/cuda/bf16_host.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/flash_attention.h"
#include "runtime/cuda/flash_attention_mma.h"

#include <cmath>
#include <type_traits>

namespace loom_emulated {
namespace loom {
using ::loom::Status;
namespace cuda {
using ::loom::cuda::flashAttentionSupports;
using ::loom::cuda::FlashTcOccupancy;
using ::loom::cuda::FlashTcShapes;
using ::loom::cuda::kFlashMaxHeadSize;
using ::loom::cuda::kFlashTensorCoreHeadSize;
namespace launch = ::cuda_emulation::launch;
namespace mma = ::cuda_emulation::mma;
namespace async_copy = ::cuda_emulation::async_copy;
} // namespace cuda
} // namespace loom
// flash_attention.cu calls the tensor-core kernels: they come first.
// clang-format off
#include "runtime/cuda/flash_attention_mma.cu"
#include "runtime/cuda/flash_attention.cu"
// clang-format on
} // namespace loom_emulated

using namespace loom;
using namespace loom::test;
namespace emulated = loom_emulated::loom::cuda;

namespace {

struct Case {
  int64_t B, T, NH, hs;
  std::string name() const {
    return "B" + std::to_string(B) + " T" + std::to_string(T) + " NH" +
           std::to_string(NH) + " hs" + std::to_string(hs);
  }
};

/// Every compiled head size (16, 32, 64, 128; 48 padded to 64), T inside
/// one tile, T = 1, and T past several forward / backward tiles with tails
/// (hs 64 in bf16: the tensor-core kernels, tiles of 64 rows), and hs 64
/// over several sequences and heads.
const Case kCases[] = {{2, 37, 3, 16},  {1, 100, 2, 64}, {1, 130, 1, 32},
                       {1, 71, 1, 128}, {1, 50, 1, 48},  {1, 1, 2, 64},
                       {1, 192, 1, 64}, {2, 45, 3, 64}};

struct Reference {
  std::vector<float> out, dqkv;
};

Reference cpuAttention(const std::vector<float> &qkv,
                       const std::vector<float> &dout, const Case &c) {
  const int64_t C = c.NH * c.hs;
  std::vector<float> att(static_cast<size_t>(c.B * c.NH * c.T * c.T));
  Reference r{std::vector<float>(static_cast<size_t>(c.B * c.T * C)),
              std::vector<float>(qkv.size())};
  cpu::attentionForward(r.out.data(), att.data(), qkv.data(), c.B, c.T, C,
                        c.NH);
  cpu::attentionBackward(r.dqkv.data(), dout.data(), qkv.data(), att.data(),
                         c.B, c.T, C, c.NH);
  return r;
}

double maxAbs(const std::vector<float> &v) {
  double m = 0;
  for (float x : v)
    m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

TEST(FlashAttentionEmulation, Fp32MatchesCpuKernels) {
  for (const Case &c : kCases) {
    const int64_t C = c.NH * c.hs, rows = c.B * c.NH * c.T;
    auto qkv = randomVector(c.B * c.T * 3 * C, 41);
    auto dout = randomVector(c.B * c.T * C, 42);
    Reference want = cpuAttention(qkv, dout, c);
    std::vector<float> out(want.out.size(), 9.0f), lse(rows, 9.0f),
        rowDot(rows), dqkv(qkv.size(), 9.0f);
    ASSERT_TRUE(emulated::flashAttentionForward(out.data(), lse.data(),
                                                qkv.data(), c.B, c.T, C, c.NH,
                                                nullptr)
                    .ok())
        << c.name();
    ASSERT_TRUE(emulated::flashAttentionBackward(
                    dqkv.data(), rowDot.data(), dout.data(), qkv.data(),
                    out.data(), lse.data(), c.B, c.T, C, c.NH, nullptr)
                    .ok())
        << c.name();
    expectClose(out, want.out, 1e-4, 2e-5, "emulated flash out " + c.name());
    expectClose(dqkv, want.dqkv, 1e-4, 1e-4,
                "emulated flash dqkv " + c.name());
  }
}

TEST(FlashAttentionEmulation, Bf16MatchesCpuKernelsOnRoundedInputs) {
  // offset 1 moves every tensor one element off 16-byte alignment: the
  // tensor-core kernels then stage tiles element by element instead of
  // with 16-byte asynchronous copies.
  for (int offset : {0, 1})
    for (const Case &c : kCases) {
      const int64_t C = c.NH * c.hs, rows = c.B * c.NH * c.T;
      auto qkv = cuda::roundedToBf16(randomVector(c.B * c.T * 3 * C, 51));
      auto dout = cuda::roundedToBf16(randomVector(c.B * c.T * C, 52));
      Reference want = cpuAttention(qkv, dout, c);
      auto qkv16 = cuda::bf16Bits(qkv), dout16 = cuda::bf16Bits(dout);
      qkv16.insert(qkv16.begin(), offset, 0);
      dout16.insert(dout16.begin(), offset, 0);
      std::vector<uint16_t> out16(want.out.size() + offset),
          dqkv16(qkv.size() + offset);
      std::vector<float> lse(rows), rowDot(rows);
      auto bf = [offset](auto &v) {
        return reinterpret_cast<__nv_bfloat16 *>(v.data() + offset);
      };
      const std::string name = c.name() + " offset " + std::to_string(offset);
      // The default shapes (the others compute the same:
      // TensorCoreOccupanciesComputeTheSameValues).
      const cuda::FlashTcShapes shape;
      ASSERT_TRUE(emulated::flashAttentionForward(bf(out16), lse.data(),
                                                  bf(qkv16), c.B, c.T, C, c.NH,
                                                  nullptr, shape)
                      .ok())
          << name;
      ASSERT_TRUE(emulated::flashAttentionBackward(
                      bf(dqkv16), rowDot.data(), bf(dout16), bf(qkv16),
                      bf(out16), lse.data(), c.B, c.T, C, c.NH, nullptr, shape)
                      .ok())
          << name;
      out16.erase(out16.begin(), out16.begin() + offset);
      dqkv16.erase(dqkv16.begin(), dqkv16.begin() + offset);
      // The backward's row dots D[b, h, i] = dout[b, i, h, :] . out[b, i,
      // h, :] of the stored out, where the kernels left them.
      const std::vector<float> outF = cuda::floatsFromBf16(out16);
      std::vector<float> wantDot(rows);
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.NH; ++h)
          for (int64_t i = 0; i < c.T; ++i) {
            double dot = 0;
            const int64_t at = (b * c.T + i) * C + h * c.hs;
            for (int64_t d = 0; d < c.hs; ++d)
              dot += double(dout[at + d]) * outF[at + d];
            wantDot[(b * c.NH + h) * c.T + i] = static_cast<float>(dot);
          }
      expectClose(rowDot, wantDot, 1e-5, 1e-6, "row dots " + name);
      // |error| <= 2^-9 (max|v| + |out|): out is rounded once to bf16, and
      // the tensor-core kernels (hs 64) round each probability to bf16
      // before P V (sum_k |dp_k v_k| <= 2^-9 max|v| with v in [-1, 1)).
      expectClose(cuda::floatsFromBf16(out16), want.out, 1.0 / 256, 2.5e-3,
                  "emulated bf16 flash out " + name);
      expectClose(cuda::floatsFromBf16(dqkv16), want.dqkv, 0,
                  2e-2 * maxAbs(want.dqkv), "emulated bf16 flash dqkv " + name);
    }
}

// The tensor-core kernels compiled for more blocks per SM (the launch
// bounds bench/attention_cuda.cpp times) are the same code: their out, lse
// and dqkv equal the default's bit for bit, and the dispatch launches the
// right kernels for each. So are the kernels each in its own shape (what
// LOOM_CUDA_FLASH_SHAPE=auto may pick, flash_shape_tuning.h): dK/dV and dQ
// write disjoint columns of dqkv in any pair of shapes.
TEST(FlashAttentionEmulation, TensorCoreOccupanciesComputeTheSameValues) {
  const Case c{2, 130, 2, 64};
  const int64_t C = c.NH * c.hs, rows = c.B * c.NH * c.T;
  auto qkv16 = cuda::bf16Bits(randomVector(c.B * c.T * 3 * C, 61));
  auto dout16 = cuda::bf16Bits(randomVector(c.B * c.T * C, 62));
  auto bf = [](auto &v) { return reinterpret_cast<__nv_bfloat16 *>(v.data()); };
  struct Result {
    std::vector<uint16_t> out, dqkv;
    std::vector<float> lse;
  };
  std::vector<float> rowDot(rows);
  for (int64_t r = 0; r < rows; ++r)
    rowDot[r] = 0.01f * static_cast<float>(r % 17) - 0.08f;
  auto run = [&](cuda::FlashTcShapes shapes) {
    Result r{std::vector<uint16_t>(c.B * c.T * C, 0x7fc0),
             std::vector<uint16_t>(qkv16.size(), 0x7fc0),
             std::vector<float>(rows, NAN)};
    EXPECT_TRUE(emulated::flashAttentionForwardTensorCores(
                    bf(r.out), r.lse.data(), bf(qkv16), c.B, c.T, C, c.NH,
                    nullptr, shapes.forward)
                    .ok());
    EXPECT_TRUE(emulated::flashAttentionBackwardTensorCores(
                    bf(r.dqkv), rowDot.data(), bf(dout16), bf(qkv16),
                    r.lse.data(), c.B, c.T, C, c.NH, nullptr, shapes)
                    .ok());
    return r;
  };
  const Result spill0 = run(cuda::FlashTcShapes{});
  // MoreBlocks: other launch bounds; WideBlocks: 128-row blocks (T = 130:
  // one full block and a tail of 2 rows, the top warps' last key tile and
  // the bottom warps' first query tile skipped).
  using Shape = cuda::FlashTcOccupancy;
  const struct {
    const char *name;
    cuda::FlashTcShapes shapes;
  } others[] = {
      {"MoreBlocks", cuda::FlashTcShapes::all(Shape::MoreBlocks)},
      {"WideBlocks", cuda::FlashTcShapes::all(Shape::WideBlocks)},
      {"forward wide, dK/dV spill0, dQ blocks",
       {Shape::WideBlocks, Shape::FewestSpills, Shape::MoreBlocks}},
      {"forward blocks, dK/dV wide, dQ spill0",
       {Shape::MoreBlocks, Shape::WideBlocks, Shape::FewestSpills}},
      // The forward's warps 32 rows each (T = 130: a block of 128 rows
      // and one of 2; the top row tile of a warp fully masked in the
      // warp's last key tile); the backward kernels run it as spill0.
      {"TallWarps", cuda::FlashTcShapes::all(Shape::TallWarps)},
      {"forward tall, dK/dV wide, dQ blocks",
       {Shape::TallWarps, Shape::WideBlocks, Shape::MoreBlocks}},
  };
  for (const auto &other : others) {
    SCOPED_TRACE(other.name);
    const Result r = run(other.shapes);
    EXPECT_EQ(r.out, spill0.out);
    EXPECT_EQ(r.dqkv, spill0.dqkv);
    ASSERT_EQ(r.lse.size(), spill0.lse.size());
    for (size_t i = 0; i < spill0.lse.size(); ++i)
      ASSERT_EQ(r.lse[i], spill0.lse[i]) << "lse " << i;
    // Every output written (no NaN left from the fill).
    for (float x : cuda::floatsFromBf16(r.dqkv))
      ASSERT_FALSE(std::isnan(x));
    for (float x : cuda::floatsFromBf16(r.out))
      ASSERT_FALSE(std::isnan(x));
  }
}

TEST(FlashAttentionEmulation, RefusesHeadSizesItIsNotCompiledFor) {
  std::vector<float> buf(3 * 2 * 160);
  Status s = emulated::flashAttentionForward(buf.data(), buf.data(), buf.data(),
                                             1, 2, 160, 1, nullptr);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("C = 160 over 1 heads is not a head size of "
                             "1..128; use LOOM_CUDA_ATTENTION=naive"),
            std::string::npos)
      << s.message();
}

} // namespace
