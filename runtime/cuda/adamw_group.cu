//===- adamw_group.cu - Many parameters' AdamW step in one launch ---------===//
//
// Every thread walks the launch's tensors in order and, in each, the
// elements first, first + stride, ... (a grid-stride loop): a large tensor
// is spread over the whole grid, a small one over its first threads, and
// no tensor needs a table of its blocks. See adamw_group.h.
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

/// One wave on an H100/H200: 132 SMs, 5 blocks each (ptxas: 47 registers
/// a thread, so 5 blocks of 256 fit an SM's 64K registers). Every block has
/// the same share of a tensor, so a second, partial wave would only wait
/// on the first; a larger tensor loops instead.
constexpr unsigned kMaxBlocks = 132 * 5;

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
    for (int64_t i = first; i < t.n; i += stride) {
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
