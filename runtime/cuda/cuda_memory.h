//===- cuda_memory.h - Buffer memory on the CUDA device ---------*- C++ -*-===//
//
// BufferMemory (runtime/core/buffer_memory.h) for cuda::CudaKernels: the
// arena and the executor's temporaries are cudaMalloc allocations, copies
// and zero fills are enqueued on the kernels' compute stream so they are
// ordered with the kernels. The executor reuses its host bytes (token rows,
// lr / step) right after copyIn, so copyIn first copies them into a pinned
// staging ring and enqueues the upload from there: it returns without
// waiting for the stream (a training step's token copies no longer stall
// the host behind the previous step's kernels). A ring region is reused
// only after the upload that read it has completed (an event per upload).
// copyOut waits for the stream: the executor reads the loss right after.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_CUDA_MEMORY_H
#define LOOM_RUNTIME_CUDA_CUDA_MEMORY_H

#include "runtime/core/buffer_memory.h"

#include <cuda_runtime.h>
#include <deque>
#include <vector>

namespace loom::cuda {

/// Device memory as buffer memory, ordered on one stream.
class CudaMemory final : public BufferMemory {
public:
  /// `stream`: the stream the kernels run on (CudaKernels::stream()).
  explicit CudaMemory(cudaStream_t stream) : stream(stream) {}
  ~CudaMemory() override;
  CudaMemory(const CudaMemory &) = delete;
  CudaMemory &operator=(const CudaMemory &) = delete;

  Status allocate(uint64_t bytes, uint8_t *&base) override;
  void release(uint8_t *base, uint64_t bytes) override;
  Status copyIn(void *dst, const void *hostSrc, uint64_t bytes) override;
  Status copyOut(void *hostDst, const void *src, uint64_t bytes) override;
  Status copy(void *dst, const void *src, uint64_t bytes) override;
  Status fillZero(void *dst, uint64_t bytes) override;
  Status synchronize() override;

  /// Bytes of pinned host memory the staging ring holds (tests).
  uint64_t pinnedStagingBytes() const { return ringBytes; }

private:
  /// `bytes` of the pinned ring for an upload, after every earlier upload
  /// that read those bytes has completed.
  Status stagingRegion(uint64_t bytes, uint8_t *&region);

  /// An upload in flight from [begin, end) of the ring.
  struct Upload {
    uint64_t begin, end;
    cudaEvent_t done;
  };
  cudaStream_t stream;
  uint8_t *ring = nullptr; // pinned (cudaHostAlloc)
  uint64_t ringBytes = 0, ringHead = 0;
  std::deque<Upload> uploads; // oldest first
  std::vector<cudaEvent_t> idleEvents;
};

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_CUDA_MEMORY_H
