//===- convert.h - fp32 <-> bf16 conversion on device -----------*- C++ -*-===//
//
// The device counterparts of runtime/core/bfloat16.h's floatsToBF16 /
// bf16ToFloats (convert.cu), bit for bit: round to nearest, ties to even; a
// NaN stays a NaN with its sign and top payload bits (the same bits the host
// gives, which CUDA's __float2bfloat16_rn, returning one canonical NaN, would
// not); overflow becomes an infinity. Opcode::Cast and the executor's bf16
// staging call them through cuda::CudaKernels.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_CONVERT_H
#define LOOM_RUNTIME_CUDA_CONVERT_H

#include "runtime/core/status.h"

#include <cstdint>
#include <cuda_runtime_api.h>

namespace loom::cuda {

/// out[i] = in[i] rounded to bf16 (n elements, device pointers).
Status convertF32ToBF16(uint16_t *out, const float *in, int64_t n,
                        cudaStream_t stream);
/// out[i] = in[i] widened to fp32 (exact).
Status convertBF16ToF32(float *out, const uint16_t *in, int64_t n,
                        cudaStream_t stream);

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_CONVERT_H
