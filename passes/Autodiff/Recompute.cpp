//===- Recompute.cpp - Activation recomputation per block ------*- C++ -*-===//
//
// `--loom-recompute=mode=full`: a backward block that reads activations its
// forward block saved re-runs the forward block's body instead, from the
// block's inputs (the activation entering it and its parameters). Only the
// block inputs then live from the forward pass to the backward pass — the
// memory of Korthikanti et al.'s full recomputation, at the cost of one more
// forward per block. `selective` (recompute attention's T×T scores) is what
// the attention kernels always do here: the forward keeps only qkv, the
// output and its log-sum-exp per row, and the backward recomputes the
// probabilities from them.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMRECOMPUTE
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

/// Whether `v` is a block result only `reader` reads: an activation saved
/// for that one (backward) block, as opposed to a block's output that the
/// next block also reads.
bool savedOnlyFor(Value v, BlockOp reader) {
  return v.getDefiningOp<BlockOp>() && !v.use_empty() &&
         llvm::all_of(v.getUsers(),
                      [&](Operation *user) { return user == reader; });
}

/// The forward block whose saved activations `backward` reads, if any: of
/// the blocks whose results only `backward` reads, the one it reads most
/// from (the other is the next block's backward, which hands it one value:
/// the incoming gradient).
BlockOp savedFrom(BlockOp backward) {
  llvm::SmallMapVector<Operation *, unsigned, 4> saved;
  for (Value input : backward.getInputs())
    if (savedOnlyFor(input, backward))
      ++saved[input.getDefiningOp()];
  BlockOp forward;
  unsigned most = 0;
  bool tie = false;
  for (auto [producer, count] : saved) {
    if (count == most)
      tie = true;
    if (count > most) {
      forward = cast<BlockOp>(producer);
      most = count;
      tie = false;
    }
  }
  return tie ? BlockOp() : forward;
}

/// Re-runs `forward`'s body at the top of `backward` and reads the
/// recomputed values instead of `forward`'s results. Returns how many
/// saved activations `backward` no longer reads.
unsigned recomputeInto(BlockOp forward, BlockOp backward) {
  Block &fwdBody = forward.getBody().front();
  Block &bwdBody = backward.getBody().front();
  const unsigned originalInputs = backward.getInputs().size();

  // The forward block's inputs, as seen inside the backward block: an
  // existing argument when the backward block already takes the value,
  // else a new input.
  IRMapping map;
  for (auto [value, arg] :
       llvm::zip(forward.getInputs(), fwdBody.getArguments())) {
    Value inside;
    for (auto [i, input] : llvm::enumerate(backward.getInputs()))
      if (input == value && i < originalInputs) {
        inside = bwdBody.getArgument(i);
        break;
      }
    if (!inside) {
      backward->insertOperands(backward->getNumOperands(), value);
      inside = bwdBody.addArgument(value.getType(), value.getLoc());
    }
    map.map(arg, inside);
  }
  OpBuilder b = OpBuilder::atBlockBegin(&bwdBody);
  for (Operation &op : fwdBody.without_terminator())
    b.clone(op, map);
  SmallVector<Value> recomputed;
  for (Value v : forward.getYield().getValues())
    recomputed.push_back(map.lookupOrDefault(v));

  // Saved results become recomputed values; drop them as inputs, so they
  // die at the end of the forward block.
  unsigned dropped = 0;
  for (unsigned i = originalInputs; i-- > 0;) {
    auto result = dyn_cast<OpResult>(backward.getInputs()[i]);
    if (!result || result.getOwner() != forward.getOperation() ||
        !savedOnlyFor(result, backward))
      continue;
    bwdBody.getArgument(i).replaceAllUsesWith(
        recomputed[result.getResultNumber()]);
    backward->eraseOperand(i);
    bwdBody.eraseArgument(i);
    ++dropped;
  }
  return dropped;
}

struct LoomRecomputePass
    : mlir::loom::impl::LoomRecomputeBase<LoomRecomputePass> {
  using Base::Base;

  void runOnOperation() override {
    if (mode != "none" && mode != "selective" && mode != "full") {
      getOperation().emitError()
          << "loom-recompute: mode is none, selective or full, got '" << mode
          << "'";
      return signalPassFailure();
    }
    if (mode != "full")
      return; // see the file comment: selective is the kernels' default
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      SmallVector<BlockOp> blocks(func.getBody().front().getOps<BlockOp>());
      for (BlockOp backward : blocks)
        if (BlockOp forward = savedFrom(backward))
          recomputeInto(forward, backward);
    }
  }
};

} // namespace
