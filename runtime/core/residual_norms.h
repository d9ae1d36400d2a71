//===- residual_norms.h - Residual Adds fused with layer norms --*- C++ -*-===//
//
// A backend that fuses a transformer block's residual Add with the layer
// norm beside it (KernelBackend::fusesResidualNorms, the CUDA backend's bf16
// rows) gets two pairs of adjacent instructions as one call each:
//  * Forward: an Add (the residual stream plus a sublayer's output) and the
//    LayerNorm of its sum. One pass over the rows writes the sum and the
//    normalized rows: the LayerNorm's read of the sum and a launch are gone
//    (GPT-2 124M at B=16, T=1024: 25 MB each, 24 pairs a step). The
//    LayerNorm's scratch statistics, which nothing reads (its gradient
//    recomputes them), are not written.
//  * Backward: a LayerNormGrad and the Add of its input gradient to the
//    residual stream's gradient. The kernel writes the sum where it would
//    have written the input gradient, which is never written, so it must
//    be read by nothing else: its write, the Add's read of it and a launch
//    are gone (50 MB a pair).
// Unlike the GELU epilogues (gelu_epilogues.h) the fused kernels round as
// the two instructions do, so results are the same to the bit;
// LOOM_CUDA_RESIDUAL_NORM=0 runs the instructions one by one to compare.
//
// Which pairs qualify is decided once, when the executor loads the stage;
// the backend may still decline one at run time (a row width or pointer
// alignment its kernel does not take), and the executor then runs the two
// instructions. Pipeline chunks' lists are not planned.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_RESIDUAL_NORMS_H
#define LOOM_RUNTIME_CORE_RESIDUAL_NORMS_H

#include "runtime/core/pair_fusion.h"
#include "runtime/program/program.h"

#include <cstdint>
#include <vector>

namespace loom {

/// Instructions `first` and first + 1 of a list, run as one
/// KernelBackend::addLayerNorm (forward: Add, LayerNorm) or
/// layerNormGradAdd (backward: LayerNormGrad, Add) call.
using ResidualNormPlan = pair_fusion::PairAt;

/// The pairs of `stage.instructions()` (the stage must be verified) that
/// qualify: every operand is BF16, the Add has no broadcast, neither
/// instruction runs only on the last micro-batch, what the fused call
/// writes overlaps nothing it reads except where each row element is read
/// before it is written (the sum over an addend), and what it skips is
/// read by nothing (pair_fusion::deadAfter): forward the LayerNorm's
/// scratch statistics, backward the LayerNormGrad's input gradient, but
/// by the Add.
std::vector<ResidualNormPlan> planResidualNorms(const program::Stage &stage);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_RESIDUAL_NORMS_H
