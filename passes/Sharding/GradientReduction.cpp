//===- GradientReduction.cpp - DP gradient sums once per step ---*- C++ -*-===//

#include "passes/Sharding/GradientReduction.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
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
  /// The accumulation `acc + g` and the result of its function that
  /// returns it.
  AddOp accumulation;
  unsigned result = 0;
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

/// Whether an update already sums a gradient norm's squares over `dpAxes`
/// (ZeRO-2/3: its sharded gradients' blocks are summed there).
bool sumsSquaresOverDp(func::FuncOp update, ArrayAttr dpAxes) {
  for (SumSquaresOp sum : update.getOps<SumSquaresOp>())
    for (Operation *user : sum.getResult().getUsers())
      if (auto ar = dyn_cast<AllReduceOp>(user))
        for (StringRef axis : ar.getAxes().getAsValueRange<StringAttr>())
          if (llvm::is_contained(dpAxes.getAsValueRange<StringAttr>(), axis))
            return true;
  return false;
}

/// How the update reads a once-per-step dp all-reduce `reduce`: through dp
/// slices of one dimension (and the norm) alone, directly or after one sum
/// over the stages that share the parameter (the tied wte's
/// group_all_reduce on pp, which commutes with the dp reduce-scatter: it
/// runs on other axes). Empty `slices` when it is read otherwise.
struct BlockReads {
  SmallVector<LocalSliceOp> slices;
  GroupAllReduceOp shared;
};

BlockReads readsAsDpBlocks(AllReduceOp reduce) {
  ArrayAttr dpAxes = reduce.getAxesAttr();
  BlockReads reads;
  Value whole = reduce.getResults().front();
  if (whole.hasOneUse())
    if (auto group = dyn_cast<GroupAllReduceOp>(*whole.getUsers().begin()))
      if (group.getReduction() == ReductionKind::Sum &&
          llvm::none_of(group.getAxes().getAsValueRange<StringAttr>(),
                        [&](StringRef axis) {
                          return llvm::is_contained(
                              dpAxes.getAsValueRange<StringAttr>(), axis);
                        })) {
        reads.shared = group;
        whole = group.getResult();
      }
  for (OpOperand &use : whole.getUses()) {
    auto slice = dyn_cast<LocalSliceOp>(use.getOwner());
    if (slice && slice.getAxesAttr() == dpAxes &&
        slice.getMeshAttr() == reduce.getMeshAttr() &&
        (reads.slices.empty() ||
         reads.slices.front().getDim() == slice.getDim()))
      reads.slices.push_back(slice);
    else if (!isa<SumSquaresOp>(use.getOwner()))
      return {};
  }
  return reads;
}

/// ZeRO-1 (moments sharded, gradients whole): the update reads only this
/// rank's dp block of a gradient, for AdamW and for the gradient norm. An
/// all-reduce of the accumulator followed by that slice becomes one
/// reduce-scatter (half the bytes: ZeRO-1 then moves what DDP does, as
/// Megatron's distributed optimizer) and the norm sums the blocks' squares
/// over dp. A parameter shared between stages (the tied wte) is summed
/// over them after the reduce-scatter, block by block (1/n of the whole
/// table's pp bytes), when its name is in `sharedScattered` (every stage
/// that holds it scatters its copy the same way; otherwise the stages'
/// sums would not match). An accumulator read whole anywhere (or through
/// other axes' slices) keeps its all-reduce; so does every one of an update
/// whose sum of squares is already reduced over dp (ZeRO-2/3). Returns the
/// reduce-scatters by accumulator name.
llvm::StringMap<ReduceScatterOp> scatterWhereSliced(
    func::FuncOp update,
    ArrayRef<std::pair<AllReduceOp, std::string>> reductions,
    const llvm::StringSet<> &sharedScattered) {
  llvm::StringMap<ReduceScatterOp> scattered;
  if (reductions.empty())
    return scattered;
  AllReduceOp first = reductions.front().first;
  ArrayAttr dpAxes = first.getAxesAttr();
  FlatSymbolRefAttr mesh = first.getMeshAttr();
  if (sumsSquaresOverDp(update, dpAxes))
    return scattered;

  // 1. Each reduction read only through dp slices of one dimension (and the
  //    norm) becomes a reduce-scatter.
  llvm::DenseSet<Value> blocks;
  for (auto [reduce, name] : reductions) {
    if (reduce.getAxesAttr() != dpAxes || reduce.getMeshAttr() != mesh)
      continue;
    BlockReads reads = readsAsDpBlocks(reduce);
    if (reads.slices.empty() ||
        (reads.shared && !sharedScattered.contains(name)))
      continue;
    OpBuilder b(reduce);
    Value acc = reduce.getInputs().front();
    auto scatter = ReduceScatterOp::create(
        b, reduce.getLoc(), reads.slices.front().getResult().getType(), acc,
        mesh, dpAxes, reads.slices.front().getDim(),
        ReductionKindAttr::get(b.getContext(), ReductionKind::Sum),
        b.getStringAttr(name + ": the micro-batches' local gradients "
                               "reduce-scattered over the data-parallel ranks "
                               "once per step; this rank updates its block"));
    Value block = scatter.getResult();
    Value whole = reduce.getResults().front();
    if (GroupAllReduceOp group = reads.shared) {
      // The stages' sum of this rank's block (every sharing stage's rank
      // at this dp coordinate holds the same block).
      b.setInsertionPoint(group);
      auto blockSum = GroupAllReduceOp::create(
          b, group.getLoc(), block.getType(), block, group.getMeshAttr(),
          group.getAxesAttr(), group.getMembersAttr(), group.getReductionAttr(),
          b.getStringAttr(group.getReason().value_or("").str() +
                          " (this rank's dp block)"));
      whole = group.getResult();
      block = blockSum.getResult();
    }
    whole.replaceAllUsesWith(block);
    for (LocalSliceOp slice : reads.slices) {
      slice.getResult().replaceAllUsesWith(block);
      slice.erase();
    }
    if (reads.shared)
      reads.shared.erase();
    reduce.erase();
    blocks.insert(block);
    scattered[name] = scatter;
  }
  if (blocks.empty())
    return scattered;

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
  return scattered;
}

/// Moves the accumulation `sum` right after the gradient it adds and
/// returns a builder placed behind it, where a last-micro-batch reduction
/// of the sum launches while the rest of the backward computes.
OpBuilder behindAccumulation(DeferrableSum &sum) {
  AddOp add = sum.accumulation;
  if (Operation *grad = add.getRhs().getDefiningOp())
    if (grad->getBlock() == add->getBlock())
      add->moveAfter(grad);
  OpBuilder b(add.getContext());
  b.setInsertionPointAfter(add);
  return b;
}

/// The location a last-micro-batch reduction of `name` is traced under:
/// what it synchronizes (the update's location would call it "optimizer").
Location gradSyncLoc(OpBuilder &b, StringRef name, Location at) {
  return NameLoc::get(b.getStringAttr(name + ".grad_sync"), at);
}

/// DDP's no_sync (more than one micro-batch): the once-per-step all-reduce
/// `reduce` of accumulator `name` at the top of an update moves into the
/// micro-batch function (or pipeline chunk backward) that returns the
/// accumulation `sum`, onto it, as a `last_microbatch` all-reduce: skipped
/// in the first M-1 micro-batches (the sum stays local), run in the last
/// one right after the accumulation, which moves up to right after the
/// gradient is computed, so that `--loom-schedule-comm` launches it while
/// the rest of the last backward computes (as PyTorch DDP's reducer does on
/// the micro-batch it syncs).
void reduceInLastMicrobatch(DeferrableSum &sum, AllReduceOp reduce,
                            StringRef name) {
  Value accumulated = sum.accumulation.getResult();
  // 1-2. The accumulation right after the gradient it adds, its sum
  //      reduced there, in the last micro-batch only.
  OpBuilder b = behindAccumulation(sum);
  auto last = AllReduceOp::create(
      b, gradSyncLoc(b, name, accumulated.getLoc()),
      TypeRange{accumulated.getType()}, ValueRange{accumulated},
      reduce.getMeshAttr(), reduce.getAxesAttr(), reduce.getReductionAttr(),
      /*async=*/UnitAttr(),
      b.getStringAttr(name + ": the micro-batches' local gradients summed "
                             "over the data-parallel ranks once per step, "
                             "in the last micro-batch"),
      /*last_microbatch=*/b.getUnitAttr());
  b.getBlock()->getTerminator()->setOperand(sum.result, last.getResult());
  // 3. The update reads the reduced accumulator as it is.
  reduce.getResult().replaceAllUsesWith(reduce.getInput());
  reduce.erase();
}

/// ZeRO-1's reduce-scatter of an accumulated gradient, `scatter` at the top
/// of the update (nothing to overlap there), moves into the micro-batch
/// function (or pipeline chunk backward) that returns the accumulation
/// `sum`, as an in-place `last_microbatch` reduce-scatter right after it:
/// skipped in the first M-1 micro-batches, run in the last one while the
/// rest of its backward computes (`--loom-schedule-comm` launches it). The
/// accumulator then holds this rank's reduced block (zeros elsewhere), and
/// the update reads that block with a local slice: no persistent shard
/// buffer, as Megatron's distributed optimizer reduce-scatters its
/// gradient buffer in place.
void scatterInLastMicrobatch(DeferrableSum &sum, ReduceScatterOp scatter,
                             StringRef name) {
  Value accumulated = sum.accumulation.getResult();
  OpBuilder b = behindAccumulation(sum);
  auto last = ReduceScatterOp::create(
      b, gradSyncLoc(b, name, accumulated.getLoc()), accumulated.getType(),
      accumulated, scatter.getMeshAttr(), scatter.getAxesAttr(),
      scatter.getDim(), scatter.getReductionAttr(),
      b.getStringAttr(name + ": the micro-batches' local gradients "
                             "reduce-scattered over the data-parallel ranks "
                             "once per step, in place in the last "
                             "micro-batch; this rank updates its block"),
      /*async=*/UnitAttr(), /*last_microbatch=*/b.getUnitAttr());
  b.getBlock()->getTerminator()->setOperand(sum.result, last.getResult());
  OpBuilder u(scatter);
  auto block = LocalSliceOp::create(
      u, scatter.getLoc(), scatter.getResult().getType(), scatter.getInput(),
      scatter.getMeshAttr(), scatter.getAxesAttr(),
      u.getI64IntegerAttr(scatter.getDim()),
      u.getStringAttr(name + ": this rank's block of the gradient the last "
                             "micro-batch reduce-scattered in place"));
  scatter.getResult().replaceAllUsesWith(block.getResult());
  scatter.erase();
}

/// `local_slice` on dp of (slices on other axes and slice_grad pads of) a
/// dp all-reduce: the partitioner reduces a partial sum whole and then
/// keeps the rank's block (the position embedding's gradient, padded from
/// seq rows to the table by slice_grad, at every ZeRO-2/3 step). The other
/// axes' slices and the pad commute with the dp sum, and a dp block of a dp
/// sum is a reduce-scatter: 1/n of the all-reduce's bytes. The pad then runs on the local partial sum, so the reduce-scatter
/// moves the whole table's rows, as PyTorch's FSDP does for wpe: fewer
/// bytes than the all-reduce of the seq rows only while seq is at least
/// half the table (otherwise the all-reduce stays).
/// Returns how many were rewritten.
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
    // 1. Up through other axes' slices and slice_grad pads (the position
    //    embedding's rows written into zeros of the table: linear, so the
    //    pad of a sum is the sum of the pads) to the all-reduce.
    Value v = slice.getInput();
    while (v.hasOneUse()) {
      Operation *def = v.getDefiningOp();
      if (auto inner = dyn_cast_or_null<LocalSliceOp>(def)) {
        if (!disjoint(inner.getAxesAttr()))
          break;
        v = inner.getInput();
      } else if (auto pad = dyn_cast_or_null<SliceGradOp>(def)) {
        v = pad.getDout();
      } else {
        break;
      }
    }
    auto ar = v.getDefiningOp<AllReduceOp>();
    if (!v.hasOneUse() || !ar || ar.getInputs().size() != 1 ||
        ar.getAsync() || ar.getReduction() != ReductionKind::Sum ||
        ar.getAxesAttr() != axes || ar.getMeshAttr() != slice.getMeshAttr())
      continue;
    // A ring reduce-scatter sends (n-1)/n of its input, an all-reduce twice
    // that: scatter only when that sends no more (after a pad, the padded
    // table must be at most twice the rows it pads: wpe at seq =
    // n_positions is half the bytes; a short sequence in a long table keeps
    // its all-reduce of seq rows).
    auto elements = [](Value x) {
      return cast<RankedTensorType>(x.getType()).getNumElements();
    };
    if (elements(slice.getInput()) > 2 * elements(ar.getInputs().front()))
      continue;
    // 2. The pads and other slices take the partial sum; the dp slice
    //    becomes the reduce-scatter.
    std::string reason = ar.getReason().value_or("").str();
    ar.getResults().front().replaceAllUsesWith(ar.getInputs().front());
    ar.erase();
    OpBuilder b(slice);
    auto scatter = ReduceScatterOp::create(
        b, slice.getLoc(), slice.getResult().getType(), slice.getInput(),
        slice.getMeshAttr(), axes, slice.getDim(),
        ReductionKindAttr::get(b.getContext(), ReductionKind::Sum),
        b.getStringAttr(reason + ", reduce-scattered to this rank's block"));
    slice.getResult().replaceAllUsesWith(scatter.getResult());
    slice.erase();
    ++rewritten;
  }
  return rewritten;
}

} // namespace

int64_t mlir::loom::reduceGradientsOncePerStep(ArrayRef<func::FuncOp> backward,
                                               ArrayRef<func::FuncOp> updates,
                                               int64_t stages,
                                               StringRef pipelineAxis,
                                               bool onlyWhereScattered,
                                               bool wholeInLastMicrobatch) {
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
      sum.accumulation = add;
      sum.result = i;
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
  std::vector<SmallVector<std::pair<AllReduceOp, std::string>>> perStageOnce(
      stages);
  for (int64_t s = 0; s < stages; ++s) {
    func::FuncOp update = updates[s];
    SmallVector<std::pair<AllReduceOp, std::string>> &onceReductions =
        perStageOnce[s];
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
  }

  // 3. A parameter shared between stages scatters only where every stage
  //    that holds it reads its sum as dp blocks of the same dimension in a
  //    ZeRO-1 update: then each sums its block with the others' (the
  //    members' sums agree in shape, so none waits on a mismatched one).
  struct SharedReads {
    size_t stagesScattering = 0;
    std::optional<uint64_t> dim;
    bool mismatched = false;
  };
  llvm::StringMap<SharedReads> sharedReads;
  for (int64_t s = 0; s < stages; ++s) {
    auto &once = perStageOnce[s];
    if (once.empty())
      continue;
    bool zero1 =
        !sumsSquaresOverDp(updates[s], once.front().first.getAxesAttr());
    for (auto &[reduce, name] : once) {
      BlockReads reads = readsAsDpBlocks(reduce);
      if (!reads.shared)
        continue;
      SharedReads &r = sharedReads[name];
      if (!zero1 || reads.slices.empty() ||
          (r.dim && *r.dim != reads.slices.front().getDim()) ||
          reads.shared.getMembers().size() < 2) {
        r.mismatched = true;
        continue;
      }
      r.dim = reads.slices.front().getDim();
      ++r.stagesScattering;
    }
  }
  llvm::StringSet<> sharedScattered;
  for (int64_t s = 0; s < stages; ++s)
    for (auto &[reduce, name] : perStageOnce[s]) {
      BlockReads reads = readsAsDpBlocks(reduce);
      const SharedReads &r = sharedReads.lookup(name);
      if (reads.shared && !r.mismatched &&
          r.stagesScattering == reads.shared.getMembers().size())
        sharedScattered.insert(name);
    }
  for (int64_t s = 0; s < stages; ++s) {
    llvm::StringMap<ReduceScatterOp> scattered =
        scatterWhereSliced(updates[s], perStageOnce[s], sharedScattered);
    // 4. Each once-per-step reduction goes back into the last micro-batch
    //    of the one backward function that accumulates it, where it
    //    overlaps that backward: ZeRO-1's reduce-scatters (in place, with
    //    any number of micro-batches) and, with more than one micro-batch,
    //    what stays a whole all-reduce (DDP: every gradient; ZeRO-1: those
    //    whose moments are whole over dp).
    for (auto &[reduce, name] : perStageOnce[s]) {
      // One accumulating function, its sum read by nothing but its return:
      // with several, the last micro-batch of one is not the end of the sum.
      SmallVector<DeferrableSum> &sums = perStage[s][name].sums;
      if (sums.size() != 1 ||
          !isa<func::FuncOp>(sums.front().accumulation->getParentOp()) ||
          !sums.front().accumulation.getResult().hasOneUse())
        continue;
      if (ReduceScatterOp scatter = scattered.lookup(name))
        scatterInLastMicrobatch(sums.front(), scatter, name);
      else if (wholeInLastMicrobatch)
        reduceInLastMicrobatch(sums.front(), reduce, name);
    }
  }
  for (func::FuncOp func : backward)
    scatterSlicedSums(func);
  return moved;
}
