//===- InPlaceResults.h - Results over dying operands -----------*- C++ -*-===//
//
// Buffer planning (--loom-plan-buffers) normally gives every result bytes of
// its own. For a few ops the runtime's kernels read each element of one
// operand before they write the same element of the result (elementwise
// ops; row-wise ones that read a whole row before writing it), so when
// that operand is read for the last time by the op, the result can simply
// take its bytes: the training step's logits gradient is written over the
// logits (llm.c and Megatron's fused cross-entropy do the same), which is
// the largest tensor of a GPT step and lies at the step's peak.
//
// Which ops and operands is the runtime's table
// (runtime/program/in_place.h), less the GELU forward: there the runtime
// would lose its GEMM-epilogue fusion (runtime/core/gelu_epilogues.h needs
// the GELU apart from the pre-activation), to save bytes only in programs
// that do not keep the pre-activation for a backward.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_LOWERING_INPLACERESULTS_H
#define LOOM_PASSES_LOWERING_INPLACERESULTS_H

#include "passes/Lowering/BestFitPlacement.h"
#include "passes/Lowering/ExecutionOrder.h"

#include "llvm/ADT/MapVector.h"

namespace mlir::loom {

/// The operand whose bytes `op`'s result may take when `op` reads it last
/// (the lhs of an add, a GELU gradient's incoming gradient, a softmax's
/// input, a cross-entropy gradient's logits, whole or a vocabulary shard):
/// the first the runtime's table allows; null for any other op.
Value inPlaceOperand(Operation *op);

/// Moves each result that may take its inPlaceOperand's bytes into them
/// where the operand's storage is a transient of the result's size whose
/// allocation ends at the op (no later reader, not returned, not held by a
/// collective in flight): `order.storageOf` then maps the result, and any
/// value stored in it, to the operand's storage, whose allocation lives on
/// to the result's last reader; the result's own allocation is dropped.
/// `transient` holds the allocations by storage, with their final live
/// ranges over `order`'s positions. Returns how many results moved.
int64_t shareDyingOperands(ExecutionOrder &order,
                           llvm::MapVector<Value, Allocation> &transient);

} // namespace mlir::loom

#endif // LOOM_PASSES_LOWERING_INPLACERESULTS_H
