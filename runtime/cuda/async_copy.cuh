//===- async_copy.cuh - Background copies to shared memory -----*- CUDA -*-===//
//
// PTX's cp.async (sm_80+): a thread issues copies from global to shared
// memory that complete in the background, groups them (commit), and later
// waits until all but its newest N groups have landed. A kernel that
// streams tiles through shared memory issues the next tile's copies, then
// computes on the current one, so the load latency hides behind the math
// (the double buffering of FlashAttention-2 and CUTLASS's multistage
// GEMMs). A wait covers the calling thread's own copies only: the block
// still needs __syncthreads() before reading what other threads copied.
//
// CudaEmulation.h replaces this header: there the copies happen at the
// wait, so a kernel that reads a tile before waiting (or before the barrier
// after it) reads stale data, as it may on the GPU.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_ASYNC_COPY_CUH
#define LOOM_RUNTIME_CUDA_ASYNC_COPY_CUH

#include <cstdint>

namespace loom::cuda::async_copy {

/// 16 bytes from global `src` to shared `dst` (both 16-byte aligned), or
/// 16 zero bytes when !valid (src is then not read, but must still be a
/// global address).
__device__ inline void copy16(void *dst, const void *src, bool valid) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address),
               "l"(src), "r"(valid ? 16 : 0));
}

/// copy16 for 4 bytes (4-byte aligned).
__device__ inline void copy4(void *dst, const void *src, bool valid) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(address),
               "l"(src), "r"(valid ? 4 : 0));
}

/// Closes the calling thread's group of copies issued since the last
/// commit (possibly none: an empty group keeps wait counts uniform).
__device__ inline void commit() { asm volatile("cp.async.commit_group;\n" ::); }

/// Waits until at most `kPending` of the calling thread's newest groups
/// are still in flight.
template <int kPending> __device__ inline void wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

} // namespace loom::cuda::async_copy

#endif // LOOM_RUNTIME_CUDA_ASYNC_COPY_CUH
