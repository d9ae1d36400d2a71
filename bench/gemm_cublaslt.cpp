//===- gemm_cublaslt.cpp - cuBLASLt bf16 GEMMs on the GPT-2 shapes --------===//
//
// Times runtime/cuda/gemm.h's bf16 path (bf16 A/B, fp32 accumulation, bf16
// C) on every GEMM of one GPT-2 training step: for each linear layer (qkv,
// attention projection, fc, fc projection, tied LM head) the forward
// Y = X W, and the two backward GEMMs dX = dY W^T and dW = X^T dY, and for
// the four with a bias dW again with the bias gradient (dY's column sums)
// in its epilogue (dw+bias: cuBLASLt's BGRADA, as LinearGrad runs it; its
// TFLOP/s count the product only, so against the dw row it shows what the
// sums cost, and torch_matmul.py's dw+bias row is autograd's separate sum).
// Prints
//   gemm | M | N | K | ms | TFLOP/s
// (median of --iters timed calls after --warmup, CUDA events) and, with
// --json F, the same rows for scripts (bench/torch_matmul.py prints the same
// table for torch.matmul; scripts/gpu-check joins the two). Needs a GPU;
// without one it says so and exits 1.
//
//   loom-bench-gemm-cublaslt [--batch 16] [--seq 1024] [--C 768] [--V 50257]
//                            [--Vp 50304] [--iters 20] [--warmup 5] [--json F]
//
// --Vp adds the LM head's GEMMs on a padded vocabulary (lm_head_p.*).
//
//===----------------------------------------------------------------------===//
#include "bench/bench_cli.h"
#include "runtime/cuda/bf16_host.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/gemm.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr const char *kTool = "loom-bench-gemm-cublaslt";

using loom::Status;

/// One GEMM of the step, in gemm.h's row-major contract; with
/// biasGradient, op(B)'s column sums in the epilogue too.
struct Shape {
  std::string name;
  int64_t M, N, K;
  bool transA, transB;
  bool biasGradient = false;
};

/// The step's GEMMs for rows = B*T tokens: each linear X[rows,in] W[in,out]
/// gives fwd (rows x out x in), dx (rows x in x out, W^T) and dw
/// (in x out x rows, X^T). The LM head multiplies by wte[V,C] transposed;
/// with Vp > 0 also by the padded table wte[Vp,C] (lm_head_p: what `loom
/// compile` runs after padding the vocabulary, 50257 -> 50304).
std::vector<Shape> gpt2Shapes(int64_t rows, int64_t C, int64_t V,
                              int64_t Vp) {
  std::vector<Shape> shapes;
  const struct {
    const char *name;
    int64_t in, out;
  } linears[] = {{"qkv", C, 3 * C},
                 {"attn_proj", C, C},
                 {"fc", C, 4 * C},
                 {"fc_proj", 4 * C, C}};
  for (const auto &l : linears) {
    const std::string n = l.name;
    shapes.push_back({n + ".fwd", rows, l.out, l.in, false, false});
    shapes.push_back({n + ".dx", rows, l.in, l.out, false, true});
    shapes.push_back({n + ".dw", l.in, l.out, rows, true, false});
    shapes.push_back({n + ".dw+bias", l.in, l.out, rows, true, false, true});
  }
  // logits[rows,V] = x[rows,C] wte^T; dx = dlogits wte; dwte = dlogits^T x.
  for (auto [name, v] : {std::pair<std::string, int64_t>{"lm_head", V},
                         {"lm_head_p", Vp}}) {
    if (v <= 0)
      continue;
    shapes.push_back({name + ".fwd", rows, v, C, false, true});
    shapes.push_back({name + ".dx", rows, C, v, false, false});
    shapes.push_back({name + ".dw", v, C, rows, true, false});
  }
  return shapes;
}

#define BENCH_CHECK(expr) LOOM_BENCH_CHECK(kTool, expr)
#define BENCH_CUDA(call) LOOM_BENCH_CUDA(kTool, call)

} // namespace

int main(int argc, char **argv) {
  const int64_t B = loom::bench::flagInteger(kTool, argc, argv, "--batch", 16);
  const int64_t T = loom::bench::flagInteger(kTool, argc, argv, "--seq", 1024);
  const int64_t C = loom::bench::flagInteger(kTool, argc, argv, "--C", 768);
  const int64_t V = loom::bench::flagInteger(kTool, argc, argv, "--V", 50257);
  // 0: no padded LM head rows.
  const int64_t Vp =
      loom::bench::flagInteger(kTool, argc, argv, "--Vp", 0, 0);
  const int iters = static_cast<int>(
      loom::bench::flagInteger(kTool, argc, argv, "--iters", 20));
  const int warmup = static_cast<int>(
      loom::bench::flagInteger(kTool, argc, argv, "--warmup", 5, 0));
  const char *jsonPath = loom::bench::flagString(argc, argv, "--json");
  if (B <= 0 || T <= 0 || C <= 0 || V <= 0 || iters <= 0 || warmup < 0) {
    std::fprintf(stderr, "loom-bench-gemm-cublaslt: --batch, --seq, --C, --V "
                         "and --iters must be positive\n");
    return 2;
  }
  int devices = 0;
  Status probe = loom::cuda::probeDevice(devices);
  if (!probe.ok()) {
    std::fprintf(stderr,
                 "loom-bench-gemm-cublaslt: %s\n  (this benchmark needs a "
                 "GPU; scripts/gpu-check runs it there)\n",
                 probe.message().c_str());
    return 1;
  }

  const std::vector<Shape> shapes = gpt2Shapes(B * T, C, V, Vp);
  // Buffers big enough for every operand.
  int64_t maxA = 0, maxB = 0, maxC = 0;
  for (const Shape &s : shapes) {
    maxA = std::max(maxA, s.M * s.K);
    maxB = std::max(maxB, s.K * s.N);
    maxC = std::max(maxC, s.M * s.N);
  }
  // One 16 Mi-value block of bf16 values in [-1, 1), copied over each
  // buffer (the values do not change the time; they only avoid denormals
  // and keep the host side small at the LM head's 16384 x 50257).
  const int64_t block = int64_t(1) << 24;
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> host(static_cast<size_t>(block));
  for (float &x : host)
    x = dist(gen);
  const std::vector<uint16_t> bits = loom::cuda::bf16Bits(host);
  void *dA = nullptr, *dB = nullptr, *dC = nullptr, *dBias = nullptr;
  BENCH_CUDA(cudaMalloc(&dA, maxA * 2));
  BENCH_CUDA(cudaMalloc(&dB, maxB * 2));
  BENCH_CUDA(cudaMalloc(&dC, maxC * 2));
  BENCH_CUDA(cudaMalloc(&dBias, 4 * C * 2)); // the widest biased linear
  for (auto [ptr, n] : {std::pair<void *, int64_t>{dA, maxA}, {dB, maxB}})
    for (int64_t at = 0; at < n; at += block)
      BENCH_CUDA(cudaMemcpy(static_cast<uint16_t *>(ptr) + at, bits.data(),
                            std::min(block, n - at) * 2,
                            cudaMemcpyHostToDevice));
  cudaStream_t stream = nullptr;
  BENCH_CUDA(cudaStreamCreate(&stream));
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  loom::cuda::Gemm gemm;
  BENCH_CHECK(loom::cuda::Gemm::create(gemm));
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));

  std::printf("cuBLASLt bf16 GEMMs (fp32 accumulate, bf16 out) of GPT-2 "
              "C=%lld V=%lld at B=%lld T=%lld on %s\n",
              (long long)C, (long long)V, (long long)B, (long long)T,
              prop.name);
  std::printf("%-17s %7s %7s %7s %9s %9s\n", "gemm", "M", "N", "K", "ms",
              "TFLOP/s");
  std::string json = "[";
  double totalMs = 0, totalFlops = 0;
  for (const Shape &s : shapes) {
    const auto *a = static_cast<const __nv_bfloat16 *>(dA);
    const auto *b = static_cast<const __nv_bfloat16 *>(dB);
    auto *c = static_cast<__nv_bfloat16 *>(dC);
    const int64_t lda = s.transA ? s.M : s.K, ldb = s.transB ? s.K : s.N;
    loom::cuda::GemmArgs args;
    args.transA = s.transA, args.transB = s.transB;
    args.M = s.M, args.N = s.N, args.K = s.K;
    args.A = a, args.lda = lda, args.B = b, args.ldb = ldb;
    args.C = c, args.ldc = s.N;
    args.inputType = args.outputType = loom::cuda::GemmType::BF16;
    args.biasGradient = s.biasGradient ? dBias : nullptr;
    if (s.biasGradient) {
      bool runnable = false;
      BENCH_CHECK(gemm.canRun(args, runnable));
      if (!runnable) {
        // LinearGrad then sums the bias gradient in its own kernel.
        std::printf("%-17s %7lld %7lld %7lld  cuBLASLt has no BGRADA kernel "
                    "for it\n",
                    s.name.c_str(), (long long)s.M, (long long)s.N,
                    (long long)s.K);
        continue;
      }
    }
    auto run = [&] { return gemm.matmul(args, stream); };
    for (int i = 0; i < warmup; ++i)
      BENCH_CHECK(run());
    std::vector<float> ms(static_cast<size_t>(iters));
    for (int i = 0; i < iters; ++i) {
      BENCH_CUDA(cudaEventRecord(start, stream));
      BENCH_CHECK(run());
      BENCH_CUDA(cudaEventRecord(stop, stream));
      BENCH_CUDA(cudaEventSynchronize(stop));
      BENCH_CUDA(cudaEventElapsedTime(&ms[i], start, stop));
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    const double flops = 2.0 * s.M * s.N * s.K;
    const double tflops = flops / (median * 1e-3) / 1e12;
    if (!s.biasGradient) { // the step's GEMMs once each
      totalMs += median;
      totalFlops += flops;
    }
    std::printf("%-17s %7lld %7lld %7lld %9.4f %9.1f\n", s.name.c_str(),
                (long long)s.M, (long long)s.N, (long long)s.K, median, tflops);
    char row[256];
    std::snprintf(row, sizeof(row),
                  "%s{\"gemm\": \"%s\", \"M\": %lld, \"N\": %lld, \"K\": %lld, "
                  "\"ms\": %.6f, \"tflops\": %.6g}",
                  json.size() > 1 ? ", " : "", s.name.c_str(), (long long)s.M,
                  (long long)s.N, (long long)s.K, median, tflops);
    json += row;
  }
  std::printf("%-17s %7s %7s %7s %9.4f %9.1f\n", "all", "", "", "", totalMs,
              totalFlops / (totalMs * 1e-3) / 1e12);
  json += "]\n";
  if (jsonPath) {
    FILE *f = std::fopen(jsonPath, "w");
    if (!f || std::fputs(json.c_str(), f) < 0 || std::fclose(f) != 0) {
      std::fprintf(stderr, "loom-bench-gemm-cublaslt: cannot write %s\n",
                   jsonPath);
      return 1;
    }
  }
  cudaFree(dA);
  cudaFree(dB);
  cudaFree(dC);
  cudaFree(dBias);
  cudaStreamDestroy(stream);
  return 0;
}
