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
};

/// Walks the tree of `g` (adds of same-typed values, each used once) down
/// to the all-reduces; fails when a contribution reaches the accumulator
/// without one, through another op, or on other axes than the first.
LogicalResult collectReductions(Value g, DeferrableSum &sum) {
  Operation *def = g.getDefiningOp();
  if (!def || !g.hasOneUse())
    return failure();
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

} // namespace

int64_t mlir::loom::reduceGradientsOncePerStep(ArrayRef<func::FuncOp> backward,
                                               ArrayRef<func::FuncOp> updates,
                                               int64_t stages,
                                               StringRef pipelineAxis) {
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
      if (!add || add.getLhs() != func.getArgument(accIndex) ||
          failed(collectReductions(add.getRhs(), sum)) ||
          llvm::is_contained(sum.axes.getAsValueRange<StringAttr>(),
                             pipelineAxis)) {
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
      ++moved;
      LLVM_DEBUG(llvm::dbgs() << "stage " << s << ": " << name
                              << " all-reduced once per step\n");
    }
  }
  return moved;
}
