//===- ExecutionOrder.h - The op sequence a rank executes -------*- C++ -*-===//
//
// The runtime executes a flat instruction list: blocks are inlined, views
// (reshape) and block boundaries move no data. Buffer planning and program
// emission both walk this one linearization so they agree on lifetimes.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_LOWERING_EXECUTIONORDER_H
#define LOOM_PASSES_LOWERING_EXECUTIONORDER_H

#include "dialects/Loom/IR/LoomOps.h"
#include "llvm/ADT/DenseMap.h"

namespace mlir::loom {

/// The ops of a function in execution order, with value aliasing resolved.
struct ExecutionOrder {
  /// Ops that become instructions or views, in order (no blocks, yields or
  /// returns).
  SmallVector<Operation *> ops;
  /// Values that share storage with an earlier value: block arguments with
  /// their operands, block results with the yielded values, reshape results
  /// with their inputs, in-place reductions' results with their inputs.
  /// Maps to the value that owns the storage.
  llvm::DenseMap<Value, Value> storageOf;
  /// Block arguments and block results mapped to the value they stand for
  /// (same type, same bytes): the operand, or the yielded value.
  llvm::DenseMap<Value, Value> sameAs;
  /// The values the function returns.
  SmallVector<Value> returned;

  /// The value that owns the storage of `v` (itself when not an alias).
  Value storage(Value v) const {
    auto it = storageOf.find(v);
    return it == storageOf.end() ? v : it->second;
  }
  /// The value of the same type that `v` stands for across block
  /// boundaries (itself when it is no block argument or result).
  Value representative(Value v) const {
    for (auto it = sameAs.find(v); it != sameAs.end(); it = sameAs.find(v))
      v = it->second;
    return v;
  }
};

/// Linearizes `func`. Fails with a diagnostic on ops the runtime cannot
/// execute (anything outside the loom dialect but func.return).
FailureOr<ExecutionOrder> linearize(func::FuncOp func);

/// The key under which an argument's storage is shared by the functions of
/// one program: "<role>:<name>" (the training step's micro-batch and update
/// functions see the same parameters, gradients and moments), or a key
/// unique to the argument when it has no role or name.
std::string storageKey(func::FuncOp func, BlockArgument arg);

/// True for ops that only reinterpret their input's storage.
bool isView(Operation *op);

/// True for ops whose results live in their inputs' storage (a
/// `last_microbatch` all-reduce or reduce-scatter: the identity in the
/// micro-batches that skip it, so its results must be where its inputs
/// already are).
bool reducesInPlace(Operation *op);

/// Kernel workspace or state an op needs beyond its results (attention
/// row statistics, layer-norm statistics, a bucket's packed buffers, an
/// in-place reduce-scatter's received block, the rank-by-rank blocks of a
/// collective split on a non-leading dimension), in the order the runtime
/// expects.
SmallVector<RankedTensorType> getScratchTypes(Operation *op);

/// Whether `op` is still in flight after it starts (an `async` all-reduce,
/// reduce-scatter or all-gather): its scratch stays in use until the first
/// instruction that reads one of its results.
bool completesLater(Operation *op);

/// Whether an in-flight `op` also reads its inputs until it completes (an
/// `async` reduce-scatter of one value sends from its input; a bucket's
/// inputs, and an all-reduce's, are copied or packed when it starts), so
/// they stay allocated until then.
bool readsInputsUntilComplete(Operation *op);

} // namespace mlir::loom

#endif // LOOM_PASSES_LOWERING_EXECUTIONORDER_H
