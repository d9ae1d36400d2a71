//===- StageCut.h - Where the training step is cut into stages --*- C++ -*-===//
//
// The analysis half of --loom-pipeline. The micro-batch function of a
// training step is a sequence of units: `embedding` (the forward ops before
// the first transformer block), one per block, and `head` (the ops after
// the last block: final norm, LM head, loss). Every top-level op belongs to
// one unit: forward ops by position (ops between two blocks join the later
// one), backward ops by the backward block they follow (`h.3.grad` is in
// unit h.3; the ops before the first backward block are the head's, those
// after `h.0.grad` the embedding's). The gradient accumulations (acc + g,
// with g a sum of contributions, possibly all-reduced over dp) are kept
// apart: each contribution belongs to the unit that produced it, so a
// parameter used by two units (GPT-2's tied wte) is accumulated on both.
//
// Units are then grouped into contiguous chunks, balanced by the roofline
// cost of their forward and backward ops (not by layer count).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_PIPELINE_STAGECUT_H
#define LOOM_PASSES_PIPELINE_STAGECUT_H

#include "passes/Pipeline/PipelineModel.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <string>

namespace mlir::loom {

struct StepUnit {
  std::string name;
  double forwardSeconds = 0, backwardSeconds = 0;
  double seconds() const { return forwardSeconds + backwardSeconds; }
};

/// acc + g with g a tree of loom.add (and sum all-reduces, sum
/// reduce-scatters and local slices into a sharded accumulator) over
/// contributions.
struct Accumulation {
  /// The function result it produces and the accumulator it updates.
  unsigned result = 0;
  unsigned accumulator = 0;
  /// The `acc + g` op and the tree's inner ops.
  Operation *root = nullptr;
  llvm::SmallVector<Operation *> inner;
  /// Contributions and their units.
  llvm::SmallVector<std::pair<Value, int>> leaves;
};

/// The training step, in units.
struct StepCut {
  llvm::SmallVector<StepUnit> units;
  /// Units of the forward blocks: unit i + 1 is block i.
  int64_t numBlocks = 0;
  /// Unit of every top-level op outside the accumulations.
  llvm::DenseMap<Operation *, int> unitOf;
  /// The forward ops (what the loss depends on).
  llvm::DenseSet<Operation *> forward;
  llvm::SmallVector<Accumulation> accumulations;
  /// Ops of the accumulations (roots and inner ops).
  llvm::DenseSet<Operation *> accumulationOps;
};

/// Analyses the micro-batch function `train`; fails with a diagnostic when
/// it has no transformer block or its backward blocks do not match.
FailureOr<StepCut> analyzeStep(func::FuncOp train, const CostModel &costs);

/// Splits `units` into `chunks` contiguous non-empty groups minimizing the
/// most expensive group; returns the first unit of each group.
llvm::SmallVector<int64_t> balanceUnits(llvm::ArrayRef<StepUnit> units,
                                        int64_t chunks);

} // namespace mlir::loom

#endif // LOOM_PASSES_PIPELINE_STAGECUT_H
