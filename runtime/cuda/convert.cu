//===- convert.cu - fp32 <-> bf16 conversion on device --------------------===//
//
// One thread per element, integer arithmetic on the fp32 bits (the same
// rounding as runtime/core/bfloat16.h, so device and host results are
// bitwise equal, NaN payloads included).
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/convert.h"

#include "runtime/cuda/check.h"
#include "runtime/cuda/launch.cuh"

namespace loom::cuda {
namespace {

using launch::blocksFor;
using launch::kThreads;

__global__ void f32ToBF16Kernel(uint16_t *out, const float *in, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n)
    return;
  uint32_t bits = __float_as_uint(in[i]);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    out[i] = static_cast<uint16_t>((bits >> 16) | 0x0040u); // quiet NaN
    return;
  }
  bits += 0x7fffu + ((bits >> 16) & 1u); // ties to even
  out[i] = static_cast<uint16_t>(bits >> 16);
}

__global__ void bf16ToF32Kernel(float *out, const uint16_t *in, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n)
    out[i] = __uint_as_float(static_cast<uint32_t>(in[i]) << 16);
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
