//===- launch.cuh - Launch shapes and warp reductions ----------*- CUDA -*-===//
//
// What every .cu file of the backend shares: the block size, grid sizes for
// one thread per element or one warp per row, and the butterfly warp
// reductions (every lane ends with the result, in a fixed order, so the
// kernels stay deterministic).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_LAUNCH_CUH
#define LOOM_RUNTIME_CUDA_LAUNCH_CUH

#include <cstdint>

namespace loom::cuda::launch {

constexpr int kThreads = 256;
constexpr int kWarp = 32;

/// Blocks of `threads` covering `n` threads.
inline unsigned blocksFor(int64_t n, int threads = kThreads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}
/// Blocks for one warp per row.
inline unsigned blocksForRows(int64_t rows) { return blocksFor(rows * kWarp); }

__device__ inline float warpSum(float x) {
  for (int o = kWarp / 2; o > 0; o /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}
__device__ inline float warpMax(float x) {
  for (int o = kWarp / 2; o > 0; o /= 2)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

/// x as lane (lane ^ mask) of this warp holds it (the whole warp calls it).
__device__ inline float laneXor(float x, int mask) {
  return __shfl_xor_sync(0xffffffffu, x, mask);
}

/// The max / sum of x over the lane pair (2k, 2k + 1), in both lanes: two
/// lanes that share a row.
__device__ inline float pairMax(float x) {
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
}
__device__ inline float pairSum(float x) {
  return x + __shfl_xor_sync(0xffffffffu, x, 1);
}

/// The max / sum of x over the lane quad (4k .. 4k + 3), in every lane of
/// it: the four lanes that hold one row of an mma.sync tile (mma.cuh).
__device__ inline float quadMax(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ inline float quadSum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

/// The sum of every thread's `s` over a block of kThreads threads, in a
/// fixed shared-memory tree (deterministic); valid in thread 0. Every
/// thread of the block must call it.
__device__ inline double blockSum(double s) {
  __shared__ double partial[kThreads];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  return partial[0];
}

/// Global warp index / lane for warp-per-row kernels.
__device__ inline int64_t warpIndex() {
  return (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
}
__device__ inline int laneIndex() { return threadIdx.x % kWarp; }

} // namespace loom::cuda::launch

/// Launches `kernel` on `stream` when there is work (a zero-size grid is an
/// error in CUDA) and checks the launch (check.h).
#define LOOM_LAUNCH(kernel, blocks, threads, stream, ...)                      \
  do {                                                                         \
    if ((blocks) > 0)                                                          \
      kernel<<<(blocks), (threads), 0, (stream)>>>(__VA_ARGS__);               \
    LOOM_CUDA_CHECK_LAUNCH();                                                  \
  } while (0)

#endif // LOOM_RUNTIME_CUDA_LAUNCH_CUH
