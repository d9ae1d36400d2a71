//===- elementwise.h - Adds, broadcast adds and scaling ---------*- C++ -*-===//
//
// The residual add, the position-embedding add ([B,T,C] + [T,C], i.e. a rhs
// that matches a trailing suffix of the lhs shape) and its backward, which
// reduces the gradient over the broadcast (leading) dimensions.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CPU_ELEMENTWISE_H
#define LOOM_RUNTIME_CPU_ELEMENTWISE_H

#include <cstdint>

namespace loom::cpu {

/// out[i] = a[i] + b[i] for n elements (out may alias a or b).
void add(float *out, const float *a, const float *b, int64_t n);

/// dst[i] += src[i] (gradient accumulation).
void accumulate(float *dst, const float *src, int64_t n);

/// out[i] = alpha * in[i] (out may alias in).
void scale(float *out, const float *in, float alpha, int64_t n);

/// out[o, j] = a[o, j] + b[j] for o < outer, j < inner: `b` has the shape of a
/// trailing suffix of `a` (e.g. outer = B, inner = T*C). out may alias a.
void addBroadcast(float *out, const float *a, const float *b, int64_t outer,
                  int64_t inner);

/// Backward of addBroadcast for the broadcast operand: db[j] (+)= sum over o
/// of dout[o, j]. Accumulates when `accumulateInto` (b is a parameter such as
/// wpe), else overwrites. The gradient of `a` is dout itself. Deterministic:
/// sums over o in order for every thread count.
void addBroadcastBackward(float *db, const float *dout, int64_t outer,
                          int64_t inner, bool accumulateInto);

/// Reference versions (serial loops, double sums), same contracts.
void addBroadcastReference(float *out, const float *a, const float *b,
                           int64_t outer, int64_t inner);
void addBroadcastBackwardReference(float *db, const float *dout, int64_t outer,
                                   int64_t inner, bool accumulateInto);

} // namespace loom::cpu

#endif // LOOM_RUNTIME_CPU_ELEMENTWISE_H
