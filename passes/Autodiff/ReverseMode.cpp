//===- ReverseMode.cpp - Reverse-mode differentiation -----------*- C++ -*-===//

#include "passes/Autodiff/ReverseMode.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

using namespace mlir;
using namespace mlir::loom;

void GradientMap::accumulate(OpBuilder &b, Location loc, Value value,
                             Value grad) {
  auto [it, inserted] = grads.insert({value, grad});
  if (!inserted)
    it->second = AddOp::create(b, loc, it->second.getType(), it->second, grad);
}

/// A backward ops' location: the forward op's name + ".grad".
static Location backwardLoc(Operation *op, StringRef suffix = ".grad") {
  if (auto named = dyn_cast<NameLoc>(op->getLoc()))
    return NameLoc::get(
        StringAttr::get(op->getContext(), named.getName().str() + suffix));
  return op->getLoc();
}

/// Differentiates one transformer block: builds "<label>.grad", an isolated
/// block computing the gradients of the forward block's inputs from those of
/// its results, and makes the forward block yield what the backward reads.
static LogicalResult differentiateTransformerBlock(BlockOp forward,
                                                   OpBuilder &b,
                                                   GradientMap &grads) {
  SmallVector<Value> resultGrads;
  for (Value r : forward.getResults())
    resultGrads.push_back(grads.lookup(r));
  if (llvm::all_of(resultGrads, [](Value g) { return !g; }))
    return success();
  MLIRContext *ctx = forward.getContext();
  Location loc = backwardLoc(forward);

  // 1. Build the backward body in a detached block whose first arguments
  //    are the result gradients; it may refer to forward values for now.
  auto body = std::make_unique<Block>();
  Block &fwdBody = forward.getBody().front();
  GradientMap inner;
  SmallVector<Value> dyOuter;
  {
    OpBuilder ib(ctx);
    ib.setInsertionPointToEnd(body.get());
    for (auto [i, yielded] :
         llvm::enumerate(forward.getYield().getValues())) {
      if (!resultGrads[i])
        continue;
      BlockArgument dy = body->addArgument(resultGrads[i].getType(), loc);
      dyOuter.push_back(resultGrads[i]);
      inner.accumulate(ib, loc, yielded, dy);
    }
    if (failed(differentiateBlock(fwdBody, ib, inner)))
      return failure();
  }

  // 2. The backward block returns the gradients of the forward inputs.
  SmallVector<Value> inputGrads;
  SmallVector<unsigned> gradInputIndices;
  for (BlockArgument arg : fwdBody.getArguments())
    if (Value g = inner.lookup(arg)) {
      inputGrads.push_back(g);
      gradInputIndices.push_back(arg.getArgNumber());
    }

  // 3. Capture: forward values used by the backward body become block
  //    arguments; forward block arguments map to the forward block's inputs,
  //    forward intermediates are yielded by the forward block.
  llvm::SetVector<Value> captured;
  body->walk([&](Operation *op) {
    for (Value operand : op->getOperands())
      if (operand.getParentRegion() == &forward.getBody())
        captured.insert(operand);
  });
  for (Value g : inputGrads)
    if (g.getParentRegion() == &forward.getBody())
      captured.insert(g);
  SmallVector<Value> saved; // forward intermediates to yield
  for (Value v : captured)
    if (!isa<BlockArgument>(v))
      saved.push_back(v);

  // 4. Rebuild the forward block with the saved activations as results.
  YieldOp yield = forward.getYield();
  SmallVector<Value> yieldValues(yield.getValues());
  llvm::append_range(yieldValues, saved);
  OpBuilder fb(forward);
  auto newForward = BlockOp::create(fb, forward.getLoc(),
                                    ValueRange(yieldValues).getTypes(),
                                    forward.getLabelAttr(), forward.getInputs());
  newForward->setDiscardableAttrs(forward->getDiscardableAttrDictionary());
  newForward.getBody().takeBody(forward.getBody());
  {
    OpBuilder yb(yield);
    YieldOp::create(yb, yield.getLoc(), yieldValues);
    yield.erase();
  }
  unsigned numOriginal = forward.getNumResults();
  for (unsigned i = 0; i < numOriginal; ++i)
    forward.getResult(i).replaceAllUsesWith(newForward.getResult(i));
  forward.erase();

  // 5. The backward block: inputs are dy..., then the captured values.
  SmallVector<Value> bwdInputs(dyOuter);
  for (Value v : captured) {
    Value outer;
    if (auto arg = dyn_cast<BlockArgument>(v))
      outer = newForward.getInputs()[arg.getArgNumber()];
    else
      outer = newForward.getResult(numOriginal +
                                   llvm::find(saved, v) - saved.begin());
    bwdInputs.push_back(outer);
    BlockArgument local = body->addArgument(v.getType(), v.getLoc());
    v.replaceUsesWithIf(local, [&](OpOperand &use) {
      return use.getOwner()->getBlock() == body.get();
    });
    for (Value &g : inputGrads)
      if (g == v)
        g = local;
  }
  {
    OpBuilder ib(ctx);
    ib.setInsertionPointToEnd(body.get());
    YieldOp::create(ib, loc, inputGrads);
  }
  auto backward = BlockOp::create(
      b, loc, ValueRange(inputGrads).getTypes(),
      StringAttr::get(ctx, newForward.getLabel() + ".grad"), bwdInputs);
  backward.getBody().push_back(body.release());

  // 6. Hand the input gradients to the enclosing differentiation.
  for (auto [i, index] : llvm::enumerate(gradInputIndices))
    grads.accumulate(b, loc, newForward.getInputs()[index],
                     backward.getResult(i));
  return success();
}

LogicalResult mlir::loom::differentiateBlock(Block &block, OpBuilder &b,
                                             GradientMap &grads) {
  SmallVector<Operation *> ops;
  for (Operation &op : block.without_terminator())
    ops.push_back(&op);
  for (Operation *op : llvm::reverse(ops)) {
    if (auto transformer = dyn_cast<BlockOp>(op)) {
      if (failed(differentiateTransformerBlock(transformer, b, grads)))
        return failure();
      continue;
    }
    SmallVector<Value> resultGrads;
    bool any = false;
    for (Value r : op->getResults()) {
      resultGrads.push_back(grads.lookup(r));
      any |= static_cast<bool>(resultGrads.back());
    }
    if (!any)
      continue; // nothing downstream of this op reaches the loss
    auto rule = dyn_cast<GradientOpInterface>(op);
    if (!rule)
      return op->emitOpError()
             << "has no gradient rule (GradientOpInterface), so the loss "
                "cannot be differentiated through it";
    // A result nothing reads (attention's log-sum-exp, kept for its own
    // gradient) contributes none: its rule gets a null gradient. Any other
    // result without one is an error: rules need every used result's.
    for (auto [r, g] : llvm::zip(op->getResults(), resultGrads))
      if (!g && !r.use_empty())
        return op->emitOpError() << "has results without gradients; rules "
                                    "need every result's gradient";
    SmallVector<Value> operandGrads;
    if (failed(rule.buildGradient(b, resultGrads, operandGrads)))
      return failure();
    for (auto [operand, grad] : llvm::zip(op->getOperands(), operandGrads))
      if (grad)
        grads.accumulate(b, backwardLoc(op, ".grad.sum"), operand, grad);
  }
  return success();
}
