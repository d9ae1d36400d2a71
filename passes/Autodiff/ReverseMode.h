//===- ReverseMode.h - Reverse-mode differentiation of Loom IR --*- C++ -*-===//
//
// Builds the backward pass of a region from the ops' gradient rules
// (GradientOpInterface). Transformer blocks stay blocks: each forward block
// gets a backward block ("h.3.grad"), and the forward block yields the
// activations its backward needs, so ZeRO-3 and pipeline passes keep seeing
// the per-layer structure in the training step.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_AUTODIFF_REVERSEMODE_H
#define LOOM_PASSES_AUTODIFF_REVERSEMODE_H

#include "dialects/Loom/IR/LoomOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::loom {

/// Gradients by value, summed when a value feeds several ops (as a tied
/// embedding does). Insertion order is deterministic.
class GradientMap {
public:
  /// Adds `grad` to the gradient of `value`, emitting a loom.add at `b`'s
  /// insertion point when one exists already.
  void accumulate(OpBuilder &b, Location loc, Value value, Value grad);
  Value lookup(Value value) const { return grads.lookup(value); }

private:
  llvm::MapVector<Value, Value> grads;
};

/// Differentiates the ops of `block` (all but its terminator) in reverse,
/// appending backward ops at `b`'s insertion point. `grads` holds the seeds
/// (gradients of the values the block produces) and receives the gradients
/// of everything upstream, block arguments included. Fails with a
/// diagnostic naming an op that has no gradient rule.
LogicalResult differentiateBlock(Block &block, OpBuilder &b,
                                 GradientMap &grads);

} // namespace mlir::loom

#endif // LOOM_PASSES_AUTODIFF_REVERSEMODE_H
