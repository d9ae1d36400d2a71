//===- device.cpp - CUDA device probe and the per-rank device arena -------===//
#include "runtime/cuda/device.h"

#include "runtime/cuda/check.h"

#include <string>

namespace loom::cuda {

Status probeDevice(int &count) {
  count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError(); // clear the sticky-free error state
    LOOM_ERROR("no CUDA device: cudaGetDeviceCount returned "
               << cudaGetErrorName(err) << " (" << cudaGetErrorString(err)
               << "); --backend cuda needs an NVIDIA GPU whose driver "
                  "supports this CUDA runtime: run there, or run with "
                  "--backend cpu");
  }
  LOOM_CHECK(count > 0, "no CUDA device: cudaGetDeviceCount returned 0 "
                        "devices (check CUDA_VISIBLE_DEVICES); run on a "
                        "machine with an NVIDIA GPU, or run with --backend "
                        "cpu");
  return Status::success();
}

double bf16PeakTflops(const char *deviceName) {
  const std::string name = deviceName ? deviceName : "";
  auto has = [&](const char *part) {
    return name.find(part) != std::string::npos;
  };
  // Most specific first: "H100 NVL" and "H100 PCIe" also contain "H100".
  if (has("H100 NVL") || has("H200 NVL"))
    return 835;
  if (has("H100 PCIe"))
    return 756;
  if (has("H100") || has("H200"))
    return 989;
  if (has("A100"))
    return 312;
  return 0;
}

double deviceBf16PeakTflops(int device) {
  cudaDeviceProp props{};
  if (cudaGetDeviceProperties(&props, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return bf16PeakTflops(props.name);
}

double memoryBandwidthGbps(int memoryClockKhz, int busWidthBits) {
  if (memoryClockKhz <= 0 || busWidthBits <= 0)
    return 0;
  return 2.0 * memoryClockKhz * 1e3 * (busWidthBits / 8.0) / 1e9;
}

double deviceMemoryBandwidthGbps(int device) {
  int clockKhz = 0, busBits = 0;
  if (cudaDeviceGetAttribute(&clockKhz, cudaDevAttrMemoryClockRate, device) !=
          cudaSuccess ||
      cudaDeviceGetAttribute(&busBits, cudaDevAttrGlobalMemoryBusWidth,
                             device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return memoryBandwidthGbps(clockKhz, busBits);
}

DeviceArena::~DeviceArena() {
  if (base)
    cudaFree(base);
}

Status DeviceArena::allocate(uint64_t n, cudaStream_t stream) {
  LOOM_CHECK(!base, "the device arena is already allocated");
  if (n == 0)
    return Status::success();
  void *p = nullptr;
  cudaError_t err = cudaMalloc(&p, n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    size_t freeBytes = 0, totalBytes = 0;
    cudaMemGetInfo(&freeBytes, &totalBytes);
    LOOM_ERROR("cannot allocate the device arena: " << n << " bytes ("
               << cudaGetErrorName(err) << "); the device has " << freeBytes
               << " of " << totalBytes << " bytes free");
  }
  base = static_cast<uint8_t *>(p);
  bytes = n;
  LOOM_CUDA_CHECK(cudaMemsetAsync(base, 0, n, stream));
  return Status::success();
}

Status DeviceArena::copyIn(uint64_t offset, const void *src, uint64_t n,
                           cudaStream_t stream) {
  LOOM_CHECK(offset + n <= bytes, "copy of " << n << " bytes at offset "
                                             << offset << " is outside the "
                                             << bytes << "-byte arena");
  LOOM_CUDA_CHECK(
      cudaMemcpyAsync(base + offset, src, n, cudaMemcpyHostToDevice, stream));
  return Status::success();
}

Status DeviceArena::copyOut(void *dst, uint64_t offset, uint64_t n,
                            cudaStream_t stream) {
  LOOM_CHECK(offset + n <= bytes, "copy of " << n << " bytes at offset "
                                             << offset << " is outside the "
                                             << bytes << "-byte arena");
  LOOM_CUDA_CHECK(
      cudaMemcpyAsync(dst, base + offset, n, cudaMemcpyDeviceToHost, stream));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  return Status::success();
}

} // namespace loom::cuda
