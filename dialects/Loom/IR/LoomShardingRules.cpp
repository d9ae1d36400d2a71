//===- LoomShardingRules.cpp - Sharding rules of compute ops ----*- C++ -*-===//
//
// One rule per op kind (ShardingRuleOpInterface::getShardingRule). Factors
// that a kernel needs whole (a layer norm's row, attention's sequence, the
// vocabulary of a softmax) map to no factor. Megatron's splits are plain
// factors: a linear's output dimensions (column-parallel) and its K
// (row-parallel, partial sums), attention heads, embedding rows.
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/IR/LoomOps.h"
#include "dialects/Loom/IR/OpShapes.h"

using namespace mlir;
using namespace mlir::loom;

namespace {
constexpr int64_t kNone = ShardingRule::kNoFactor;

/// One factor per dimension of `shape`.
SmallVector<int64_t> addFactors(ShardingRule &rule, ArrayRef<int64_t> shape) {
  SmallVector<int64_t> factors;
  for (int64_t size : shape)
    factors.push_back(rule.addFactor(size));
  return factors;
}

/// `factors` with its last `n` entries replaced by kNone.
SmallVector<int64_t> wholeTrailing(ArrayRef<int64_t> factors, size_t n) {
  SmallVector<int64_t> out(factors);
  for (size_t i = 0; i < n && i < out.size(); ++i)
    out[out.size() - 1 - i] = kNone;
  return out;
}

/// Every operand and result shares one factor per dimension (all have the
/// shape of the first result); scalar operands map to nothing.
ShardingRule elementwise(Operation *op) {
  ShardingRule rule;
  SmallVector<int64_t> f = addFactors(rule, shapeOf(op->getResult(0)));
  for (Value operand : op->getOperands())
    rule.addOperand(shapeOf(operand).empty() ? SmallVector<int64_t>() : f);
  for (Value result : op->getResults())
    rule.addResult(shapeOf(result).empty() ? SmallVector<int64_t>() : f);
  return rule;
}

/// Like elementwise, but the last dimension is kept whole.
ShardingRule rowwise(Operation *op) {
  ShardingRule rule = elementwise(op);
  for (auto &dims : rule.operandFactors)
    dims = wholeTrailing(dims, 1);
  for (auto &dims : rule.resultFactors)
    dims = wholeTrailing(dims, 1);
  return rule;
}

/// A shape-changing op: nothing may be split.
ShardingRule wholeTensors(Operation *op) {
  ShardingRule rule;
  for (Value operand : op->getOperands())
    rule.addOperand(SmallVector<int64_t>(shapeOf(operand).size(), kNone));
  for (Value result : op->getResults())
    rule.addResult(SmallVector<int64_t>(shapeOf(result).size(), kNone));
  return rule;
}
} // namespace

//===----------------------------------------------------------------------===//
// Forward ops
//===----------------------------------------------------------------------===//

ShardingRule EmbeddingOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> lead = addFactors(rule, shapeOf(getIds()));
  int64_t v = rule.addFactor(shapeOf(getTable())[0], /*reduction=*/true);
  int64_t c = rule.addFactor(shapeOf(getTable())[1]);
  rule.addOperand({v, c});
  rule.addOperand(lead);
  lead.push_back(c);
  rule.addResult(lead);
  return rule;
}

ShardingRule AddOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> f = addFactors(rule, shapeOf(getLhs()));
  rule.addOperand(f);
  rule.addOperand(ArrayRef<int64_t>(f).take_back(shapeOf(getRhs()).size()));
  rule.addResult(f);
  // Sum of partial sums = partial sum of the sum (same shapes only: a
  // broadcast rhs would be counted once per rank).
  rule.partialSumsPassThrough = getLhs().getType() == getRhs().getType();
  return rule;
}

ShardingRule LinearOp::getShardingRule() {
  // Column-parallel splits an output dimension (the weight's, the bias's and
  // the result's); row-parallel splits K, leaving partial sums.
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getInput()), w = shapeOf(getWeight());
  SmallVector<int64_t> lead = addFactors(rule, in.drop_back());
  int64_t k = rule.addFactor(w[0], /*reduction=*/true);
  SmallVector<int64_t> n = addFactors(rule, w.drop_front());
  SmallVector<int64_t> x(lead), y(lead), weight{k};
  x.push_back(k);
  llvm::append_range(y, n);
  llvm::append_range(weight, n);
  rule.addOperand(x);
  rule.addOperand(weight);
  if (getBias())
    rule.addOperand(n);
  rule.addResult(y);
  return rule;
}

ShardingRule MatmulOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> lhs = shapeOf(getLhs()), rhs = shapeOf(getRhs());
  SmallVector<int64_t> lead = addFactors(rule, lhs.drop_back());
  int64_t k = rule.addFactor(lhs.back(), /*reduction=*/true);
  int64_t n = rule.addFactor(getTransposeRhs() ? rhs[0] : rhs[1]);
  SmallVector<int64_t> a(lead), out(lead);
  a.push_back(k);
  out.push_back(n);
  rule.addOperand(a);
  rule.addOperand(getTransposeRhs() ? SmallVector<int64_t>{n, k}
                                    : SmallVector<int64_t>{k, n});
  rule.addResult(out);
  return rule;
}

ShardingRule LayerNormOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> x =
      wholeTrailing(addFactors(rule, shapeOf(getInput())), 1);
  rule.addOperand(x);
  rule.addOperand({kNone});
  rule.addOperand({kNone});
  rule.addResult(x);
  return rule;
}

ShardingRule GeluOp::getShardingRule() { return elementwise(*this); }
ShardingRule CastOp::getShardingRule() {
  // A widening cast (bf16 -> f32) is exact, so it commutes with a sum: a
  // partial sum is reduced after it, in f32 (the fp32 gradient reductions
  // of --loom-mixed-precision=grad-precision=fp32). A narrowing cast rounds
  // each partial sum, so it reads the reduced value.
  ShardingRule rule = elementwise(*this);
  rule.partialSumsPassThrough = isWidening();
  return rule;
}
ShardingRule SoftmaxOp::getShardingRule() { return rowwise(*this); }

/// Attention's rule, shared by the forward and the backward: the batch may
/// be split; with q, k and v as a dimension (`[B, T, 3, C]`) so may the
/// channels, in whole heads (Megatron's head-parallel attention: each rank
/// attends with its heads; the partitioner gives it the local head count).
/// The sequence and packed `[B, T, 3C]` channels stay whole.
/// The backward takes (dout, qkv[, out, lse]) and returns dqkv; the
/// forward returns out[, lse]. The log-sum-exp `[B, NH, T]` is split like
/// the batch and the heads: its head dimension takes the channels' factor
/// (NH = C / hs, so whole heads split both alike).
static ShardingRule attentionRule(Value qkv, bool backward, bool withLse) {
  ShardingRule rule;
  ArrayRef<int64_t> shape = shapeOf(qkv);
  int64_t b = rule.addFactor(shape[0]);
  int64_t h = shape.size() == 4 ? rule.addFactor(shape[3])
                                : ShardingRule::kNoFactor;
  SmallVector<int64_t> qkvFactors =
      shape.size() == 4 ? SmallVector<int64_t>{b, kNone, kNone, h}
                        : SmallVector<int64_t>{b, kNone, kNone};
  SmallVector<int64_t> outFactors{b, kNone, h};
  SmallVector<int64_t> lseFactors{b, h, kNone};
  if (backward)
    rule.addOperand(outFactors);
  rule.addOperand(qkvFactors);
  if (backward && withLse) {
    rule.addOperand(outFactors);
    rule.addOperand(lseFactors);
  }
  rule.addResult(backward ? qkvFactors : outFactors);
  if (!backward && withLse)
    rule.addResult(lseFactors);
  return rule;
}

ShardingRule AttentionOp::getShardingRule() {
  return attentionRule(getQkv(), /*backward=*/false, bool(getLse()));
}

ShardingRule CrossEntropyOp::getShardingRule() {
  // The loss is a mean over tokens: split tokens leave partial sums of
  // per-token losses (each scaled by 1/global tokens) to be reduced.
  ShardingRule rule;
  SmallVector<int64_t> tokens;
  for (int64_t size : shapeOf(getTargets()))
    tokens.push_back(rule.addFactor(size, /*reduction=*/true));
  SmallVector<int64_t> logits(tokens);
  logits.push_back(kNone);
  rule.addOperand(logits);
  rule.addOperand(tokens);
  rule.addResult({});
  return rule;
}

//===----------------------------------------------------------------------===//
// Vocab-parallel loss
//===----------------------------------------------------------------------===//

ShardingRule RowMaxOp::getShardingRule() {
  // Split over the last dimension: partial maxima.
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getInput());
  SmallVector<int64_t> tokens = addFactors(rule, in.drop_back());
  int64_t v = rule.addFactor(in.back(), /*reduction=*/true, ReductionKind::Max);
  SmallVector<int64_t> x(tokens);
  x.push_back(v);
  rule.addOperand(x);
  rule.addResult(tokens);
  return rule;
}

ShardingRule CrossEntropySumsOp::getShardingRule() {
  // Split over the vocabulary: partial sums (a shard without the target
  // contributes 0 to the target logit). The row maximum is read whole.
  ShardingRule rule;
  ArrayRef<int64_t> logits = shapeOf(getLogits());
  SmallVector<int64_t> tokens = addFactors(rule, logits.drop_back());
  int64_t v = rule.addFactor(logits.back(), /*reduction=*/true);
  SmallVector<int64_t> x(tokens);
  x.push_back(v);
  rule.addOperand(x);
  rule.addOperand(tokens);
  rule.addOperand(tokens);
  rule.addResult(tokens);
  rule.addResult(tokens);
  return rule;
}

ShardingRule CrossEntropyFromSumsOp::getShardingRule() {
  // A mean over tokens: split tokens leave partial sums of the scaled
  // per-token losses, as for loom.cross_entropy.
  ShardingRule rule;
  SmallVector<int64_t> tokens;
  for (int64_t size : shapeOf(getRowMax()))
    tokens.push_back(rule.addFactor(size, /*reduction=*/true));
  rule.addOperand(tokens);
  rule.addOperand(tokens);
  rule.addOperand(tokens);
  rule.addResult({});
  return rule;
}

ShardingRule ReshapeOp::getShardingRule() { return wholeTensors(*this); }

ShardingRule TransposeOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> in = addFactors(rule, shapeOf(getInput()));
  SmallVector<int64_t> out;
  for (int64_t p : getPermutation())
    out.push_back(in[p]);
  rule.addOperand(in);
  rule.addResult(out);
  return rule;
}

ShardingRule SliceOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> f = addFactors(rule, shapeOf(getInput()));
  f[getDim()] = kNone;
  rule.addOperand(f);
  rule.addResult(f);
  return rule;
}

ShardingRule ConcatOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> f = addFactors(rule, shapeOf(getResult()));
  f[getDim()] = kNone;
  for (size_t i = 0; i < getInputs().size(); ++i)
    rule.addOperand(f);
  rule.addResult(f);
  return rule;
}

//===----------------------------------------------------------------------===//
// Backward ops
//===----------------------------------------------------------------------===//

ShardingRule EmbeddingGradOp::getShardingRule() {
  // Sums over tokens into table rows: split tokens leave partial sums.
  ShardingRule rule;
  SmallVector<int64_t> tokens;
  for (int64_t size : shapeOf(getIds()))
    tokens.push_back(rule.addFactor(size, /*reduction=*/true));
  int64_t c = rule.addFactor(shapeOf(getResult())[1]);
  SmallVector<int64_t> dout(tokens);
  dout.push_back(c);
  rule.addOperand(dout);
  rule.addOperand(tokens);
  rule.addResult({kNone, c});
  return rule;
}

ShardingRule ReduceLeadingOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getInput());
  size_t lead = in.size() - shapeOf(getResult()).size();
  SmallVector<int64_t> f;
  for (auto [i, size] : llvm::enumerate(in))
    f.push_back(rule.addFactor(size, /*reduction=*/i < lead));
  rule.addOperand(f);
  rule.addResult(ArrayRef<int64_t>(f).drop_front(lead));
  return rule;
}

ShardingRule LinearGradOp::getShardingRule() {
  // dinput contracts N; dweight and dbias contract the leading dims.
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getInput()), w = shapeOf(getWeight());
  SmallVector<int64_t> lead;
  for (int64_t size : in.drop_back())
    lead.push_back(rule.addFactor(size, /*reduction=*/true));
  int64_t k = rule.addFactor(w[0]);
  SmallVector<int64_t> n;
  for (int64_t size : w.drop_front())
    n.push_back(rule.addFactor(size, /*reduction=*/true));
  SmallVector<int64_t> dout(lead), x(lead), weight{k};
  llvm::append_range(dout, n);
  x.push_back(k);
  llvm::append_range(weight, n);
  rule.addOperand(dout);
  rule.addOperand(x);
  rule.addOperand(weight);
  rule.addResult(x);
  rule.addResult(weight);
  if (getBiasGrad())
    rule.addResult(n);
  return rule;
}

ShardingRule MatmulGradOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> lhs = shapeOf(getLhs()), rhs = shapeOf(getRhs());
  SmallVector<int64_t> lead;
  for (int64_t size : lhs.drop_back())
    lead.push_back(rule.addFactor(size, /*reduction=*/true));
  int64_t k = rule.addFactor(lhs.back());
  int64_t n = rule.addFactor(getTransposeRhs() ? rhs[0] : rhs[1],
                             /*reduction=*/true);
  SmallVector<int64_t> dout(lead), a(lead);
  dout.push_back(n);
  a.push_back(k);
  SmallVector<int64_t> b = getTransposeRhs() ? SmallVector<int64_t>{n, k}
                                             : SmallVector<int64_t>{k, n};
  rule.addOperand(dout);
  rule.addOperand(a);
  rule.addOperand(b);
  rule.addResult(a);
  rule.addResult(b);
  return rule;
}

ShardingRule LayerNormGradOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> lead;
  for (int64_t size : shapeOf(getInput()).drop_back())
    lead.push_back(rule.addFactor(size, /*reduction=*/true));
  SmallVector<int64_t> x(lead);
  x.push_back(kNone);
  rule.addOperand(x);
  rule.addOperand(x);
  rule.addOperand({kNone});
  rule.addResult(x);
  rule.addResult({kNone});
  rule.addResult({kNone});
  return rule;
}

ShardingRule GeluGradOp::getShardingRule() { return elementwise(*this); }
ShardingRule SoftmaxGradOp::getShardingRule() { return rowwise(*this); }

ShardingRule AttentionGradOp::getShardingRule() {
  return attentionRule(getQkv(), /*backward=*/true, bool(getLse()));
}

ShardingRule CrossEntropyGradOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> tokens = addFactors(rule, shapeOf(getTargets()));
  SmallVector<int64_t> logits(tokens);
  logits.push_back(kNone);
  rule.addOperand({});
  rule.addOperand(logits);
  rule.addOperand(tokens);
  rule.addResult(logits);
  return rule;
}

ShardingRule CrossEntropySumsGradOp::getShardingRule() {
  // Each rank computes the gradient of its vocabulary shard from the reduced
  // statistics.
  ShardingRule rule;
  ArrayRef<int64_t> logits = shapeOf(getLogits());
  SmallVector<int64_t> tokens = addFactors(rule, logits.drop_back());
  int64_t v = rule.addFactor(logits.back());
  SmallVector<int64_t> x(tokens);
  x.push_back(v);
  rule.addOperand({});
  rule.addOperand(x);
  rule.addOperand(tokens);
  rule.addOperand(tokens);
  rule.addOperand(tokens);
  rule.addResult(x);
  return rule;
}

ShardingRule SliceGradOp::getShardingRule() {
  ShardingRule rule;
  SmallVector<int64_t> f = addFactors(rule, shapeOf(getDout()));
  f[getDim()] = kNone;
  rule.addOperand(f);
  rule.addResult(f);
  return rule;
}

ShardingRule FillOp::getShardingRule() { return elementwise(*this); }

//===----------------------------------------------------------------------===//
// Optimizer ops
//===----------------------------------------------------------------------===//

ShardingRule SumSquaresOp::getShardingRule() {
  // A sum over every element: each dimension of each operand is its own
  // contracted factor, so a gradient split over an axis leaves a partial sum
  // over it, and the reduction is one scalar all-reduce, not an all-gather
  // of the gradients (ZeRO-2/3, tensor parallelism).
  ShardingRule rule;
  for (Value input : getInputs()) {
    SmallVector<int64_t> factors;
    for (int64_t size : shapeOf(input))
      factors.push_back(rule.addFactor(size, /*reduction=*/true));
    rule.addOperand(factors);
  }
  rule.addResult({});
  return rule;
}

ShardingRule ClipCoefOp::getShardingRule() {
  // Scalars in and out: the sum of squares arrives whole (reduced).
  return wholeTensors(*this);
}

ShardingRule AdamWOp::getShardingRule() { return elementwise(*this); }
