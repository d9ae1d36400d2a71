//===- gelu_epilogues.h - GELUs run in their GEMM's epilogue ----*- C++ -*-===//
//
// A backend that runs GELUs in a GEMM's epilogue (KernelBackend::
// fusesGeluEpilogues, the CUDA backend through cuBLASLt's GELU_AUX and DGELU
// epilogues) gets two pairs of adjacent instructions as one call each:
//  * Forward: a Linear and the Gelu of its result. One GEMM writes both the
//    Linear's result (the pre-activation, which the GeluGrad reads later)
//    and the Gelu's: the Gelu's read of the pre-activation and its launch
//    are gone (GPT-2's MLP: 100 MB a layer at B=16, T=1024). Where nothing
//    reads the pre-activation later (an evaluation: no GeluGrad), the GEMM
//    writes only the GELU (its write is gone too).
//  * Backward: a LinearGrad and the GeluGrad of its input gradient. The
//    input-gradient GEMM applies gelu'(pre-activation) in its epilogue and
//    writes the GeluGrad's result; the LinearGrad's own input gradient is
//    never written, so it must be read by nothing else (dead after the
//    GeluGrad). Gone: its write, the GeluGrad's read of it and its launch
//    (200 MB a layer).
// llm.c's gelu_fusion (the default on Hopper) makes the same two trades.
// The results are the same up to bf16 rounding, not to the bit: the
// epilogue applies the GELU (or its slope) to the fp32 product before its
// one rounding instead of to the rounded product; so only bf16 programs'
// pairs are fused, and LOOM_CUDA_GELU_EPILOGUE=0 runs the instructions one
// by one to compare.
//
// Which pairs qualify is decided once, when the executor loads the stage,
// from the program alone; the backend may still decline one at run time
// (pointer alignments, a shape cuBLASLt has no epilogue kernel for), and
// the executor then runs the two instructions. Pipeline chunks' lists are
// not planned (their buffers' lifetimes span actions).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_GELU_EPILOGUES_H
#define LOOM_RUNTIME_CORE_GELU_EPILOGUES_H

#include "runtime/core/pair_fusion.h"
#include "runtime/program/program.h"

#include <cstdint>
#include <vector>

namespace loom {

/// Instructions `first` and first + 1 of a list, run as one
/// KernelBackend::linearGelu (forward: Linear, Gelu) or linearGradGelu
/// (backward: LinearGrad, GeluGrad) call.
using GeluEpiloguePlan = pair_fusion::PairAt;

/// The pairs of `stage.instructions()` (the stage must be verified) that
/// qualify: every operand the fused GEMM reads or writes is BF16, what the
/// fused call writes overlaps nothing it reads before (forward: the
/// pre-activation and the GELU vs x, the weight, the bias, and the GELU vs
/// the pre-activation; backward, where the LinearGrad's weight gradients
/// run first: those vs dout, x, the weight and the pre-activation, and the
/// GeluGrad's result vs dout, the weight and the pre-activation),
/// neither instruction runs only on the last micro-batch, and, backward,
/// the LinearGrad's input gradient is dead once the GeluGrad has read it:
/// nothing reads any of its bytes before they are written again (by an
/// output or a scratch buffer), neither later instructions of the
/// micro-batch list, nor the next micro-batch's pass, nor the update, nor
/// the runtime (the loss, the gradient norm, the model state it saves).
/// A forward pair's firstResultUnread says the same of the pre-activation
/// once the Gelu has read it: the fused GEMM then need not write it.
std::vector<GeluEpiloguePlan> planGeluEpilogues(const program::Stage &stage);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_GELU_EPILOGUES_H
