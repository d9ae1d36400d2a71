//===- Recompute.cpp - Activation recomputation per block -------*- C++ -*-===//
//
// `--loom-recompute=mode=full`: a backward block that reads activations its
// forward block saved re-runs the forward block's body instead, from the
// block's inputs (the activation entering it and its parameters). Only the
// block inputs then live from the forward pass to the backward pass — the
// memory of Korthikanti et al.'s full recomputation, at the cost of one more
// forward per block.
//
// `selective` recomputes what is cheap to recompute and large to keep.
// Attention's T×T scores are never kept here: the forward keeps only qkv,
// the output and its log-sum-exp per row, and the backward recomputes the
// probabilities from them, whatever the mode. The MLP's GELU output (4h
// wide, as large as its input) is recomputed in the backward block from
// the pre-activation the GELU gradient reads anyway (llm.c's --recompute
// 1): one elementwise kernel per block for a third of the 16-bit values a
// GPT block keeps (sbh(8+24/t) -> sbh(8+16/t) bytes).
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

/// For `selective`: a GELU output that `backward` reads as saved by
/// `forward`, whose input `backward` reads too, is recomputed right before
/// its first reader in `backward` (a clone of the forward's GELU, so the
/// same values) and no longer kept. Returns how many GELUs.
unsigned recomputeGelus(BlockOp forward, BlockOp backward) {
  Block &bwdBody = backward.getBody().front();
  ValueRange yielded = forward.getYield().getValues();
  // The backward block's argument for a result of `forward`.
  auto argumentFor = [&](Value forwardResult) -> Value {
    for (auto [i, input] : llvm::enumerate(backward.getInputs()))
      if (input == forwardResult)
        return bwdBody.getArgument(i);
    return Value();
  };
  unsigned recomputed = 0;
  for (unsigned i = backward.getInputs().size(); i-- > 0;) {
    auto result = dyn_cast<OpResult>(backward.getInputs()[i]);
    if (!result || result.getOwner() != forward.getOperation() ||
        !savedOnlyFor(result, backward))
      continue;
    auto gelu = yielded[result.getResultNumber()].getDefiningOp<GeluOp>();
    if (!gelu)
      continue;
    auto kept = llvm::find(yielded, gelu.getInput());
    if (kept == yielded.end())
      continue;
    Value input = argumentFor(forward->getResult(kept - yielded.begin()));
    BlockArgument saved = bwdBody.getArgument(i);
    if (!input || saved.use_empty())
      continue;
    Operation *firstReader = nullptr;
    for (Operation &op : bwdBody)
      if (llvm::is_contained(op.getOperands(), saved)) {
        firstReader = &op;
        break;
      }
    if (!firstReader)
      continue; // read only inside a nested region: leave it kept
    OpBuilder b(firstReader);
    IRMapping map;
    map.map(gelu.getInput(), input);
    saved.replaceAllUsesWith(b.clone(*gelu, map)->getResult(0));
    backward->eraseOperand(i);
    bwdBody.eraseArgument(i);
    ++recomputed;
  }
  return recomputed;
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
    if (mode == "none")
      return;
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      SmallVector<BlockOp> blocks(func.getBody().front().getOps<BlockOp>());
      for (BlockOp backward : blocks)
        if (BlockOp forward = savedFrom(backward)) {
          if (mode == "full")
            recomputeInto(forward, backward);
          else
            recomputeGelus(forward, backward);
        }
    }
  }
};

} // namespace
