//===- cuda_memory.h - Buffer memory on the CUDA device ---------*- C++ -*-===//
//
// BufferMemory (runtime/core/buffer_memory.h) for cuda::CudaKernels: the
// arena and the executor's temporaries are cudaMalloc allocations, copies
// and zero fills are enqueued on the kernels' compute stream so they are
// ordered with the kernels. copyIn and copyOut wait for the stream: the
// executor reuses its host bytes (token rows, lr / step) right after
// copyIn, and reads the loss right after copyOut.
//
// Not yet used by loom-run: the executor's collectives, checkpoints and the
// sampler still read buffers on the host (issue 8, step 2).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_CUDA_MEMORY_H
#define LOOM_RUNTIME_CUDA_CUDA_MEMORY_H

#include "runtime/core/buffer_memory.h"

#include <cuda_runtime.h>

namespace loom::cuda {

/// Device memory as buffer memory, ordered on one stream.
class CudaMemory final : public BufferMemory {
public:
  /// `stream`: the stream the kernels run on (CudaKernels::stream()).
  explicit CudaMemory(cudaStream_t stream) : stream(stream) {}

  Status allocate(uint64_t bytes, uint8_t *&base) override;
  void release(uint8_t *base, uint64_t bytes) override;
  Status copyIn(void *dst, const void *hostSrc, uint64_t bytes) override;
  Status copyOut(void *hostDst, const void *src, uint64_t bytes) override;
  Status copy(void *dst, const void *src, uint64_t bytes) override;
  Status fillZero(void *dst, uint64_t bytes) override;
  Status synchronize() override;

private:
  cudaStream_t stream;
};

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_CUDA_MEMORY_H
