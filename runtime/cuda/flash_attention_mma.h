//===- flash_attention_mma.h - Tensor-core bf16 flash attention -*- C++ -*-===//
//
// The bf16, head-size-64 (GPT-2) case of flash_attention.h on tensor cores
// (PTX mma.sync m16n8k16 through mma.cuh, fp32 accumulation).
// flashAttentionForward / flashAttentionBackward call these for bf16 at
// hs = 64; other head sizes and fp32 run the CUDA-core kernels of
// flash_attention.cu.
//
// As in FlashAttention-2: scores, probabilities and dS stay in registers
// between the products (the accumulator layout of one mma is the operand
// layout of the next); the forward is one pass with an online softmax; the
// backward is a key-major kernel (dK, dV) and a query-major one (dQ), both
// reading the forward's log-sum-exp, so neither re-runs the forward and no
// atomics make dQ depend on scheduling. Probabilities and dS enter the
// tensor-core products rounded to bf16.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_FLASH_ATTENTION_MMA_H
#define LOOM_RUNTIME_CUDA_FLASH_ATTENTION_MMA_H

#include "runtime/core/status.h"

#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace loom::cuda {

/// The only head size the tensor-core kernels are compiled for.
constexpr int64_t kFlashTensorCoreHeadSize = 64;

/// How the kernels trade registers for blocks per SM (the launch bounds
/// they are compiled with) and rows per block. All compute the same values;
/// which is fastest is a measurement (bench/attention_cuda.cpp times each,
/// and scripts/gpu-check prints them).
enum class FlashTcOccupancy {
  /// ptxas' own register choice, no spills: forward 135 registers (3
  /// blocks of 128 threads per SM), dK/dV 246 (2), dQ 181 (2). What a
  /// kernel runs in until its shapes are timed (flash_shape_tuning.h).
  FewestSpills,
  /// The forward capped to 4 blocks per SM (128 registers, 56 bytes of
  /// spill stores) and dQ to 3 (168 registers, 44 bytes); dK/dV as above.
  MoreBlocks,
  /// Blocks of 8 warps (128 rows) instead of 4: each streamed 64-row tile
  /// is read from L2 into shared memory once for twice the rows, half the
  /// traffic per product (at full mma.sync rate blocks of 4 warps ask
  /// about 40 bytes a clock of an SM in the forward, 28 in dQ, 21 in dK/dV,
  /// against roughly 24 from L2; docs/gpu-measurements.md).
  /// dK/dV (254 registers) and dQ (171) keep their 8 warps per SM, one
  /// block each; the forward is capped to 2 blocks (128 registers, 56
  /// bytes of spill stores).
  WideBlocks,
  /// The forward only (the backward kernels run as FewestSpills): blocks of
  /// 4 warps owning 32 rows each (128 rows a block), so each K and V
  /// fragment a warp reads from shared memory serves two products instead
  /// of one (FlashAttention-2's forward layout: at full mma.sync rate a
  /// warp of 16 rows asks shared memory for 256 bytes per product, twice
  /// what an SM serves a clock), at the cost of registers: 247 (no
  /// spills), 2 blocks per SM.
  TallWarps,
};

/// The launch shape of each tensor-core kernel. The forward, dK/dV and dQ
/// are separate launches that share nothing but global memory, so each may
/// run in the shape it is fastest in (flash_shape_tuning.h times them).
struct FlashTcShapes {
  FlashTcOccupancy forward = FlashTcOccupancy::FewestSpills;
  /// dK/dV (MoreBlocks and TallWarps run it as FewestSpills: see above).
  FlashTcOccupancy keys = FlashTcOccupancy::FewestSpills;
  /// dQ (TallWarps runs it as FewestSpills).
  FlashTcOccupancy queries = FlashTcOccupancy::FewestSpills;

  /// Every kernel in `shape`.
  static FlashTcShapes all(FlashTcOccupancy shape) {
    return {shape, shape, shape};
  }
};

/// flashAttentionForward's contract for bf16 with C / NH == 64.
Status flashAttentionForwardTensorCores(__nv_bfloat16 *out, float *lse,
                                        const __nv_bfloat16 *qkv, int64_t B,
                                        int64_t T, int64_t C, int64_t NH,
                                        cudaStream_t stream,
                                        FlashTcOccupancy occupancy);
/// The dK and dV columns of flashAttentionBackward's dqkv for bf16 with
/// C / NH == 64, given rowDot (D_i = dout_i . out_i, already computed).
Status flashBackwardKeysTensorCores(__nv_bfloat16 *dqkv, const float *rowDot,
                                    const __nv_bfloat16 *dout,
                                    const __nv_bfloat16 *qkv, const float *lse,
                                    int64_t B, int64_t T, int64_t C, int64_t NH,
                                    cudaStream_t stream,
                                    FlashTcOccupancy occupancy);
/// The dQ columns, as flashBackwardKeysTensorCores.
Status flashBackwardQueriesTensorCores(
    __nv_bfloat16 *dqkv, const float *rowDot, const __nv_bfloat16 *dout,
    const __nv_bfloat16 *qkv, const float *lse, int64_t B, int64_t T, int64_t C,
    int64_t NH, cudaStream_t stream, FlashTcOccupancy occupancy);
/// Both: the whole of dqkv.
Status flashAttentionBackwardTensorCores(
    __nv_bfloat16 *dqkv, const float *rowDot, const __nv_bfloat16 *dout,
    const __nv_bfloat16 *qkv, const float *lse, int64_t B, int64_t T, int64_t C,
    int64_t NH, cudaStream_t stream, FlashTcShapes shapes);

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_FLASH_ATTENTION_MMA_H
