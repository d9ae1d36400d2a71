//===- CudaEmulation.h - Run simple CUDA kernels on CPU threads -*- C++ -*-===//
//
// Lets a .cu file whose kernels use only threadIdx / blockIdx / blockDim,
// __shared__ arrays, __syncthreads / __syncwarp, integer atomicAdd,
// launch.cuh's warp helpers, mma.cuh's m16n8k16 product and ldmatrix (on
// the PTX fragment layouts), async_copy.cuh's cp.async groups and WMMA's
// whole-tile operations (load / store / mma / fill, never a fragment's
// elements) compile as C++ and run on the CPU, so its indexing, tiling,
// masking and barrier placement are tested on machines without a GPU (the real
// kernels are still tested on a device by the Cuda* tests). Blocks run one
// after another; a block's threads are fibers (CudaEmulation.cpp) on the
// launching OS thread, scheduled round robin, each running to its next
// barrier: __syncthreads is a barrier of the block, __syncwarp and the warp
// helpers (warpSum's butterfly, the pair reductions) barriers of the warp
// (whole warps call them together, as __shfl_xor_sync with a full mask
// requires). A thread that has returned no
// longer counts at a barrier, as on the GPU; a block whose live threads wait at
// a barrier the others never reach aborts with a message instead of hanging.
// Between barriers thread t runs before t + 1, so a missing barrier before
// reading a higher thread's write reads stale data deterministically. A WMMA
// fragment holds its whole 16 x 16 tile in every lane; store_matrix_sync writes
// from the warp's last lane only, so another lane that reads the stored tile
// before a __syncwarp() sees stale data, as on the GPU. Vector accesses
// (uint4, float4, uint2) must be aligned to their size, as on the GPU: the
// kernels' source is built with UBSan's alignment check, which ends the run at
// a misaligned one (test/runtime/CMakeLists.txt). What it does not model:
// warp-synchronous code without barriers, WMMA fragment element layouts,
// occupancy, registers and shared-memory limits. One OS thread launches at a
// time (__shared__ arrays are static).
//
// Two ways to use it: include it, then a .cu file inside a namespace of the
// test's own (FlashAttentionEmulationTest, BF16KernelEmulationTest), or link
// loom_cuda_emulated (test/runtime/CMakeLists.txt), the whole CUDA backend
// with each .cu compiled on it.
//
// Include it first, then the .cu file (launch.cuh, mma.cuh and async_copy.cuh
// are replaced: their include guards are defined here).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_TEST_RUNTIME_CUDAEMULATION_H
#define LOOM_TEST_RUNTIME_CUDAEMULATION_H

#include <cuda_bf16.h> // host-side __nv_bfloat16 and its conversions

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <type_traits>
#include <vector>

#undef __global__
#undef __device__
#undef __shared__
#undef __launch_bounds__
#undef __align__
#define __align__(n) __attribute__((aligned(n)))
#define __global__
#define __device__
#define __launch_bounds__(...)
// Blocks run one at a time, so one static array per kernel is the block's.
#define __shared__ static

namespace cuda_emulation {

struct Dim {
  unsigned x = 0, y = 0, z = 0;
};

inline thread_local Dim threadIdx, blockIdx, blockDim, gridDim;
/// __shfl / __ballot exchange slots, one per thread of the block.
inline thread_local float warpSlots[1024];

namespace fibers {

constexpr unsigned kMaxThreads = 1024;

/// Runs body(arg) as every thread of one block (threadIdx.x = 0..threads-1)
/// to completion (CudaEmulation.cpp).
void runBlock(unsigned threads, void (*body)(void *), void *arg);
/// A barrier of the block (scope 0) or of warp w (scope 1 + w).
void arrive(int scope);

} // namespace fibers

namespace async_copy {
/// Drops copies a finished block issued and never waited for.
inline void resetBlock();
} // namespace async_copy

/// Runs kernel(args...) over `blocks` blocks of `threads` threads, blocks
/// one after another (a block's __shared__ arrays are the next block's),
/// each block's threads as fibers on the calling OS thread.
template <typename Kernel, typename... Args>
void runKernel(Kernel kernel, unsigned blocks, unsigned threads, Args... args) {
  if (threads == 0 || threads > fibers::kMaxThreads) {
    std::fprintf(stderr, "CudaEmulation: a block of %u threads\n", threads);
    std::abort();
  }
  blockDim = {threads, 1, 1};
  gridDim = {blocks, 1, 1};
  auto body = [&]() { kernel(args...); };
  auto call = [](void *b) { (*static_cast<decltype(body) *>(b))(); };
  for (unsigned b = 0; b < blocks; ++b) {
    blockIdx = {b, 0, 0};
    async_copy::resetBlock();
    fibers::runBlock(threads, call, &body);
  }
}

/// __syncthreads and __syncwarp on the fibers.
inline void syncBlock() { fibers::arrive(0); }
inline void syncWarp() {
  fibers::arrive(1 + static_cast<int>(threadIdx.x / 32));
}

/// launch.cuh's contents, on the emulated threads.
namespace launch {
constexpr int kThreads = 256;
constexpr int kWarp = 32;
inline unsigned blocksFor(int64_t n, int threads = kThreads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}
inline unsigned blocksForRows(int64_t rows) { return blocksFor(rows * kWarp); }
inline int64_t warpIndex() {
  return (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
}
inline int laneIndex() { return threadIdx.x % kWarp; }
/// The butterfly of __shfl_xor_sync, lane by lane.
inline float warpSum(float x) {
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int o = kWarp / 2; o > 0; o /= 2) {
    warpSlots[threadIdx.x] = x;
    syncWarp();
    const float other = warpSlots[w * kWarp + (lane ^ o)];
    syncWarp();
    x += other;
  }
  return x;
}
/// warpSum's butterfly with max.
inline float warpMax(float x) {
  const int w = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
  for (int o = kWarp / 2; o > 0; o /= 2) {
    warpSlots[threadIdx.x] = x;
    syncWarp();
    const float other = warpSlots[w * kWarp + (lane ^ o)];
    syncWarp();
    x = std::max(x, other);
  }
  return x;
}
/// launch.cuh's pair reductions: lanes 2k and 2k + 1 exchange once.
inline float pairExchange(float x) {
  const int lane = threadIdx.x % kWarp;
  warpSlots[threadIdx.x] = x;
  syncWarp();
  const float other = warpSlots[threadIdx.x - lane + (lane ^ 1)];
  syncWarp();
  return other;
}
inline float pairMax(float x) { return std::max(x, pairExchange(x)); }
inline float pairSum(float x) { return x + pairExchange(x); }
/// launch.cuh's laneXor: x from lane (lane ^ mask) of the warp.
inline float laneXor(float x, int mask) {
  const int lane = threadIdx.x % kWarp;
  warpSlots[threadIdx.x] = x;
  syncWarp();
  const float other = warpSlots[threadIdx.x - lane + (lane ^ mask)];
  syncWarp();
  return other;
}
/// launch.cuh's quad reductions: the xor-1 then xor-2 butterfly.
inline float quadMax(float x) {
  x = std::max(x, laneXor(x, 1));
  return std::max(x, laneXor(x, 2));
}
inline float quadSum(float x) {
  x += laneXor(x, 1);
  return x + laneXor(x, 2);
}
/// launch.cuh's fixed shared-memory tree over a block of kThreads.
inline double blockSum(double s) {
  static double partial[kThreads];
  partial[threadIdx.x] = s;
  syncBlock();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride)
      partial[threadIdx.x] += partial[threadIdx.x + stride];
    syncBlock();
  }
  const double total = partial[0];
  // Every thread has read the total before a later call overwrites it.
  syncBlock();
  return total;
}
} // namespace launch

/// mma.cuh's contents. bf16m16n8k16 runs lane by lane on the PTX ISA's
/// fragment layouts (mma.cuh's table): every lane posts its registers,
/// then computes its own four accumulators from the elements the other
/// lanes' registers hold, so a kernel that puts an element in the wrong
/// register or half computes a wrong product here, as on the GPU.
namespace mma {
/// Each thread's a[0..3], b0, b1 for the warp's current product.
inline thread_local uint32_t slots[fibers::kMaxThreads][6];
inline float bf16BitsToFloat(uint32_t bits) {
  const uint32_t u = (bits & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
inline void bf16m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                         uint32_t b1) {
  const int lane = threadIdx.x % 32, warpBase = threadIdx.x - lane;
  uint32_t *mine = slots[threadIdx.x];
  for (int i = 0; i < 4; ++i)
    mine[i] = a[i];
  mine[4] = b0;
  mine[5] = b1;
  syncWarp();
  // A(r, k): lane 4 (r % 8) + (k % 8) / 2, register r / 8 + 2 (k / 8),
  // half k % 2. B(k, n): lane 4 n + (k % 8) / 2, register k / 8, half k % 2.
  auto elementA = [&](int r, int k) {
    const uint32_t reg =
        slots[warpBase + 4 * (r % 8) + (k % 8) / 2][r / 8 + 2 * (k / 8)];
    return bf16BitsToFloat(reg >> (16 * (k % 2)));
  };
  auto elementB = [&](int k, int n) {
    const uint32_t reg = slots[warpBase + 4 * n + (k % 8) / 2][4 + k / 8];
    return bf16BitsToFloat(reg >> (16 * (k % 2)));
  };
  const int g = lane / 4, t = lane % 4;
  float out[4];
  for (int i = 0; i < 4; ++i) {
    const int r = g + 8 * (i / 2), n = 2 * t + i % 2;
    float acc = d[i];
    for (int k = 0; k < 16; ++k)
      acc += elementA(r, k) * elementB(k, n);
    out[i] = acc;
  }
  syncWarp(); // every lane has read the slots before the next product
  for (int i = 0; i < 4; ++i)
    d[i] = out[i];
}
inline uint32_t packBf16(float lo, float hi) {
  const __nv_bfloat16 l = __float2bfloat16(lo), h = __float2bfloat16(hi);
  uint16_t lb, hb;
  std::memcpy(&lb, &l, sizeof lb);
  std::memcpy(&hb, &h, sizeof hb);
  return static_cast<uint32_t>(lb) | static_cast<uint32_t>(hb) << 16;
}
inline uint32_t load2(const __nv_bfloat16 *p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
/// Each thread's row address for the warp's current ldmatrix.
inline thread_local const __nv_bfloat16 *rowSlots[fibers::kMaxThreads];
/// ldmatrix .x4 (.trans when `transposed`) lane by lane: lane 8j + r posts
/// row r of matrix j; lane 4g + t takes elements (g, 2t), (g, 2t + 1) of
/// each matrix, or (2t, g), (2t + 1, g) transposed.
inline void loadMatrices(uint32_t (&r)[4], const __nv_bfloat16 *row,
                         bool transposed) {
  const int lane = threadIdx.x % 32, warpBase = threadIdx.x - lane;
  rowSlots[threadIdx.x] = row;
  syncWarp();
  const int g = lane / 4, t = lane % 4;
  auto element = [&](int j, int rowIndex, int column) {
    uint16_t bits;
    std::memcpy(&bits, rowSlots[warpBase + 8 * j + rowIndex] + column,
                sizeof bits);
    return static_cast<uint32_t>(bits);
  };
  uint32_t out[4];
  for (int j = 0; j < 4; ++j)
    out[j] = transposed ? element(j, 2 * t, g) | element(j, 2 * t + 1, g) << 16
                        : element(j, g, 2 * t) | element(j, g, 2 * t + 1) << 16;
  syncWarp(); // every lane has read the rows before the next load posts
  for (int j = 0; j < 4; ++j)
    r[j] = out[j];
}
inline void loadMatrices(uint32_t (&r)[4], const __nv_bfloat16 *row) {
  loadMatrices(r, row, false);
}
inline void loadMatricesTransposed(uint32_t (&r)[4], const __nv_bfloat16 *row) {
  loadMatrices(r, row, true);
}
} // namespace mma

/// async_copy.cuh's contents. A copy's destination is undefined from its
/// issue until the issuing thread waits for its group: here it reads as
/// all-ones bytes (NaN in bf16 and fp32) in between, and the data lands at
/// the wait. So reading a tile before the wait, or another thread's part
/// before the barrier after the waits, reads NaN; so does a thread still
/// reading a buffer that another thread, past the barrier that should have
/// held it, has started copying the next tile into.
namespace async_copy {
struct Copy {
  void *dst;
  const void *src;
  int bytes;
  bool valid;
};
/// Per thread of the block: copies issued since the last commit, and the
/// committed groups still in flight, oldest first.
inline thread_local std::vector<Copy> issued[fibers::kMaxThreads];
inline thread_local std::deque<std::vector<Copy>> inFlight[fibers::kMaxThreads];
inline void resetBlock() {
  for (unsigned i = 0; i < fibers::kMaxThreads; ++i) {
    issued[i].clear();
    inFlight[i].clear();
  }
}
inline void issue(void *dst, const void *src, int bytes, bool valid) {
  std::memset(dst, 0xff, bytes);
  issued[threadIdx.x].push_back({dst, src, bytes, valid});
}
inline void copy16(void *dst, const void *src, bool valid) {
  issue(dst, src, 16, valid);
}
inline void copy4(void *dst, const void *src, bool valid) {
  issue(dst, src, 4, valid);
}
inline void commit() {
  inFlight[threadIdx.x].push_back(std::move(issued[threadIdx.x]));
  issued[threadIdx.x].clear();
}
template <int kPending> inline void wait() {
  auto &groups = inFlight[threadIdx.x];
  while (groups.size() > static_cast<size_t>(kPending)) {
    for (const Copy &c : groups.front()) {
      if (c.valid)
        std::memcpy(c.dst, c.src, c.bytes);
      else
        std::memset(c.dst, 0, c.bytes);
    }
    groups.pop_front();
  }
}
} // namespace async_copy

} // namespace cuda_emulation

using cuda_emulation::blockDim;
using cuda_emulation::blockIdx;
using cuda_emulation::gridDim;
using cuda_emulation::threadIdx;
/// One fiber runs at a time, so a read-modify-write is atomic.
inline int atomicAdd(int *address, int value) {
  const int old = *address;
  *address += value;
  return old;
}
inline void __syncthreads() { cuda_emulation::syncBlock(); }
inline void __syncwarp() { cuda_emulation::syncWarp(); }

/// WMMA's 16x16x16 tiles (the shapes and types the kernels use).
namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };
template <typename Use, int M, int N, int K, typename T, typename L = void>
struct fragment {
  T x[16 * 16]; // element (r, c) at x[r * 16 + c], in every lane
};
template <typename Use, typename T, typename L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p,
                      unsigned ldm) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] =
          std::is_same<L, row_major>::value ? p[r * ldm + c] : p[c * ldm + r];
}
inline void store_matrix_sync(float *p,
                              const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t layout) {
  // The warp's last lane runs last between barriers: every other lane that
  // reads the tile before a __syncwarp() sees what was there before.
  if (threadIdx.x % 32 != 31)
    return;
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) =
          f.x[r * 16 + c];
}
template <typename Use, typename T, typename L, typename V>
void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, V v) {
  for (auto &e : f.x)
    e = static_cast<T>(v);
}
template <typename LA, typename LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
              const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
              const fragment<accumulator, 16, 16, 16, float> &c) {
  float out[16 * 16];
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float acc = c.x[r * 16 + n];
      for (int k = 0; k < 16; ++k)
        acc += __bfloat162float(a.x[r * 16 + k]) *
               __bfloat162float(b.x[k * 16 + n]);
      out[r * 16 + n] = acc;
    }
  for (int i = 0; i < 16 * 16; ++i)
    d.x[i] = out[i];
}
} // namespace nvcuda::wmma
/// CUDA's bit casts between float and its 32 bits.
inline unsigned __float_as_uint(float f) {
  unsigned u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float __uint_as_float(unsigned u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
/// CUDA's device reciprocal square root.
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
/// CUDA's overloaded device min, for mixed integer widths.
template <typename A, typename B> inline auto min(A a, B b) {
  return a < b ? a : b;
}


#define LOOM_RUNTIME_CUDA_LAUNCH_CUH
#define LOOM_RUNTIME_CUDA_MMA_CUH
#define LOOM_RUNTIME_CUDA_ASYNC_COPY_CUH
#define LOOM_LAUNCH(kernel, blocks, threads, stream, ...)                      \
  do {                                                                         \
    (void)(stream);                                                            \
    if ((blocks) > 0)                                                          \
      ::cuda_emulation::runKernel(kernel, (blocks), (threads), __VA_ARGS__);   \
  } while (0)

#endif // LOOM_TEST_RUNTIME_CUDAEMULATION_H
