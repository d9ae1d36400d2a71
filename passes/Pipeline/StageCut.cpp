//===- StageCut.cpp - Where the step is cut into stages ---------*- C++ -*-===//

#include "passes/Pipeline/StageCut.h"

#include "llvm/ADT/StringMap.h"

#include <limits>

using namespace mlir;
using namespace mlir::loom;

/// Collects the tree of `g` (loom.add of same-typed values, one-input sum
/// all-reduces, sum reduce-scatters, local slices and widening casts, each
/// used only there)
/// into `inner` and its leaves.
static void collectTree(Value g, const llvm::DenseSet<Operation *> &forward,
                        SmallVectorImpl<Operation *> &inner,
                        SmallVectorImpl<Value> &leaves) {
  Operation *def = g.getDefiningOp();
  bool single = g.hasOneUse();
  if (def && single && !forward.contains(def)) {
    if (auto add = dyn_cast<AddOp>(def);
        add && add.getLhs().getType() == add.getType() &&
        add.getRhs().getType() == add.getType()) {
      collectTree(add.getLhs(), forward, inner, leaves);
      collectTree(add.getRhs(), forward, inner, leaves);
      inner.push_back(def);
      return;
    }
    if (auto ar = dyn_cast<AllReduceOp>(def);
        ar && ar.getInputs().size() == 1 &&
        ar.getReduction() == ReductionKind::Sum) {
      collectTree(ar.getInput(), forward, inner, leaves);
      inner.push_back(def);
      return;
    }
    // fp32 gradients of bf16 compute: the sum is widened before it is
    // accumulated; exact, so each chunk widens its own contributions.
    if (auto widen = dyn_cast<CastOp>(def);
        widen && widen.isWidening()) {
      collectTree(widen.getInput(), forward, inner, leaves);
      inner.push_back(def);
      return;
    }
    // ZeRO-2/3: each micro-batch's gradient is reduce-scattered (or, when
    // already summed, sliced) into the dp-sharded accumulator. Both are
    // linear, so a chunk applies them to its own contributions only.
    if (auto rs = dyn_cast<ReduceScatterOp>(def);
        rs && rs.getReduction() == ReductionKind::Sum &&
        rs.getInputs().size() == 1) {
      collectTree(rs.getInput(), forward, inner, leaves);
      inner.push_back(def);
      return;
    }
    if (auto slice = dyn_cast<LocalSliceOp>(def)) {
      collectTree(slice.getInput(), forward, inner, leaves);
      inner.push_back(def);
      return;
    }
  }
  leaves.push_back(g);
}

FailureOr<StepCut> mlir::loom::analyzeStep(func::FuncOp train,
                                           const CostModel &costs) {
  StepCut cut;
  Block &body = train.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  if (ret.getNumOperands() < 1)
    return train.emitOpError() << "returns no loss to pipeline";

  // 1. Forward: the top-level ops the loss depends on.
  SmallVector<Operation *> worklist;
  if (Operation *def = ret.getOperand(0).getDefiningOp())
    worklist.push_back(def);
  while (!worklist.empty()) {
    Operation *op = worklist.pop_back_val();
    if (!cut.forward.insert(op).second)
      continue;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        worklist.push_back(def);
  }

  // 2. Units of the forward ops: before the first block, each block (with
  //    the glue before it), after the last block.
  SmallVector<BlockOp> blocks;
  llvm::StringMap<int> unitOfLabel;
  for (Operation &op : body)
    if (auto block = dyn_cast<BlockOp>(op); block && cut.forward.contains(&op))
      blocks.push_back(block);
  if (blocks.empty())
    return train.emitOpError()
           << "has no loom.block in its forward; pipeline stages are cut at "
              "transformer-block boundaries";
  cut.numBlocks = blocks.size();
  cut.units.push_back({"embedding"});
  for (auto [i, block] : llvm::enumerate(blocks)) {
    cut.units.push_back({block.getLabel().str()});
    if (!unitOfLabel.try_emplace(block.getLabel(), i + 1).second)
      return block.emitOpError() << "repeats the block label '"
                                 << block.getLabel()
                                 << "'; each block needs its own";
  }
  int head = static_cast<int>(cut.units.size());
  cut.units.push_back({"head"});
  {
    int next = head; // unit of the next forward block, scanning backwards
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    for (Operation *op : llvm::reverse(ops)) {
      if (!cut.forward.contains(op))
        continue;
      if (auto block = dyn_cast<BlockOp>(op))
        next = unitOfLabel.lookup(block.getLabel());
      cut.unitOf[op] = next;
    }
    for (Operation *op : ops) // before the first block: the embedding
      if (cut.forward.contains(op)) {
        if (isa<BlockOp>(op))
          break;
        cut.unitOf[op] = 0;
      }
  }

  // 3. Gradient accumulations: results that update a grad argument.
  for (unsigned i = 1; i < ret.getNumOperands(); ++i) {
    auto updates =
        train.getResultAttrOfType<IntegerAttr>(i, LoomDialect::kUpdatesAttr);
    Value value = ret.getOperand(i);
    auto add = value.getDefiningOp<AddOp>();
    if (!updates || !add || !value.hasOneUse())
      continue;
    auto acc = dyn_cast<BlockArgument>(add.getLhs());
    if (!acc || acc.getOwner() != &body ||
        acc.getArgNumber() != updates.getInt())
      continue;
    Accumulation a;
    a.result = i;
    a.accumulator = acc.getArgNumber();
    a.root = add;
    SmallVector<Value> leaves;
    collectTree(add.getRhs(), cut.forward, a.inner, leaves);
    for (Value leaf : leaves)
      a.leaves.push_back({leaf, -1});
    cut.accumulationOps.insert(add);
    for (Operation *op : a.inner)
      cut.accumulationOps.insert(op);
    cut.accumulations.push_back(std::move(a));
  }

  // 4. Units of the backward ops, by the backward block they follow.
  int current = head;
  for (Operation &op : body.without_terminator()) {
    if (cut.forward.contains(&op) || cut.accumulationOps.contains(&op))
      continue;
    if (auto block = dyn_cast<BlockOp>(op)) {
      StringRef label = block.getLabel();
      int unit = label.consume_back(".grad") ? unitOfLabel.lookup(label) : 0;
      if (unit == 0)
        return block.emitOpError()
               << "is a backward block without a forward block '" << label
               << "'; --loom-pipeline expects the backward blocks of "
                  "--loom-autodiff (\"<label>.grad\")";
      cut.unitOf[&op] = unit;
      current = unit == 1 ? 0 : unit;
      continue;
    }
    cut.unitOf[&op] = current;
  }
  for (Accumulation &a : cut.accumulations)
    for (auto &[leaf, unit] : a.leaves) {
      Operation *def = leaf.getDefiningOp();
      auto it = def ? cut.unitOf.find(def) : cut.unitOf.end();
      if (it == cut.unitOf.end())
        return train.emitOpError()
               << "accumulates a gradient (result #" << a.result
               << ") that no op of the step produces";
      unit = it->second;
    }

  // 5. Costs per unit.
  for (auto [op, unit] : cut.unitOf) {
    double s = costs.seconds(op);
    if (cut.forward.contains(op))
      cut.units[unit].forwardSeconds += s;
    else
      cut.units[unit].backwardSeconds += s;
  }
  for (const Accumulation &a : cut.accumulations) {
    double s = costs.seconds(a.root);
    for (Operation *op : a.inner)
      s += costs.seconds(op);
    cut.units[a.leaves.front().second].backwardSeconds += s;
  }
  return cut;
}

SmallVector<int64_t> mlir::loom::balanceUnits(ArrayRef<StepUnit> units,
                                              int64_t chunks) {
  // Linear partition: best[k][i] = the smallest possible maximum when the
  // first i units form k chunks.
  const int64_t n = units.size();
  const double inf = std::numeric_limits<double>::infinity();
  SmallVector<double> prefix(n + 1, 0.0);
  for (int64_t i = 0; i < n; ++i)
    prefix[i + 1] = prefix[i] + units[i].seconds();
  std::vector<std::vector<double>> best(chunks + 1,
                                        std::vector<double>(n + 1, inf));
  std::vector<std::vector<int64_t>> from(chunks + 1,
                                         std::vector<int64_t>(n + 1, 0));
  best[0][0] = 0;
  for (int64_t k = 1; k <= chunks; ++k)
    for (int64_t i = k; i <= n; ++i)
      for (int64_t j = k - 1; j < i; ++j) {
        double cost = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        // Strictly better only: ties keep the earliest cut.
        if (cost < best[k][i] * (1 - 1e-12)) {
          best[k][i] = cost;
          from[k][i] = j;
        }
      }
  SmallVector<int64_t> starts(chunks, 0);
  for (int64_t k = chunks, i = n; k > 0; --k) {
    starts[k - 1] = from[k][i];
    i = from[k][i];
  }
  return starts;
}
