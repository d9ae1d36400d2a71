//===- CudaDevicePeakTest.cpp - The bf16 peaks MFU is reported against ----===//
//
// runtime/cuda/device.h's table, by the names cudaGetDeviceProperties gives
// (no device needed): NVIDIA's dense bf16 tensor-core figures, the more
// specific names (NVL, PCIe) before the family's.
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

} // namespace
