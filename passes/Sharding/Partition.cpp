//===- Partition.cpp - Global program -> per-rank program -------*- C++ -*-===//
//
// `--loom-partition`: reads the shardings propagation left on every value,
// inserts the collectives that reconcile producers with consumers, and
// shrinks every split dimension to its local size.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/Sharding/GradientReduction.h"
#include "passes/Sharding/OpNames.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "loom-partition"

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMPARTITION
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

/// Axes per dimension and partial axes of one value.
struct Layout {
  SmallVector<SmallVector<StringRef>> dims;
  SmallVector<StringRef> partial;
  /// How the partial results combine (sums, or a row maximum's maxima).
  ReductionKind partialKind = ReductionKind::Sum;
};

Layout layoutOf(ShardingAttr attr) {
  Layout l;
  for (unsigned d = 0; d < attr.getRank(); ++d)
    l.dims.push_back(attr.getDimAxes(d));
  l.partial = attr.getPartialAxes();
  l.partialKind = attr.getPartialKind();
  return l;
}

std::string nameOf(Operation *op) { return describeOp(op); }

/// What a value is called in a collective's reason: its producer's name, a
/// parameter's `loom.name` (also seen through `loom.block` arguments).
std::string nameOf(Value v) {
  if (Operation *op = v.getDefiningOp())
    return nameOf(op);
  auto arg = cast<BlockArgument>(v);
  Operation *owner = arg.getOwner()->getParentOp();
  if (auto block = dyn_cast<BlockOp>(owner))
    return nameOf(block.getInputs()[arg.getArgNumber()]);
  if (auto func = dyn_cast<func::FuncOp>(owner))
    if (auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                      LoomDialect::kNameAttr)) {
      // A gradient or moment shares its parameter's name: say which it is.
      auto role = func.getArgAttrOfType<RoleAttr>(arg.getArgNumber(),
                                                  LoomDialect::kRoleAttr);
      if (role && role.getValue() != Role::Param)
        return (name.getValue() + " (" + stringifyRole(role.getValue()) + ")")
            .str();
      return name.str();
    }
  return "argument #" + std::to_string(arg.getArgNumber());
}

ArrayAttr axesAttr(Builder &b, ArrayRef<StringRef> axes) {
  SmallVector<Attribute> names;
  for (StringRef a : axes)
    names.push_back(b.getStringAttr(a));
  return b.getArrayAttr(names);
}

class Partitioner {
public:
  /// `pipelined`: --loom-pipeline will cut the step into stages.
  Partitioner(MeshOp mesh, bool pipelined) : mesh(mesh), pipelined(pipelined) {}

  LogicalResult run(func::FuncOp func);

private:
  int64_t ways(ArrayRef<StringRef> axes) {
    int64_t n = 1;
    for (StringRef axis : axes)
      if (std::optional<unsigned> i = mesh.getShape().findAxis(axis))
        n *= mesh.getShape().getAxisSizes()[*i];
    return n;
  }
  void record(Value v, const Layout &l) { layouts[v] = l; }
  Layout layout(Value v) {
    auto it = layouts.find(v);
    if (it != layouts.end())
      return it->second;
    Layout l;
    if (auto type = dyn_cast<RankedTensorType>(v.getType()))
      l.dims.resize(type.getRank());
    return l;
  }
  /// Makes `operand` of `user` have the layout `want`: all-reduce partial
  /// sums, all-gather dimensions split against the wish.
  LogicalResult reshard(OpOperand &operand, const Layout &want);
  /// The layout a linear op's result keeps when its operands hold the same
  /// partial sums: each dimension split as the operands that split it have
  /// it. None when the partials differ, or the splits conflict, or a whole
  /// operand cannot be sliced to them without traffic (a split over a
  /// partial axis is a reduce-scatter, not a slice).
  std::optional<Layout> passThroughLayout(Operation *op);
  /// Takes this rank's block of each operand `op` reads whole along a
  /// dimension `common` splits (no traffic), so that the partial sums add
  /// block to block: with tensor parallelism the tied wte's embedding
  /// contribution is computed for the whole vocabulary and its LM-head
  /// contribution for this rank's rows, and one reduction of their sum
  /// replaces one per contribution.
  void matchSplits(Operation *op, const Layout &common);
  LogicalResult partitionOps(Block &block);
  /// A sum of squares over gradients split over different axes (ZeRO-2/3
  /// or tensor parallelism next to replicated ones): see the definition.
  LogicalResult balanceSumSquares(SumSquaresOp op);
  /// Tensor parallelism: per-rank attributes of ops whose split dimensions
  /// change what a rank computes (local head counts, table rows).
  LogicalResult localizeHeadCounts(func::FuncOp func);
  void markVocabShards(func::FuncOp func);

  MeshOp mesh;
  llvm::DenseMap<Value, Layout> layouts;
  /// Reduced / gathered copies already made, by (value, layout key).
  llvm::DenseMap<std::pair<Value, Block *>, Value> reducedCopies;
  /// Gathered copies, by (value, dimension, block, span). A `loom.block`'s
  /// copies serve its body only: a ZeRO-3 block parameter is gathered again
  /// for the block's backward instead of staying whole through every block
  /// in between. A copy made at a function's top level serves all of the
  /// function's top-level users: the tied wte is gathered once per
  /// micro-batch for the embedding and the LM head's forward and backward,
  /// as FSDP2 keeps its root module's parameters unsharded from forward to
  /// backward. The copy then lives through the forward blocks, while the
  /// saved activations still grow toward the peak that the LM head reaches
  /// with the table whole anyway (GPT-2 124M under ZeRO-3: the planned peak
  /// is unchanged, the bytes sent 10% fewer at dp=8). On a pipelined mesh
  /// a span ends at each `loom.block` instead: --loom-pipeline cuts the
  /// step between blocks, and each stage gathers its own copy (the
  /// embedding's and the LM head's are on different stages).
  llvm::DenseMap<std::tuple<Value, int64_t, Block *, unsigned>, Value>
      gatheredCopies;
  bool pipelined;
  unsigned span = 0;
};

LogicalResult Partitioner::reshard(OpOperand &operand, const Layout &want) {
  Value value = operand.get();
  Operation *user = operand.getOwner();
  Layout have = layout(value);
  OpBuilder b(user);
  FlatSymbolRefAttr meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());

  // 1. Partial sums: reduce once per block, before the first user; when the
  //    user wants a dimension split over partial axes, a reduce-scatter
  //    reduces and splits at once (ZeRO-2's gradients; sequence
  //    parallelism's row-parallel outputs). Partial axes the split does not
  //    use are all-reduced after it, on the smaller block (a layer norm
  //    gradient partial over [dp, tp] into a ZeRO-2 shard on dp).
  if (!have.partial.empty() && want.partial.empty()) {
    // A dimension the user wants split over axes the sums are not partial
    // over is sliced first (no traffic): less to reduce.
    auto splitsAnotherDim = [&](size_t d, StringRef a) {
      for (size_t e = 0; e < have.dims.size(); ++e)
        if (e != d && llvm::is_contained(have.dims[e], a))
          return true;
      return false;
    };
    for (size_t d = 0; d < have.dims.size() && d < want.dims.size(); ++d) {
      if (!have.dims[d].empty() || want.dims[d].empty() ||
          llvm::any_of(want.dims[d], [&](StringRef a) {
            return llvm::is_contained(have.partial, a) ||
                   splitsAnotherDim(d, a);
          }))
        continue;
      std::string reason = "this rank's block of " + nameOf(value) + " for " +
                           nameOf(user) + ", before reducing it";
      Value slice = LocalSliceOp::create(
          b, value.getLoc(), value.getType(), value, meshRef,
          axesAttr(b, want.dims[d]), b.getI64IntegerAttr(d),
          b.getStringAttr(reason));
      Layout l = have;
      l.dims[d] = want.dims[d];
      record(slice, l);
      operand.set(slice);
      return reshard(operand, want);
    }
    for (size_t d = 0; d < have.dims.size() && d < want.dims.size(); ++d) {
      if (!have.dims[d].empty() || want.dims[d].empty() ||
          have.partialKind != ReductionKind::Sum ||
          !llvm::all_of(want.dims[d], [&](StringRef a) {
            return llvm::is_contained(have.partial, a);
          }))
        continue;
      std::string reason = "partial sum over [" +
                           llvm::join(want.dims[d], ", ") + "] of " +
                           nameOf(value) + ", reduced and split for " +
                           nameOf(user);
      // Typed globally like everything else here; localization below
      // shrinks the split dimension.
      Value scattered = ReduceScatterOp::create(
          b, value.getLoc(), value.getType(), value, meshRef,
          axesAttr(b, want.dims[d]), static_cast<int64_t>(d),
          ReductionKindAttr::get(b.getContext(), ReductionKind::Sum),
          b.getStringAttr(reason)).getResult();
      Layout l = have;
      l.dims[d] = want.dims[d];
      llvm::erase_if(l.partial, [&](StringRef a) {
        return llvm::is_contained(want.dims[d], a);
      });
      record(scattered, l);
      operand.set(scattered);
      return reshard(operand, want);
    }
    auto key = std::make_pair(value, user->getBlock());
    Value reduced = reducedCopies.lookup(key);
    if (!reduced) {
      std::string reason = "partial " +
                           stringifyReductionKind(have.partialKind).str() +
                           " over [" + llvm::join(have.partial, ", ") +
                           "] of " + nameOf(value) + ", reduced for " +
                           nameOf(user);
      reduced = AllReduceOp::create(
                    b, value.getLoc(), value, meshRef,
                    axesAttr(b, have.partial),
                    ReductionKindAttr::get(b.getContext(), have.partialKind),
                    b.getStringAttr(reason))
                    .getResult();
      Layout l = have;
      l.partial.clear();
      record(reduced, l);
      reducedCopies[key] = reduced;
    }
    operand.set(reduced);
    value = reduced;
    have = layout(reduced);
  }
  // 2. Dimensions the user needs whole (or split differently): all the
  //    gathers first, then the slices. (Slicing a dimension over an axis
  //    that still splits another one would pair this rank's block of one
  //    with other ranks' blocks of the other once that one is gathered.)
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t d = 0; d < have.dims.size() && d < want.dims.size(); ++d) {
      if (have.dims[d] == want.dims[d])
        continue;
      if (!want.dims[d].empty() && !have.dims[d].empty())
        return user->emitOpError()
               << "needs operand #" << operand.getOperandNumber() << " split on ["
               << llvm::join(want.dims[d], ", ") << "] along dimension " << d
               << " but it is split on [" << llvm::join(have.dims[d], ", ")
               << "]; the partitioner cannot re-split a value yet";
      if (want.dims[d].empty() != (pass == 0))
        continue;
      if (!want.dims[d].empty()) {
        // A whole value meets a consumer of shards: take this rank's block.
        std::string reason = "this rank's block of " + nameOf(value) + " for " +
                             nameOf(user);
        Value slice = LocalSliceOp::create(
            b, value.getLoc(), value.getType(), value, meshRef, axesAttr(b, want.dims[d]), b.getI64IntegerAttr(d),
            b.getStringAttr(reason));
        Layout l = have;
        l.dims[d] = want.dims[d];
        record(slice, l);
        operand.set(slice);
        value = slice;
        have = l;
        continue;
      }
      auto key = std::make_tuple(value, static_cast<int64_t>(d),
                                 user->getBlock(), pipelined ? span : 0u);
      Value gathered = gatheredCopies.lookup(key);
      if (!gathered) {
        std::string reason = "gather dimension " + std::to_string(d) + " of " +
                             nameOf(value) + " for " + nameOf(user);
        gathered = AllGatherOp::create(
            b, value.getLoc(), value.getType(), value, meshRef,
            axesAttr(b, have.dims[d]), static_cast<int64_t>(d),
            /*async=*/UnitAttr(), b.getStringAttr(reason))
                       .getResult();
        Layout l = have;
        l.dims[d].clear();
        record(gathered, l);
        gatheredCopies[key] = gathered;
      }
      Layout l = layout(gathered);
      operand.set(gathered);
      value = gathered;
      have = l;
    }
  }
  return success();
}

std::optional<Layout> Partitioner::passThroughLayout(Operation *op) {
  Layout common = layout(op->getOperand(0));
  if (common.partial.empty() || common.partialKind != ReductionKind::Sum)
    return std::nullopt;
  for (Value v : op->getOperands()) {
    Layout l = layout(v);
    if (l.partial != common.partial || l.partialKind != common.partialKind ||
        l.dims.size() != common.dims.size())
      return std::nullopt;
    for (auto [mine, theirs] : llvm::zip(common.dims, l.dims)) {
      if (theirs.empty())
        continue;
      if (!mine.empty() && mine != theirs)
        return std::nullopt;
      mine = theirs;
    }
  }
  for (Value v : op->getOperands()) {
    Layout l = layout(v);
    for (size_t d = 0; d < l.dims.size(); ++d) {
      if (!l.dims[d].empty() || common.dims[d].empty())
        continue;
      for (StringRef a : common.dims[d]) {
        if (llvm::is_contained(l.partial, a))
          return std::nullopt;
        for (size_t e = 0; e < l.dims.size(); ++e)
          if (e != d && llvm::is_contained(l.dims[e], a))
            return std::nullopt;
      }
    }
  }
  return common;
}

void Partitioner::matchSplits(Operation *op, const Layout &common) {
  OpBuilder b(op);
  FlatSymbolRefAttr meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  for (OpOperand &operand : op->getOpOperands()) {
    Value value = operand.get();
    Layout have = layout(value);
    for (size_t d = 0; d < have.dims.size(); ++d) {
      if (have.dims[d] == common.dims[d])
        continue;
      std::string reason = "this rank's block of " + nameOf(value) + " for " +
                           nameOf(op) + ", before reducing their sum";
      // Typed globally like everything else here; localization below
      // shrinks the split dimension.
      value = LocalSliceOp::create(b, value.getLoc(), value.getType(), value,
                                   meshRef, axesAttr(b, common.dims[d]),
                                   b.getI64IntegerAttr(d),
                                   b.getStringAttr(reason));
      have.dims[d] = common.dims[d];
      record(value, have);
    }
    operand.set(value);
  }
}

LogicalResult Partitioner::partitionOps(Block &block) {
  for (Operation &op : llvm::make_early_inc_range(block)) {
    if (auto inner = dyn_cast<BlockOp>(op)) {
      ++span;
      // Inputs enter with their layout; the body resolves what it needs.
      Block &body = inner.getBody().front();
      for (auto [input, arg] : llvm::zip(inner.getInputs(), body.getArguments()))
        record(arg, layout(input));
      if (failed(partitionOps(body)))
        return failure();
      for (auto [yielded, result] :
           llvm::zip(inner.getYield().getValues(), inner.getResults()))
        record(result, layout(yielded));
      continue;
    }
    if (isa<YieldOp>(op))
      continue;
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      auto func = ret->getParentOfType<func::FuncOp>();
      for (OpOperand &operand : ret->getOpOperands()) {
        Layout want;
        want.dims.resize(layout(operand.get()).dims.size());
        if (auto updates = func.getResultAttrOfType<IntegerAttr>(
                operand.getOperandNumber(), LoomDialect::kUpdatesAttr))
          want = layout(func.getArgument(updates.getInt()));
        if (failed(reshard(operand, want)))
          return failure();
      }
      continue;
    }
    // Results: as propagation left them, except dimensions the op's rule
    // produces whole (a slice's gradient is built whole along the sliced
    // dimension even when a consumer asked for shards: the consumer gets a
    // local slice of it).
    auto ruleOp = dyn_cast<ShardingRuleOpInterface>(&op);
    std::optional<ShardingRule> rule;
    if (ruleOp)
      rule = ruleOp.getShardingRule();
    if (auto attrs = op.getAttrOfType<ArrayAttr>(LoomDialect::kShardingsAttr))
      for (auto [r, result, attr] : llvm::enumerate(op.getResults(), attrs)) {
        Layout l = layoutOf(cast<ShardingAttr>(attr));
        if (rule)
          for (auto [d, f] : llvm::enumerate(rule->resultFactors[r]))
            if (f == ShardingRule::kNoFactor && d < l.dims.size())
              l.dims[d].clear();
        record(result, l);
      }
    if (!rule)
      continue; // collectives already placed by hand keep their operands
    if (auto sumSquares = dyn_cast<SumSquaresOp>(op)) {
      if (failed(balanceSumSquares(sumSquares)))
        return failure();
      continue;
    }
    // An op linear in its operands (addition) passes partial sums through
    // when every operand holds the same ones: reduce once after it instead
    // of once per operand (a tied embedding's two gradient contributions).
    if (rule->partialSumsPassThrough && op.getNumResults() == 1)
      if (std::optional<Layout> common = passThroughLayout(&op)) {
        matchSplits(&op, *common);
        record(op.getResult(0), *common);
        continue;
      }
    // Operands: each dimension split the way its factor is split in the
    // op's results (as propagation decided), no partial sums. A factor no
    // result has (a contracted dimension) stays split only where the
    // results hold partial sums over the same axes; everything else, and
    // the dimensions the rule keeps whole, is read whole (a ZeRO-3
    // parameter meets activations split on the same axis: it is gathered).
    size_t numFactors = rule->factorSizes.size();
    SmallVector<SmallVector<StringRef>> factorAxes(numFactors);
    SmallVector<bool> inResults(numFactors, false);
    llvm::DenseSet<StringRef> partialAxes;
    for (auto [r, result] : llvm::enumerate(op.getResults())) {
      Layout l = layout(result);
      partialAxes.insert(l.partial.begin(), l.partial.end());
      for (auto [d, f] : llvm::enumerate(rule->resultFactors[r])) {
        if (f == ShardingRule::kNoFactor)
          continue;
        inResults[f] = true;
        if (d < l.dims.size() && !l.dims[d].empty())
          factorAxes[f] = l.dims[d];
      }
    }
    // A contracted factor stays split as the first operand holding it
    // split over partial axes has it; every operand of that factor is read
    // with that split (an embedding gradient of sequence-split rows takes
    // this rank's block of the whole ids).
    for (OpOperand &operand : op.getOpOperands()) {
      Layout have = layout(operand.get());
      for (auto [d, f] :
           llvm::enumerate(rule->operandFactors[operand.getOperandNumber()]))
        if (f != ShardingRule::kNoFactor && !inResults[f] &&
            rule->isReduction[f] && d < have.dims.size() &&
            factorAxes[f].empty() && !have.dims[d].empty() &&
            llvm::all_of(have.dims[d],
                         [&](StringRef a) { return partialAxes.contains(a); }))
          factorAxes[f] = have.dims[d];
    }
    for (OpOperand &operand : op.getOpOperands()) {
      Layout want = layout(operand.get());
      want.partial.clear();
      for (auto [d, f] :
           llvm::enumerate(rule->operandFactors[operand.getOperandNumber()])) {
        if (d >= want.dims.size())
          continue;
        if (f == ShardingRule::kNoFactor)
          want.dims[d].clear();
        else
          want.dims[d] = factorAxes[f];
      }
      if (failed(reshard(operand, want)))
        return failure();
    }
    // 3. A result holds partial sums only over the axes some contracted
    //    factor of its operands is now split over: where propagation made
    //    a result partial over an axis that no operand reads split (a
    //    dimension the op's rule keeps whole cleared the split that implied
    //    it), every rank computes the whole sum, and reducing it would
    //    count it once per rank.
    for (auto [r, result] : llvm::enumerate(op.getResults())) {
      llvm::DenseSet<StringRef> produced;
      for (OpOperand &operand : op.getOpOperands()) {
        Layout in = layout(operand.get());
        for (auto [d, f] : llvm::enumerate(
                 rule->operandFactors[operand.getOperandNumber()]))
          if (f != ShardingRule::kNoFactor && rule->isReduction[f] &&
              !llvm::is_contained(rule->resultFactors[r], f) &&
              d < in.dims.size())
            produced.insert(in.dims[d].begin(), in.dims[d].end());
      }
      Layout l = layout(result);
      size_t before = l.partial.size();
      llvm::erase_if(l.partial,
                     [&](StringRef a) { return !produced.contains(a); });
      if (l.partial.size() != before)
        record(result, l);
    }
    // A mean over tokens split across ranks divides by the global count.
    // (Types are still global here: they shrink after all ops are seen.)
    auto globalTokens = [&](Value targets) -> IntegerAttr {
      Layout l = layout(targets);
      int64_t n = cast<RankedTensorType>(targets.getType()).getNumElements();
      bool split = llvm::any_of(l.dims, [](const auto &a) { return !a.empty(); });
      return split ? Builder(op.getContext()).getI64IntegerAttr(n)
                   : IntegerAttr();
    };
    if (auto ce = dyn_cast<CrossEntropyOp>(op))
      if (IntegerAttr n = globalTokens(ce.getTargets()))
        ce.setNumTokensAttr(n);
    if (auto ce = dyn_cast<CrossEntropyGradOp>(op))
      if (IntegerAttr n = globalTokens(ce.getTargets()))
        ce.setNumTokensAttr(n);
    if (auto ce = dyn_cast<CrossEntropyFromSumsOp>(op))
      if (IntegerAttr n = globalTokens(ce.getRowMax()))
        ce.setNumTokensAttr(n);
    if (auto ce = dyn_cast<CrossEntropySumsGradOp>(op))
      if (IntegerAttr n = globalTokens(ce.getTargets()))
        ce.setNumTokensAttr(n);
  }
  return success();
}

/// Every operand of a sum of squares must hold a disjoint piece on each
/// rank over the axes the result is partial on, or the all-reduce counts
/// it more than once. An operand whole on some of those axes takes this
/// rank's block of a dimension they divide (no traffic); one no dimension
/// of which divides is summed in a second, replicated sum of squares that
/// is added after the reduction. Either way: one scalar all-reduce.
LogicalResult Partitioner::balanceSumSquares(SumSquaresOp op) {
  Layout result = layout(op.getResult());
  if (result.partial.empty())
    return success();
  OpBuilder b(op);
  SmallVector<Value> whole;
  SmallVector<unsigned> wholeOperands;
  for (OpOperand &operand : op->getOpOperands()) {
    Layout have = layout(operand.get());
    if (!have.partial.empty())
      return op.emitOpError() << "operand #" << operand.getOperandNumber()
                              << " holds partial sums; reduce it first";
    SmallVector<StringRef> missing;
    for (StringRef axis : result.partial)
      if (llvm::none_of(have.dims, [&](const auto &axes) {
            return llvm::is_contained(axes, axis);
          }))
        missing.push_back(axis);
    if (missing.empty())
      continue;
    auto shape = cast<RankedTensorType>(operand.get().getType()).getShape();
    std::optional<size_t> dim;
    for (size_t d = 0; d < shape.size() && !dim; ++d)
      if (have.dims[d].empty() && shape[d] % ways(missing) == 0)
        dim = d;
    if (!dim) {
      wholeOperands.push_back(operand.getOperandNumber());
      whole.push_back(operand.get());
      continue;
    }
    Layout want = have;
    want.dims[*dim] = missing;
    if (failed(reshard(operand, want)))
      return failure();
  }
  if (whole.empty())
    return success();
  // The indivisible ones, grouped by the partial axes that do split them:
  // none (the same on every rank), or some (a ZeRO-2/3 shard on dp that is
  // whole over tp). Each group's own sum, reduced over just its axes, is
  // added after the reduction of the rest.
  SmallVector<std::pair<SmallVector<StringRef>, SmallVector<Value>>> groups;
  for (Value v : whole) {
    Layout have = layout(v);
    SmallVector<StringRef> split;
    for (StringRef axis : result.partial)
      if (llvm::any_of(have.dims, [&](const auto &axes) {
            return llvm::is_contained(axes, axis);
          }))
        split.push_back(axis);
    auto *group = llvm::find_if(
        groups, [&](const auto &g) { return g.first == split; });
    if (group == groups.end())
      group = &groups.emplace_back(split, SmallVector<Value>());
    group->second.push_back(v);
  }
  for (unsigned i : llvm::reverse(wholeOperands))
    op->eraseOperand(i);
  Type scalar = op.getResult().getType();
  Value rest = op.getInputs().empty() ? Value() : op.getResult();
  b.setInsertionPointAfter(op);
  OpBuilder before(op);
  Value total = rest;
  SmallVector<AddOp> adds;
  for (auto &[axes, values] : groups) {
    auto sum = SumSquaresOp::create(before, op.getLoc(), scalar, values);
    Layout l;
    l.partial = axes;
    record(sum.getResult(), l);
    if (!total) {
      total = sum.getResult();
      continue;
    }
    auto add = AddOp::create(b, op.getLoc(), scalar, total, sum.getResult());
    record(add.getResult(), Layout());
    adds.push_back(add);
    total = add.getResult();
  }
  if (!rest) {
    op.getResult().replaceAllUsesWith(total);
    op.erase();
  } else if (!adds.empty()) {
    op.getResult().replaceAllUsesExcept(total, adds.front());
  }
  // Reduce both sides of each addition (over their own axes) before it.
  for (AddOp add : adds)
    if (failed(reshard(add->getOpOperand(0), Layout())) ||
        failed(reshard(add->getOpOperand(1), Layout())))
      return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Tensor parallelism
//===----------------------------------------------------------------------===//

/// A linear whose result holds partial sums (row-parallel: its K is split)
/// would add its bias on every rank, once per rank in the sum. The bias is
/// split off into an add of the reduced value, so it is added once, after
/// the all-reduce (Megatron's row-parallel linear). Runs on the shardings
/// propagation left, before anything is partitioned.
void splitBiasFromPartialSums(func::FuncOp func) {
  SmallVector<LinearOp> linears;
  func.walk([&](LinearOp linear) {
    auto attrs = linear->getAttrOfType<ArrayAttr>(LoomDialect::kShardingsAttr);
    if (linear.getBias() && attrs &&
        !cast<ShardingAttr>(attrs[0]).getPartialAxes().empty() &&
        cast<ShardingAttr>(attrs[0]).getPartialKind() == ReductionKind::Sum)
      linears.push_back(linear);
  });
  for (LinearOp linear : linears) {
    auto attrs = linear->getAttrOfType<ArrayAttr>(LoomDialect::kShardingsAttr);
    auto sharding = cast<ShardingAttr>(attrs[0]);
    OpBuilder b(linear);
    auto product =
        LinearOp::create(b, linear.getLoc(), linear.getType(),
                         linear.getInput(), linear.getWeight(), Value());
    product->setAttr(LoomDialect::kShardingsAttr, attrs);
    auto add = AddOp::create(
        b, NameLoc::get(b.getStringAttr(nameOf(linear.getOperation()) + ".bias")),
        linear.getType(), product.getResult(), linear.getBias());
    add->setAttr(LoomDialect::kShardingsAttr,
                 b.getArrayAttr({ShardingAttr::get(
                     b.getContext(), sharding.getMesh(), sharding.getDims(),
                     b.getArrayAttr({}))}));
    linear.getResult().replaceAllUsesWith(add.getResult());
    linear.erase();
  }
}

/// Attention whose channels are split (in whole heads) attends with the
/// heads this rank holds: num_heads becomes the local count.
LogicalResult Partitioner::localizeHeadCounts(func::FuncOp func) {
  auto localize = [&](Operation *op, Value qkv,
                      int64_t heads) -> FailureOr<int64_t> {
    Layout l = layout(qkv);
    if (l.dims.size() != 4)
      return heads;
    int64_t n = ways(l.dims[3]);
    if (heads % n != 0)
      return op->emitOpError()
             << "splits the channels of its " << heads << " heads over ["
             << llvm::join(l.dims[3], ", ") << "] (" << n
             << " ways), which does not give every rank whole heads; n_head "
                "must be divisible by "
             << n;
    return heads / n;
  };
  WalkResult walk = func.walk([&](Operation *op) {
    FailureOr<int64_t> local = int64_t(0);
    Builder b(op->getContext());
    if (auto att = dyn_cast<AttentionOp>(op)) {
      local = localize(op, att.getQkv(), att.getNumHeads());
      if (succeeded(local))
        att.setNumHeadsAttr(b.getI64IntegerAttr(*local));
    } else if (auto grad = dyn_cast<AttentionGradOp>(op)) {
      local = localize(op, grad.getQkv(), grad.getNumHeads());
      if (succeeded(local))
        grad.setNumHeadsAttr(b.getI64IntegerAttr(*local));
    }
    return failed(local) ? WalkResult::interrupt() : WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

/// Ops reading a vocabulary shard (an embedding table split on rows, logits
/// split on the last dimension) need to know which shard this rank holds:
/// name the axes so the kernel can find its offset.
void Partitioner::markVocabShards(func::FuncOp func) {
  Builder b(func.getContext());
  auto axesOf = [&](Value v, bool last) -> ArrayAttr {
    Layout l = layout(v);
    if (l.dims.empty())
      return {};
    ArrayRef<StringRef> axes = last ? l.dims.back() : l.dims.front();
    return axes.empty() ? ArrayAttr() : axesAttr(b, axes);
  };
  func.walk([&](Operation *op) {
    if (auto embedding = dyn_cast<EmbeddingOp>(op)) {
      if (ArrayAttr axes = axesOf(embedding.getTable(), /*last=*/false))
        embedding.setRowAxesAttr(axes);
    } else if (auto max = dyn_cast<RowMaxOp>(op)) {
      // Only padding needs the offset: which of its columns are real.
      if (max.getVocabSize())
        if (ArrayAttr axes = axesOf(max.getInput(), /*last=*/true))
          max.setVocabAxesAttr(axes);
    } else if (auto sums = dyn_cast<CrossEntropySumsOp>(op)) {
      if (ArrayAttr axes = axesOf(sums.getLogits(), /*last=*/true))
        sums.setVocabAxesAttr(axes);
    } else if (auto grad = dyn_cast<CrossEntropySumsGradOp>(op)) {
      if (ArrayAttr axes = axesOf(grad.getLogits(), /*last=*/true))
        grad.setVocabAxesAttr(axes);
    }
  });
}

/// The local type of a value with layout `l`.
Type localType(Type type, const Layout &l, function_ref<int64_t(ArrayRef<StringRef>)> ways) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return type;
  SmallVector<int64_t> shape(tensor.getShape());
  for (size_t d = 0; d < shape.size() && d < l.dims.size(); ++d)
    shape[d] /= ways(l.dims[d]);
  return RankedTensorType::get(shape, tensor.getElementType());
}

LogicalResult Partitioner::run(func::FuncOp func) {
  for (BlockArgument arg : func.getArguments())
    if (auto attr = func.getArgAttrOfType<ShardingAttr>(
            arg.getArgNumber(), LoomDialect::kShardingAttr))
      record(arg, layoutOf(attr));
  splitBiasFromPartialSums(func);
  if (failed(partitionOps(func.getBody().front())))
    return failure();
  if (failed(localizeHeadCounts(func)))
    return failure();
  markVocabShards(func);

  // Shrink every value to its local shape (the collectives inserted above
  // are typed in global shapes and shrink with everything else).
  auto ways = [&](ArrayRef<StringRef> axes) { return this->ways(axes); };
  func.walk([&](Block *block) {
    for (BlockArgument arg : block->getArguments())
      arg.setType(localType(arg.getType(), layout(arg), ways));
  });
  func.walk([&](Operation *op) {
    for (Value result : op->getResults())
      result.setType(localType(result.getType(), layout(result), ways));
    op->removeAttr(LoomDialect::kShardingsAttr);
  });
  // Argument shardings stay (global layout: the runtime needs it to place
  // each rank's slice of sharded parameters and optimizer state).
  func->setAttr(LoomDialect::kPartitionedAttr, UnitAttr::get(func.getContext()));
  auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
  func.setFunctionType(FunctionType::get(func.getContext(),
                                         func.getBody().getArgumentTypes(),
                                         ret.getOperandTypes()));
  return success();
}

struct LoomPartitionPass
    : mlir::loom::impl::LoomPartitionBase<LoomPartitionPass> {
  using Base::Base;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<MeshOp> meshes(module.getOps<MeshOp>());
    if (meshes.empty())
      return; // a single-rank program: nothing to partition
    if (meshes.size() > 1) {
      meshes[1].emitOpError() << "is a second mesh; a program is partitioned "
                                 "over exactly one mesh";
      return signalPassFailure();
    }
    bool pipelined = isPipelined(meshes.front());
    for (auto func : module.getOps<func::FuncOp>())
      if (!func.isExternal() &&
          failed(Partitioner(meshes.front(), pipelined).run(func)))
        return signalPassFailure();
    if (reduceOncePerStep && !pipelined)
      reduceOncePerStepUnpipelined(module);
  }

  /// Whether the mesh has a `pipeline-axis` of size > 1, which
  /// --loom-pipeline cuts the step over.
  bool isPipelined(MeshOp mesh) {
    std::optional<unsigned> pp = mesh.getShape().findAxis(pipelineAxis);
    return pp && mesh.getShape().getAxisSizes()[*pp] > 1;
  }

  /// DDP's no_sync: each training step's (`<f>_train`, `<f>_update`)
  /// gradients are summed over dp once per step in the update (see the
  /// pass description). A pipelined mesh is left to --loom-pipeline, which
  /// does the same per stage after cutting the step.
  void reduceOncePerStepUnpipelined(ModuleOp module) {
    llvm::StringMap<func::FuncOp> updates;
    SmallVector<func::FuncOp> steps;
    for (auto func : module.getOps<func::FuncOp>()) {
      auto train = func->getAttrOfType<DictionaryAttr>(LoomDialect::kTrainAttr);
      auto phase = train ? train.getAs<StringAttr>("phase") : StringAttr();
      if (phase && phase.getValue() == "update")
        updates[func.getSymName()] = func;
      else if (phase && phase.getValue() == "microbatch")
        steps.push_back(func);
    }
    for (func::FuncOp step : steps) {
      StringRef model = step.getSymName();
      if (!model.consume_back("_train"))
        continue;
      func::FuncOp update = updates.lookup((model + "_update").str());
      if (!update)
        continue;
      auto microbatches =
          step->getAttrOfType<DictionaryAttr>(LoomDialect::kTrainAttr)
              .getAs<IntegerAttr>("microbatches");
      bool oneMicrobatch = !microbatches || microbatches.getInt() <= 1;
      int64_t moved = reduceGradientsOncePerStep(
          {step}, {update}, /*stages=*/1, /*pipelineAxis=*/"",
          /*onlyWhereScattered=*/oneMicrobatch,
          /*wholeInLastMicrobatch=*/!oneMicrobatch);
      LLVM_DEBUG(llvm::dbgs() << step.getSymName() << ": " << moved
                              << " gradients reduced once per step\n");
      (void)moved;
    }
  }
};

} // namespace
