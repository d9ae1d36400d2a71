//===- PlanBuffers.cpp - Static arena offsets from liveness -----*- C++ -*-===//
//
// `--loom-plan-buffers`: one arena per rank, planned before launch, so the
// memory a run needs is known (and checked) before it starts, and the
// runtime never allocates in the step.
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/IR/OpShapes.h"
#include "passes/Lowering/BestFitPlacement.h"
#include "passes/Lowering/ExecutionOrder.h"
#include "passes/Lowering/InPlaceResults.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Debug.h"

#include <map>

#define DEBUG_TYPE "loom-plan-buffers"

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMPLANBUFFERS
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

struct LoomPlanBuffersPass
    : mlir::loom::impl::LoomPlanBuffersBase<LoomPlanBuffersPass> {
  using Base::Base;

  void runOnOperation() override {
    if (alignment < 1 || (alignment & (alignment - 1)) != 0) {
      getOperation().emitError()
          << "loom-plan-buffers: alignment must be a power of two, got "
          << static_cast<int64_t>(alignment);
      return signalPassFailure();
    }
    // The functions of a training step share one arena (one per pipeline
    // stage, loom.pipeline); any other function is a program of its own.
    std::map<int64_t, SmallVector<func::FuncOp>> trainingSteps;
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (auto where =
              func->getAttrOfType<DictionaryAttr>(LoomDialect::kPipelineAttr))
        trainingSteps[where.getAs<IntegerAttr>("stage").getInt()].push_back(
            func);
      else if (func->hasAttr(LoomDialect::kTrainAttr))
        trainingSteps[-1].push_back(func);
      else if (failed(plan({func})))
        return signalPassFailure();
    }
    for (auto &[stage, funcs] : trainingSteps)
      if (failed(plan(funcs)))
        return signalPassFailure();
  }

  static bool isStashInput(func::FuncOp func, BlockArgument arg) {
    auto role =
        func.getArgAttrOfType<RoleAttr>(arg.getArgNumber(), LoomDialect::kRoleAttr);
    return role && role.getValue() == Role::Stash;
  }

  /// A pipeline forward's kept values (results with loom.stash): their
  /// storage leaves `transient` for the chunk's stash slot, packed in result
  /// order (aligned), each storage once however many kept views share it.
  /// Records each stash name's offset and sets loom.stash_bytes (0 when the
  /// function keeps nothing or is not a forward).
  LogicalResult placeInStash(func::FuncOp func, const ExecutionOrder &order,
                             llvm::MapVector<Value, Allocation> &transient,
                             llvm::DenseMap<Value, int64_t> &inStash,
                             llvm::StringMap<int64_t> &offsetByName) {
    int64_t slotBytes = 0;
    for (auto [i, value] : llvm::enumerate(order.returned)) {
      auto name =
          func.getResultAttrOfType<StringAttr>(i, LoomDialect::kStashAttr);
      if (!name)
        continue;
      Value root = order.storage(value);
      auto held = transient.find(root);
      if (!inStash.count(root)) {
        // Kept values are the forward's own results; an argument's storage
        // (a parameter, the micro-batch's tokens) lives through the step
        // and the backward takes it as its own argument.
        if (held == transient.end())
          return func.emitOpError()
                 << "result #" << i << " (stash '" << name.getValue()
                 << "') is an argument's storage; a stash slot holds only "
                    "values the forward computes";
        inStash[root] = alignTo(slotBytes, alignment);
        slotBytes = inStash[root] + held->second.bytes;
      }
      offsetByName[name.getValue()] = inStash[root];
    }
    if (!inStash.empty())
      transient.remove_if([&](const std::pair<Value, Allocation> &entry) {
        return inStash.count(entry.first);
      });
    if (slotBytes > 0)
      func->setAttr(LoomDialect::kStashBytesAttr,
                    Builder(func.getContext())
                        .getI64IntegerAttr(alignTo(slotBytes, alignment)));
    else
      func->removeAttr(LoomDialect::kStashBytesAttr);
    return success();
  }

  /// Plans `funcs` into one arena: arguments (by storageKey) once, at the
  /// bottom; each function's transients above them, reusing the same bytes
  /// since the functions never run at the same time. What a pipeline
  /// forward keeps for its backward goes to the chunk's stash slot instead
  /// (one per micro-batch in flight, outside the arena): the forward writes
  /// it there and the backward reads it there, so neither holds it in the
  /// arena and the runtime copies nothing.
  LogicalResult plan(ArrayRef<func::FuncOp> funcs) {
    std::map<std::string, Allocation> persistent;
    std::vector<std::string> persistentOrder;
    struct FunctionPlan {
      ExecutionOrder order;
      llvm::MapVector<Value, Allocation> transient;
      std::vector<SmallVector<Allocation>> scratch;
      /// Values stored in an argument's storage (arguments, and results
      /// returned as that argument's in-place update).
      llvm::DenseMap<Value, std::string> inArgument;
      /// A forward's kept values (their storage) -> offset in the slot.
      llvm::DenseMap<Value, int64_t> inStash;
    };
    std::vector<FunctionPlan> plans(funcs.size());
    /// Slot offset of each kept value by its stash name, which the
    /// backward's stash argument of the same loom.name reads.
    llvm::StringMap<int64_t> stashOffsetByName;

    for (size_t f = 0; f < funcs.size(); ++f) {
      func::FuncOp func = funcs[f];
      FailureOr<ExecutionOrder> order = linearize(func);
      if (failed(order))
        return failure();
      FunctionPlan &fp = plans[f];
      fp.order = std::move(*order);
      const int64_t last = static_cast<int64_t>(fp.order.ops.size());

      // 1. Arguments and the results that update them in place. A
      //    pipeline backward's stash inputs are the exception: they are in
      //    the micro-batch's stash slot (step 5).
      for (BlockArgument arg : func.getArguments()) {
        if (isStashInput(func, arg))
          continue;
        std::string key = storageKey(func, arg);
        if (!persistent.count(key))
          persistentOrder.push_back(key);
        persistent[key] = {bytesOf(arg.getType()), -1, last, -1};
        fp.inArgument[arg] = key;
      }
      for (auto [i, value] : llvm::enumerate(fp.order.returned)) {
        auto updates =
            func.getResultAttrOfType<IntegerAttr>(i, LoomDialect::kUpdatesAttr);
        if (!updates)
          continue;
        Value root = fp.order.storage(value);
        BlockArgument arg = func.getArgument(updates.getInt());
        if (root == arg)
          continue;
        if (isa<BlockArgument>(root) || fp.inArgument.count(root))
          return func.emitOpError()
                 << "result #" << i << " updates argument #"
                 << updates.getInt()
                 << " in place but is another argument's storage";
        // Copy first: inserting may rehash and move the argument's entry.
        std::string key = fp.inArgument.lookup(arg);
        fp.inArgument[root] = std::move(key);
      }

      // 2. Live ranges of everything else, plus scratch.
      fp.scratch.resize(fp.order.ops.size());
      llvm::DenseMap<Value, int64_t> lastRead;
      for (auto [pos, op] : llvm::enumerate(fp.order.ops)) {
        int64_t p = static_cast<int64_t>(pos);
        for (Value operand : op->getOperands())
          lastRead[fp.order.storage(operand)] = p;
        if (isView(op))
          continue;
        for (Value result : op->getResults())
          if (!fp.inArgument.count(result) && fp.order.storage(result) == result)
            fp.transient[result] = {bytesOf(result.getType()), p, p, -1};
        for (RankedTensorType type : getScratchTypes(op))
          fp.scratch[pos].push_back({bytesOf(type), p, p, -1});
      }
      for (auto &[value, alloc] : fp.transient)
        if (auto it = lastRead.find(value); it != lastRead.end())
          alloc.end = std::max(alloc.end, it->second);
      // The CUDA backend may run a GELU in the GEMM epilogue of the linear
      // right before it (runtime/core/gelu_epilogues.h): that GEMM reads
      // the linear's inputs while it writes the GELU, so they stay
      // allocated through the GELU and its result never lands on them (a
      // ZeRO-3 step's gathered weight, an evaluation's activation).
      for (size_t pos = 1; pos < fp.order.ops.size(); ++pos) {
        auto gelu = dyn_cast<GeluOp>(fp.order.ops[pos]);
        auto linear = dyn_cast<LinearOp>(fp.order.ops[pos - 1]);
        if (!gelu || !linear ||
            fp.order.storage(gelu.getInput()) !=
                fp.order.storage(linear.getResult()))
          continue;
        for (Value operand : linear->getOperands())
          if (auto it = fp.transient.find(fp.order.storage(operand));
              it != fp.transient.end())
            it->second.end =
                std::max(it->second.end, static_cast<int64_t>(pos));
      }
      // An asynchronous collective keeps its scratch (the packed bucket)
      // until the first op that reads one of its results: the runtime
      // completes it there. A reduce-scatter also sends from its input
      // until then.
      for (auto [pos, op] : llvm::enumerate(fp.order.ops)) {
        const bool inputs = readsInputsUntilComplete(op);
        if (!completesLater(op) || (fp.scratch[pos].empty() && !inputs))
          continue;
        llvm::DenseSet<Value> results;
        for (Value result : op->getResults())
          results.insert(fp.order.storage(result));
        int64_t done = last;
        for (size_t q = pos + 1; q < fp.order.ops.size() && done == last; ++q)
          for (Value operand : fp.order.ops[q]->getOperands())
            if (results.contains(fp.order.storage(operand)))
              done = static_cast<int64_t>(q);
        for (Allocation &alloc : fp.scratch[pos])
          alloc.end = done;
        if (inputs)
          for (Value operand : op->getOperands())
            if (auto it = fp.transient.find(fp.order.storage(operand));
                it != fp.transient.end())
              it->second.end = std::max(it->second.end, done);
      }
      for (Value v : fp.order.returned)
        if (auto it = fp.transient.find(fp.order.storage(v));
            it != fp.transient.end())
          it->second.end = last;
      // Results written over an operand that dies at their op take its
      // bytes (the lifetimes above are final; InPlaceResults.h).
      if (inPlace) {
        int64_t moved = shareDyingOperands(fp.order, fp.transient);
        LLVM_DEBUG(llvm::dbgs() << func.getSymName() << ": " << moved
                                << " results in their operand's bytes\n");
      }
      if (failed(placeInStash(func, fp.order, fp.transient, fp.inStash,
                              stashOffsetByName)))
        return failure();

      // 3. An in-place update must be the argument's last reader: nothing
      //    may read the old value after the new one overwrote it. (The last
      //    read per storage key, once: comparing every update with every
      //    argument was quadratic in the parameter count.)
      llvm::StringMap<int64_t> lastArgumentRead;
      for (BlockArgument arg : func.getArguments())
        if (auto read = lastRead.find(arg); read != lastRead.end()) {
          int64_t &last = lastArgumentRead[fp.inArgument.lookup(arg)];
          last = std::max(last, read->second);
        }
      for (auto [pos, op] : llvm::enumerate(fp.order.ops))
        for (Value result : op->getResults()) {
          auto it = fp.inArgument.find(result);
          if (it == fp.inArgument.end() || isa<BlockArgument>(result))
            continue;
          if (lastArgumentRead.lookup(it->second) > static_cast<int64_t>(pos))
            return op->emitOpError()
                   << "updates an argument in place that is read "
                      "again later; the planner cannot reuse its storage";
        }
    }

    // 4. Place arguments in first-seen order, then each function's
    //    transients above them.
    int64_t base = 0;
    for (const std::string &key : persistentOrder) {
      Allocation &alloc = persistent[key];
      alloc.offset = base;
      base = alignTo(base + alloc.bytes, alignment);
    }
    int64_t top = base;
    for (FunctionPlan &fp : plans) {
      SmallVector<Allocation *> transient;
      for (auto &[value, alloc] : fp.transient)
        transient.push_back(&alloc);
      for (auto &allocs : fp.scratch)
        for (Allocation &alloc : allocs)
          transient.push_back(&alloc);
      top = std::max(top, alignTo(placeBestFit(transient, base, alignment),
                                  alignment));
    }
    LLVM_DEBUG(llvm::dbgs() << "arena " << top << " bytes (arguments " << base
                            << ")\n");

    // 5. Annotate the IR.
    for (size_t f = 0; f < funcs.size(); ++f) {
      func::FuncOp func = funcs[f];
      FunctionPlan &fp = plans[f];
      Builder b(func.getContext());
      auto offsetOf = [&](Value v) -> int64_t {
        Value root = fp.order.storage(v);
        if (auto it = fp.inArgument.find(root); it != fp.inArgument.end())
          return persistent[it->second].offset;
        if (auto it = fp.inStash.find(root); it != fp.inStash.end())
          return it->second;
        return fp.transient[root].offset;
      };
      // All argument attributes at once: setArgAttr rebuilds the whole
      // list each call, quadratic in the argument count.
      SmallVector<DictionaryAttr> argAttrs;
      for (BlockArgument arg : func.getArguments()) {
        int64_t offset = 0;
        if (isStashInput(func, arg)) {
          auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                        LoomDialect::kNameAttr);
          auto it = name ? stashOffsetByName.find(name.getValue())
                         : stashOffsetByName.end();
          if (it == stashOffsetByName.end())
            return func.emitOpError()
                   << "stash argument #" << arg.getArgNumber() << " ('"
                   << (name ? name.getValue() : StringRef("?"))
                   << "') is kept by no forward of this pipeline stage";
          offset = it->second;
        } else {
          offset = offsetOf(arg);
        }
        NamedAttrList attrs(func.getArgAttrDict(arg.getArgNumber()));
        attrs.set(LoomDialect::kOffsetAttr, b.getI64IntegerAttr(offset));
        argAttrs.push_back(attrs.getDictionary(func.getContext()));
      }
      func.setAllArgAttrs(argAttrs);
      for (auto [pos, op] : llvm::enumerate(fp.order.ops)) {
        SmallVector<int64_t> offsets;
        SmallVector<bool> inStash;
        for (Value result : op->getResults()) {
          offsets.push_back(offsetOf(result));
          inStash.push_back(fp.inStash.count(fp.order.storage(result)));
        }
        op->setAttr(LoomDialect::kOffsetsAttr, b.getDenseI64ArrayAttr(offsets));
        if (llvm::is_contained(inStash, true))
          op->setAttr(LoomDialect::kInStashAttr,
                      b.getDenseBoolArrayAttr(inStash));
        else
          op->removeAttr(LoomDialect::kInStashAttr);
        if (fp.scratch[pos].empty())
          continue;
        SmallVector<int64_t> scratchOffsets;
        for (const Allocation &alloc : fp.scratch[pos])
          scratchOffsets.push_back(alloc.offset);
        op->setAttr(LoomDialect::kScratchOffsetsAttr,
                    b.getDenseI64ArrayAttr(scratchOffsets));
      }
      func->setAttr(LoomDialect::kArenaBytesAttr, b.getI64IntegerAttr(top));
    }
    return success();
  }
};

} // namespace
