//===- device.h - Device probe and the per-rank arena -----------*- C++ -*-===//
//
// The CUDA backend holds one rank's tensors in one cudaMalloc of the stage's
// arena_bytes (the compiler's buffer plan applies unchanged: buffers are
// views at their offsets), a compute stream, and host<->device copies for
// what crosses the boundary (parameters at init / checkpoint, tokens and
// targets per micro-batch, loss and gradient norm per step).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_DEVICE_H
#define LOOM_RUNTIME_CUDA_DEVICE_H

#include "runtime/core/status.h"

#include <cstdint>
#include <cuda_runtime_api.h>

namespace loom::cuda {

/// Ok with `count` >= 1 when a CUDA device can be used; otherwise an error
/// that says what cudaGetDeviceCount returned and to use --backend cpu.
Status probeDevice(int &count);

/// A GPU's dense bf16 tensor-core peak in TFLOP/s by its name (what
/// cudaGetDeviceProperties reports), the denominator of the MFU loom-run
/// reports: 989 for the H100 SXM, H200 and GH200, 835 for the H100 / H200
/// NVL, 756 for the H100 PCIe, 312 for the A100; 0 for any other (then no
/// MFU unless --peak-tflops gives the peak).
double bf16PeakTflops(const char *deviceName);

/// bf16PeakTflops of device `device` (0 when it cannot be queried).
double deviceBf16PeakTflops(int device);

/// Peak memory bandwidth in GB/s (10^9 bytes a second) of memory clocked at
/// `memoryClockKhz` on a `busWidthBits`-bit bus, two transfers a clock (as
/// HBM and GDDR's data rates count): 3352 for an H100 SXM (2619 MHz, 5120
/// bits). 0 when either is not positive.
double memoryBandwidthGbps(int memoryClockKhz, int busWidthBits);

/// memoryBandwidthGbps of device `device` from its attributes (0 when they
/// cannot be queried): the roofline's bandwidth in a trace.
double deviceMemoryBandwidthGbps(int device);

/// One rank's device memory: a single allocation, zeroed.
class DeviceArena {
public:
  DeviceArena() = default;
  ~DeviceArena();
  DeviceArena(const DeviceArena &) = delete;
  DeviceArena &operator=(const DeviceArena &) = delete;

  /// Allocates `bytes` on the current device and zeroes them; errors with
  /// the size and the device's free memory when it does not fit.
  Status allocate(uint64_t bytes, cudaStream_t stream);
  uint8_t *data() const { return base; }
  uint64_t size() const { return bytes; }

  /// Host -> arena at `offset` / arena at `offset` -> host (stream-ordered;
  /// copyOut waits for the stream).
  Status copyIn(uint64_t offset, const void *src, uint64_t n,
                cudaStream_t stream);
  Status copyOut(void *dst, uint64_t offset, uint64_t n, cudaStream_t stream);

private:
  uint8_t *base = nullptr;
  uint64_t bytes = 0;
};

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_DEVICE_H
