//===- flash_attention.h - Tiled causal FlashAttention-2 --------*- C++ -*-===//
//
// Causal multi-head attention in the layout of runtime/cpu/attention.h
// (qkv[B,T,3C] packed, head h at columns [h*hs, (h+1)*hs) of q, k and v;
// out[B,T,C]; scale 1/sqrt(hs)) without the [B,NH,T,T] probabilities:
//
//  * the forward streams key/value tiles through shared memory with an
//    online softmax (running max and sum per query row) and keeps only the
//    log-sum-exp of each row, lse[B,NH,T];
//  * the backward (Dao 2023, FlashAttention-2, Algorithm 2) recomputes the
//    probabilities tile by tile from q, k and lse:
//        P = exp(scale q k^T - lse),  dP = dO v^T,
//        dS = P (dP - D) with D_i = dO_i . O_i,
//        dV = P^T dO,  dK = scale dS^T Q,  dQ = scale dS K.
//    dK/dV and dQ are two kernels (one owning key rows, one owning query
//    rows) instead of FlashAttention-2's atomic dQ, so every output is
//    written once, in a fixed order: deterministic like the rest of the
//    backend (kernels.h).
//
// Each thread owns one row (a query in the forward and in dQ, a key in
// dK/dV) and computes in fp32 whatever the element type; bf16 variants load
// and store bf16, and at head size 64 run on tensor cores
// (flash_attention_mma.h). Head sizes up to kFlashMaxHeadSize (GPT-2: 64) are
// supported; the executor falls back to attention.cu beyond that.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_FLASH_ATTENTION_H
#define LOOM_RUNTIME_CUDA_FLASH_ATTENTION_H

#include "runtime/core/status.h"
#include "runtime/cuda/flash_attention_mma.h"

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace loom::cuda {

/// The largest head size (C / NH) the flash kernels are compiled for.
constexpr int64_t kFlashMaxHeadSize = 128;

/// True when C / NH is a head size the flash kernels take.
inline bool flashAttentionSupports(int64_t C, int64_t NH) {
  return NH > 0 && C % NH == 0 && C / NH >= 1 && C / NH <= kFlashMaxHeadSize;
}

/// out[B,T,C] and lse[B,NH,T] (natural-log log-sum-exp of each query row's
/// scaled scores) from qkv[B,T,3C]. Errors when C / NH is not supported.
Status flashAttentionForward(float *out, float *lse, const float *qkv,
                             int64_t B, int64_t T, int64_t C, int64_t NH,
                             cudaStream_t stream);
/// bf16: at head size 64 the tensor-core kernels, launched in
/// `shapes.forward`.
Status flashAttentionForward(__nv_bfloat16 *out, float *lse,
                             const __nv_bfloat16 *qkv, int64_t B, int64_t T,
                             int64_t C, int64_t NH, cudaStream_t stream,
                             FlashTcShapes shapes = {});

/// dqkv[B,T,3C] (overwritten) from dout[B,T,C] and the forward's qkv, out
/// and lse. `rowDot` is fp32 scratch of B*NH*T values (D_i = dout_i . out_i).
Status flashAttentionBackward(float *dqkv, float *rowDot, const float *dout,
                              const float *qkv, const float *out,
                              const float *lse, int64_t B, int64_t T,
                              int64_t C, int64_t NH, cudaStream_t stream);
Status flashAttentionBackward(__nv_bfloat16 *dqkv, float *rowDot,
                              const __nv_bfloat16 *dout,
                              const __nv_bfloat16 *qkv,
                              const __nv_bfloat16 *out, const float *lse,
                              int64_t B, int64_t T, int64_t C, int64_t NH,
                              cudaStream_t stream, FlashTcShapes shapes = {});

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_FLASH_ATTENTION_H
