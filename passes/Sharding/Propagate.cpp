//===- Propagate.cpp - Sharding propagation over op rules -------*- C++ -*-===//
//
// `--loom-propagate`: one generic mechanism for every strategy. ZeRO,
// Megatron and hand annotations only seed shardings; the ops' factor rules
// carry them everywhere else.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <functional>

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMPROPAGATE
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

/// Mesh axes per tensor dimension, plus partial-result axes (sums, or
/// maxima).
struct ValueSharding {
  SmallVector<SmallVector<StringRef>> dims;
  SmallVector<StringRef> partial;
  ReductionKind partialKind = ReductionKind::Sum;

  bool isReplicated() const {
    return partial.empty() &&
           llvm::all_of(dims, [](const auto &axes) { return axes.empty(); });
  }
};

std::string axesStr(ArrayRef<StringRef> axes) {
  std::string out = "[";
  llvm::raw_string_ostream os(out);
  llvm::interleaveComma(axes, os);
  return out + "]";
}

class Propagator {
public:
  Propagator(MeshOp mesh) : mesh(mesh) {}

  /// Reads the seeds of `func` and the ops inside it.
  void seed(func::FuncOp func);
  /// Runs to a fixpoint; fails on inconsistent seeds.
  void run(func::FuncOp func);
  /// Writes the shardings back as attributes.
  void annotate(func::FuncOp func);

private:
  bool propagateOp(Operation *op);
  bool propagateBlock(BlockOp block);
  /// Gives `v` `sharding` if it has none; refines it if it is an open seed
  /// and `mayRefine` (the op computing it, or the block plumbing carrying
  /// it, is being propagated: its consumers never refine it).
  bool assign(Value v, ValueSharding sharding, bool mayRefine = false);
  void remarkOnce(Operation *op, int64_t factor, const Twine &message) {
    if (remarked.insert({op, factor}).second)
      op->emitRemark() << message;
  }
  ShardingAttr toAttr(MLIRContext *ctx, const ValueSharding &s) const;

  mutable MeshOp mesh;
  llvm::DenseMap<Value, ValueSharding> shardings;
  /// Op results seeded by a strategy pass (`loom.shardings` before
  /// propagation): the axes a seed names are fixed, its other dimensions
  /// and partial axes stay open (as Shardy's open dimensions), so a pass
  /// that runs before another axis is decided (tensor parallelism before
  /// data parallelism) need not know it.
  llvm::DenseSet<Value> openSeeds;
  llvm::DenseSet<std::pair<Operation *, int64_t>> remarked;
};

ValueSharding fromAttr(ShardingAttr attr) {
  ValueSharding s;
  for (unsigned d = 0; d < attr.getRank(); ++d)
    s.dims.push_back(attr.getDimAxes(d));
  s.partial = attr.getPartialAxes();
  s.partialKind = attr.getPartialKind();
  return s;
}

ShardingAttr Propagator::toAttr(MLIRContext *ctx,
                                const ValueSharding &s) const {
  Builder b(ctx);
  SmallVector<Attribute> dims;
  for (const auto &axes : s.dims) {
    SmallVector<Attribute> names;
    for (StringRef axis : axes)
      names.push_back(b.getStringAttr(axis));
    dims.push_back(b.getArrayAttr(names));
  }
  SmallVector<Attribute> partial;
  for (StringRef axis : s.partial)
    partial.push_back(b.getStringAttr(axis));
  return ShardingAttr::get(ctx, FlatSymbolRefAttr::get(mesh.getSymNameAttr()),
                           b.getArrayAttr(dims), b.getArrayAttr(partial),
                           s.partialKind);
}

void Propagator::seed(func::FuncOp func) {
  for (BlockArgument arg : func.getArguments())
    if (auto attr = func.getArgAttrOfType<ShardingAttr>(
            arg.getArgNumber(), LoomDialect::kShardingAttr))
      shardings[arg] = fromAttr(attr);
  func.walk([&](Operation *op) {
    if (auto attrs = op->getAttrOfType<ArrayAttr>(LoomDialect::kShardingsAttr))
      for (auto [result, attr] : llvm::zip(op->getResults(), attrs)) {
        shardings[result] = fromAttr(cast<ShardingAttr>(attr));
        openSeeds.insert(result);
      }
  });
}

bool Propagator::assign(Value v, ValueSharding sharding, bool mayRefine) {
  auto it = shardings.find(v);
  if (it == shardings.end()) {
    if (sharding.isReplicated())
      return false;
    shardings[v] = std::move(sharding);
    return true;
  }
  if (!mayRefine || !openSeeds.contains(v))
    return false;
  // An open seed takes the axes it does not name yet: on its unsplit
  // dimensions, and as partial axes. Additions only: this terminates.
  ValueSharding &have = it->second;
  llvm::StringSet<> used;
  for (const auto &axes : have.dims)
    used.insert(axes.begin(), axes.end());
  used.insert(have.partial.begin(), have.partial.end());
  bool changed = false;
  for (auto [d, axes] : llvm::enumerate(sharding.dims)) {
    if (d >= have.dims.size() || !have.dims[d].empty() || axes.empty() ||
        llvm::any_of(axes, [&](StringRef a) { return used.contains(a); }))
      continue;
    have.dims[d] = axes;
    used.insert(axes.begin(), axes.end());
    changed = true;
  }
  if (have.partial.empty() || have.partialKind == sharding.partialKind)
    for (StringRef axis : sharding.partial)
      if (!used.contains(axis)) {
        if (have.partial.empty())
          have.partialKind = sharding.partialKind;
        have.partial.push_back(axis);
        used.insert(axis);
        changed = true;
      }
  return changed;
}

bool Propagator::propagateBlock(BlockOp block) {
  bool changed = false;
  Block &body = block.getBody().front();
  // A copy of an open seed is open too: it follows the seed's refinements.
  auto carry = [&](Value from, Value to) {
    auto it = shardings.find(from);
    if (it == shardings.end())
      return false;
    bool open = openSeeds.contains(from);
    if (open && !shardings.count(to))
      openSeeds.insert(to);
    return assign(to, it->second, /*mayRefine=*/open);
  };
  for (auto [input, arg] : llvm::zip(block.getInputs(), body.getArguments())) {
    if (shardings.count(input))
      changed |= carry(input, arg);
    else
      changed |= carry(arg, input);
  }
  for (auto [yielded, result] :
       llvm::zip(block.getYield().getValues(), block.getResults())) {
    if (shardings.count(yielded))
      changed |= carry(yielded, result);
    else
      changed |= carry(result, yielded);
  }
  return changed;
}

bool Propagator::propagateOp(Operation *op) {
  auto ruleOp = dyn_cast<ShardingRuleOpInterface>(op);
  if (!ruleOp)
    return false;
  ShardingRule rule = ruleOp.getShardingRule();
  size_t numFactors = rule.factorSizes.size();

  // 1. What each factor is split by, from the values that have a sharding:
  //    more axes win, then the earlier operand (results after operands).
  SmallVector<std::optional<SmallVector<StringRef>>> factorAxes(numFactors);
  auto visit = [&](Value v, ArrayRef<int64_t> factors, StringRef what,
                   unsigned index) {
    auto it = shardings.find(v);
    if (it == shardings.end())
      return;
    for (auto [d, f] : llvm::enumerate(factors)) {
      if (f == ShardingRule::kNoFactor || d >= it->second.dims.size())
        continue;
      ArrayRef<StringRef> axes = it->second.dims[d];
      if (axes.empty())
        continue; // unsplit is no opinion: any split may refine it
      auto &current = factorAxes[f];
      if (!current) {
        current = SmallVector<StringRef>(axes);
      } else if (ArrayRef<StringRef>(*current) != axes) {
        SmallVector<StringRef> kept =
            axes.size() > current->size() ? SmallVector<StringRef>(axes)
                                           : *current;
        remarkOnce(op, f,
                   "sharding conflict on dimension " + Twine(d) + " of " +
                       what + " #" + Twine(index) + ": " + axesStr(*current) +
                       " vs " + axesStr(axes) + "; kept " + axesStr(kept) +
                       " (more axes win, then the earlier operand)");
        current = kept;
      }
    }
  };
  for (auto [i, operand] : llvm::enumerate(op->getOperands()))
    visit(operand, rule.operandFactors[i], "operand", i);
  for (auto [i, result] : llvm::enumerate(op->getResults()))
    visit(result, rule.resultFactors[i], "result", i);

  // 2. An axis can split only one dimension of a tensor (and a result
  //    cannot be split and partial over the same axis): a factor whose
  //    axes another factor of the same tensor already uses stays whole.
  //    Factors of different tensors may share axes (two gradients both split
  //    over dp in one sum of squares). (Sizes always divide: every split
  //    comes from a verified seed of the same factor size.)
  // The factors of each tensor; a result also holds the partial sums of the
  // contracted factors (several of which may share an axis: one sum).
  struct Held {
    int64_t factor;
    bool partial;
  };
  SmallVector<SmallVector<Held>> tensors;
  for (ArrayRef<int64_t> factors : rule.operandFactors) {
    tensors.emplace_back();
    for (int64_t f : factors)
      tensors.back().push_back({f, false});
  }
  for (ArrayRef<int64_t> factors : rule.resultFactors) {
    tensors.emplace_back();
    for (int64_t f : factors)
      tensors.back().push_back({f, false});
    for (size_t f = 0; f < numFactors; ++f)
      if (rule.isReduction[f] &&
          !llvm::is_contained(factors, static_cast<int64_t>(f)))
        tensors.back().push_back({static_cast<int64_t>(f), true});
  }
  // Axes already splitting a dimension / held as partial sums, per tensor.
  SmallVector<llvm::StringSet<>> splitting(tensors.size()),
      partialOver(tensors.size());
  // Factors an already sharded result uses (a split dimension, or a
  // contracted factor whose axes it holds partial sums over) claim their
  // axes first: that result is decided, the operands are resharded to it
  // (a column-parallel linear's seeded output keeps its split; its
  // sequence-split input is gathered). Then the others, in factor order.
  SmallVector<size_t> order;
  SmallVector<bool> claimsFirst(numFactors, false);
  for (auto [r, result] : llvm::enumerate(op->getResults())) {
    auto it = shardings.find(result);
    if (it == shardings.end())
      continue;
    for (size_t f = 0; f < numFactors; ++f) {
      if (!factorAxes[f])
        continue;
      auto pos = llvm::find(rule.resultFactors[r], static_cast<int64_t>(f));
      if (pos != rule.resultFactors[r].end()) {
        size_t d = pos - rule.resultFactors[r].begin();
        claimsFirst[f] |= d < it->second.dims.size() &&
                          ArrayRef<StringRef>(it->second.dims[d]) ==
                              ArrayRef<StringRef>(*factorAxes[f]);
      } else if (rule.isReduction[f]) {
        claimsFirst[f] |= llvm::all_of(*factorAxes[f], [&](StringRef a) {
          return llvm::is_contained(it->second.partial, a);
        });
      }
    }
  }
  llvm::StringSet<> claimedAxes;
  for (size_t f = 0; f < numFactors; ++f)
    if (claimsFirst[f]) {
      order.push_back(f);
      claimedAxes.insert(factorAxes[f]->begin(), factorAxes[f]->end());
    }
  for (size_t f = 0; f < numFactors; ++f)
    if (!claimsFirst[f])
      order.push_back(f);
  for (size_t f : order) {
    if (!factorAxes[f])
      continue;
    SmallVector<std::pair<size_t, bool>> holders; // tensor, as partial
    for (auto [t, held] : llvm::enumerate(tensors))
      for (Held h : held)
        if (h.factor == static_cast<int64_t>(f))
          holders.push_back({t, h.partial});
    bool clash = llvm::any_of(holders, [&](auto holder) {
      auto [t, partial] = holder;
      return llvm::any_of(*factorAxes[f], [&](StringRef axis) {
        return splitting[t].contains(axis) ||
               (!partial && partialOver[t].contains(axis));
      });
    });
    if (clash) {
      // Losing to a decided result is the expected case (the partitioner
      // reshards the operand, e.g. gathers a sequence shard): no remark.
      bool lostToDecided =
          llvm::all_of(*factorAxes[f],
                       [&](StringRef a) { return claimedAxes.contains(a); });
      if (lostToDecided) {
        factorAxes[f].reset();
        continue;
      }
      remarkOnce(op, f,
                 "cannot split a dimension of size " +
                     Twine(rule.factorSizes[f]) + " by " +
                     axesStr(*factorAxes[f]) +
                     ": an axis already splits another dimension; it stays "
                     "whole");
      factorAxes[f].reset();
      continue;
    }
    for (auto [t, partial] : holders)
      for (StringRef axis : *factorAxes[f])
        (partial ? partialOver[t] : splitting[t]).insert(axis);
  }

  // 3. Give every unsharded operand and result its factors' splits; a
  //    result whose contracted factors are split holds partial sums.
  auto shardingFor = [&](ArrayRef<int64_t> factors) {
    ValueSharding s;
    for (int64_t f : factors)
      s.dims.push_back(f != ShardingRule::kNoFactor && factorAxes[f]
                           ? *factorAxes[f]
                           : SmallVector<StringRef>());
    return s;
  };
  bool changed = false;
  for (auto [i, operand] : llvm::enumerate(op->getOperands()))
    changed |= assign(operand, shardingFor(rule.operandFactors[i]));
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    ValueSharding s = shardingFor(rule.resultFactors[i]);
    for (size_t f = 0; f < numFactors; ++f)
      if (rule.isReduction[f] && factorAxes[f] &&
          !llvm::is_contained(rule.resultFactors[i], static_cast<int64_t>(f))) {
        for (StringRef axis : *factorAxes[f])
          if (!llvm::is_contained(s.partial, axis))
            s.partial.push_back(axis); // several contracted factors: one sum
        s.partialKind = rule.reductionKind[f];
      }
    changed |= assign(result, std::move(s), /*mayRefine=*/true);
  }
  return changed;
}

void Propagator::run(func::FuncOp func) {
  // Program order with each block op listed before its body (inputs reach
  // the body's arguments before its ops are visited) and again after it
  // (yields reach the results before the ops after the block). Visiting a
  // body before its arguments are known would let a later consumer's
  // sharding flow backwards into the block first: a gradient accumulator
  // split on dp would then split a weight gradient's contracted dimension.
  SmallVector<Operation *> ops;
  std::function<void(Block &)> list = [&](Block &block) {
    for (Operation &op : block) {
      ops.push_back(&op);
      if (auto inner = dyn_cast<BlockOp>(op)) {
        list(inner.getBody().front());
        ops.push_back(&op);
      }
    }
  };
  list(func.getBody().front());
  // Forward then backward sweeps until nothing changes; each assignment is
  // permanent, so this terminates.
  for (bool changed = true; changed;) {
    changed = false;
    for (Operation *op : ops)
      changed |= isa<BlockOp>(op) ? propagateBlock(cast<BlockOp>(op))
                                  : propagateOp(op);
    for (Operation *op : llvm::reverse(ops))
      changed |= isa<BlockOp>(op) ? propagateBlock(cast<BlockOp>(op))
                                  : propagateOp(op);
  }
}

void Propagator::annotate(func::FuncOp func) {
  MLIRContext *ctx = func.getContext();
  // All argument attributes at once: setArgAttr rebuilds the whole list
  // each call, quadratic in the argument count.
  SmallVector<DictionaryAttr> argAttrs;
  func.getAllArgAttrs(argAttrs);
  bool anyArg = false;
  for (BlockArgument arg : func.getArguments())
    if (auto it = shardings.find(arg); it != shardings.end()) {
      NamedAttrList attrs(argAttrs[arg.getArgNumber()]);
      attrs.set(LoomDialect::kShardingAttr, toAttr(ctx, it->second));
      argAttrs[arg.getArgNumber()] = attrs.getDictionary(ctx);
      anyArg = true;
    }
  if (anyArg)
    func.setAllArgAttrs(argAttrs);
  func.walk([&](Operation *op) {
    if (op->getNumResults() == 0 || isa<BlockOp>(op))
      return;
    bool any = llvm::any_of(op->getResults(),
                            [&](Value r) { return shardings.count(r); });
    if (!any)
      return;
    SmallVector<Attribute> attrs;
    for (Value r : op->getResults()) {
      ValueSharding s;
      if (auto it = shardings.find(r); it != shardings.end())
        s = it->second;
      else
        s.dims.resize(cast<RankedTensorType>(r.getType()).getRank());
      attrs.push_back(toAttr(ctx, s));
    }
    op->setAttr(LoomDialect::kShardingsAttr, ArrayAttr::get(ctx, attrs));
  });
}

/// Seeds the unsharded training-state arguments of `func` from `shardings`
/// (by role and name), or with `record`, records the sharded ones.
void linkTrainingState(func::FuncOp func,
                       llvm::StringMap<ShardingAttr> &shardings, bool record) {
  SmallVector<DictionaryAttr> argAttrs;
  bool seeded = false;
  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto role = func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
    auto name = func.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
    if (!role || !name ||
        (role.getValue() != Role::Param && role.getValue() != Role::Grad &&
         role.getValue() != Role::AdamM && role.getValue() != Role::AdamV &&
         role.getValue() != Role::Master))
      continue;
    std::string key = (stringifyRole(role.getValue()) + ":" + name.getValue()).str();
    auto sharding =
        func.getArgAttrOfType<ShardingAttr>(i, LoomDialect::kShardingAttr);
    if (record) {
      if (sharding)
        shardings.try_emplace(key, sharding);
      continue;
    }
    auto it = shardings.find(key);
    if (sharding || it == shardings.end() ||
        it->second.getRank() !=
            static_cast<unsigned>(
                cast<RankedTensorType>(arg.getType()).getRank()))
      continue;
    // All at once below: setArgAttr rebuilds the whole list each call.
    if (argAttrs.empty())
      func.getAllArgAttrs(argAttrs);
    NamedAttrList attrs(argAttrs[i]);
    attrs.set(LoomDialect::kShardingAttr, it->second);
    argAttrs[i] = attrs.getDictionary(func.getContext());
    seeded = true;
  }
  if (seeded)
    func.setAllArgAttrs(argAttrs);
}

struct LoomPropagatePass
    : mlir::loom::impl::LoomPropagateBase<LoomPropagatePass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<MeshOp> meshes(module.getOps<MeshOp>());
    if (meshes.empty())
      return; // nothing is sharded without a mesh
    if (meshes.size() > 1) {
      meshes[1].emitOpError()
          << "is a second mesh; sharding propagation works on one mesh";
      return signalPassFailure();
    }
    // A parameter's state (the parameter, its gradient accumulator, its
    // moments) is one tensor per name, however many functions take it:
    // what propagation decided for it in one function seeds the next (the
    // training step before the optimizer update).
    llvm::StringMap<ShardingAttr> stateShardings;
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      linkTrainingState(func, stateShardings, /*record=*/false);
      Propagator propagator(meshes.front());
      propagator.seed(func);
      propagator.run(func);
      propagator.annotate(func);
      linkTrainingState(func, stateShardings, /*record=*/true);
    }
  }
};

} // namespace
