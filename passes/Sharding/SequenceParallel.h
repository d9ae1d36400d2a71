//===- SequenceParallel.h - Megatron sequence-parallel seeds ----*- C++ -*-===//
//
// Sequence parallelism (Korthikanti et al. 2022) on top of the Megatron
// layout `--loom-tensor-parallel` seeds: more shardings, no code path.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_SHARDING_SEQUENCEPARALLEL_H
#define LOOM_PASSES_SHARDING_SEQUENCEPARALLEL_H

#include "dialects/Loom/IR/LoomOps.h"

#include "mlir/IR/BuiltinOps.h"

#include <functional>
#include <optional>

namespace mlir::loom {

/// Which dimension of a tensor-parallel parameter the axis splits (seen
/// through `loom.block` arguments), or none for anything else.
using ParamSplitFn = std::function<std::optional<int64_t>(Value)>;

/// Splits the residual stream on the sequence over `axis` (`ways` ranks):
/// every layer norm's result and the residual add feeding it get the
/// sequence dimension (the one before the channels) split, and the ops
/// whose Megatron split competes with it for the axis get their result
/// seeded, so that propagation keeps the weight's split and the
/// partitioner reshards the activation: an all-gather before each
/// column-parallel linear (and the LM head), a reduce-scatter of each
/// row-parallel linear's partial sums (and the vocab-parallel embedding's),
/// and the mirror images in the backward. Row-parallel biases are split
/// off into an add after the reduce-scatter, on this rank's sequence block.
/// `splitDimOf` names the Megatron split of each parameter. Fails with a
/// diagnostic when the sequence does not divide by `ways`.
LogicalResult seedSequenceParallel(ModuleOp module, MeshOp mesh,
                                   StringRef axis, int64_t ways,
                                   const ParamSplitFn &splitDimOf);

} // namespace mlir::loom

#endif // LOOM_PASSES_SHARDING_SEQUENCEPARALLEL_H
