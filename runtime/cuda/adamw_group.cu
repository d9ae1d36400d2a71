//===- adamw_group.cu - Many parameters' AdamW step in one launch ---------===//
//
// Every thread walks the launch's tensors in order and, in each, the
// elements first, first + stride, ... (a grid-stride loop): a large tensor
// is spread over the whole grid, a small one over its first threads, and
// no tensor needs a table of its blocks. A tensor whose arrays are all
// aligned goes four elements at a time (16-byte loads and stores of the
// fp32 arrays, 8-byte of the bf16 ones), then its last n % 4 one by one;
// each element's arithmetic is the same either way. See adamw_group.h.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/adamw_group.h"

#include "runtime/cuda/adamw_step.cuh"
#include "runtime/cuda/bf16_round.cuh"
#include "runtime/cuda/check.h"
#include "runtime/cuda/launch.cuh"

#include <algorithm>

namespace loom::cuda {
namespace {

using launch::blocksFor;
using launch::kThreads;

/// One launch's tensors, passed by value as a kernel parameter.
struct LaunchTensors {
  AdamWGroupMember tensor[kAdamWGroupLaunchTensors];
  int count;
};
static_assert(sizeof(LaunchTensors) <= 4096 - 128,
              "AdamW group descriptors exceed the kernel parameter space");

/// One wave on an H100/H200: 132 SMs, 4 blocks each (ptxas: 64 registers
/// a thread with the four-element path, so 4 blocks of 256 fit an SM's 64K
/// registers). Every block has the same share of a tensor, so a second,
/// partial wave would only wait on the first; a larger tensor loops
/// instead.
constexpr unsigned kMaxBlocks = 132 * 4;

/// Whether `p` is a multiple of `bytes` (null counts as aligned).
__device__ inline bool alignedTo(const void *p, uintptr_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

/// Whether tensor `t` can go four elements at a time.
__device__ inline bool fourAtATime(const AdamWGroupMember &t) {
  return alignedTo(t.params, 16) && alignedTo(t.m, 16) && alignedTo(t.v, 16) &&
         alignedTo(t.grads, t.gradsBF16 ? 8 : 16) && alignedTo(t.bf16Params, 8);
}

/// Elements [4q, 4q + 4) of `t`.
__device__ inline void updateFour(const AdamWGroupMember &t, int64_t q,
                                  float scale, const AdamWStepScalars &s,
                                  float decay) {
  float g[4];
  if (t.gradsBF16) {
    const uint2 raw = static_cast<const uint2 *>(t.grads)[q];
    g[0] = widenBF16Bits(static_cast<uint16_t>(raw.x & 0xffffu));
    g[1] = widenBF16Bits(static_cast<uint16_t>(raw.x >> 16));
    g[2] = widenBF16Bits(static_cast<uint16_t>(raw.y & 0xffffu));
    g[3] = widenBF16Bits(static_cast<uint16_t>(raw.y >> 16));
  } else {
    const float4 raw = static_cast<const float4 *>(t.grads)[q];
    g[0] = raw.x, g[1] = raw.y, g[2] = raw.z, g[3] = raw.w;
  }
  float4 p = reinterpret_cast<float4 *>(t.params)[q];
  float4 m = reinterpret_cast<float4 *>(t.m)[q];
  float4 v = reinterpret_cast<float4 *>(t.v)[q];
  adamwUpdate(g[0] * scale, p.x, m.x, v.x, s, decay);
  adamwUpdate(g[1] * scale, p.y, m.y, v.y, s, decay);
  adamwUpdate(g[2] * scale, p.z, m.z, v.z, s, decay);
  adamwUpdate(g[3] * scale, p.w, m.w, v.w, s, decay);
  reinterpret_cast<float4 *>(t.params)[q] = p;
  reinterpret_cast<float4 *>(t.m)[q] = m;
  reinterpret_cast<float4 *>(t.v)[q] = v;
  if (t.bf16Params) {
    uint2 out;
    out.x = static_cast<uint32_t>(roundToBF16Bits(p.x)) |
            static_cast<uint32_t>(roundToBF16Bits(p.y)) << 16;
    out.y = static_cast<uint32_t>(roundToBF16Bits(p.z)) |
            static_cast<uint32_t>(roundToBF16Bits(p.w)) << 16;
    reinterpret_cast<uint2 *>(t.bf16Params)[q] = out;
  }
}

__global__ void adamwGroupKernel(LaunchTensors batch, const float *lrPtr,
                                 const float *stepPtr, const float *scalePtr,
                                 AdamWHyper h) {
  const AdamWStepScalars s = adamwStepScalars(lrPtr[0], stepPtr[0], h);
  const float scale = scalePtr[0];
  const int64_t first =
      static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int j = 0; j < batch.count; ++j) {
    const AdamWGroupMember &t = batch.tensor[j];
    const float decay = adamwDecay(s, t.weightDecay);
    int64_t done = 0;
    if (fourAtATime(t)) {
      const int64_t quads = t.n / 4;
      for (int64_t q = first; q < quads; q += stride)
        updateFour(t, q, scale, s, decay);
      done = quads * 4;
    }
    for (int64_t i = done + first; i < t.n; i += stride) {
      const float g =
          t.gradsBF16 ? widenBF16Bits(static_cast<const uint16_t *>(t.grads)[i])
                      : static_cast<const float *>(t.grads)[i];
      float p = t.params[i], m = t.m[i], v = t.v[i];
      adamwUpdate(g * scale, p, m, v, s, decay);
      t.params[i] = p;
      t.m[i] = m;
      t.v[i] = v;
      if (t.bf16Params)
        t.bf16Params[i] = roundToBF16Bits(p);
    }
  }
}

} // namespace

Status adamwGroupStep(const AdamWGroupMember *tensors, size_t count,
                      const float *lr, const float *step,
                      const float *gradScale, const AdamWHyper &h,
                      cudaStream_t stream) {
  for (size_t begin = 0; begin < count; begin += kAdamWGroupLaunchTensors) {
    LaunchTensors batch{};
    batch.count =
        static_cast<int>(std::min(kAdamWGroupLaunchTensors, count - begin));
    int64_t largest = 0;
    for (int j = 0; j < batch.count; ++j) {
      batch.tensor[j] = tensors[begin + static_cast<size_t>(j)];
      largest = std::max(largest, batch.tensor[j].n);
    }
    if (largest == 0)
      continue;
    LOOM_LAUNCH(adamwGroupKernel, std::min(blocksFor(largest), kMaxBlocks),
                kThreads, stream, batch, lr, step, gradScale, h);
  }
  return Status::success();
}

} // namespace loom::cuda
