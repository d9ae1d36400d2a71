//===- reduce_members.cu - Member-order reduction on the device -----------===//
//
// One thread per element; each reads its element of every block before
// writing, so the output may be one of the blocks.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/reduce_members.h"

#include "runtime/cuda/check.h"
#include "runtime/cuda/launch.cuh"

#include <cuda_bf16.h>

namespace loom::cuda {
namespace {

using launch::blocksFor;
using launch::kThreads;

/// 0 sum, 1 max, 2 min, 3 avg (program::Reduction's meaning, passed as an
/// int so the kernel does not depend on the schema's enum values).
__global__ void reduceMembersKernel(void *out, const void *all, int64_t n,
                                    int64_t count, bool bf16, int op) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count)
    return;
  auto value = [&](int64_t k) {
    return bf16 ? __bfloat162float(
                      static_cast<const __nv_bfloat16 *>(all)[k * count + i])
                : static_cast<const float *>(all)[k * count + i];
  };
  float acc = value(0);
  for (int64_t k = 1; k < n; ++k) {
    const float v = value(k);
    acc = op == 1   ? (acc > v ? acc : v)
          : op == 2 ? (acc < v ? acc : v)
                    : acc + v;
  }
  if (op == 3)
    acc /= static_cast<float>(n);
  if (bf16)
    static_cast<__nv_bfloat16 *>(out)[i] = __float2bfloat16(acc);
  else
    static_cast<float *>(out)[i] = acc;
}

} // namespace

Status reduceMembers(void *out, const void *all, int64_t n, int64_t count,
                     bool bf16, program::Reduction op, cudaStream_t stream) {
  const int code = op == program::Reduction::Max   ? 1
                   : op == program::Reduction::Min ? 2
                   : op == program::Reduction::Avg ? 3
                                                   : 0;
  LOOM_LAUNCH(reduceMembersKernel, blocksFor(count), kThreads, stream, out, all,
              n, count, bf16, code);
  return Status::success();
}

} // namespace loom::cuda
