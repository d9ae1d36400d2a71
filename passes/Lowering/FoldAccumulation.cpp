//===- FoldAccumulation.cpp - One micro-batch writes its gradients --------===//
//
// `--loom-fold-accumulation`: a training step of one micro-batch adds each
// gradient to an accumulator that enters the step at zero (the executor
// zeroes every gradient buffer before the first micro-batch), so the
// accumulation `acc + g` is `g`. The add is dropped and `g` is returned as
// the accumulator's update; buffer planning then puts g's storage in the
// accumulator's, so the backward op that computes g (a GEMM's weight
// gradient, a layer norm's parameter gradients, a collective's result)
// writes the accumulator directly: per parameter one elementwise kernel
// (a read of g and of the accumulator, a write of the accumulator) and
// g's transient buffer fewer. Megatron's gradient_accumulation_fusion and
// PyTorch's first backward (`.grad` is assigned, not added) do the same.
//
// With several micro-batches the adds are the accumulation and stay.
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/IR/OpShapes.h"
#include "passes/Lowering/ExecutionOrder.h"
#include "passes/Passes.h"

#include "llvm/ADT/DenseSet.h"

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMFOLDACCUMULATION
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

/// A micro-batch function (not a pipeline stage's) of a step with one
/// micro-batch.
bool isSingleMicrobatchStep(func::FuncOp func) {
  auto train = func->getAttrOfType<DictionaryAttr>(LoomDialect::kTrainAttr);
  if (!train || func->hasAttr(LoomDialect::kPipelineAttr))
    return false;
  auto phase = train.getAs<StringAttr>("phase");
  auto microbatches = train.getAs<IntegerAttr>("microbatches");
  return phase && phase.getValue() == "microbatch" && microbatches &&
         microbatches.getInt() == 1;
}

struct LoomFoldAccumulationPass
    : mlir::loom::impl::LoomFoldAccumulationBase<LoomFoldAccumulationPass> {
  using Base::Base;

  void runOnOperation() override {
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal() && isSingleMicrobatchStep(func) &&
          failed(fold(func)))
        return signalPassFailure();
  }

  LogicalResult fold(func::FuncOp func) {
    FailureOr<ExecutionOrder> order = linearize(func);
    if (failed(order))
      return failure();
    auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    // Storages already holding an argument or a returned value: g may take
    // an accumulator's storage only if it has none of its own yet.
    llvm::DenseSet<Value> claimed;
    for (BlockArgument arg : func.getArguments())
      claimed.insert(order->storage(arg));
    for (Value v : ret.getOperands())
      if (!v.getDefiningOp<AddOp>())
        claimed.insert(order->storage(v));

    for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
      auto updates =
          func.getResultAttrOfType<IntegerAttr>(i, LoomDialect::kUpdatesAttr);
      auto add = ret.getOperand(i).getDefiningOp<AddOp>();
      if (!updates || !add || !add->hasOneUse() ||
          add->getBlock() != ret->getBlock())
        continue;
      BlockArgument acc = func.getArgument(updates.getInt());
      auto role = func.getArgAttrOfType<RoleAttr>(acc.getArgNumber(),
                                                  LoomDialect::kRoleAttr);
      if (!role || role.getValue() != Role::Grad || !acc.hasOneUse())
        continue;
      Value g = add.getLhs() == acc   ? add.getRhs()
                : add.getRhs() == acc ? add.getLhs()
                                      : Value();
      // g must be a gradient of the accumulator's type (not, say, a bf16
      // gradient summed into fp32), read by the add alone.
      if (!g || g.getType() != acc.getType() || !g.hasOneUse())
        continue;
      // Its storage must be the result of the op that computes it (through
      // blocks, not views or in-place reductions: the program then gives
      // that op's output the accumulator's buffer itself).
      Value root = order->storage(g);
      if (isa<BlockArgument>(root) || order->representative(g) != root ||
          bytesOf(root) != bytesOf(acc) || !claimed.insert(root).second)
        continue;
      ret.setOperand(i, g);
      add.erase();
    }
    return success();
  }
};

} // namespace
