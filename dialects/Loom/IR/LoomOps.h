//===- LoomOps.h - Ops of the loom dialect ----------------------*- C++ -*-===//
//
// Graph, structure and collective ops, plus the per-op rule interfaces.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_LOOM_IR_LOOMOPS_H
#define LOOM_DIALECTS_LOOM_IR_LOOMOPS_H

#include "dialects/Loom/IR/LoomDialect.h"
#include "dialects/Loom/IR/ShardingRule.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Loom/IR/LoomInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/Loom/IR/LoomOps.h.inc"

namespace mlir::loom {

/// Finds the `loom.mesh` named `mesh` in the module around `from`, or null.
MeshOp lookupMesh(Operation *from, FlatSymbolRefAttr mesh);

/// Checks that `sharding` can describe a value of type `type` on `meshOp`:
/// same rank, known axes, each split dimension divisible by its axes.
/// Emits through `emitError` and fails otherwise.
LogicalResult verifyShardingForType(
    ShardingAttr sharding, Type type, MeshOp meshOp,
    llvm::function_ref<InFlightDiagnostic()> emitError);

/// Whether `op` is a `last_microbatch` reduction (an all-reduce or an
/// in-place reduce-scatter): run once per step, in the last micro-batch,
/// its result in its input's storage.
bool isLastMicrobatchReduction(Operation *op);

} // namespace mlir::loom

#endif // LOOM_DIALECTS_LOOM_IR_LOOMOPS_H
