//===- convert.cu - fp32 <-> bf16 conversion on device --------------------===//
//
// One thread per element; the rounding is bf16_round.cuh's (that of
// runtime/core/bfloat16.h, so device and host results are bitwise equal,
// NaN payloads included).
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/convert.h"

#include "runtime/cuda/bf16_round.cuh"
#include "runtime/cuda/check.h"
#include "runtime/cuda/launch.cuh"

namespace loom::cuda {
namespace {

using launch::blocksFor;
using launch::kThreads;

__global__ void f32ToBF16Kernel(uint16_t *out, const float *in, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = roundToBF16Bits(in[i]);
}

__global__ void bf16ToF32Kernel(float *out, const uint16_t *in, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = widenBF16Bits(in[i]);
}

} // namespace

Status convertF32ToBF16(uint16_t *out, const float *in, int64_t n,
                        cudaStream_t stream) {
  LOOM_LAUNCH(f32ToBF16Kernel, blocksFor(n), kThreads, stream, out, in, n);
  return Status::success();
}

Status convertBF16ToF32(float *out, const uint16_t *in, int64_t n,
                        cudaStream_t stream) {
  LOOM_LAUNCH(bf16ToF32Kernel, blocksFor(n), kThreads, stream, out, in, n);
  return Status::success();
}

} // namespace loom::cuda
