//===- VocabPadding.cpp - Pad an embedding table's rows ---------*- C++ -*-===//
//
// A vocabulary of 50257 rows cannot be split 8 ways. Megatron-LM pads it
// (--make-vocab-size-divisible-by, 128 by default) to 50304 rows and masks
// the padded logits out of the loss; Loom does the same as a retyping of the
// IR: the padded dimension spreads from the table's arguments along the
// ops' sharding-rule factors (a factor is one index space: the table's rows,
// the logits' columns, the table gradient's rows are all the vocabulary),
// so no op needs to know about padding except the loss, which is told where
// the real columns end.
//
// Why the padding is exact: padding rows start at zero (the runtime zeroes
// them, `loom.unpadded_rows`), so their logits are 0 and, masked out of the
// row maximum and the sums (`vocab_size`), they get a zero gradient; no
// token id reaches them in the embedding. Their gradient is zero, so AdamW
// (moments and decoupled weight decay alike) keeps them at zero, and the
// real rows see exactly the unpadded model's arithmetic.
//
//===----------------------------------------------------------------------===//

#include "passes/Sharding/VocabPadding.h"
#include "passes/Sharding/OpNames.h"

#include "dialects/Loom/IR/OpShapes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/Support/Debug.h"

#include <algorithm>

#define DEBUG_TYPE "loom-tensor-parallel"

using namespace mlir;
using namespace mlir::loom;

int64_t mlir::loom::paddedRows(int64_t rows, int64_t ways,
                               int64_t divisibleBy) {
  // Split: only a table the ways do not divide (a small vocabulary that tp
  // splits evenly keeps its size). Whole: to a multiple of divisibleBy.
  if (ways > 1 && rows % ways == 0)
    return rows;
  int64_t multiple = divisibleBy * std::max<int64_t>(ways, 1);
  return (rows + multiple - 1) / multiple * multiple;
}

namespace {

/// The factor of dimension `dim` of operand (or result) `index`; kNoFactor
/// when the rule does not list it (an op whose rule keeps it whole).
int64_t factorOf(ArrayRef<SmallVector<int64_t>> factors, unsigned index,
                 unsigned dim) {
  if (index >= factors.size() || dim >= factors[index].size())
    return ShardingRule::kNoFactor;
  return factors[index][dim];
}

/// Whether operand `index`, dimension `dim` of `op` is the vocabulary of
/// the logits of a loss op (VocabMaskOpInterface): padding there is masked
/// by the op's vocab_size (step 3).
bool isPaddedLossColumn(Operation *op, unsigned index, unsigned dim) {
  auto loss = dyn_cast<VocabMaskOpInterface>(op);
  if (!loss)
    return false;
  Value logits = loss.getMaskedLogits();
  return op->getOperand(index) == logits &&
         int64_t(dim) + 1 == cast<RankedTensorType>(logits.getType()).getRank();
}

bool isTrainingState(Role role) {
  return role == Role::Param || role == Role::Grad || role == Role::AdamM ||
         role == Role::AdamV || role == Role::Master;
}

/// The (value, dimension) pairs that hold the padded index space, found by
/// a worklist over uses, definitions and `loom.block` boundaries.
class PaddingSpread {
public:
  PaddingSpread(StringAttr param, int64_t rows, int64_t padded,
                StringRef remedy)
      : param(param), rows(rows), padded(padded), remedy(remedy) {}

  /// Adds dimension `dim` of `v`; fails when its size is not `rows`.
  LogicalResult add(Value v, unsigned dim, Operation *why);
  /// Follows every added dimension to a fixpoint.
  LogicalResult run();
  /// Retypes the padded values and the functions' signatures.
  void retype(ModuleOp module);
  /// Whether the last dimension of `v` is padded.
  bool lastDimPadded(Value v) const {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    return type && type.getRank() > 0 &&
           paddedDims.contains({v, unsigned(type.getRank() - 1)});
  }

private:
  LogicalResult visitUse(OpOperand &use, unsigned dim);
  LogicalResult visitDefinition(Value v, unsigned dim);
  /// Adds every operand and result dimension of `op` that the rule maps to
  /// `factor`.
  LogicalResult addFactor(Operation *op, const ShardingRule &rule,
                          int64_t factor);
  /// The error for an op through which the padding cannot go.
  InFlightDiagnostic refuse(Operation *op, const Twine &reason);

  StringAttr param;
  int64_t rows, padded;
  StringRef remedy;
  llvm::DenseSet<std::pair<Value, unsigned>> paddedDims;
  SmallVector<std::pair<Value, unsigned>> worklist;
};

InFlightDiagnostic PaddingSpread::refuse(Operation *op, const Twine &reason) {
  return op->emitOpError() << reason << ", so " << param
                           << " cannot be padded from " << rows << " to "
                           << padded << " rows " << remedy;
}

LogicalResult PaddingSpread::add(Value v, unsigned dim, Operation *why) {
  if (!paddedDims.insert({v, dim}).second)
    return success();
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || dim >= type.getRank() || type.getDimSize(dim) != rows)
    return refuse(
        why, "ties a dimension of size " +
                 Twine(type && dim < type.getRank() ? type.getDimSize(dim)
                                                    : int64_t(-1)) +
                 " to the " + Twine(rows) + " rows of " + param.getValue());
  worklist.push_back({v, dim});
  return success();
}

LogicalResult PaddingSpread::addFactor(Operation *op, const ShardingRule &rule,
                                       int64_t factor) {
  for (auto [operand, factors] :
       llvm::zip(op->getOperands(), rule.operandFactors))
    for (auto [d, f] : llvm::enumerate(factors))
      if (f == factor && failed(add(operand, d, op)))
        return failure();
  for (auto [result, factors] : llvm::zip(op->getResults(), rule.resultFactors))
    for (auto [d, f] : llvm::enumerate(factors))
      if (f == factor && failed(add(result, d, op)))
        return failure();
  return success();
}

LogicalResult PaddingSpread::visitUse(OpOperand &use, unsigned dim) {
  Operation *user = use.getOwner();
  unsigned index = use.getOperandNumber();
  if (auto block = dyn_cast<BlockOp>(user))
    return add(block.getBody().front().getArgument(index), dim, user);
  if (isa<YieldOp>(user))
    return add(user->getParentOp()->getResult(index), dim, user);
  if (isa<func::ReturnOp>(user))
    return success(); // the signature follows in retype()
  // A loss op reads the padded columns (step 3 masks them with
  // vocab_size); a logits gradient's result is padded like its logits.
  if (isPaddedLossColumn(user, index, dim)) {
    Value result = cast<VocabMaskOpInterface>(user).getPaddedResult();
    return result ? add(result, dim, user) : success();
  }
  auto ruleOp = dyn_cast<ShardingRuleOpInterface>(user);
  if (!ruleOp)
    return refuse(user, "has no sharding rule to say where the padded "
                        "dimension of operand #" +
                            Twine(index) + " goes");
  ShardingRule rule = ruleOp.getShardingRule();
  int64_t factor = factorOf(rule.operandFactors, index, dim);
  if (factor == ShardingRule::kNoFactor)
    return refuse(user, "needs dimension " + Twine(dim) + " of operand #" +
                            Twine(index) + " (" + describeOp(user) + ") whole");
  return addFactor(user, rule, factor);
}

LogicalResult PaddingSpread::visitDefinition(Value v, unsigned dim) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    if (auto block = dyn_cast<BlockOp>(arg.getOwner()->getParentOp()))
      return add(block.getInputs()[arg.getArgNumber()], dim, block);
    return success(); // a function argument: seeded by name
  }
  Operation *def = v.getDefiningOp();
  unsigned index = cast<OpResult>(v).getResultNumber();
  if (auto block = dyn_cast<BlockOp>(def))
    return add(block.getYield().getValues()[index], dim, block);
  // An embedding gradient's rows are the table's, indexed by token ids that
  // never reach the padding (its rule keeps them whole: they come from no
  // operand): the padding rows get zero.
  if (isa<EmbeddingGradOp>(def) && dim == 0)
    return success();
  if (auto loss = dyn_cast<VocabMaskOpInterface>(def))
    if (loss.getPaddedResult() == v)
      return add(loss.getMaskedLogits(), dim, def);
  auto ruleOp = dyn_cast<ShardingRuleOpInterface>(def);
  if (!ruleOp)
    return refuse(def, "has no sharding rule to say where the padded "
                       "dimension of result #" +
                           Twine(index) + " comes from");
  ShardingRule rule = ruleOp.getShardingRule();
  int64_t factor = factorOf(rule.resultFactors, index, dim);
  if (factor == ShardingRule::kNoFactor)
    return refuse(def, "needs dimension " + Twine(dim) + " of result #" +
                           Twine(index) + " whole");
  return addFactor(def, rule, factor);
}

LogicalResult PaddingSpread::run() {
  while (!worklist.empty()) {
    auto [v, dim] = worklist.pop_back_val();
    if (failed(visitDefinition(v, dim)))
      return failure();
    for (OpOperand &use : v.getUses())
      if (failed(visitUse(use, dim)))
        return failure();
  }
  return success();
}

void PaddingSpread::retype(ModuleOp module) {
  llvm::MapVector<Value, SmallVector<int64_t>> shapes;
  for (auto [v, dim] : paddedDims) {
    auto [it, inserted] = shapes.try_emplace(v);
    if (inserted)
      it->second.assign(shapeOf(v).begin(), shapeOf(v).end());
    it->second[dim] = padded;
  }
  for (auto &[v, shape] : shapes)
    v.setType(RankedTensorType::get(shape, elementTypeOf(v)));
  for (auto func : module.getOps<func::FuncOp>()) {
    Block &entry = func.getBody().front();
    auto ret = cast<func::ReturnOp>(entry.getTerminator());
    func.setType(FunctionType::get(func.getContext(), entry.getArgumentTypes(),
                                   ret.getOperandTypes()));
  }
}

} // namespace

std::optional<std::pair<func::FuncOp, unsigned>>
mlir::loom::functionArgumentOf(Value v) {
  while (auto arg = dyn_cast<BlockArgument>(v)) {
    Operation *owner = arg.getOwner()->getParentOp();
    if (auto block = dyn_cast<BlockOp>(owner)) {
      v = block.getInputs()[arg.getArgNumber()];
      continue;
    }
    if (auto func = dyn_cast<func::FuncOp>(owner))
      return std::make_pair(func, arg.getArgNumber());
    return std::nullopt;
  }
  return std::nullopt;
}

LogicalResult mlir::loom::padParameterRows(ModuleOp module, StringAttr param,
                                           int64_t rows, int64_t padded,
                                           StringRef remedy) {
  if (padded == rows)
    return success();
  PaddingSpread spread(param, rows, padded, remedy);
  // 1. Seeds: the parameter and its training state, in every function.
  Builder b(module.getContext());
  for (auto func : module.getOps<func::FuncOp>())
    for (BlockArgument arg : func.getArguments()) {
      unsigned i = arg.getArgNumber();
      auto role = func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
      auto name = func.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
      if (!role || name != param || !isTrainingState(role.getValue()))
        continue;
      if (func.getArgAttr(i, LoomDialect::kCheckpointShapeAttr))
        return func.emitOpError()
               << "argument #" << i << " (" << param
               << ") has a loom.checkpoint_shape; a regrouped parameter "
                  "cannot be padded from "
               << rows << " to " << padded << " rows";
      if (failed(spread.add(arg, 0, func)))
        return failure();
      if (role.getValue() == Role::Param)
        func.setArgAttr(i, LoomDialect::kUnpaddedRowsAttr,
                        b.getI64IntegerAttr(rows));
    }
  // 2. Everything tied to those rows.
  if (failed(spread.run()))
    return failure();
  // 3. The loss masks the padded columns of the logits.
  IntegerAttr vocab = b.getI64IntegerAttr(rows);
  module.walk([&](VocabMaskOpInterface loss) {
    if (spread.lastDimPadded(loss.getMaskedLogits()))
      loss.setVocabSizeAttr(vocab);
  });
  spread.retype(module);
  LLVM_DEBUG(llvm::dbgs() << "padded " << param << " from " << rows << " to "
                          << padded << " rows\n");
  return success();
}
