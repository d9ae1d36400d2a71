//===- embedding.h - Token embedding gather / scatter-add -------*- C++ -*-===//
//
// out[n, :] = wte[idx[n], :] for N tokens (N = B*T); the position embedding is
// a separate broadcast add done by the caller (elementwise.h). The backward
// scatter-adds into dwte deterministically: each thread owns a block of
// columns and visits tokens in order, so repeated tokens accumulate in the
// same order for any thread count (no atomics).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CPU_EMBEDDING_H
#define LOOM_RUNTIME_CPU_EMBEDDING_H

#include "runtime/core/status.h"

#include <cstdint>

namespace loom::cpu {

/// out[N, C] gathered from wte[V, C]. Errors (before writing anything) when an
/// index is outside [0, V).
Status embeddingForward(float *out, const int32_t *idx, const float *wte,
                        int64_t N, int64_t V, int64_t C);

/// dwte[V, C] += scatter of dout[N, C] by idx. Same errors as forward.
Status embeddingBackward(float *dwte, const float *dout, const int32_t *idx,
                         int64_t N, int64_t V, int64_t C);

/// Vocab-parallel forward: `rows` holds rows [rowBegin, rowBegin + R) of a
/// table of V rows. out[n, :] is that row for ids in the range, zeros for
/// the others (the ranks' outputs sum to the full lookup). Errors when an
/// id is outside [0, V).
Status embeddingForwardRows(float *out, const int32_t *idx, const float *rows,
                            int64_t N, int64_t V, int64_t rowBegin, int64_t R,
                            int64_t C);

/// Reference versions (serial loops), same contracts.
Status embeddingForwardReference(float *out, const int32_t *idx,
                                 const float *wte, int64_t N, int64_t V,
                                 int64_t C);
Status embeddingBackwardReference(float *dwte, const float *dout,
                                  const int32_t *idx, int64_t N, int64_t V,
                                  int64_t C);

} // namespace loom::cpu

#endif // LOOM_RUNTIME_CPU_EMBEDDING_H
