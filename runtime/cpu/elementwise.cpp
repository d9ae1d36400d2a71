//===- elementwise.cpp - Adds, broadcast adds and scaling -------*- C++ -*-===//
#include "runtime/cpu/elementwise.h"

#include <algorithm>

namespace loom::cpu {

void add(float *out, const float *a, const float *b, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i)
    out[i] = a[i] + b[i];
}

void accumulate(float *dst, const float *src, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i)
    dst[i] += src[i];
}

void scale(float *out, const float *in, float alpha, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i)
    out[i] = alpha * in[i];
}

void addBroadcast(float *out, const float *a, const float *b, int64_t outer,
                  int64_t inner) {
#pragma omp parallel for schedule(static) if (outer * inner > 65536)
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j)
      out[o * inner + j] = a[o * inner + j] + b[j];
}

void addBroadcastBackward(float *db, const float *dout, int64_t outer,
                          int64_t inner, bool accumulateInto) {
  // Threads own disjoint column blocks of db; rows are summed in order.
  constexpr int64_t kBlock = 256;
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (outer * inner > 65536)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t j0 = blk * kBlock, j1 = std::min(inner, j0 + kBlock);
    float acc[kBlock] = {};
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = j0; j < j1; ++j)
        acc[j - j0] += dout[o * inner + j];
    for (int64_t j = j0; j < j1; ++j)
      db[j] = accumulateInto ? db[j] + acc[j - j0] : acc[j - j0];
  }
}

void addBroadcastReference(float *out, const float *a, const float *b,
                           int64_t outer, int64_t inner) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < inner; ++j)
      out[o * inner + j] = a[o * inner + j] + b[j];
}

void addBroadcastBackwardReference(float *db, const float *dout, int64_t outer,
                                   int64_t inner, bool accumulateInto) {
  for (int64_t j = 0; j < inner; ++j) {
    double acc = 0.0;
    for (int64_t o = 0; o < outer; ++o)
      acc += dout[o * inner + j];
    db[j] = static_cast<float>(accumulateInto ? db[j] + acc : acc);
  }
}

} // namespace loom::cpu
