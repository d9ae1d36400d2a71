//===- LoomGradients.cpp - Gradient rules of the forward ops ----*- C++ -*-===//
//
// One rule per op kind (GradientOpInterface::buildGradient): given the
// gradients of the op's results, build those of its operands. --loom-autodiff
// is generic over these rules; nothing here knows about GPT.
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/IR/LoomOps.h"
#include "dialects/Loom/IR/OpShapes.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace mlir::loom;

/// `h.0.mlp.c_fc` -> `h.0.mlp.c_fc.grad`: backward ops keep the forward
/// op's name so traces and diagnostics point at the layer.
static Location gradLoc(Operation *op) {
  Location loc = op->getLoc();
  if (auto named = dyn_cast<NameLoc>(loc))
    return NameLoc::get(
        StringAttr::get(op->getContext(), named.getName().str() + ".grad"));
  return loc;
}

/// Sizes `operandGrads` to the op's operands, all null (no gradient).
static void resetGrads(Operation *op, SmallVectorImpl<Value> &operandGrads) {
  operandGrads.assign(op->getNumOperands(), Value());
}

LogicalResult EmbeddingOp::buildGradient(OpBuilder &b, ValueRange dy,
                                         SmallVectorImpl<Value> &grads) {
  resetGrads(*this, grads);
  grads[0] = EmbeddingGradOp::create(b, gradLoc(*this), getTable().getType(),
                                     dy[0], getIds());
  return success(); // token ids have no gradient
}

LogicalResult AddOp::buildGradient(OpBuilder &b, ValueRange dy,
                                   SmallVectorImpl<Value> &grads) {
  resetGrads(*this, grads);
  grads[0] = dy[0];
  grads[1] = getRhs().getType() == getLhs().getType()
                 ? dy[0]
                 : ReduceLeadingOp::create(b, gradLoc(*this),
                                           getRhs().getType(), dy[0])
                       .getResult();
  return success();
}

LogicalResult LinearOp::buildGradient(OpBuilder &b, ValueRange dy,
                                      SmallVectorImpl<Value> &grads) {
  resetGrads(*this, grads);
  Type biasType = getBias() ? getBias().getType() : Type();
  auto grad = LinearGradOp::create(
      b, gradLoc(*this), getInput().getType(), getWeight().getType(), biasType,
      dy[0], getInput(), getWeight());
  grads[0] = grad.getInputGrad();
  grads[1] = grad.getWeightGrad();
  if (getBias())
    grads[2] = grad.getBiasGrad();
  return success();
}

LogicalResult MatmulOp::buildGradient(OpBuilder &b, ValueRange dy,
                                      SmallVectorImpl<Value> &grads) {
  resetGrads(*this, grads);
  auto grad = MatmulGradOp::create(b, gradLoc(*this), getLhs().getType(),
                                   getRhs().getType(), dy[0], getLhs(),
                                   getRhs(), getTransposeRhsAttr());
  grads[0] = grad.getLhsGrad();
  grads[1] = grad.getRhsGrad();
  return success();
}

LogicalResult LayerNormOp::buildGradient(OpBuilder &b, ValueRange dy,
                                         SmallVectorImpl<Value> &grads) {
  resetGrads(*this, grads);
  auto grad = LayerNormGradOp::create(
      b, gradLoc(*this), getInput().getType(), getWeight().getType(),
      getBias().getType(), dy[0], getInput(), getWeight(), getEpsilonAttr());
  grads[0] = grad.getInputGrad();
  grads[1] = grad.getWeightGrad();
  grads[2] = grad.getBiasGrad();
  return success();
}

LogicalResult GeluOp::buildGradient(OpBuilder &b, ValueRange dy,
                                    SmallVectorImpl<Value> &grads) {
  resetGrads(*this, grads);
  grads[0] = GeluGradOp::create(b, gradLoc(*this), getInput().getType(), dy[0],
                                getInput());
  return success();
}

LogicalResult CastOp::buildGradient(OpBuilder &b, ValueRange dy,
                                    SmallVectorImpl<Value> &grads) {
  resetGrads(*this, grads);
  // The gradient flows back in the input's precision.
  grads[0] = CastOp::create(b, gradLoc(*this), getInput().getType(), dy[0]);
  return success();
}

LogicalResult AttentionOp::buildGradient(OpBuilder &b, ValueRange dy,
                                         SmallVectorImpl<Value> &grads) {
  resetGrads(*this, grads);
  // The log-sum-exp is kept for this gradient, not differentiated through.
  if (dy.size() > 1 && dy[1])
    return emitOpError() << "has its lse result on the path to the loss; "
                            "attention's gradient rule differentiates its "
                            "output only (compute the statistic separately)";
  // With the forward's log-sum-exp (the training step asks for it), the
  // backward reads it and the output instead of re-running the forward.
  Value out = getLse() ? getResult() : Value();
  grads[0] =
      AttentionGradOp::create(b, gradLoc(*this), getQkv().getType(), dy[0],
                              getQkv(), out, getLse(), getNumHeadsAttr());
  return success();
}

LogicalResult SoftmaxOp::buildGradient(OpBuilder &b, ValueRange dy,
                                       SmallVectorImpl<Value> &grads) {
  resetGrads(*this, grads);
  grads[0] = SoftmaxGradOp::create(b, gradLoc(*this), getInput().getType(),
                                   dy[0], getResult());
  return success();
}

LogicalResult CrossEntropyOp::buildGradient(OpBuilder &b, ValueRange dy,
                                            SmallVectorImpl<Value> &grads) {
  resetGrads(*this, grads);
  grads[0] = CrossEntropyGradOp::create(b, gradLoc(*this),
                                        getLogits().getType(), dy[0],
                                        getLogits(), getTargets(),
                                        getNumTokensAttr(), getVocabSizeAttr());
  return success(); // targets have no gradient
}

LogicalResult ReshapeOp::buildGradient(OpBuilder &b, ValueRange dy,
                                       SmallVectorImpl<Value> &grads) {
  resetGrads(*this, grads);
  grads[0] =
      ReshapeOp::create(b, gradLoc(*this), getInput().getType(), dy[0]);
  return success();
}

LogicalResult TransposeOp::buildGradient(OpBuilder &b, ValueRange dy,
                                         SmallVectorImpl<Value> &grads) {
  resetGrads(*this, grads);
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<int64_t> inverse(perm.size());
  for (auto [i, p] : llvm::enumerate(perm))
    inverse[p] = i;
  grads[0] = TransposeOp::create(b, gradLoc(*this), getInput().getType(),
                                 dy[0], b.getDenseI64ArrayAttr(inverse));
  return success();
}

LogicalResult SliceOp::buildGradient(OpBuilder &b, ValueRange dy,
                                     SmallVectorImpl<Value> &grads) {
  resetGrads(*this, grads);
  grads[0] = SliceGradOp::create(b, gradLoc(*this), getInput().getType(),
                                 dy[0], getDimAttr(), getOffsetAttr());
  return success();
}

LogicalResult ConcatOp::buildGradient(OpBuilder &b, ValueRange dy,
                                      SmallVectorImpl<Value> &grads) {
  resetGrads(*this, grads);
  int64_t offset = 0;
  for (auto [i, input] : llvm::enumerate(getInputs())) {
    grads[i] = SliceOp::create(b, gradLoc(*this), input.getType(), dy[0],
                               getDimAttr(), b.getI64IntegerAttr(offset));
    offset += shapeOf(input)[getDim()];
  }
  return success();
}
