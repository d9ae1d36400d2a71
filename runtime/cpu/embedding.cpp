//===- embedding.cpp - Token embedding gather / scatter-add -----*- C++ -*-===//
#include "runtime/cpu/embedding.h"

#include <algorithm>
#include <cstring>

namespace loom::cpu {

namespace {

Status checkIndices(const int32_t *idx, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n)
    LOOM_CHECK(idx[n] >= 0 && idx[n] < V,
               "embedding: token id " << idx[n] << " at position " << n
                                      << " is outside [0, " << V
                                      << "); the data does not match the "
                                         "model's vocabulary size");
  return Status::success();
}

} // namespace

Status embeddingForward(float *out, const int32_t *idx, const float *wte,
                        int64_t N, int64_t V, int64_t C) {
  LOOM_RETURN_IF_ERROR(checkIndices(idx, N, V));
#pragma omp parallel for schedule(static) if (N * C > 65536)
  for (int64_t n = 0; n < N; ++n)
    std::memcpy(out + n * C, wte + static_cast<int64_t>(idx[n]) * C,
                static_cast<size_t>(C) * sizeof(float));
  return Status::success();
}

Status embeddingForwardRows(float *out, const int32_t *idx, const float *rows,
                            int64_t N, int64_t V, int64_t rowBegin, int64_t R,
                            int64_t C) {
  LOOM_RETURN_IF_ERROR(checkIndices(idx, N, V));
#pragma omp parallel for schedule(static) if (N * C > 65536)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t r = static_cast<int64_t>(idx[n]) - rowBegin;
    if (r >= 0 && r < R)
      std::memcpy(out + n * C, rows + r * C,
                  static_cast<size_t>(C) * sizeof(float));
    else
      std::memset(out + n * C, 0, static_cast<size_t>(C) * sizeof(float));
  }
  return Status::success();
}

Status embeddingBackward(float *dwte, const float *dout, const int32_t *idx,
                         int64_t N, int64_t V, int64_t C) {
  LOOM_RETURN_IF_ERROR(checkIndices(idx, N, V));
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock, c1 = std::min(C, c0 + kBlock);
    for (int64_t n = 0; n < N; ++n) {
      float *dst = dwte + static_cast<int64_t>(idx[n]) * C;
      const float *src = dout + n * C;
      for (int64_t c = c0; c < c1; ++c)
        dst[c] += src[c];
    }
  }
  return Status::success();
}

Status embeddingForwardReference(float *out, const int32_t *idx,
                                 const float *wte, int64_t N, int64_t V,
                                 int64_t C) {
  LOOM_RETURN_IF_ERROR(checkIndices(idx, N, V));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      out[n * C + c] = wte[idx[n] * C + c];
  return Status::success();
}

Status embeddingBackwardReference(float *dwte, const float *dout,
                                  const int32_t *idx, int64_t N, int64_t V,
                                  int64_t C) {
  LOOM_RETURN_IF_ERROR(checkIndices(idx, N, V));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      dwte[idx[n] * C + c] += dout[n * C + c];
  return Status::success();
}

} // namespace loom::cpu
