//===- CudaDevicePeakTest.cpp - The bf16 peaks MFU is reported against ----===//
//
// runtime/cuda/device.h's table, by the names cudaGetDeviceProperties gives
// (no device needed): NVIDIA's dense bf16 tensor-core figures, the more
// specific names (NVL, PCIe) before the family's; and the memory bandwidth
// a trace's roofline takes from the device's clock and bus width.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/device.h"

#include <gtest/gtest.h>

using namespace loom;

namespace {

TEST(CudaDevicePeak, KnownGpusByName) {
  EXPECT_EQ(cuda::bf16PeakTflops("NVIDIA H100 80GB HBM3"), 989);
  EXPECT_EQ(cuda::bf16PeakTflops("NVIDIA H200"), 989);
  EXPECT_EQ(cuda::bf16PeakTflops("NVIDIA GH200 480GB"), 989);
  EXPECT_EQ(cuda::bf16PeakTflops("NVIDIA H100 NVL"), 835);
  EXPECT_EQ(cuda::bf16PeakTflops("NVIDIA H200 NVL"), 835);
  EXPECT_EQ(cuda::bf16PeakTflops("NVIDIA H100 PCIe"), 756);
  EXPECT_EQ(cuda::bf16PeakTflops("NVIDIA A100-SXM4-80GB"), 312);
  EXPECT_EQ(cuda::bf16PeakTflops("NVIDIA A100 80GB PCIe"), 312);
}

TEST(CudaDevicePeak, UnknownGpusHaveNoPeak) {
  // Then loom-run reports no MFU unless --peak-tflops gives the peak.
  EXPECT_EQ(cuda::bf16PeakTflops("NVIDIA GeForce RTX 4090"), 0);
  EXPECT_EQ(cuda::bf16PeakTflops(""), 0);
  EXPECT_EQ(cuda::bf16PeakTflops(nullptr), 0);
}

TEST(CudaDevicePeak, MemoryBandwidthFromClockAndBusWidth) {
  // An H100 SXM reports 2619 MHz on 5120 bits: its 3.35 TB/s.
  EXPECT_DOUBLE_EQ(cuda::memoryBandwidthGbps(2619000, 5120), 3352.32);
  // Two transfers a clock: an A100 40GB's 1215 MHz on 5120 bits, 1555 GB/s.
  EXPECT_DOUBLE_EQ(cuda::memoryBandwidthGbps(1215000, 5120), 1555.2);
  // Unknown: no roofline bandwidth.
  EXPECT_EQ(cuda::memoryBandwidthGbps(0, 5120), 0);
  EXPECT_EQ(cuda::memoryBandwidthGbps(2619000, 0), 0);
  EXPECT_EQ(cuda::memoryBandwidthGbps(-1, -1), 0);
}

} // namespace
