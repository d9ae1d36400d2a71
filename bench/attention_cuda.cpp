//===- attention_cuda.cpp - Naive vs flash causal attention on a GPU ------===//
//
// Times the executor's two attention calls (CudaKernels::attentionForward
// and attentionGrad, the Attention / AttentionGrad opcodes) with each
// kernel LOOM_CUDA_ATTENTION selects, at one GPT-2 layer's shape, and
// checks on the way that the two kernels agree (max |flash - naive| of out
// and dqkv; inputs uniform in [-1, 1)). A third row, flash-bf16, times the
// bf16 flash kernels (tensor cores at head size 64) on the same inputs
// rounded to bf16: forward, and the backward given the forward's out and
// lse (no recompute: the API a bf16 executor calls); its differences from
// naive are bf16 roundings, reported, not judged. At head size 64 three
// more rows time the tensor-core kernels alone (the backward given the
// row dots) with every kernel in one FlashTcOccupancy (training times each
// kernel's shapes and keeps its fastest: flash_shape_tuning.h): tc-spill0,
// tc-blocks with the forward and dQ compiled for more blocks per SM at a
// few bytes of spills, tc-wide with blocks of 8 warps (128 rows), tc-tall
// with the forward's 4 warps 32 rows each (the backward as tc-spill0); their
// differences are from tc-spill0 (the same arithmetic, so 0 unless the
// compiler reorders it). Prints
//   kernel | forward ms | grad ms | total ms | max |diff| out | dqkv
// (median of --iters, CUDA events) and, with --json F, the same for
// scripts. Needs a GPU; without one it says so and exits 1.
//
//   loom-bench-attention-cuda [--batch 16] [--seq 1024] [--heads 12]
//                             [--C 768] [--iters 10] [--json F]
//
//===----------------------------------------------------------------------===//
#include "bench/bench_cli.h"
#include "runtime/cuda/bf16_host.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/device.h"
#include "runtime/cuda/flash_attention.h"
#include "runtime/cuda/flash_attention_mma.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

constexpr const char *kTool = "loom-bench-attention-cuda";

using loom::Status;
using loom::cuda::AttentionKernel;

#define BENCH_CHECK(expr) LOOM_BENCH_CHECK(kTool, expr)
#define BENCH_CUDA(call) LOOM_BENCH_CUDA(kTool, call)

double maxAbsDiff(const std::vector<float> &a, const std::vector<float> &b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

/// Median milliseconds of `forward` and of `grad` (calls that launch on
/// `stream` and return a Status) over `iters` runs after one warm-up,
/// timed by CUDA events. Returns main's exit code on an error, 0 otherwise.
template <typename Forward, typename Grad>
int timePasses(cudaStream_t stream, int iters, Forward forward, Grad grad,
               double &forwardMs, double &gradMs) {
  cudaEvent_t e0, e1, e2;
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  BENCH_CUDA(cudaEventCreate(&e2));
  std::vector<float> fwdMs(iters), gradMsAll(iters);
  for (int i = -1; i < iters; ++i) { // i = -1: warm-up
    BENCH_CUDA(cudaEventRecord(e0, stream));
    BENCH_CHECK(forward());
    BENCH_CUDA(cudaEventRecord(e1, stream));
    BENCH_CHECK(grad());
    BENCH_CUDA(cudaEventRecord(e2, stream));
    BENCH_CUDA(cudaEventSynchronize(e2));
    if (i < 0)
      continue;
    BENCH_CUDA(cudaEventElapsedTime(&fwdMs[i], e0, e1));
    BENCH_CUDA(cudaEventElapsedTime(&gradMsAll[i], e1, e2));
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaEventDestroy(e2);
  std::sort(fwdMs.begin(), fwdMs.end());
  std::sort(gradMsAll.begin(), gradMsAll.end());
  forwardMs = fwdMs[iters / 2];
  gradMs = gradMsAll[iters / 2];
  return 0;
}

/// Prints one row of the table (`note` after it) and appends it to the
/// JSON list `json` (opened with "[").
void addRow(std::string &json, const char *kernel, double forwardMs,
            double gradMs, double diffOut, double diffDqkv,
            const char *note = "") {
  std::printf("%-10s %11.3f %11.3f %11.3f %14.3g %14.3g%s\n", kernel, forwardMs,
              gradMs, forwardMs + gradMs, diffOut, diffDqkv, note);
  char row[256];
  std::snprintf(row, sizeof(row),
                "%s{\"kernel\": \"%s\", \"forward_ms\": %.6f, "
                "\"grad_ms\": %.6f, \"max_abs_diff_out\": %.6g, "
                "\"max_abs_diff_dqkv\": %.6g}",
                json.size() > 1 ? ", " : "", kernel, forwardMs, gradMs, diffOut,
                diffDqkv);
  json += row;
}

/// `outF` and `dqkvF` = a bf16 run's results (device `out`, nOut values;
/// `dqkv`, nQkv), widened to float. Returns main's exit code on a CUDA
/// error, 0 otherwise.
int resultsToHost(const __nv_bfloat16 *out, int64_t nOut,
                  const __nv_bfloat16 *dqkv, int64_t nQkv,
                  std::vector<float> &outF, std::vector<float> &dqkvF) {
  std::vector<uint16_t> bits(nOut);
  BENCH_CUDA(cudaMemcpy(bits.data(), out, nOut * 2, cudaMemcpyDeviceToHost));
  outF = loom::cuda::floatsFromBf16(bits);
  bits.resize(nQkv);
  BENCH_CUDA(cudaMemcpy(bits.data(), dqkv, nQkv * 2, cudaMemcpyDeviceToHost));
  dqkvF = loom::cuda::floatsFromBf16(bits);
  return 0;
}

/// The tc-spill0, tc-blocks, tc-wide and tc-tall rows (see the file comment):
/// the tensor-core kernels on bf16 `qkv` and `dout`, given `rowDot` (the row
/// dots of the forward's out, already computed). Returns main's exit code
/// on a CUDA error, 0 otherwise.
int timeOccupancies(const __nv_bfloat16 *qkv, const __nv_bfloat16 *dout,
                    const float *rowDot, int64_t B, int64_t T, int64_t C,
                    int64_t NH, int iters, cudaStream_t stream,
                    std::string &json) {
  using loom::cuda::FlashTcOccupancy;
  const int64_t nQkv = B * T * 3 * C, nOut = B * T * C;
  __nv_bfloat16 *out = nullptr, *dqkv = nullptr;
  float *lse = nullptr;
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void **>(&out), nOut * 2));
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void **>(&dqkv), nQkv * 2));
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void **>(&lse), B * NH * T * 4));
  std::vector<float> firstOut, firstDqkv;
  for (FlashTcOccupancy occupancy :
       {FlashTcOccupancy::FewestSpills, FlashTcOccupancy::MoreBlocks,
        FlashTcOccupancy::WideBlocks, FlashTcOccupancy::TallWarps}) {
    double f = 0, g = 0;
    if (int rc = timePasses(
            stream, iters,
            [&] {
              return loom::cuda::flashAttentionForwardTensorCores(
                  out, lse, qkv, B, T, C, NH, stream, occupancy);
            },
            [&] {
              return loom::cuda::flashAttentionBackwardTensorCores(
                  dqkv, rowDot, dout, qkv, lse, B, T, C, NH, stream,
                  loom::cuda::FlashTcShapes::all(occupancy));
            },
            f, g))
      return rc;
    std::vector<float> outF, dqkvF;
    if (int rc = resultsToHost(out, nOut, dqkv, nQkv, outF, dqkvF))
      return rc;
    if (firstOut.empty()) {
      firstOut = outF;
      firstDqkv = dqkvF;
    }
    addRow(json,
           occupancy == FlashTcOccupancy::FewestSpills ? "tc-spill0"
           : occupancy == FlashTcOccupancy::MoreBlocks ? "tc-blocks"
           : occupancy == FlashTcOccupancy::WideBlocks ? "tc-wide"
                                                       : "tc-tall",
           f, g, maxAbsDiff(outF, firstOut), maxAbsDiff(dqkvF, firstDqkv),
           "  (vs tc-spill0)");
  }
  cudaFree(out);
  cudaFree(dqkv);
  cudaFree(lse);
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  const int64_t B = loom::bench::flagInteger(kTool, argc, argv, "--batch", 16);
  const int64_t T = loom::bench::flagInteger(kTool, argc, argv, "--seq", 1024);
  const int64_t NH = loom::bench::flagInteger(kTool, argc, argv, "--heads", 12);
  const int64_t C = loom::bench::flagInteger(kTool, argc, argv, "--C", 768);
  const int iters = static_cast<int>(
      loom::bench::flagInteger(kTool, argc, argv, "--iters", 10));
  const char *jsonPath = loom::bench::flagString(argc, argv, "--json");
  if (B <= 0 || T <= 0 || NH <= 0 || C % NH != 0 || iters <= 0) {
    std::fprintf(stderr, "loom-bench-attention-cuda: --batch, --seq, --heads "
                         "and --iters must be positive and --C divisible by "
                         "--heads\n");
    return 2;
  }
  int devices = 0;
  Status probe = loom::cuda::probeDevice(devices);
  if (!probe.ok()) {
    std::fprintf(stderr,
                 "loom-bench-attention-cuda: %s\n  (this benchmark needs a "
                 "GPU; scripts/gpu-check runs it there)\n",
                 probe.message().c_str());
    return 1;
  }

  const int64_t nQkv = B * T * 3 * C, nOut = B * T * C;
  const int64_t nAtt = B * NH * T * T;
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> qkv(nQkv), dout(nOut);
  for (float &x : qkv)
    x = dist(gen);
  for (float &x : dout)
    x = dist(gen);
  float *dQkv = nullptr, *dDout = nullptr, *dOut = nullptr, *dAtt = nullptr,
        *dDqkv = nullptr, *dLse = nullptr;
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void **>(&dQkv), nQkv * 4));
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void **>(&dDout), nOut * 4));
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void **>(&dOut), nOut * 4));
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void **>(&dAtt), nAtt * 4)); // the opcodes' [B,NH,T,T] scratch
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void **>(&dDqkv), nQkv * 4));
  BENCH_CUDA(cudaMalloc(reinterpret_cast<void **>(&dLse), B * NH * T * 4));
  BENCH_CUDA(cudaMemcpy(dQkv, qkv.data(), nQkv * 4, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(dDout, dout.data(), nOut * 4, cudaMemcpyHostToDevice));
  cudaStream_t stream = nullptr;
  BENCH_CUDA(cudaStreamCreate(&stream));
  std::unique_ptr<loom::cuda::CudaKernels> kernels;
  BENCH_CHECK(loom::cuda::CudaKernels::create(stream, kernels));

  std::printf("causal attention fp32, B=%lld T=%lld NH=%lld C=%lld "
              "(executor calls of a training step: forward with lse, grad "
              "from the saved forward)\n",
              (long long)B, (long long)T, (long long)NH, (long long)C);
  std::printf("%-10s %11s %11s %11s %14s %14s\n", "kernel", "forward ms",
              "grad ms", "total ms", "max|d| out", "max|d| dqkv");
  std::vector<float> outs[2], grads[2];
  std::string json = "[";
  const AttentionKernel order[] = {AttentionKernel::Naive,
                                   AttentionKernel::Flash};
  for (int k = 0; k < 2; ++k) {
    kernels->setAttentionKernel(order[k]);
    const char *name = k == 0 ? "naive" : "flash";
    double f = 0, g = 0;
    if (int rc = timePasses(
            stream, iters,
            [&] {
              return kernels->attentionForward(dOut, dLse, dAtt, dQkv, B, T, C,
                                               NH);
            },
            [&] {
              return kernels->attentionGrad(dDqkv, dDout, dQkv, dOut, dLse,
                                            dAtt, B, T, C, NH);
            },
            f, g))
      return rc;
    outs[k].resize(nOut);
    grads[k].resize(nQkv);
    BENCH_CUDA(cudaMemcpy(outs[k].data(), dOut, nOut * 4,
                          cudaMemcpyDeviceToHost));
    BENCH_CUDA(cudaMemcpy(grads[k].data(), dDqkv, nQkv * 4,
                          cudaMemcpyDeviceToHost));
    addRow(json, name, f, g, k ? maxAbsDiff(outs[1], outs[0]) : 0,
           k ? maxAbsDiff(grads[1], grads[0]) : 0);
  }
  // flash-bf16: the same values rounded to bf16, out / lse / rowDot kept.
  {
    const std::vector<uint16_t> qkv16 = loom::cuda::bf16Bits(qkv),
                                dout16 = loom::cuda::bf16Bits(dout);
    __nv_bfloat16 *bQkv = nullptr, *bDout = nullptr, *bOut = nullptr,
                  *bDqkv = nullptr;
    float *lse = nullptr, *rowDot = nullptr;
    BENCH_CUDA(cudaMalloc(reinterpret_cast<void **>(&bQkv), nQkv * 2));
    BENCH_CUDA(cudaMalloc(reinterpret_cast<void **>(&bDout), nOut * 2));
    BENCH_CUDA(cudaMalloc(reinterpret_cast<void **>(&bOut), nOut * 2));
    BENCH_CUDA(cudaMalloc(reinterpret_cast<void **>(&bDqkv), nQkv * 2));
    BENCH_CUDA(cudaMalloc(reinterpret_cast<void **>(&lse), B * NH * T * 4));
    BENCH_CUDA(cudaMalloc(reinterpret_cast<void **>(&rowDot), B * NH * T * 4));
    BENCH_CUDA(
        cudaMemcpy(bQkv, qkv16.data(), nQkv * 2, cudaMemcpyHostToDevice));
    BENCH_CUDA(
        cudaMemcpy(bDout, dout16.data(), nOut * 2, cudaMemcpyHostToDevice));
    double f = 0, g = 0;
    if (int rc = timePasses(
            stream, iters,
            [&] {
              return loom::cuda::flashAttentionForward(bOut, lse, bQkv, B, T, C,
                                                       NH, stream);
            },
            [&] {
              return loom::cuda::flashAttentionBackward(
                  bDqkv, rowDot, bDout, bQkv, bOut, lse, B, T, C, NH, stream);
            },
            f, g))
      return rc;
    std::vector<float> outF, dqkvF;
    if (int rc = resultsToHost(bOut, nOut, bDqkv, nQkv, outF, dqkvF))
      return rc;
    addRow(json, "flash-bf16", f, g, maxAbsDiff(outF, outs[0]),
           maxAbsDiff(dqkvF, grads[0]), "  (bf16 inputs)");
    if (C / NH == loom::cuda::kFlashTensorCoreHeadSize)
      if (int rc = timeOccupancies(bQkv, bDout, rowDot, B, T, C, NH, iters,
                                   stream, json))
        return rc;
    cudaFree(bQkv);
    cudaFree(bDout);
    cudaFree(bOut);
    cudaFree(bDqkv);
    cudaFree(lse);
    cudaFree(rowDot);
  }
  json += "]\n";
  if (jsonPath) {
    FILE *f = std::fopen(jsonPath, "w");
    if (!f || std::fputs(json.c_str(), f) < 0 || std::fclose(f) != 0) {
      std::fprintf(stderr, "loom-bench-attention-cuda: cannot write %s\n",
                   jsonPath);
      return 1;
    }
  }
  kernels.reset();
  cudaFree(dQkv);
  cudaFree(dDout);
  cudaFree(dOut);
  cudaFree(dAtt);
  cudaFree(dDqkv);
  cudaFree(dLse);
  cudaStreamDestroy(stream);
  return 0;
}
