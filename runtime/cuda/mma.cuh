//===- mma.cuh - Warp-level bf16 tensor-core products ----------*- CUDA -*-===//
//
// PTX's mma.sync m16n8k16 with bf16 inputs and fp32 accumulation, for
// kernels that keep their operands in registers (flash_attention_mma.cu).
// Unlike WMMA's opaque fragments, the PTX ISA documents which lane holds
// which element ("Matrix Fragments for mma.m16n8k16"); with g = lane / 4
// and t = lane % 4:
//
//   A (16 x 16, row major), four 32-bit registers of two bf16 each (the
//   lower-indexed element in the low half):
//     a[0] = (g, 2t..2t+1)      a[1] = (g + 8, 2t..2t+1)
//     a[2] = (g, 2t+8..2t+9)    a[3] = (g + 8, 2t+8..2t+9)
//   B (16 x 8, "col": element (k, n) of column n), two registers:
//     b0 = (2t..2t+1, g)        b1 = (2t+8..2t+9, g)
//   C / D (16 x 8, fp32):
//     c[0..1] = (g, 2t..2t+1)   c[2..3] = (g + 8, 2t..2t+1)
//
// So the accumulators of two adjacent 16 x 8 tiles (columns 16s..16s+15)
// are, element for element, the A fragment of k-step s of the next product:
// a softmax's probabilities go from S = Q K^T into P V without leaving the
// registers (FlashAttention-2). B's column n = g, rows 2t, 2t + 1 are two
// adjacent elements of row n of a row-major [n][k] array: one 32-bit load,
// or four such registers in one ldmatrix (loadMatrices); ldmatrix .trans
// reads them from a row-major [k][n] array (loadMatricesTransposed).
//
// CudaEmulation.h replaces this header with the same operations lane by
// lane on the documented layouts.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_MMA_CUH
#define LOOM_RUNTIME_CUDA_MMA_CUH

#include <cstdint>
#include <cuda_bf16.h>

namespace loom::cuda::mma {

/// d += a b for one m16n8k16 tile (layouts above).
__device__ inline void bf16m16n8k16(float (&d)[4], const uint32_t (&a)[4],
                                    uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
               "{%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// lo and hi rounded to bf16 in one register, lo in the low half (the
/// order of a fragment's element pairs).
__device__ inline uint32_t packBf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t *>(&v);
}

/// Four 8 x 8 bf16 matrices from shared memory (ldmatrix .x4): lane
/// 8j + r gives the address of row r of matrix j (8 contiguous elements,
/// 16-byte aligned), and r[j] receives elements (g, 2t) and (g, 2t + 1) of
/// matrix j. That pair is a B register of a product with X^T read from
/// X's row-major [n][k] tile: column n = g, rows k = 2t, 2t + 1.
__device__ inline void loadMatrices(uint32_t (&r)[4],
                                    const __nv_bfloat16 *row) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 "
               "{%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

/// loadMatrices transposed (ldmatrix .x4 .trans): r[j] receives elements
/// (2t, g) and (2t + 1, g) of matrix j, a B register of a product with X
/// read from X's row-major [k][n] tile, without a transposed copy.
__device__ inline void loadMatricesTransposed(uint32_t (&r)[4],
                                              const __nv_bfloat16 *row) {
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 "
               "{%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(address));
}

/// Two adjacent bf16 (4-byte aligned) as one register.
__device__ inline uint32_t load2(const __nv_bfloat16 *p) {
  return *reinterpret_cast<const uint32_t *>(p);
}

} // namespace loom::cuda::mma

#endif // LOOM_RUNTIME_CUDA_MMA_CUH
