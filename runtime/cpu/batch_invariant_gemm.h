//===- batch_invariant_gemm.h - A GEMM whose bits ignore the batch -*- C++
//-*-===//
//
// Row-major C = alpha op(A) op(B) + beta C in which every element is one
// fp32 dot product summed in k order (0, 1, ..., K-1) in one accumulator:
// an element's bits depend only on its row of op(A), its column of op(B)
// and K, never on M or N, on where the row sits in the call, on the thread
// count or on the schedule. That is what lets a data-parallel rank, a
// micro-batch, a shorter sampling context or an MPI rank with one thread
// reproduce the single-rank run bit for bit (the e2e tests compare
// checkpoints with cmp). OpenBLAS promises none of it: on AMD Zen its
// Haswell-class kernels give a row different bits at a different position
// in the call, and with a different thread count.
//
// How (GotoBLAS's blocking, batch_invariant_gemm.cpp): tasks of (a run of
// rows, 256-column panel) run in parallel under OpenMP; each walks K in
// blocks of 256, packing op(B)'s block once as contiguous strips of a
// micro-tile's width, then op(A)'s block 96 rows at a time as slivers of
// its height (zero-padded); a micro-tile of 6 x 16 (AVX2 + FMA) or 4 x 8
// (baseline x86-64) keeps its sums in registers through a block and in
// fp32 memory between blocks, which changes no bit. Padding rows and
// columns are zeros whose results are never stored. On one GPT-2 layer's
// GEMMs at 1024 rows it runs at 0.8-1.3x OpenBLAS's speed on 2 cores
// (loom-bench-kernels).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CPU_BATCH_INVARIANT_GEMM_H
#define LOOM_RUNTIME_CPU_BATCH_INVARIANT_GEMM_H

#include <cstdint>

namespace loom::cpu {

/// gemm()'s contract (gemm.h), each element summed as above. Runs on the
/// calling thread alone inside an OpenMP parallel region.
void batchInvariantGemm(bool transA, bool transB, int64_t M, int64_t N,
                        int64_t K, float alpha, const float *A, int64_t lda,
                        const float *B, int64_t ldb, float beta, float *C,
                        int64_t ldc);

} // namespace loom::cpu

#endif // LOOM_RUNTIME_CPU_BATCH_INVARIANT_GEMM_H
