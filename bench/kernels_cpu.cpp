//===- kernels_cpu.cpp - Micro-benchmark of the CPU attention/GELU kernels ===//
//
// Times the runtime's attention and GELU kernels against verbatim copies of
// the previous implementations (below, "before"), and its batch-invariant
// GEMM (batch_invariant_gemm.h) against OpenBLAS's cblas_sgemm ("before",
// what the runtime called until then) on a GPT-2 layer's four GEMMs, an
// input gradient and a weight gradient, interleaved in one process so that
// both see the same machine state; prints
//   kernel | shape | before ms | after ms | speedup
// (median of --reps runs each, after one warm-up) and the max error of both
// against the double-precision reference. Shapes default to one GPT-2-small
// layer at B=4, T=256. Threads: OMP_NUM_THREADS / OPENBLAS_NUM_THREADS.
//
//   loom-bench-kernels [--reps N] [--B 4] [--T 256] [--C 768] [--NH 12]
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/attention.h"
#include "runtime/cpu/batch_invariant_gemm.h"
#include "runtime/cpu/gelu.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace {
// Verbatim copies of the previous runtime kernels (git c03197f), the
// "before" column.
namespace legacy_att {

/// Softmax probabilities of query t of (b, h) against keys 0..t into
/// a[0..T) (masked positions exactly zero). Shared by the forward and
/// attentionProbs so both agree bitwise.
inline void probabilityRow(float *a, const float *qkv, int64_t b, int64_t h,
                           int64_t t, int64_t T, int64_t C, int64_t hs,
                           float scale) {
  const int64_t C3 = 3 * C;
  const float *q = qkv + (b * T + t) * C3 + h * hs;
  // 1. Scaled scores against keys 0..t, tracking the max for stability.
  float maxv = -INFINITY;
  for (int64_t t2 = 0; t2 <= t; ++t2) {
    const float *k = qkv + (b * T + t2) * C3 + C + h * hs;
    float s = 0.0f;
    for (int64_t i = 0; i < hs; ++i)
      s += q[i] * k[i];
    s *= scale;
    a[t2] = s;
    maxv = std::fmax(maxv, s);
  }
  // 2. Softmax; masked positions are exactly zero.
  float sum = 0.0f;
  for (int64_t t2 = 0; t2 <= t; ++t2) {
    a[t2] = std::exp(a[t2] - maxv);
    sum += a[t2];
  }
  float inv = 1.0f / sum;
  for (int64_t t2 = 0; t2 <= t; ++t2)
    a[t2] *= inv;
  for (int64_t t2 = t + 1; t2 < T; ++t2)
    a[t2] = 0.0f;
}


void legacyAttentionForward(float *out, float *att, const float *qkv, int64_t B,
                      int64_t T, int64_t C, int64_t NH) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        float *a = att + ((b * NH + h) * T + t) * T;
        probabilityRow(a, qkv, b, h, t, T, C, hs, scale);
        // 3. Weighted sum of values.
        float *o = out + (b * T + t) * C + h * hs;
        for (int64_t i = 0; i < hs; ++i)
          o[i] = 0.0f;
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const float *v = qkv + (b * T + t2) * C3 + 2 * C + h * hs;
          const float w = a[t2];
          for (int64_t i = 0; i < hs; ++i)
            o[i] += w * v[i];
        }
      }
}

void legacyAttentionProbs(float *att, const float *qkv, int64_t B, int64_t T,
                    int64_t C, int64_t NH) {
  const int64_t hs = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(3) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t)
        probabilityRow(att + ((b * NH + h) * T + t) * T, qkv, b, h, t, T, C, hs,
                       scale);
}

void legacyAttentionBackward(float *dqkv, const float *dout, const float *qkv,
                       const float *att, int64_t B, int64_t T, int64_t C,
                       int64_t NH) {
  const int64_t hs = C / NH, C3 = 3 * C;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hs));
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      // This (b, h) owns dqkv[b, :, {0,C,2C} + h*hs + (0..hs)]: clear it.
      for (int64_t t = 0; t < T; ++t)
        for (int64_t part = 0; part < 3; ++part) {
          float *d = dqkv + (b * T + t) * C3 + part * C + h * hs;
          for (int64_t i = 0; i < hs; ++i)
            d[i] = 0.0f;
        }
      std::vector<float> datt(static_cast<size_t>(T));
      for (int64_t t = 0; t < T; ++t) {
        const float *a = att + ((b * NH + h) * T + t) * T;
        const float *dy = dout + (b * T + t) * C + h * hs;
        const float *q = qkv + (b * T + t) * C3 + h * hs;
        float *dq = dqkv + (b * T + t) * C3 + h * hs;
        // 1. Through the value sum: datt = dy . v, dv += a * dy.
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          const float *v = qkv + (b * T + t2) * C3 + 2 * C + h * hs;
          float *dv = dqkv + (b * T + t2) * C3 + 2 * C + h * hs;
          float s = 0.0f;
          for (int64_t i = 0; i < hs; ++i) {
            s += dy[i] * v[i];
            dv[i] += a[t2] * dy[i];
          }
          datt[t2] = s;
        }
        // 2. Through the softmax: dscore = a * (datt - sum(a * datt)).
        float dot = 0.0f;
        for (int64_t t2 = 0; t2 <= t; ++t2)
          dot += a[t2] * datt[t2];
        // 3. Through the scaled dot product into q and k.
        for (int64_t t2 = 0; t2 <= t; ++t2) {
          float ds = a[t2] * (datt[t2] - dot) * scale;
          const float *k = qkv + (b * T + t2) * C3 + C + h * hs;
          float *dk = dqkv + (b * T + t2) * C3 + C + h * hs;
          for (int64_t i = 0; i < hs; ++i) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
          }
        }
      }
    }
}

} // namespace legacy_att

namespace legacy_gelu {
constexpr float kGeluScale = 0.7978845608028654f; // sqrt(2/pi)
constexpr float kGeluCube = 0.044715f;

void legacyGeluForward(float *out, const float *inp, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCube * x * x * x);
    out[i] = 0.5f * x * (1.0f + std::tanh(u));
  }
}

void legacyGeluBackward(float *dinp, const float *inp, const float *dout, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t i = 0; i < n; ++i) {
    float x = inp[i];
    float u = kGeluScale * (x + kGeluCube * x * x * x);
    float th = std::tanh(u);
    // d/dx [0.5 x (1 + tanh u)] = 0.5 (1 + tanh u) + 0.5 x sech^2(u) u'.
    float sech2 = 1.0f - th * th;
    float du = kGeluScale * (1.0f + 3.0f * kGeluCube * x * x);
    dinp[i] = (0.5f * (1.0f + th) + 0.5f * x * sech2 * du) * dout[i];
  }
}

} // namespace legacy_gelu

} // namespace

namespace {

using loom::cpu::attentionBackward;
using loom::cpu::attentionForward;
using loom::cpu::attentionProbs;

std::vector<float> randomVec(size_t n, unsigned seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto &x : v)
    x = d(rng);
  return v;
}

double timeMs(const std::function<void()> &f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Runs before/after alternately `reps` times (after a warm-up of each).
void row(const char *kernel, const std::string &shape, int reps,
         const std::function<void()> &before,
         const std::function<void()> &after) {
  before();
  after();
  std::vector<double> tb, ta;
  for (int r = 0; r < reps; ++r) {
    tb.push_back(timeMs(before));
    ta.push_back(timeMs(after));
  }
  double b = median(tb), a = median(ta);
  std::printf("%-20s | %-22s | %9.2f | %8.2f | %6.1fx\n", kernel, shape.c_str(),
              b, a, b / a);
}

double maxRelErr(const std::vector<float> &x, const std::vector<float> &ref,
                 double floor) {
  double m = 0;
  for (size_t i = 0; i < x.size(); ++i)
    m = std::max(m, std::fabs(double(x[i]) - ref[i]) /
                        std::max(floor, std::fabs(double(ref[i]))));
  return m;
}

} // namespace

int main(int argc, char **argv) {
  int reps = 7;
  int64_t B = 4, T = 256, C = 768, NH = 12;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    int64_t v = std::atoll(argv[i + 1]);
    if (a == "--reps") reps = static_cast<int>(v);
    else if (a == "--B") B = v;
    else if (a == "--T") T = v;
    else if (a == "--C") C = v;
    else if (a == "--NH") NH = v;
    else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
  }
  const char *omp = std::getenv("OMP_NUM_THREADS");
  std::printf("OMP_NUM_THREADS=%s, median of %d reps\n", omp ? omp : "(unset)",
              reps);
  std::printf("%-20s | %-22s | %9s | %8s | %7s\n", "kernel", "shape",
              "before ms", "after ms", "speedup");
  std::printf("%s\n", std::string(78, '-').c_str());

  const std::string ashape = "B" + std::to_string(B) + " T" +
                             std::to_string(T) + " C" + std::to_string(C) +
                             " NH" + std::to_string(NH);
  auto qkv = randomVec(B * T * 3 * C, 1, -1.0f, 1.0f);
  auto dout = randomVec(B * T * C, 2, -1.0f, 1.0f);
  std::vector<float> out(B * T * C), att(B * NH * T * T), dqkv(qkv.size());
  std::vector<float> out0(out.size()), att0(att.size()), dqkv0(qkv.size());
  row("attention fwd", ashape, reps,
      [&] { legacy_att::legacyAttentionForward(out0.data(), att0.data(), qkv.data(), B, T, C, NH); },
      [&] { attentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH); });
  row("attention probs", ashape, reps,
      [&] { legacy_att::legacyAttentionProbs(att0.data(), qkv.data(), B, T, C, NH); },
      [&] { attentionProbs(att.data(), qkv.data(), B, T, C, NH); });
  row("attention bwd", ashape, reps,
      [&] { legacy_att::legacyAttentionBackward(dqkv0.data(), dout.data(), qkv.data(), att0.data(), B, T, C, NH); },
      [&] { attentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH); });

  const int64_t n = B * T * 4 * C;
  const std::string gshape = "n=" + std::to_string(n);
  auto x = randomVec(n, 3, -6.0f, 6.0f), dy = randomVec(n, 4, -1.0f, 1.0f);
  std::vector<float> y(n), dx(n), y0(n), dx0(n);
  row("gelu fwd", gshape, reps,
      [&] { legacy_gelu::legacyGeluForward(y0.data(), x.data(), n); },
      [&] { loom::cpu::geluForward(y.data(), x.data(), n); });
  row("gelu bwd", gshape, reps,
      [&] { legacy_gelu::legacyGeluBackward(dx0.data(), x.data(), dy.data(), n); },
      [&] { loom::cpu::geluBackward(dx.data(), x.data(), dy.data(), n); });

  // GEMMs of one layer at M = B*T rows: qkv, the attention projection, the
  // MLP's two, the fc projection's input gradient (op(B) = W^T, stored
  // [N, K]: how a linear layer's backward calls it) and the qkv weight's
  // gradient (op(A) = x^T: K = M).
  struct GemmShape {
    const char *name;
    bool transA, transB;
    int64_t M, N, K;
  };
  const int64_t rows = B * T;
  const GemmShape gemms[] = {{"gemm qkv", false, false, rows, 3 * C, C},
                             {"gemm attn proj", false, false, rows, C, C},
                             {"gemm fc", false, false, rows, 4 * C, C},
                             {"gemm fc proj", false, false, rows, C, 4 * C},
                             {"gemm fc proj dX", false, true, rows, 4 * C, C},
                             {"gemm qkv dW", true, false, C, 3 * C, rows}};
  for (const GemmShape &g : gemms) {
    // Stored A: [M, K], or [K, M] for transA; B: [K, N], or [N, K].
    auto a = randomVec(g.M * g.K, 5, -1.0f, 1.0f);
    auto b = randomVec(g.K * g.N, 6, -1.0f, 1.0f);
    std::vector<float> c0(g.M * g.N), c1(g.M * g.N);
    const int64_t lda = g.transA ? g.M : g.K, ldb = g.transB ? g.K : g.N;
    char shape[64];
    std::snprintf(shape, sizeof shape, "%lldx%lldx%lld",
                  static_cast<long long>(g.M), static_cast<long long>(g.N),
                  static_cast<long long>(g.K));
    row(
        g.name, shape, reps,
        [&] {
          cblas_sgemm(CblasRowMajor, g.transA ? CblasTrans : CblasNoTrans,
                      g.transB ? CblasTrans : CblasNoTrans,
                      static_cast<int>(g.M), static_cast<int>(g.N),
                      static_cast<int>(g.K), 1.0f, a.data(),
                      static_cast<int>(lda), b.data(), static_cast<int>(ldb),
                      0.0f, c0.data(), static_cast<int>(g.N));
        },
        [&] {
          loom::cpu::batchInvariantGemm(g.transA, g.transB, g.M, g.N, g.K, 1.0f,
                                        a.data(), lda, b.data(), ldb, 0.0f,
                                        c1.data(), g.N);
        });
  }

  // Accuracy against the double-precision references (relative, with an
  // absolute floor).
  std::vector<float> outR(out.size()), attR(att.size()), dqkvR(qkv.size());
  loom::cpu::attentionForwardReference(outR.data(), attR.data(), qkv.data(), B,
                                       T, C, NH);
  loom::cpu::attentionBackwardReference(dqkvR.data(), dout.data(), qkv.data(),
                                        att.data(), B, T, C, NH);
  std::vector<float> yR(n), dxR(n);
  loom::cpu::geluForwardReference(yR.data(), x.data(), n);
  loom::cpu::geluBackwardReference(dxR.data(), x.data(), dy.data(), n);
  std::printf("\nmax |err| / max(|ref|, floor) vs the double reference:\n");
  std::printf("%-20s | before %.2e | after %.2e\n", "attention out (1e-3)",
              maxRelErr(out0, outR, 1e-3), maxRelErr(out, outR, 1e-3));
  std::printf("%-20s | before %.2e | after %.2e\n", "attention att (1e-3)",
              maxRelErr(att0, attR, 1e-3), maxRelErr(att, attR, 1e-3));
  std::printf("%-20s | before %.2e | after %.2e\n", "attention dqkv (1e-3)",
              maxRelErr(dqkv0, dqkvR, 1e-3), maxRelErr(dqkv, dqkvR, 1e-3));
  std::printf("%-20s | before %.2e | after %.2e\n", "gelu fwd (1e-6)",
              maxRelErr(y0, yR, 1e-6), maxRelErr(y, yR, 1e-6));
  std::printf("%-20s | before %.2e | after %.2e\n", "gelu bwd (1e-6)",
              maxRelErr(dx0, dxR, 1e-6), maxRelErr(dx, dxR, 1e-6));
  return 0;
}
