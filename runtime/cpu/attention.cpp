//===- attention.cpp - Causal multi-head self-attention ---------*- C++ -*-===//
//
// The fast kernels work one (b, h) head at a time, in parallel over B*NH
// heads (OpenMP, dynamic schedule), and do the O(T^2 hs) work with
// single-threaded GEMM calls straight on the strided qkv / out / dqkv
// views (lda = 3C or C, so nothing is gathered; gemm.h's GEMM, so
// batch-invariant unless LOOM_CPU_GEMM=openblas). Queries are cut into blocks
// of kBlock rows; a row block only multiplies against the keys it can see
// (0..block end), which skips most of the masked upper triangle. OpenBLAS's
// own threads are turned down to one for the duration of the parallel region
// (and restored) so that 2 OpenMP threads x N BLAS threads do not
// oversubscribe the cores.
//
//   forward, row block R = [r0, r1):  S = scale Q_R K_{<r1}^T  (into att,
//                                     or the thread's kBlock x T scratch)
//                                     softmax rows over j <= i, zero j > i
//                                     out_R = P_R,{<r1} V_{<r1}
//   backward, row block R:            dP = dO_R V_{<r1}^T
//                                     dS = P (dP - rowsum(P dP)), 0 for j > i
//                                     dq_R = scale dS_R,{<r1} K_{<r1}
//             column block K=[c0,c1): dv_K = P_{>=c0},K^T dO_{>=c0}
//                                     dk_K = scale dS_{>=c0},K^T Q_{>=c0}
//
// attentionProbs runs exactly the forward's probability code (same gemm
// calls, same row kernel), so its result is bitwise equal to the forward's;
// attentionGrad runs it one head at a time into a buffer of the thread's
// (no [B, NH, T, T] tensor), then the same backward, so it is bitwise equal
// to attentionProbs + attentionBackward.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/attention.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/vector_exp.h"

#include <algorithm>
#include <cblas.h>
#include <cmath>
#include <cstring>
#include <omp.h>
#include <vector>

namespace loom::cpu {

namespace {

/// Query rows (and key columns in the backward) per block. Blocks must be
/// the same in the row and the column loops of the backward.
constexpr int64_t kBlock = 32;

/// exp(t) for t <= 0 (the softmax subtracts the row maximum first).
inline float expNonPositive(float t) {
  return expClamped(t < -80.0f ? -80.0f : t);
}

/// In place: a[0..n) (scaled scores) -> softmax probabilities; a[n..T) = 0.
/// `lse` (may be null) gets the row's log-sum-exp, max + log(sum).
inline void softmaxRow(float *a, int64_t n, int64_t T, float *lse) {
  float maxv = -INFINITY;
#pragma omp simd reduction(max : maxv)
  for (int64_t j = 0; j < n; ++j)
    maxv = a[j] > maxv ? a[j] : maxv;
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    float e = expNonPositive(a[j] - maxv);
    a[j] = e;
    sum += e;
  }
  if (lse)
    *lse = maxv + std::log(sum);
  const float inv = 1.0f / sum;
#pragma omp simd
  for (int64_t j = 0; j < n; ++j)
    a[j] *= inv;
  for (int64_t j = n; j < T; ++j)
    a[j] = 0.0f;
}

/// Probabilities of query rows [r0, r1) of one head into `rows` (row i at
/// rows + (i - r0) T). Q and K point at the head's first q / k entry, row
/// stride 3C. `lse` (may be null): the head's [T] log-sum-exp row stats.
inline void probsBlock(float *rows, const float *Q, const float *K, int64_t C3,
                       int64_t T, int64_t hs, float scale, int64_t r0,
                       int64_t r1, float *lse = nullptr) {
  gemm(false, true, r1 - r0, r1, hs, scale, Q + r0 * C3, C3, K, C3, 0.0f, rows,
       T);
  for (int64_t i = r0; i < r1; ++i)
    softmaxRow(rows + (i - r0) * T, i + 1, T, lse ? lse + i : nullptr);
}

/// One head's probabilities P [T, T] (all row blocks).
inline void probsHead(float *P, const float *Q, const float *K, int64_t C3,
                      int64_t T, int64_t hs, float scale) {
  for (int64_t r0 = 0; r0 < T; r0 += kBlock)
    probsBlock(P + r0 * T, Q, K, C3, T, hs, scale, r0,
               std::min(T, r0 + kBlock));
}

/// One head's backward from its probabilities P [T, T], with dS [T, T] of
/// scratch. Q, K, V (row stride 3C), dO (stride C) and dQ, dK, dV (stride
/// 3C) point at the head's first entry.
void backwardHead(float *dQ, float *dK, float *dV, float *dS, const float *P,
                  const float *dO, const float *Q, const float *K,
                  const float *V, int64_t T, int64_t C, int64_t hs,
                  float scale) {
  const int64_t C3 = 3 * C;
  for (int64_t r0 = 0; r0 < T; r0 += kBlock) {
    const int64_t r1 = std::min(T, r0 + kBlock);
    // dP = dO V^T, then through the softmax (masked entries exactly 0).
    gemm(false, true, r1 - r0, r1, hs, 1.0f, dO + r0 * C, C, V, C3, 0.0f,
         dS + r0 * T, T);
    for (int64_t i = r0; i < r1; ++i) {
      const float *p = P + i * T;
      float *d = dS + i * T;
      float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
      for (int64_t j = 0; j <= i; ++j)
        dot += p[j] * d[j];
#pragma omp simd
      for (int64_t j = 0; j <= i; ++j)
        d[j] = p[j] * (d[j] - dot);
      for (int64_t j = i + 1; j < r1; ++j)
        d[j] = 0.0f;
    }
    gemm(false, false, r1 - r0, hs, r1, scale, dS + r0 * T, T, K, C3, 0.0f,
         dQ + r0 * C3, C3);
  }
  for (int64_t c0 = 0; c0 < T; c0 += kBlock) {
    const int64_t c1 = std::min(T, c0 + kBlock);
    gemm(true, false, c1 - c0, hs, T - c0, 1.0f, P + c0 * T + c0, T,
         dO + c0 * C, C, 0.0f, dV + c0 * C3, C3);
    gemm(true, false, c1 - c0, hs, T - c0, scale, dS + c0 * T + c0, T,
         Q + c0 * C3, C3, 0.0f, dK + c0 * C3, C3);
  }
}

/// Runs f(bh, scratch) for bh in [0, BH) in parallel, with OpenBLAS limited
/// to one thread meanwhile. `scratch` is a per-thread buffer.
template <typename F> void forEachHead(int64_t BH, F &&f) {
  const bool parallel =
      BH > 1 && !omp_in_parallel() && omp_get_max_threads() > 1;
  int blasThreads = 1;
  if (parallel) {
    blasThreads = openblas_get_num_threads();
    if (blasThreads > 1)
      openblas_set_num_threads(1);
  }
#pragma omp parallel if (parallel)
  {
    std::vector<float> scratch;
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < BH; ++bh)
      f(bh, scratch);
  }
  if (parallel && blasThreads > 1)
    openblas_set_num_threads(blasThreads);
}

} // namespace

void attentionForward(float *out, float *att, const float *qkv, int64_t B,
                      int64_t T, int64_t C, int64_t NH, float *lse) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  forEachHead(B * NH, [&](int64_t bh, std::vector<float> &scratch) {
    const int64_t b = bh / NH, h = bh % NH;
    const float *Q = qkv + b * T * C3 + h * hs;
    const float *K = Q + C, *V = Q + 2 * C;
    float *O = out + b * T * C + h * hs;
    // Without `att`, a row block's probabilities live in this thread's
    // scratch only while their block of the output is computed.
    if (!att)
      scratch.resize(static_cast<size_t>(std::min(kBlock, T) * T));
    for (int64_t r0 = 0; r0 < T; r0 += kBlock) {
      const int64_t r1 = std::min(T, r0 + kBlock);
      float *rows = att ? att + bh * T * T + r0 * T : scratch.data();
      probsBlock(rows, Q, K, C3, T, hs, scale, r0, r1,
                 lse ? lse + bh * T : nullptr);
      gemm(false, false, r1 - r0, hs, r1, 1.0f, rows, T, V, C3, 0.0f,
           O + r0 * C, C);
    }
  });
}

void attentionProbs(float *att, const float *qkv, int64_t B, int64_t T,
                    int64_t C, int64_t NH) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  forEachHead(B * NH, [&](int64_t bh, std::vector<float> &) {
    const int64_t b = bh / NH, h = bh % NH;
    const float *Q = qkv + b * T * C3 + h * hs;
    probsHead(att + bh * T * T, Q, Q + C, C3, T, hs, scale);
  });
}

namespace {

/// The backward of every head from `att`, or (null) from each head's
/// probabilities recomputed into a buffer of the thread's.
void backwardHeads(float *dqkv, const float *dout, const float *qkv,
                   const float *att, int64_t B, int64_t T, int64_t C,
                   int64_t NH) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
  forEachHead(B * NH, [&](int64_t bh, std::vector<float> &scratch) {
    const int64_t b = bh / NH, h = bh % NH;
    const float *Q = qkv + b * T * C3 + h * hs;
    float *dQ = dqkv + b * T * C3 + h * hs;
    // dS, and without `att` this head's probabilities: T x T each.
    scratch.resize(static_cast<size_t>((att ? 1 : 2) * T * T));
    float *dS = scratch.data();
    const float *P = att ? att + bh * T * T : dS + T * T;
    if (!att)
      probsHead(dS + T * T, Q, Q + C, C3, T, hs, scale);
    backwardHead(dQ, dQ + C, dQ + 2 * C, dS, P, dout + b * T * C + h * hs, Q,
                 Q + C, Q + 2 * C, T, C, hs, scale);
  });
}

} // namespace

void attentionBackward(float *dqkv, const float *dout, const float *qkv,
                       const float *att, int64_t B, int64_t T, int64_t C,
                       int64_t NH) {
  backwardHeads(dqkv, dout, qkv, att, B, T, C, NH);
}

void attentionGrad(float *dqkv, const float *dout, const float *qkv,
                   int64_t B, int64_t T, int64_t C, int64_t NH) {
  backwardHeads(dqkv, dout, qkv, nullptr, B, T, C, NH);
}

void attentionForwardReference(float *out, float *att, const float *qkv,
                               int64_t B, int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> s(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        double maxv = -INFINITY;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          double acc = 0.0;
          for (int64_t i = 0; i < hs; ++i)
            acc += static_cast<double>(qkv[(b * T + t) * C3 + h * hs + i]) *
                   qkv[(b * T + t2) * C3 + C + h * hs + i];
          s[t2] = acc * scale;
          maxv = std::fmax(maxv, s[t2]);
        }
        double sum = 0.0;
        for (int64_t t2 = 0; t2 <= t; ++t2)
          sum += s[t2] = std::exp(s[t2] - maxv);
        float *a = att + ((b * NH + h) * T + t) * T;
        for (int64_t t2 = 0; t2 < T; ++t2)
          a[t2] = t2 <= t ? static_cast<float>(s[t2] / sum) : 0.0f;
        for (int64_t i = 0; i < hs; ++i) {
          double acc = 0.0;
          for (int64_t t2 = 0; t2 <= t; ++t2)
            acc += s[t2] / sum * qkv[(b * T + t2) * C3 + 2 * C + h * hs + i];
          out[(b * T + t) * C + h * hs + i] = static_cast<float>(acc);
        }
      }
}

void attentionBackwardReference(float *dqkv, const float *dout,
                                const float *qkv, const float *att, int64_t B,
                                int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> acc(static_cast<size_t>(B * T * C3), 0.0);
  std::vector<double> datt(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const float *a = att + ((b * NH + h) * T + t) * T;
        double dot = 0.0;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          double d = 0.0;
          for (int64_t i = 0; i < hs; ++i) {
            double dy = dout[(b * T + t) * C + h * hs + i];
            d += dy * qkv[(b * T + t2) * C3 + 2 * C + h * hs + i];
            acc[(b * T + t2) * C3 + 2 * C + h * hs + i] += a[t2] * dy;
          }
          datt[t2] = d;
          dot += a[t2] * d;
        }
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          double ds = a[t2] * (datt[t2] - dot) * scale;
          for (int64_t i = 0; i < hs; ++i) {
            acc[(b * T + t) * C3 + h * hs + i] +=
                ds * qkv[(b * T + t2) * C3 + C + h * hs + i];
            acc[(b * T + t2) * C3 + C + h * hs + i] +=
                ds * qkv[(b * T + t) * C3 + h * hs + i];
          }
        }
      }
  for (size_t i = 0; i < acc.size(); ++i)
    dqkv[i] = static_cast<float>(acc[i]);
}

} // namespace loom::cpu
