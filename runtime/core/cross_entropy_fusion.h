//===- cross_entropy_fusion.h - Loss and gradient as one call ---*- C++ -*-===//
//
// A backend that runs a training step's CrossEntropy and its
// CrossEntropyGrad as one call (KernelBackend::fusesCrossEntropyGrad, the
// CUDA backend's bf16 rows; llm.c's fused classifier) reads the logits once
// from memory instead of twice: one pass per row finds its maximum and
// log-sum-exp, takes the row's loss, and a second pass over the same row
// (still in L2) writes the gradient. For GPT-2 at B=16, T=1024 that is one
// read of 1.65 GB of bf16 logits and a launch less a step. The results are
// the two instructions' to the bit (the same statistics, in the same order).
// LOOM_CUDA_FUSED_CROSS_ENTROPY=0 runs them one by one to compare.
//
// Between the two, autodiff puts the Fill of the backward's seed (the
// gradient's dloss). The fused call reads it, so the Fill runs first, then
// the fused call; the plan checks that moving the loss past the Fill
// changes nothing (the Fill writes nothing the loss reads or writes).
//
// As for the other fused instructions (residual_norms.h), which spans
// qualify is decided once, when the executor loads the stage, and the
// backend may still decline one at run time (a vocabulary or alignment its
// kernel does not take): the instructions then run one by one.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_CROSS_ENTROPY_FUSION_H
#define LOOM_RUNTIME_CORE_CROSS_ENTROPY_FUSION_H

#include "runtime/program/program.h"

#include <cstdint>
#include <vector>

namespace loom {

/// Instructions [first, first + count) of the micro-batch list, run as one
/// KernelBackend::crossEntropyWithGrad call: the CrossEntropy at `first`,
/// the CrossEntropyGrad at first + count - 1, and between them (count 3)
/// the Fill of the seed, which runs before the call.
struct CrossEntropyFusionPlan {
  uint32_t first = 0;
  uint32_t count = 2;
};

/// The spans of `stage.instructions()` (the stage must be verified) that
/// qualify: a CrossEntropy (logits, targets -> loss; optional scratch row
/// losses) whose CrossEntropyGrad (dloss, the same logits, the same
/// targets -> dlogits) comes next or after one Fill; no axes (a
/// vocabulary-parallel loss is other opcodes); BF16 logits and dlogits;
/// none of the instructions runs only on the last micro-batch; the Fill
/// writes nothing the loss reads or writes; the gradient is written over
/// the logits exactly or away from them, and away from the targets and the
/// seed; the loss and its scratch overlap nothing the call reads or the
/// gradient.
std::vector<CrossEntropyFusionPlan>
planCrossEntropyFusion(const program::Stage &stage);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_CROSS_ENTROPY_FUSION_H
