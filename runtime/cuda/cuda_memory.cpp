//===- cuda_memory.cpp - Buffer memory on the CUDA device -------*- C++ -*-===//
//
// release waits for the stream first: a kernel still in flight may read the
// bytes being freed (cudaFree alone only synchronizes the device, not a
// non-default stream's pending work in every driver mode).
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/cuda_memory.h"

#include "runtime/cuda/check.h"

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

Status CudaMemory::copyIn(void *dst, const void *hostSrc, uint64_t bytes) {
  if (bytes == 0)
    return Status::success();
  LOOM_CUDA_CHECK(
      cudaMemcpyAsync(dst, hostSrc, bytes, cudaMemcpyHostToDevice, stream));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
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
