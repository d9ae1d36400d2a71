//===- EmulatedCudaRuntimeTest.cpp - What the emulated runtime enforces ---===//
//
// EmulatedCudaRuntime.cpp stands in for libcudart under the device tests
// and loom-run-emulated. These cases hold it to what it promises beyond
// host memory: fresh device memory is not zeros (a GPU's holds whatever was
// there), so a kernel that reads a buffer before anything wrote it reads
// NaN here, as it reads garbage on a device; and an access past the end of
// an allocation faults instead of landing in the host heap's next block.
// Linked into loom-cuda-emulation-tests only: on a GPU the contents are
// undefined, and a small overrun may not fault.
//
//===----------------------------------------------------------------------===//
#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstring>

namespace {

TEST(EmulatedCudaRuntime, FreshDeviceMemoryIsNaNNotZeros) {
  for (bool async : {false, true}) {
    // A size the 256-byte rounding pads, and one large enough to come from
    // fresh (zeroed) pages of the host.
    for (size_t bytes : {size_t(1000), size_t(8) << 20}) {
      void *p = nullptr;
      ASSERT_EQ(async ? cudaMallocAsync(&p, bytes, nullptr)
                      : cudaMalloc(&p, bytes),
                cudaSuccess);
      const auto *b = static_cast<const uint8_t *>(p);
      size_t notFF = 0;
      for (size_t i = 0; i < bytes; ++i)
        notFF += b[i] != 0xFF;
      EXPECT_EQ(notFF, 0u) << bytes << " bytes, async " << async;
      float f;
      std::memcpy(&f, p, sizeof f);
      EXPECT_TRUE(std::isnan(f));
      uint16_t bf16; // NaN as bf16 too: exponent all ones, mantissa not 0
      std::memcpy(&bf16, p, sizeof bf16);
      EXPECT_EQ(bf16 & 0x7F80, 0x7F80);
      EXPECT_NE(bf16 & 0x007F, 0);
      ASSERT_EQ(async ? cudaFreeAsync(p, nullptr) : cudaFree(p), cudaSuccess);
    }
  }
}

TEST(EmulatedCudaRuntime, AnAccessPastTheEndOfDeviceMemoryFaults) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // 1000 bytes round up to 1024 (cudaMalloc's 256-byte alignment): the
  // rounding is usable, the byte after it is the guard page.
  for (bool async : {false, true}) {
    void *p = nullptr;
    ASSERT_EQ(async ? cudaMallocAsync(&p, 1000, nullptr) : cudaMalloc(&p, 1000),
              cudaSuccess);
    volatile char *bytes = static_cast<char *>(p);
    bytes[0] = 1;
    bytes[1023] = 2;
    EXPECT_EQ(bytes[1023], 2);
    EXPECT_EXIT(bytes[1024] = 3, ::testing::KilledBySignal(SIGSEGV), "");
    EXPECT_EXIT((void)bytes[1024 + 100], ::testing::KilledBySignal(SIGSEGV),
                "");
    ASSERT_EQ(async ? cudaFreeAsync(p, nullptr) : cudaFree(p), cudaSuccess);
  }
}

} // namespace
