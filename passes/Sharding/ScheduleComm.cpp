//===- ScheduleComm.cpp - Gradient buckets launched early -------*- C++ -*-===//
//
// `--loom-schedule-comm`: the partitioner places each all-reduce right
// before its first user, which for gradients is the accumulation after the
// whole backward pass: one small collective per tensor, all at the end,
// nothing overlapped. This pass does what DDP's reducer does: coalesce
// them into buckets in the order gradients become ready and launch each
// bucket as soon as its last gradient exists, so it runs while the rest of
// the backward pass computes. ZeRO-2/3's reduce-scatters launch as their
// gradient exists, a block's gradients bucketed (FSDP reduce-scatters a
// block's flat gradient), and are accumulated one block later; ZeRO-1's
// in-place ones launch behind the last micro-batch's accumulations,
// bucketed, and complete at a loom.wait after the next block. ZeRO-3's
// gathers of a block's parameters are prefetched during the previous block,
// bucketed (FSDP gathers a block's flat parameter at once). ZeRO-1/2's
// gathers of the updated parameters go out in buckets during the update,
// as the AdamW steps produce them (DeepSpeed's bucketed all-gather of the
// updated partitions). Collectives over a pipeline axis stay blocking
// (their members run other stages' functions).
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/IR/OpShapes.h"
#include "passes/Passes.h"
#include "passes/Sharding/OpNames.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMSCHEDULECOMM
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

/// One all-reduce the pass may move, with where it can go.
struct Candidate {
  AllReduceOp op;
  /// Position (in the function's top level) of its last input's producer;
  /// -1 when every input is a function argument.
  int64_t ready = -1;
  /// Position of the first op that reads one of its results.
  int64_t firstUse = 0;
  int64_t bytes = 0;
};

/// Collectives grouped by what lets them share one, groups in the order
/// their first member appears (deterministic bucket numbering).
template <typename Key, typename Member>
using Groups = SmallVector<std::pair<Key, SmallVector<Member>>>;

/// Adds `member` to the group of `key`, a new one at the end if none.
template <typename Key, typename Member>
void addToGroup(Groups<Key, Member> &groups, const Key &key,
                const Member &member) {
  auto group =
      llvm::find_if(groups, [&](const auto &g) { return g.first == key; });
  if (group == groups.end()) {
    groups.push_back({key, {}});
    group = std::prev(groups.end());
  }
  group->second.push_back(member);
}

/// Splits one group's `members`, in order, into buckets of at most
/// `capacity` bytes (a larger member alone) and hands each bucket of two or
/// more to `emit` with its bytes.
template <typename Op>
void emitBuckets(ArrayRef<Op> members, int64_t capacity,
                 llvm::function_ref<int64_t(Op)> bytesOfMember,
                 llvm::function_ref<void(ArrayRef<Op>, int64_t)> emit) {
  SmallVector<Op> bucket;
  int64_t bucketBytes = 0;
  auto flush = [&]() {
    if (bucket.size() > 1)
      emit(bucket, bucketBytes);
    bucket.clear();
    bucketBytes = 0;
  };
  for (Op member : members) {
    int64_t bytes = bytesOfMember(member);
    if (!bucket.empty() && bucketBytes + bytes > capacity)
      flush();
    bucket.push_back(member);
    bucketBytes += bytes;
  }
  flush();
}

/// Whether `a` comes before `b` in their (shared) block.
template <typename Op> bool beforeInBlock(Op a, Op b) {
  return a->isBeforeInBlock(b);
}

/// The member of `ops` (ops of one block) that comes last.
template <typename Op> Op lastInBlock(ArrayRef<Op> ops) {
  return *llvm::max_element(ops, beforeInBlock<Op>);
}

/// The operands, result types and split dimensions of the one collective
/// replacing a bucket of one-value all_gathers or reduce_scatters: the
/// members', in order.
struct BucketSignature {
  SmallVector<Value> inputs;
  SmallVector<Type> types;
  SmallVector<int64_t> dims;
};
template <typename Op> BucketSignature bucketSignature(ArrayRef<Op> bucket) {
  BucketSignature signature;
  for (Op member : bucket) {
    signature.inputs.push_back(member.getInput());
    signature.types.push_back(member.getResult().getType());
    signature.dims.push_back(member.getDim());
  }
  return signature;
}

/// Hands each member's uses to its result of `merged` and erases it.
template <typename Op> void replaceBucket(ArrayRef<Op> bucket, Op merged) {
  for (auto [member, result] : llvm::zip(bucket, merged.getResults())) {
    Op op = member;
    op.getResult().replaceAllUsesWith(result);
    op.erase();
  }
}

/// The reduce-scatters that may share one collective: launched behind the
/// same op (ZeRO-2/3's) or completed behind the same block (ZeRO-1's in
/// place), the `anchor`, with the same axes, reduction and element type.
/// Each member keeps its own split dimension (the bucket's `dims`).
struct ScatterBucketKey {
  Operation *anchor;
  Attribute mesh, axes, reduction;
  Type elementType;
  bool operator==(const ScatterBucketKey &o) const {
    return anchor == o.anchor && mesh == o.mesh && axes == o.axes &&
           reduction == o.reduction && elementType == o.elementType;
  }
};

/// The prefetched gathers that may share one collective (besides going
/// out before the same block), each member along its own dimension.
struct GatherBucketKey {
  Attribute mesh, axes;
  Type elementType;
  bool operator==(const GatherBucketKey &o) const {
    return mesh == o.mesh && axes == o.axes && elementType == o.elementType;
  }
};

/// The all-reduces that may share one collective.
struct BucketKey {
  Attribute mesh, axes, reduction;
  Type elementType;
  /// A DDP step's last-micro-batch reductions run in one micro-batch only.
  bool lastMicrobatch;
  bool operator==(const BucketKey &o) const {
    return mesh == o.mesh && axes == o.axes && reduction == o.reduction &&
           elementType == o.elementType && lastMicrobatch == o.lastMicrobatch;
  }
};

struct LoomScheduleCommPass
    : mlir::loom::impl::LoomScheduleCommBase<LoomScheduleCommPass> {
  using Base::Base;

  /// Mesh axes of the pipeline's sends and receives.
  llvm::StringSet<> pipelineAxes;
  /// Whether a collective over `axes` spans pipeline stages: its members
  /// run other stages' functions, where the matching collective may stay
  /// blocking, so it stays as it is.
  bool overPipelineAxis(ArrayAttr axes) const {
    return llvm::any_of(axes.getAsValueRange<StringAttr>(),
                        [&](StringRef axis) {
                          return pipelineAxes.contains(axis);
                        });
  }
  /// A bucket's capacity (`bucket-mb`) in bytes; 0: no buckets.
  int64_t bucketCapacityBytes() const {
    return static_cast<int64_t>(bucketMb * 1024.0 * 1024.0);
  }

  /// Number the reduce-scatter and all-gather buckets of the module (for
  /// their reasons).
  int scatterBucketIndex = 0, gatherBucketIndex = 0;
  /// The gather buckets this run formed, still to be numbered.
  llvm::DenseSet<Operation *> newGatherBuckets;

  void scheduleFunction(func::FuncOp func) {
    Block &top = func.getBody().front();
    llvm::DenseMap<Operation *, int64_t> position;
    SmallVector<Operation *> ops;
    for (Operation &op : top) {
      position[&op] = static_cast<int64_t>(ops.size());
      ops.push_back(&op);
    }
    // The top-level op a (possibly nested) user belongs to.
    auto topLevelPosition = [&](Operation *user) {
      while (user->getBlock() != &top)
        user = user->getParentOp();
      return position.lookup(user);
    };

    Groups<BucketKey, Candidate> groups;
    for (auto ar : top.getOps<AllReduceOp>()) {
      if (ar.getAsync())
        continue; // already scheduled
      // Over the pipeline axis the other members run another stage's
      // function, where the matching all-reduce may stay blocking; MPI does
      // not match a nonblocking collective with a blocking one.
      if (overPipelineAxis(ar.getAxes()))
        continue;
      // A value reduced twice stays where it is (its producer would move).
      if (llvm::any_of(ar.getInputs(), [](Value v) {
            return v.getDefiningOp<AllReduceOp>() != nullptr;
          }))
        continue;
      Candidate c{ar, -1, static_cast<int64_t>(ops.size()), 0};
      for (Value input : ar.getInputs()) {
        if (Operation *def = input.getDefiningOp())
          c.ready = std::max(c.ready, position.lookup(def));
        c.bytes += bytesOf(input);
      }
      for (Value result : ar.getResults())
        for (Operation *user : result.getUsers())
          c.firstUse = std::min(c.firstUse, topLevelPosition(user));
      BucketKey key{ar.getMeshAttr(), ar.getAxes(), ar.getReductionAttr(),
                    getElementTypeOrSelf(ar.getInputs().front().getType()),
                    ar.getLastMicrobatch()};
      addToGroup(groups, key, c);
    }

    const int64_t capacity = bucketCapacityBytes();
    int bucketIndex = 0;
    for (auto &[key, candidates] : groups) {
      llvm::stable_sort(candidates, [&](const Candidate &a,
                                        const Candidate &b) {
        return a.ready != b.ready
                   ? a.ready < b.ready
                   : position.lookup(a.op) < position.lookup(b.op);
      });
      SmallVector<Candidate> bucket;
      int64_t bucketBytes = 0, bucketFirstUse = 0;
      auto flush = [&]() {
        if (!bucket.empty())
          emitBucket(bucket, ops, bucketIndex++);
        bucket.clear();
        bucketBytes = 0;
      };
      for (const Candidate &c : candidates) {
        bool fits = capacity > 0 && bucketBytes + c.bytes <= capacity &&
                    c.ready < bucketFirstUse;
        if (!bucket.empty() && !fits)
          flush();
        if (bucket.empty())
          bucketFirstUse = c.firstUse;
        bucket.push_back(c);
        bucketBytes += c.bytes;
        bucketFirstUse = std::min(bucketFirstUse, c.firstUse);
      }
      flush();
    }
  }

  /// Replaces the bucket's all-reduces by one, right after the last
  /// producer of its inputs (or at the top when all are arguments).
  void emitBucket(ArrayRef<Candidate> bucket, ArrayRef<Operation *> ops,
                  int index) {
    int64_t ready = -1, bytes = 0;
    SmallVector<Value> inputs;
    SmallVector<Type> types;
    for (Candidate c : bucket) {
      ready = std::max(ready, c.ready);
      bytes += c.bytes;
      for (Value input : c.op.getInputs()) {
        inputs.push_back(input);
        types.push_back(input.getType());
      }
    }
    AllReduceOp first = Candidate(bucket.front()).op;
    OpBuilder b(first);
    if (ready >= 0)
      b.setInsertionPointAfter(ops[ready]);
    else
      b.setInsertionPointToStart(first->getBlock());
    // One member keeps its own reason (and the partitioner's account of it).
    std::string reason;
    if (bucket.size() == 1 && first.getInputs().size() == 1 &&
        first.getReason())
      reason = first.getReason()->str();
    else
      reason = llvm::formatv("gradient bucket {0}: {1} tensors, {2} bytes{3}",
                             index, inputs.size(), bytes,
                             first.getLastMicrobatch()
                                 ? ", in the last micro-batch"
                                 : "")
                   .str();
    if (ready >= 0)
      reason += ", launched after " + describeOp(ops[ready]);
    auto merged = AllReduceOp::create(
        b, first.getLoc(), types, inputs, first.getMeshAttr(),
        first.getAxes(), first.getReductionAttr(),
        overlap ? b.getUnitAttr() : UnitAttr(), b.getStringAttr(reason),
        first.getLastMicrobatchAttr());
    unsigned next = 0;
    for (Candidate c : bucket) {
      for (Value result : c.op.getResults())
        result.replaceAllUsesWith(merged.getResults()[next++]);
      c.op.erase();
    }
  }

  /// ZeRO-3 prefetch (FSDP's forward/backward prefetch): the gathers a
  /// block makes of its own inputs (sharded parameters) move out of it, to
  /// just before the previous block, asynchronous, and the gathered values
  /// enter the block as extra inputs: they travel while the previous block
  /// computes. Not when the previous block takes the same parameter (a
  /// block's forward right before its backward): it gathers it itself.
  void prefetchGathers(func::FuncOp func) {
    SmallVector<BlockOp> blocks(func.getBody().front().getOps<BlockOp>());
    for (size_t i = 1; i < blocks.size(); ++i) {
      BlockOp block = blocks[i], previous = blocks[i - 1];
      Block &body = block.getBody().front();
      llvm::DenseSet<Value> previousInputs(previous.getInputs().begin(),
                                           previous.getInputs().end());
      // Parameters only (the function's arguments): an activation's shard
      // gathered under sequence parallelism may not exist yet before the
      // previous block, and one that does (a forward stash) would stay
      // whole through it, costing the memory sequence parallelism saves.
      auto isFunctionArgument = [&](Value v) {
        auto arg = dyn_cast<BlockArgument>(v);
        return arg && arg.getOwner() == &func.getBody().front();
      };
      SmallVector<AllGatherOp> gathers;
      for (auto gather : body.getOps<AllGatherOp>()) {
        auto arg = dyn_cast<BlockArgument>(gather.getInput());
        if (arg && arg.getOwner() == &body && !gather.getAsync() &&
            !previousInputs.contains(block.getInputs()[arg.getArgNumber()]) &&
            isFunctionArgument(block.getInputs()[arg.getArgNumber()]))
          gathers.push_back(gather);
      }
      SmallVector<AllGatherOp> prefetched;
      for (AllGatherOp gather : gathers) {
        Value shard = block.getInputs()[cast<BlockArgument>(gather.getInput())
                                            .getArgNumber()];
        OpBuilder b(previous);
        std::string reason =
            (gather.getReason() ? gather.getReason()->str() : "gather") +
            ", prefetched during " + previous.getLabel().str();
        auto early = AllGatherOp::create(
            b, gather.getLoc(), gather.getResult().getType(), shard,
            gather.getMeshAttr(), gather.getAxes(), gather.getDim(),
            overlap ? b.getUnitAttr() : UnitAttr(), b.getStringAttr(reason));
        block->insertOperands(block->getNumOperands(), early.getResult());
        BlockArgument whole =
            body.addArgument(early.getResult().getType(), gather.getLoc());
        gather.getResult().replaceAllUsesWith(whole);
        gather.erase();
        prefetched.push_back(early);
      }
      bucketGathers(prefetched, [&](ArrayRef<AllGatherOp>) {
        return GatherBucketPlace{
            previous, "prefetched during " + previous.getLabel().str()};
      });
    }
  }

  /// The gathers a block still makes of its own parameters (the first
  /// block's forward; a backward right after its forward, or every block
  /// without prefetch) are bucketed too: they move to the top of the
  /// block, where their shards (block arguments) already are, and share
  /// buckets as the prefetched ones do. The bucket is needed by the
  /// block's first ops, so it stays blocking.
  void bucketOwnGathers(func::FuncOp func) {
    if (bucketCapacityBytes() <= 0)
      return;
    Block &top = func.getBody().front();
    for (BlockOp block : top.getOps<BlockOp>()) {
      Block &body = block.getBody().front();
      SmallVector<AllGatherOp> own;
      for (auto gather : body.getOps<AllGatherOp>()) {
        auto arg = dyn_cast<BlockArgument>(gather.getInput());
        auto outer = arg && arg.getOwner() == &body
                         ? dyn_cast<BlockArgument>(
                               block.getInputs()[arg.getArgNumber()])
                         : BlockArgument();
        if (!gather.getAsync() && gather.getInputs().size() == 1 && outer &&
            outer.getOwner() == &top)
          own.push_back(gather);
      }
      if (own.size() < 2)
        continue;
      for (AllGatherOp gather : llvm::reverse(own))
        gather->moveBefore(&body.front());
      // The first op after them (the terminator at worst) stays: the
      // buckets go before it.
      Operation *first = own.back()->getNextNode();
      bucketGathers(own, [&](ArrayRef<AllGatherOp>) {
        return GatherBucketPlace{first,
                                 "at the start of " + block.getLabel().str()};
      });
    }
  }

  /// Where a gather bucket goes: right before `before`, its reason ending
  /// in `where`.
  struct GatherBucketPlace {
    Operation *before;
    std::string where;
  };

  /// FSDP gathers a block's parameters with one collective: `gathers`
  /// (prefetched before one block, at the start of one, or the update's)
  /// with the same axes and element type, whatever dimension each gathers,
  /// share buckets of at most `bucket-mb` MiB of gathered bytes (a larger
  /// tensor alone), each placed where `place` says (where its members'
  /// inputs all exist). Returns the buckets formed.
  SmallVector<AllGatherOp> bucketGathers(
      ArrayRef<AllGatherOp> gathers,
      llvm::function_ref<GatherBucketPlace(ArrayRef<AllGatherOp>)> place) {
    SmallVector<AllGatherOp> buckets;
    const int64_t capacity = bucketCapacityBytes();
    if (capacity <= 0)
      return buckets;
    Groups<GatherBucketKey, AllGatherOp> groups;
    for (AllGatherOp gather : gathers)
      addToGroup(groups,
                 GatherBucketKey{gather.getMeshAttr(), gather.getAxes(),
                                 getElementTypeOrSelf(gather.getInput())},
                 gather);
    for (auto &[key, members] : groups)
      emitBuckets<AllGatherOp>(
          members, capacity,
          [](AllGatherOp gather) { return bytesOf(gather.getResult()); },
          [&](ArrayRef<AllGatherOp> bucket, int64_t bytes) {
            GatherBucketPlace at = place(bucket);
            buckets.push_back(
                emitGatherBucket(bucket, bytes, at.before, at.where));
          });
    return buckets;
  }

  /// Names the function's gather buckets "all-gather bucket N" in program
  /// order (prefetched ones are formed first, a block's own after).
  void numberGatherBuckets(func::FuncOp func) {
    func.walk([&](AllGatherOp gather) {
      if (newGatherBuckets.erase(gather))
        gather.setReason(("all-gather bucket " + Twine(gatherBucketIndex++) +
                          ": " + *gather.getReason())
                             .str());
    });
  }

  /// Replaces the bucket's gathers by one, right before `before`, and
  /// returns it; `where` completes its reason.
  AllGatherOp emitGatherBucket(ArrayRef<AllGatherOp> bucket, int64_t bytes,
                               Operation *before, StringRef where) {
    BucketSignature signature = bucketSignature(bucket);
    AllGatherOp first = bucket.front();
    OpBuilder b(before);
    // Numbered afterwards, in program order (numberGatherBuckets).
    std::string reason =
        llvm::formatv("{0} parameters, {1} bytes, {2}",
                      signature.inputs.size(), bytes, where)
            .str();
    auto merged = AllGatherOp::create(
        b, first.getLoc(), signature.types, signature.inputs,
        first.getMeshAttr(), first.getAxes(),
        b.getDenseI64ArrayAttr(signature.dims), first.getAsyncAttr(),
        b.getStringAttr(reason));
    newGatherBuckets.insert(merged);
    replaceBucket(bucket, merged);
    return merged;
  }

  /// ZeRO-1/2's gathers of the updated parameters (DeepSpeed's all-gather
  /// of the updated partitions, Megatron's distributed optimizer's
  /// parameter all-gather): the partitioner places each right before the
  /// return, after every AdamW step, one blocking collective per tensor
  /// (148 for GPT-2). A gather whose result only updates an argument in
  /// place (its storage is the parameter's, so moving it costs no memory)
  /// moves to right after the shard it gathers is computed, `async`; those
  /// with the same axes and element type share buckets of at most
  /// `bucket-mb` MiB gathered, each launched behind its last member and
  /// completed at a loom.wait behind the next bucket: the gathers travel
  /// while the remaining AdamW steps compute, and at most two buckets'
  /// buffers are live at once.
  void launchParameterGathers(func::FuncOp func) {
    Block &top = func.getBody().front();
    Operation *ret = top.getTerminator();
    auto updatesArgument = [&](OpOperand &use) {
      return use.getOwner() == ret &&
             func.getResultAttr(use.getOperandNumber(),
                                LoomDialect::kUpdatesAttr);
    };
    SmallVector<AllGatherOp> gathers;
    for (auto gather : top.getOps<AllGatherOp>()) {
      Operation *producer = gather.getInputs().size() == 1
                                ? gather.getInput().getDefiningOp()
                                : nullptr;
      if (gather.getAsync() || !producer || producer->getBlock() != &top ||
          gather.getResult().use_empty() ||
          !llvm::all_of(gather.getResult().getUses(), updatesArgument) ||
          overPipelineAxis(gather.getAxes()))
        continue;
      gathers.push_back(gather);
    }
    // 1. Each right behind its shard's producer, in flight while the next
    //    AdamW steps compute.
    for (AllGatherOp gather : gathers) {
      Operation *producer = gather.getInput().getDefiningOp();
      gather->moveAfter(producer);
      gather.setReason((gather.getReason() ? gather.getReason()->str()
                                           : std::string("gather")) +
                       ", launched after " + describeOp(producer));
      if (overlap)
        gather.setAsync(true);
    }
    // 2. Buckets, each where its last member went (its members' shards
    //    all exist there).
    SmallVector<AllGatherOp> buckets =
        bucketGathers(gathers, [](ArrayRef<AllGatherOp> bucket) {
          AllGatherOp last = lastInBlock(bucket);
          return GatherBucketPlace{
              last->getNextNode(),
              "updated, launched after " +
                  describeOp(last.getInput().getDefiningOp())};
        });
    // 3. Bucket k completes behind bucket k + 1 (the last at the end).
    if (!overlap)
      return;
    llvm::sort(buckets, beforeInBlock<AllGatherOp>);
    for (size_t k = 0; k + 1 < buckets.size(); ++k) {
      OpBuilder b(func.getContext());
      b.setInsertionPointAfter(buckets[k + 1]);
      WaitOp::create(b, buckets[k].getLoc(), buckets[k].getResults(),
                     b.getStringAttr("updated parameters gathered by the "
                                     "previous bucket, complete after the "
                                     "next is launched"));
    }
  }

  /// ZeRO-2/3's (FSDP's) gradient reduce-scatters: the partitioner places
  /// each right before its first reader, the accumulation after the whole
  /// backward, so every block's whole gradients stay allocated to the end
  /// and none overlaps compute. Each moves to right after its input exists,
  /// `async`, and the accumulation adding its shard to an accumulator (a
  /// function argument) moves to right after the next block: the reduction
  /// travels while that block computes (FSDP reduce-scatters a block's
  /// gradients during the next block's backward) and the whole gradient is
  /// freed one block later, not at the end. Over a pipeline axis they stay
  /// (as the all-reduces do).
  void launchReduceScatters(func::FuncOp func) {
    Block &top = func.getBody().front();
    SmallVector<ReduceScatterOp> scatters(top.getOps<ReduceScatterOp>());
    // The gradient reduce-scatters moved, with the op they follow (null: at
    // the top), in order.
    SmallVector<std::pair<ReduceScatterOp, Operation *>> launched;
    // ZeRO-1's in-place reduce-scatters left in flight, in order.
    SmallVector<ReduceScatterOp> inPlace;
    // Where the last op moved behind an anchor went, so that several keep
    // their order behind it.
    llvm::DenseMap<Operation *, Operation *> lastBehind;
    auto moveBehind = [&](Operation *op, Operation *anchor) {
      Operation *&last = lastBehind[anchor];
      if (last)
        op->moveAfter(last);
      else if (anchor)
        op->moveAfter(anchor);
      else
        op->moveBefore(&top.front());
      last = op;
    };
    for (ReduceScatterOp scatter : scatters) {
      // Left as they are: already launched (async), already a bucket, or
      // over a pipeline axis.
      if (scatter.getAsync() || scatter.getInputs().size() != 1 ||
          overPipelineAxis(scatter.getAxes()))
        continue;
      // ZeRO-1's in-place reduce-scatter of an accumulated gradient in the
      // last micro-batch: already right behind its accumulation (the
      // partitioner put it there); launched there, it completes by the end
      // of the backward, while the rest of the backward computes.
      if (scatter.getLastMicrobatch()) {
        if (overlap) {
          scatter.setAsync(true);
          scatter.setReason(
              (scatter.getReason() ? scatter.getReason()->str() : "scatter") +
              ", launched after its accumulation");
        }
        inPlace.push_back(scatter);
        continue;
      }
      // Gradients only: a shard added to an accumulator (an argument), or
      // an accumulated gradient (ZeRO-1's, in the update). Sequence
      // parallelism's reduce-scatters feed the very next op: nothing to
      // overlap.
      Value shard = scatter.getResult();
      auto add = shard.hasOneUse() ? dyn_cast<AddOp>(*shard.getUsers().begin())
                                   : AddOp();
      if (add && (add->getBlock() != &top ||
                  !isa<BlockArgument>(add.getLhs() == shard ? add.getRhs()
                                                            : add.getLhs())))
        add = AddOp();
      if (!add && !isa<BlockArgument>(scatter.getInput()))
        continue;
      // 1. Launched as soon as its input exists (at the top for an
      //    argument: ZeRO-1's accumulated gradients in the update).
      moveBehind(scatter, scatter.getInput().getDefiningOp());
      launched.push_back({scatter, scatter.getInput().getDefiningOp()});
      if (overlap) {
        scatter.setAsync(true);
        Operation *producer = scatter.getInput().getDefiningOp();
        scatter.setReason(
            (scatter.getReason() ? scatter.getReason()->str() : "scatter") +
            (producer ? ", launched after " + describeOp(producer)
                      : std::string(", launched at the start")));
      }
      // 2. Its accumulation behind the next block.
      if (!add)
        continue;
      for (Operation *op = scatter->getNextNode(); op && op != add;
           op = op->getNextNode())
        if (isa<BlockOp>(op)) {
          moveBehind(add, op);
          break;
        }
    }
    bucketReduceScatters(launched);
    SmallVector<ReduceScatterOp> inFlight = bucketInPlaceScatters(inPlace);
    if (overlap)
      waitAfterNextBlock(inFlight);
  }

  /// The block after `op` in its function (null when none follows): where
  /// ZeRO-1's in-place reduce-scatters launched behind `op` complete.
  static BlockOp nextBlock(Operation *op) {
    for (Operation *next = op->getNextNode(); next; next = next->getNextNode())
      if (auto block = dyn_cast<BlockOp>(next))
        return block;
    return BlockOp();
  }

  /// ZeRO-1's in-place reduce-scatters (right behind each accumulation in
  /// the last micro-batch's backward, one per tensor) that complete after
  /// the same block, with the same axes, reduction and element type, share
  /// buckets of at most `bucket-mb` MiB of input (Megatron's distributed
  /// optimizer reduce-scatters its gradient buffer a bucket at a time),
  /// each in its last member's place, where every member's accumulation
  /// exists; the bucket reduces each member in place. Returns the
  /// reduce-scatters left, buckets and lone ones, in program order.
  SmallVector<ReduceScatterOp>
  bucketInPlaceScatters(ArrayRef<ReduceScatterOp> inPlace) {
    const int64_t capacity = bucketCapacityBytes();
    if (capacity <= 0 || inPlace.empty())
      return SmallVector<ReduceScatterOp>(inPlace);
    Groups<ScatterBucketKey, ReduceScatterOp> groups;
    for (ReduceScatterOp scatter : inPlace)
      addToGroup(groups,
                 ScatterBucketKey{nextBlock(scatter), scatter.getMeshAttr(),
                                  scatter.getAxes(),
                                  scatter.getReductionAttr(),
                                  getElementTypeOrSelf(
                                      scatter.getInput().getType())},
                 scatter);
    llvm::DenseSet<Operation *> merged;
    SmallVector<ReduceScatterOp> left;
    for (auto &[key, members] : groups)
      emitBuckets<ReduceScatterOp>(
          members, capacity,
          [](ReduceScatterOp scatter) { return bytesOf(scatter.getInput()); },
          [&](ArrayRef<ReduceScatterOp> bucket, int64_t bytes) {
            ReduceScatterOp last = lastInBlock(bucket);
            for (ReduceScatterOp member : bucket)
              merged.insert(member);
            left.push_back(emitScatterBucket(
                bucket, bytes, last->getNextNode(),
                ", in place in the last micro-batch, launched after " +
                    describeOp(last.getInput().getDefiningOp())));
          });
    for (ReduceScatterOp scatter : inPlace)
      if (!merged.contains(scatter))
        left.push_back(scatter);
    llvm::sort(left, beforeInBlock<ReduceScatterOp>);
    return left;
  }

  /// ZeRO-1's in-place reduce-scatters: nothing reads their results before
  /// the update, so the runtime would complete them at the end of the
  /// backward and the planner keep their scratch (this rank's received
  /// block, 1/N of each gradient) allocated until then, all of them at
  /// once. A `loom.wait` on them after the block that follows each (the
  /// next layer's backward, while which it travels) completes them there,
  /// as ZeRO-2/3's accumulations one block later do theirs. After the last
  /// block they complete at the end, as before.
  void waitAfterNextBlock(ArrayRef<ReduceScatterOp> inPlace) {
    Groups<BlockOp, Value> waits;
    for (ReduceScatterOp scatter : inPlace)
      if (BlockOp next = nextBlock(scatter))
        for (Value result : scatter.getResults())
          addToGroup(waits, next, result);
    for (auto &[block, values] : waits) {
      OpBuilder b(block->getContext());
      b.setInsertionPointAfter(block);
      WaitOp::create(
          b, block.getLoc(), values,
          b.getStringAttr(llvm::formatv("{0} gradient{1} reduce-scattered "
                                        "in place, complete after {2}",
                                        values.size(),
                                        values.size() == 1 ? "" : "s",
                                        block.getLabel())
                              .str()));
    }
  }

  /// 3. The reduce-scatters launched behind one op (a backward block's
  ///    gradients) with the same axes, reduction and element type (each
  ///    split on its own dimension) share buckets of at most `bucket-mb` MiB of input (a larger tensor
  ///    is a bucket of its own): one collective per block, as FSDP
  ///    reduce-scatters a block's flat gradient, instead of one per tensor
  ///    (a GPT-2 block has 12). They are already next to each other there,
  ///    so a bucket takes the first member's place.
  void bucketReduceScatters(
      ArrayRef<std::pair<ReduceScatterOp, Operation *>> launched) {
    const int64_t capacity = bucketCapacityBytes();
    if (capacity <= 0)
      return;
    Groups<ScatterBucketKey, ReduceScatterOp> groups;
    for (auto [scatter, after] : launched) {
      ScatterBucketKey key{after,
                           scatter.getMeshAttr(),
                           scatter.getAxes(),
                           scatter.getReductionAttr(),
                           getElementTypeOrSelf(scatter.getInput().getType())};
      addToGroup(groups, key, scatter);
    }
    // Numbered in program order (groups behind one op keep theirs).
    llvm::stable_sort(groups, [](const auto &a, const auto &b) {
      return a.second.front()->isBeforeInBlock(b.second.front());
    });
    for (auto &[key, members] : groups) {
      Operation *after = key.anchor;
      emitBuckets<ReduceScatterOp>(
          members, capacity,
          [](ReduceScatterOp scatter) { return bytesOf(scatter.getInput()); },
          [&](ArrayRef<ReduceScatterOp> bucket, int64_t bytes) {
            emitScatterBucket(bucket, bytes, bucket.front(),
                              after ? ", launched after " + describeOp(after)
                                    : std::string(", launched at the start"));
          });
    }
  }

  /// Replaces the bucket's reduce-scatters by one right before `before`
  /// (which their inputs dominate), in place in the last micro-batch when
  /// they are; `where` ends its reason.
  ReduceScatterOp emitScatterBucket(ArrayRef<ReduceScatterOp> bucket,
                                    int64_t bytes, Operation *before,
                                    StringRef where) {
    BucketSignature signature = bucketSignature(bucket);
    ReduceScatterOp first = bucket.front();
    OpBuilder b(before);
    std::string reason =
        llvm::formatv("reduce-scatter bucket {0}: {1} gradients, {2} bytes{3}",
                      scatterBucketIndex++, signature.inputs.size(), bytes,
                      where)
            .str();
    auto merged = ReduceScatterOp::create(
        b, first.getLoc(), signature.types, signature.inputs,
        first.getMeshAttr(), first.getAxes(),
        b.getDenseI64ArrayAttr(signature.dims), first.getReductionAttr(),
        b.getStringAttr(reason), first.getAsyncAttr(),
        first.getLastMicrobatchAttr());
    replaceBucket(bucket, merged);
    return merged;
  }

  void runOnOperation() override {
    if (bucketMb < 0) {
      getOperation().emitError()
          << "loom-schedule-comm: bucket-mb must be >= 0 (0 keeps one "
             "all-reduce per value), got "
          << bucketMb;
      return signalPassFailure();
    }
    // The axes pipeline stages exchange values on (send / recv).
    getOperation().walk([&](Operation *op) {
      if (isa<SendOp, RecvOp>(op))
        if (auto axes = op->getAttrOfType<ArrayAttr>("axes"))
          for (StringRef axis : axes.getAsValueRange<StringAttr>())
            pipelineAxes.insert(axis);
    });
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      scheduleFunction(func);
      launchReduceScatters(func);
      if (prefetch)
        prefetchGathers(func);
      bucketOwnGathers(func);
      launchParameterGathers(func);
      numberGatherBuckets(func);
    }
  }
};

} // namespace
