//===- buffer_memory.h - Where the executor's arena lives -------*- C++ -*-===//
//
// The executor's second seam next to KernelBackend (kernel_backend.h): the
// memory its buffers live in. The executor never dereferences a buffer
// pointer itself; it allocates the arena here and moves bytes between the
// host and buffer memory only through these calls (parameter init, the
// micro-batch's tokens / targets, the loss and gradient-norm read-back,
// gradient zeroing, the lr / step scalars, pipeline stashes). A device
// implementation (cudaMalloc + stream-ordered copies) is then a new class,
// not a change to the executor.
//
// Implementations: cpu::HostMemory (runtime/cpu/host_memory.h), an anonymous
// mmap as the runtime always had; cuda::CudaMemory (runtime/cuda/
// cuda_memory.h), device memory with copies on the compute stream. The
// communicator is told which memory its buffer pointers live in
// (Communicator::bindBufferMemory), so collectives on one rank copy through
// copy() and host-only transports (MPI) stage through copyIn / copyOut.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_BUFFER_MEMORY_H
#define LOOM_RUNTIME_CORE_BUFFER_MEMORY_H

#include "runtime/core/status.h"

#include <cstdint>

namespace loom {

class BufferMemory {
public:
  virtual ~BufferMemory() = default;

  /// Allocates `bytes` of zeroed buffer memory (at least 64-byte aligned,
  /// as the buffer planner assumes) and returns its base in `base` (nullptr
  /// for 0 bytes); errors with the size when it does not fit. The executor
  /// allocates its arena and its temporaries (staging for outputs that
  /// overlap inputs, kernel workspace the program did not plan) here.
  virtual Status allocate(uint64_t bytes, uint8_t *&base) = 0;
  /// Releases what allocate returned (`bytes` as allocated).
  virtual void release(uint8_t *base, uint64_t bytes) = 0;

  /// Host bytes -> buffer memory (`dst` is a buffer pointer). The host
  /// bytes may be reused as soon as this returns.
  virtual Status copyIn(void *dst, const void *hostSrc, uint64_t bytes) = 0;
  /// Buffer memory -> host bytes, after every earlier kernel and copy that
  /// writes `src` has finished.
  virtual Status copyOut(void *hostDst, const void *src, uint64_t bytes) = 0;
  /// Buffer memory -> buffer memory (`dst` and `src` are buffer pointers;
  /// equal or disjoint). Ordered after every earlier kernel and copy. The
  /// default stages through the host; implementations override it with a
  /// device-side copy.
  virtual Status copy(void *dst, const void *src, uint64_t bytes);
  /// Sets `bytes` of buffer memory at `dst` to zero.
  virtual Status fillZero(void *dst, uint64_t bytes) = 0;
  /// Waits until every kernel and copy issued so far has finished (before
  /// the host hands buffer memory to code outside the executor).
  virtual Status synchronize() = 0;
  /// True when the host may dereference buffer pointers (host memory): then
  /// host-only transports use them directly instead of staging.
  virtual bool hostAccessible() const { return false; }
};

} // namespace loom

#endif // LOOM_RUNTIME_CORE_BUFFER_MEMORY_H
