//===- attention.h - Causal multi-head self-attention -----------*- C++ -*-===//
//
// Input is the packed qkv activation [B, T, 3C] of GPT-2's c_attn: for token
// (b, t) the first C values are q, then k, then v; head h uses columns
// [h*hs, (h+1)*hs) of each, hs = C/NH (llm.c `attention_forward` layout).
// Scores are scaled by 1/sqrt(hs) and masked causally (query t sees keys
// 0..t). The forward can save the softmax probabilities att[B, NH, T, T]
// (entries above the diagonal are written as 0) for the backward, as llm.c
// does; the runtime's kernels recompute them per head instead (attentionGrad).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CPU_ATTENTION_H
#define LOOM_RUNTIME_CPU_ATTENTION_H

#include <cstdint>

namespace loom::cpu {

/// out[B,T,C] and att[B,NH,T,T] from qkv[B,T,3C]. C must be divisible by NH.
/// `att` may be null: then each row block's probabilities exist only in a
/// thread's kBlock x T scratch while its output is computed. `lse` (may be
/// null) gets each query row's log-sum-exp of its scaled scores [B,NH,T],
/// the statistics loom.attention returns for a flash backward.
void attentionForward(float *out, float *att, const float *qkv, int64_t B,
                      int64_t T, int64_t C, int64_t NH, float *lse = nullptr);

/// Only the probabilities att[B,NH,T,T] of attentionForward (bitwise equal
/// to the forward's): the gradient instruction recomputes them instead of
/// keeping the forward's alive.
void attentionProbs(float *att, const float *qkv, int64_t B, int64_t T,
                    int64_t C, int64_t NH);

/// dqkv[B,T,3C] (overwritten) from dout[B,T,C], the forward's qkv and att.
void attentionBackward(float *dqkv, const float *dout, const float *qkv,
                       const float *att, int64_t B, int64_t T, int64_t C,
                       int64_t NH);

/// dqkv[B,T,3C] (overwritten) from dout and qkv alone: each head's
/// probabilities are recomputed into a T x T buffer of the thread's, so no
/// [B,NH,T,T] tensor exists; bitwise equal to attentionProbs followed by
/// attentionBackward.
void attentionGrad(float *dqkv, const float *dout, const float *qkv,
                   int64_t B, int64_t T, int64_t C, int64_t NH);

/// Reference versions (plain loops, double accumulation), same contracts.
void attentionForwardReference(float *out, float *att, const float *qkv,
                               int64_t B, int64_t T, int64_t C, int64_t NH);
void attentionBackwardReference(float *dqkv, const float *dout,
                                const float *qkv, const float *att, int64_t B,
                                int64_t T, int64_t C, int64_t NH);

} // namespace loom::cpu

#endif // LOOM_RUNTIME_CPU_ATTENTION_H
