//===- GradientReduction.cpp - DP gradient sums once per step -*- C++ -*-===//

#include "passes/Pipeline/GradientReduction.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Debug.h"

#include <map>

#define DEBUG_TYPE "loom-pipeline"

using namespace mlir;
using namespace mlir::loom;

namespace {

/// One accumulation `acc + g` of a backward function whose contributions
/// all pass through sum all-reduces on the same axes.
struct DeferrableSum {
  /// The all-reduces to drop (their inputs replace them).
  SmallVector<AllReduceOp> reductions;
  /// Their mesh and axes.
  FlatSymbolRefAttr mesh;
  ArrayAttr axes;
  /// Slices between them and the accumulator (on other axes: a tp slice
  /// of a dp sum is the dp sum of the tp slices).
  SmallVector<LocalSliceOp> slices;
};

/// Walks the tree of `g` (adds of same-typed values, local slices and
/// slice_grad pads, each used once) down to the all-reduces; fails when a
/// contribution reaches the accumulator without one, through another op, or
/// on other axes than the first.
LogicalResult collectReductions(Value g, DeferrableSum &sum) {
  Operation *def = g.getDefiningOp();
  if (!def || !g.hasOneUse())
    return failure();
  if (auto slice = dyn_cast<LocalSliceOp>(def)) {
    sum.slices.push_back(slice);
    return collectReductions(slice.getInput(), sum);
  }
  // The position embedding's gradient: the seq rows written into zeros of
  // the table's shape, a linear map, so the pad of the sum is the sum of
  // the pads (the once-per-step reduction then moves the whole table's
  // gradient, as PyTorch DDP does).
  if (auto pad = dyn_cast<SliceGradOp>(def))
    return collectReductions(pad.getDout(), sum);
  if (auto add = dyn_cast<AddOp>(def)) {
    if (add.getLhs().getType() != add.getType() ||
        add.getRhs().getType() != add.getType())
      return failure();
    return success(succeeded(collectReductions(add.getLhs(), sum)) &&
                   succeeded(collectReductions(add.getRhs(), sum)));
  }
  auto ar = dyn_cast<AllReduceOp>(def);
  if (!ar || ar.getInputs().size() != 1 || ar.getAsync() ||
      ar.getReduction() != ReductionKind::Sum)
    return failure();
  if (sum.axes && (sum.axes != ar.getAxesAttr() ||
                   sum.mesh != ar.getMeshAttr()))
    return failure();
  sum.mesh = ar.getMeshAttr();
  sum.axes = ar.getAxesAttr();
  sum.reductions.push_back(ar);
  return success();
}

/// The name of a function argument (loom.name), or "".
StringRef argName(func::FuncOp func, unsigned index) {
  auto name = func.getArgAttrOfType<StringAttr>(index, LoomDialect::kNameAttr);
  return name ? name.getValue() : StringRef();
}

/// ZeRO-1 (moments sharded, gradients whole): the update reads only this
/// rank's dp block of a gradient, for AdamW and for the gradient norm. An
/// all-reduce of the accumulator followed by that slice becomes one
/// reduce-scatter (half the bytes: ZeRO-1 then moves what DDP does, as
/// Megatron's distributed optimizer) and the norm sums the blocks' squares
/// over dp. An accumulator read whole anywhere (or through other axes'
/// slices, or summed with another stage's: the tied wte, whose other stage
/// may not scatter its copy) keeps its all-reduce; so does every one of an
/// update whose sum of squares is
/// already reduced over dp (ZeRO-2/3: its sharded gradients' blocks are
/// summed there).
void scatterWhereSliced(func::FuncOp update,
                        ArrayRef<std::pair<AllReduceOp, std::string>> reductions) {
  if (reductions.empty())
    return;
  AllReduceOp first = reductions.front().first;
  ArrayAttr dpAxes = first.getAxesAttr();
  FlatSymbolRefAttr mesh = first.getMeshAttr();
  auto reducesOverDp = [&](SumSquaresOp sum) {
    for (Operation *user : sum.getResult().getUsers())
      if (auto ar = dyn_cast<AllReduceOp>(user))
        for (StringRef axis : ar.getAxes().getAsValueRange<StringAttr>())
          if (llvm::is_contained(dpAxes.getAsValueRange<StringAttr>(), axis))
            return true;
    return false;
  };
  for (SumSquaresOp sum : update.getOps<SumSquaresOp>())
    if (reducesOverDp(sum))
      return;

  // 1. Each reduction read only through dp slices of one dimension (and the
  //    norm) becomes a reduce-scatter.
  llvm::DenseSet<Value> blocks;
  for (auto [reduce, name] : reductions) {
    if (reduce.getAxesAttr() != dpAxes || reduce.getMeshAttr() != mesh)
      continue;
    Value whole = reduce.getResults().front();
    SmallVector<LocalSliceOp> slices;
    bool onlySlicesAndNorm = true;
    for (OpOperand &use : whole.getUses()) {
      auto slice = dyn_cast<LocalSliceOp>(use.getOwner());
      if (slice && slice.getAxesAttr() == dpAxes &&
          (slices.empty() || slices.front().getDim() == slice.getDim()))
        slices.push_back(slice);
      else if (!isa<SumSquaresOp>(use.getOwner()))
        onlySlicesAndNorm = false;
    }
    if (slices.empty() || !onlySlicesAndNorm)
      continue;
    OpBuilder b(reduce);
    Value acc = reduce.getInputs().front();
    auto scatter = ReduceScatterOp::create(
        b, reduce.getLoc(), slices.front().getResult().getType(), acc,
        mesh, dpAxes, b.getI64IntegerAttr(slices.front().getDim()),
        ReductionKindAttr::get(b.getContext(), ReductionKind::Sum),
        b.getStringAttr(name + ": the micro-batches' local gradients "
                               "reduce-scattered over the data-parallel ranks "
                               "once per step; this rank updates its block"));
    Value block = scatter.getResult();
    whole.replaceAllUsesWith(block);
    for (LocalSliceOp slice : slices) {
      slice.getResult().replaceAllUsesWith(block);
      slice.erase();
    }
    reduce.erase();
    blocks.insert(block);
  }
  if (blocks.empty())
    return;

  // 2. The norm: the blocks' squares are partial over dp.
  SmallVector<SumSquaresOp> sums(update.getOps<SumSquaresOp>());
  for (SumSquaresOp sum : sums) {
    SmallVector<Value> whole, sharded;
    for (Value input : sum.getInputs())
      (blocks.contains(input) ? sharded : whole).push_back(input);
    if (sharded.empty())
      continue;
    OpBuilder b(sum);
    Location loc = sum.getLoc();
    auto scalar = sum.getType();
    Value shardSquares = SumSquaresOp::create(b, loc, scalar, sharded);
    Value total =
        AllReduceOp::create(
            b, loc, shardSquares, mesh, dpAxes,
            ReductionKindAttr::get(b.getContext(), ReductionKind::Sum),
            b.getStringAttr("gradient norm: squares of the reduce-scattered "
                            "gradient blocks summed over the data-parallel "
                            "ranks"))
            .getResults()
            .front();
    if (!whole.empty())
      total = AddOp::create(b, loc, SumSquaresOp::create(b, loc, scalar, whole),
                            total);
    sum.getResult().replaceAllUsesWith(total);
    sum.erase();
  }
}

/// `local_slice` on dp of (slices on other axes of) a dp all-reduce: the
/// partitioner reduces a partial sum whole and then keeps the rank's
/// block (with tensor parallelism, the embedding's full-vocabulary wte
/// gradient on its way into a ZeRO-2/3 accumulator). The other axes' slices
/// commute with the dp sum, and a dp block of a dp sum is a reduce-scatter:
/// 1/n of the all-reduce's bytes (n = 2: half; the wte of GPT-3 at tp=8:
/// 1/16). Returns how many were rewritten.
int64_t scatterSlicedSums(func::FuncOp func) {
  SmallVector<LocalSliceOp> candidates;
  func.walk([&](LocalSliceOp slice) { candidates.push_back(slice); });
  int64_t rewritten = 0;
  for (LocalSliceOp slice : candidates) {
    ArrayAttr axes = slice.getAxesAttr();
    auto disjoint = [&](ArrayAttr other) {
      return llvm::none_of(other.getAsValueRange<StringAttr>(),
                           [&](StringRef axis) {
                             return llvm::is_contained(
                                 axes.getAsValueRange<StringAttr>(), axis);
                           });
    };
    // 1. Up through other axes' slices to the all-reduce.
    SmallVector<LocalSliceOp> between;
    Value v = slice.getInput();
    while (auto inner = v.getDefiningOp<LocalSliceOp>()) {
      if (!v.hasOneUse() || !disjoint(inner.getAxesAttr()))
        break;
      between.push_back(inner);
      v = inner.getInput();
    }
    auto ar = v.getDefiningOp<AllReduceOp>();
    if (!ar || !v.hasOneUse() || ar.getInputs().size() != 1 ||
        ar.getAsync() || ar.getReduction() != ReductionKind::Sum ||
        ar.getAxesAttr() != axes || ar.getMeshAttr() != slice.getMeshAttr())
      continue;
    // 2. The other slices take the partial sum; the dp slice becomes the
    //    reduce-scatter.
    v.replaceAllUsesWith(ar.getInputs().front());
    OpBuilder b(slice);
    auto scatter = ReduceScatterOp::create(
        b, slice.getLoc(), slice.getResult().getType(), slice.getInput(),
        slice.getMeshAttr(), axes, slice.getDimAttr(),
        ReductionKindAttr::get(b.getContext(), ReductionKind::Sum),
        b.getStringAttr(ar.getReason().value_or("").str() +
                        ", reduce-scattered to this rank's block"));
    slice.getResult().replaceAllUsesWith(scatter.getResult());
    slice.erase();
    ar.erase();
    ++rewritten;
  }
  return rewritten;
}

} // namespace

int64_t mlir::loom::reduceGradientsOncePerStep(ArrayRef<func::FuncOp> backward,
                                               ArrayRef<func::FuncOp> updates,
                                               int64_t stages,
                                               StringRef pipelineAxis,
                                               bool onlyWhereScattered) {
  // 1. Per stage and accumulator (by parameter name): its accumulations in
  //    the stage's backward functions, and whether all may be deferred.
  struct Candidate {
    SmallVector<DeferrableSum> sums;
    bool deferrable = true;
  };
  std::vector<std::map<std::string, Candidate>> perStage(stages);
  for (auto [chunk, constFunc] : llvm::enumerate(backward)) {
    func::FuncOp func = constFunc;
    auto ret = cast<func::ReturnOp>(func.getBody().front().getTerminator());
    for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
      auto updatesAttr =
          func.getResultAttrOfType<IntegerAttr>(i, LoomDialect::kUpdatesAttr);
      if (!updatesAttr)
        continue;
      unsigned accIndex = updatesAttr.getInt();
      StringRef name = argName(func, accIndex);
      if (name.empty())
        continue; // no name to find it by in the update: stays as it is
      Candidate &c = perStage[chunk % stages][name.str()];
      auto add = ret.getOperand(i).getDefiningOp<AddOp>();
      DeferrableSum sum;
      auto sumsOver = [&](ArrayAttr axes) {
        return llvm::any_of(axes.getAsValueRange<StringAttr>(),
                            [&](StringRef axis) {
                              return llvm::is_contained(
                                  sum.axes.getAsValueRange<StringAttr>(),
                                  axis);
                            });
      };
      if (!add || add.getLhs() != func.getArgument(accIndex) ||
          failed(collectReductions(add.getRhs(), sum)) ||
          llvm::is_contained(sum.axes.getAsValueRange<StringAttr>(),
                             pipelineAxis) ||
          llvm::any_of(sum.slices, [&](LocalSliceOp slice) {
            // A dp block of a dp sum is not the dp sum of the blocks.
            return sumsOver(slice.getAxesAttr());
          })) {
        c.deferrable = false;
        continue;
      }
      if (!c.sums.empty() && (c.sums.front().axes != sum.axes ||
                              c.sums.front().mesh != sum.mesh))
        c.deferrable = false;
      c.sums.push_back(std::move(sum));
    }
  }

  // 2. Drop the per-micro-batch all-reduces; all-reduce the accumulator at
  //    the start of the stage's update instead.
  int64_t moved = 0;
  for (int64_t s = 0; s < stages; ++s) {
    func::FuncOp update = updates[s];
    SmallVector<std::pair<AllReduceOp, std::string>> onceReductions;
    Block &entry = update.getBody().front();
    OpBuilder b(update.getContext());
    b.setInsertionPointToStart(&entry);
    for (auto &[name, c] : perStage[s]) {
      if (!c.deferrable || c.sums.empty())
        continue;
      std::optional<unsigned> arg;
      for (unsigned i = 0; i < update.getNumArguments() && !arg; ++i) {
        auto role =
            update.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
        if (role && role.getValue() == Role::Grad && argName(update, i) == name)
          arg = i;
      }
      if (!arg || update.getArgument(*arg).use_empty())
        continue;
      // Read only as dp blocks of one dimension (and by the norm): the
      // shape scatterWhereSliced turns into a reduce-scatter.
      auto readAsBlocks = [&](BlockArgument acc) {
        std::optional<uint64_t> dim;
        for (Operation *user : acc.getUsers()) {
          if (isa<SumSquaresOp>(user))
            continue;
          auto slice = dyn_cast<LocalSliceOp>(user);
          if (!slice || slice.getAxesAttr() != c.sums.front().axes ||
              (dim && *dim != slice.getDim()))
            return false;
          dim = slice.getDim();
        }
        return dim.has_value();
      };
      if (onlyWhereScattered && !readAsBlocks(update.getArgument(*arg)))
        continue;
      for (DeferrableSum &sum : c.sums)
        for (AllReduceOp ar : sum.reductions) {
          ar.getResults().front().replaceAllUsesWith(ar.getInputs().front());
          ar.erase();
        }
      BlockArgument acc = update.getArgument(*arg);
      const DeferrableSum &first = c.sums.front();
      auto reduce = AllReduceOp::create(
          b, acc.getLoc(), acc, first.mesh, first.axes,
          ReductionKindAttr::get(b.getContext(), ReductionKind::Sum),
          b.getStringAttr(name + ": the micro-batches' local gradients "
                                 "summed over the data-parallel ranks once "
                                 "per step"));
      acc.replaceAllUsesExcept(reduce.getResults().front(), reduce);
      onceReductions.push_back({reduce, name});
      ++moved;
      LLVM_DEBUG(llvm::dbgs() << "stage " << s << ": " << name
                              << " all-reduced once per step\n");
    }
    scatterWhereSliced(update, onceReductions);
  }
  for (func::FuncOp func : backward)
    scatterSlicedSums(func);
  return moved;
}
