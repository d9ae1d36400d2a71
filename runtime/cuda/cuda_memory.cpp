//===- cuda_memory.cpp - Buffer memory on the CUDA device -------*- C++ -*-===//
//
// release waits for the stream first: a kernel still in flight may read the
// bytes being freed (cudaFree alone only synchronizes the device, not a
// non-default stream's pending work in every driver mode).
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/cuda_memory.h"

#include "runtime/cuda/check.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace loom::cuda {

Status CudaMemory::allocate(uint64_t bytes, uint8_t *&base) {
  base = nullptr;
  if (bytes == 0)
    return Status::success();
  void *p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError(); // so the next call does not report this failure
    size_t freeBytes = 0, totalBytes = 0;
    cudaMemGetInfo(&freeBytes, &totalBytes);
    LOOM_ERROR("cannot allocate " << bytes << " bytes of device memory ("
                                  << cudaGetErrorName(err) << "; "
                                  << freeBytes << " of " << totalBytes
                                  << " bytes free); use more pipeline stages, "
                                     "tensor parallelism or ZeRO");
  }
  base = static_cast<uint8_t *>(p);
  LOOM_CUDA_CHECK(cudaMemsetAsync(base, 0, bytes, stream));
  return Status::success();
}

void CudaMemory::release(uint8_t *base, uint64_t) {
  if (!base)
    return;
  cudaStreamSynchronize(stream);
  cudaFree(base);
}

CudaMemory::~CudaMemory() {
  if (ring || !uploads.empty())
    cudaStreamSynchronize(stream);
  for (const Upload &u : uploads)
    cudaEventDestroy(u.done);
  for (cudaEvent_t e : idleEvents)
    cudaEventDestroy(e);
  if (ring)
    cudaFreeHost(ring);
}

/// The ring starts at 1 MiB (a step's tokens and targets for B*T up to
/// 128K ids) and doubles to fit the largest single upload.
constexpr uint64_t kInitialRingBytes = 1 << 20;

Status CudaMemory::stagingRegion(uint64_t bytes, uint8_t *&region) {
  // Uploads start 256-byte aligned (the device copy engine's preference).
  const uint64_t need = (bytes + 255) & ~uint64_t(255);
  if (need > ringBytes) {
    // Grow: every upload from the old ring must have completed first.
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (const Upload &u : uploads)
      idleEvents.push_back(u.done);
    uploads.clear();
    if (ring)
      LOOM_CUDA_CHECK(cudaFreeHost(ring));
    ring = nullptr;
    uint64_t size = std::max<uint64_t>(ringBytes * 2, kInitialRingBytes);
    while (size < need)
      size *= 2;
    LOOM_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&ring), size,
                                  cudaHostAllocDefault));
    ringBytes = size;
    ringHead = 0;
  }
  if (ringHead + need > ringBytes)
    ringHead = 0; // wrap: the tail is left unused this lap
  const uint64_t begin = ringHead, end = begin + need;
  // Wait (oldest first) until no upload in flight reads [begin, end).
  auto overlapping = [&] {
    for (const Upload &u : uploads)
      if (u.begin < end && begin < u.end)
        return true;
    return false;
  };
  while (overlapping()) {
    LOOM_CUDA_CHECK(cudaEventSynchronize(uploads.front().done));
    idleEvents.push_back(uploads.front().done);
    uploads.pop_front();
  }
  ringHead = end;
  region = ring + begin;
  return Status::success();
}

Status CudaMemory::copyIn(void *dst, const void *hostSrc, uint64_t bytes) {
  if (bytes == 0)
    return Status::success();
  uint8_t *region = nullptr;
  LOOM_RETURN_IF_ERROR(stagingRegion(bytes, region));
  // The caller may reuse hostSrc on return: it is in the ring now.
  std::memcpy(region, hostSrc, bytes);
  LOOM_CUDA_CHECK(
      cudaMemcpyAsync(dst, region, bytes, cudaMemcpyHostToDevice, stream));
  cudaEvent_t done = nullptr;
  if (idleEvents.empty()) {
    LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  } else {
    done = idleEvents.back();
    idleEvents.pop_back();
  }
  LOOM_CUDA_CHECK(cudaEventRecord(done, stream));
  const uint64_t begin = static_cast<uint64_t>(region - ring);
  uploads.push_back({begin, begin + bytes, done});
  return Status::success();
}

Status CudaMemory::copyOut(void *hostDst, const void *src, uint64_t bytes) {
  if (bytes == 0)
    return Status::success();
  LOOM_CUDA_CHECK(
      cudaMemcpyAsync(hostDst, src, bytes, cudaMemcpyDeviceToHost, stream));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  return Status::success();
}

Status CudaMemory::copy(void *dst, const void *src, uint64_t bytes) {
  // Stream-ordered device-to-device: no host synchronization.
  if (bytes > 0 && dst != src)
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  return Status::success();
}

Status CudaMemory::fillZero(void *dst, uint64_t bytes) {
  if (bytes > 0)
    LOOM_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream));
  return Status::success();
}

Status CudaMemory::synchronize() {
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  return Status::success();
}

} // namespace loom::cuda
