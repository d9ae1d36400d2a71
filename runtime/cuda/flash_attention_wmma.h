//===- flash_attention_wmma.h - Tensor-core bf16 flash attention -*- C++ -*-===//
//
// The bf16, head-size-64 (GPT-2) case of flash_attention.h on tensor cores
// (WMMA 16x16x16 bf16 tiles, fp32 accumulation). flashAttentionForward /
// flashAttentionBackward call these for bf16 at hs = 64; other head sizes
// and fp32 run the CUDA-core kernels of flash_attention.cu.
//
// Differences from the CUDA-core kernels, both FlashAttention-2 practice:
//  * the forward makes two passes over the keys (row max and sum first,
//    then O = sum exp(S - lse) V with the final lse), so the output
//    accumulates in tensor-core fragments without per-row rescaling;
//  * probabilities and dS enter the tensor-core products rounded to bf16.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_FLASH_ATTENTION_WMMA_H
#define LOOM_RUNTIME_CUDA_FLASH_ATTENTION_WMMA_H

#include "runtime/core/status.h"

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace loom::cuda {

/// The only head size the tensor-core kernels are compiled for.
constexpr int64_t kFlashTensorCoreHeadSize = 64;

/// flashAttentionForward's contract for bf16 with C / NH == 64.
Status flashAttentionForwardTensorCores(__nv_bfloat16 *out, float *lse,
                                        const __nv_bfloat16 *qkv, int64_t B,
                                        int64_t T, int64_t C, int64_t NH,
                                        cudaStream_t stream);
/// dK/dV and dQ of flashAttentionBackward for bf16 with C / NH == 64, given
/// rowDot (D_i = dout_i . out_i, already computed).
Status flashAttentionBackwardTensorCores(__nv_bfloat16 *dqkv,
                                         const float *rowDot,
                                         const __nv_bfloat16 *dout,
                                         const __nv_bfloat16 *qkv,
                                         const float *lse, int64_t B,
                                         int64_t T, int64_t C, int64_t NH,
                                         cudaStream_t stream);

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_FLASH_ATTENTION_WMMA_H
