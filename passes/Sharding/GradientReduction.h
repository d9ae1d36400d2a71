//===- GradientReduction.h - DP gradient sums once per step -----*- C++ -*-===//
//
// The partitioner places each gradient's data-parallel all-reduce in the
// micro-batch's backward, before the accumulator: M all-reduces of every
// gradient per step (after --loom-pipeline, one per backward action; in an
// unpipelined step, --loom-partition calls this with one stage). A sum
// of sums is the sum: Megatron-LM (finalize_model_grads) and DeepSpeed's
// PipelineEngine (reduce_grads) accumulate the local gradients over the
// micro-batches and all-reduce once per step. This moves those
// all-reduces to once per step: into the last micro-batch's backward where
// one function accumulates the sum, else into the stages' optimizer updates
// (as reduce-scatters where
// an update reads only the rank's dp block, ZeRO-1: every tensor whose
// moments ZeRO-1 splits, the tied wte too, whose stages then sum their dp
// blocks; a tensor whose moments stay whole over dp, a column-parallel
// bias under tp, keeps its all-reduce), and turns a dp block of a dp
// all-reduce that stays per micro-batch (ZeRO-2/3), or of wpe's
// slice_grad pad of one, into a reduce-scatter.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_SHARDING_GRADIENTREDUCTION_H
#define LOOM_PASSES_SHARDING_GRADIENTREDUCTION_H

#include "dialects/Loom/IR/LoomOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::loom {

/// Moves the all-reduces of gradient accumulations out of the backward
/// functions (`backward[c]` of chunk c, on stage c mod stages) into the
/// stage updates (`updates[s]`), where each accumulator is all-reduced once
/// before anything reads it. An accumulator moves when, on its stage, every
/// contribution reaches it through a sum all-reduce on the same axes (not
/// `pipelineAxis`) followed by adds only; one that is sliced or
/// reduce-scattered after the all-reduce (ZeRO-2/3's sharded accumulators)
/// stays per micro-batch, since only the whole sum may be deferred; there a
/// dp block of a dp all-reduce becomes a reduce-scatter. Returns how many
/// accumulators moved.
///
/// With `onlyWhereScattered`, an accumulator moves only when its update
/// reads it through dp slices (and the norm) alone, i.e. when the once-per-
/// step reduction becomes a reduce-scatter (ZeRO-1): a step of one
/// micro-batch gains nothing from deferring a whole all-reduce and would
/// lose its overlap with the backward pass. `--loom-partition` uses this
/// for unpipelined steps (`pipelineAxis` empty, `stages` = 1).
///
/// With `wholeInLastMicrobatch`, an accumulator whose reduction stays a
/// whole all-reduce and which one backward function of its stage
/// accumulates is reduced in that function's last micro-batch instead of
/// the update: a `last_microbatch` all-reduce of the sum it returns, right
/// after the accumulation (moved up to right after its gradient), which the
/// runtime skips in the other micro-batches (DDP's no_sync; Megatron's
/// overlapped gradient reduction in a pipeline's last backward).
///
/// A reduction that becomes a reduce-scatter (ZeRO-1) and whose accumulator
/// one backward function accumulates goes there too, whatever the flags:
/// a `last_microbatch` reduce-scatter in place right after the
/// accumulation, the update reading the rank's block of the accumulator
/// with a local slice (Megatron's distributed optimizer, which
/// reduce-scatters its gradient buffer behind the last backward).
int64_t reduceGradientsOncePerStep(ArrayRef<func::FuncOp> backward,
                                   ArrayRef<func::FuncOp> updates,
                                   int64_t stages, StringRef pipelineAxis,
                                   bool onlyWhereScattered = false,
                                   bool wholeInLastMicrobatch = false);

} // namespace mlir::loom

#endif // LOOM_PASSES_SHARDING_GRADIENTREDUCTION_H
