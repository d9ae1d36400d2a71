//===- StageUpdate.cpp - The optimizer update of a stage --------*- C++ -*-===//
//
// A stage updates only the parameters it holds. A parameter held by several
// stages (GPT-2's tied wte) has its gradient contributions summed among
// them first (loom.group_all_reduce, Megatron's embedding group); the
// gradient norm counts each parameter once (on its first stage) and sums
// the squares over the pipeline axis.
//
//===----------------------------------------------------------------------===//

#include "passes/Pipeline/StageUpdate.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/BitVector.h"

using namespace mlir;
using namespace mlir::loom;

/// The argument a value of the update function comes from (through
/// local slices and group all-reduces), or null.
static BlockArgument sourceArgument(Value v) {
  while (Operation *def = v.getDefiningOp()) {
    if (!isa<LocalSliceOp, GroupAllReduceOp>(def))
      return BlockArgument();
    v = def->getOperand(0);
  }
  return dyn_cast<BlockArgument>(v);
}

FailureOr<func::FuncOp>
mlir::loom::buildStageUpdate(func::FuncOp update, int64_t stage, int64_t stages,
                 const std::map<std::string, std::vector<int64_t>> &owners,
                 MeshOp mesh, StringRef axis) {
  MLIRContext *ctx = update.getContext();
  OpBuilder b(update);
  auto func = cast<func::FuncOp>(b.clone(*update));
  func.setSymName((update.getSymName() + "_stage" + Twine(stage)).str());
  func->setAttr(LoomDialect::kPipelineAttr,
                b.getDictionaryAttr(
                    {b.getNamedAttr("stage", b.getI64IntegerAttr(stage))}));
  Block &entry = func.getBody().front();
  auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  auto axes = b.getStrArrayAttr({axis});
  auto nameOf = [&](BlockArgument arg) -> std::string {
    auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  LoomDialect::kNameAttr);
    return name ? name.str() : "";
  };
  auto ownersOf = [&](BlockArgument arg) -> const std::vector<int64_t> * {
    auto it = owners.find(nameOf(arg));
    return it == owners.end() ? nullptr : &it->second;
  };
  auto owned = [&](BlockArgument arg) {
    const std::vector<int64_t> *s = ownersOf(arg);
    return s && llvm::is_contained(*s, stage);
  };

  // 1. A parameter on several stages: its gradient contributions are
  //    summed among them (Megatron's embedding group) before anything
  //    reads the gradient.
  for (BlockArgument arg : entry.getArguments()) {
    auto role =
        func.getArgAttrOfType<RoleAttr>(arg.getArgNumber(), LoomDialect::kRoleAttr);
    const std::vector<int64_t> *s = ownersOf(arg);
    if (!role || role.getValue() != Role::Grad || !s || s->size() < 2 ||
        !owned(arg) || arg.use_empty())
      continue;
    b.setInsertionPointToStart(&entry);
    std::string members;
    for (auto [i, m] : llvm::enumerate(*s))
      members += (i ? (i + 1 == s->size() ? " and " : ", ") : "") +
                 std::to_string(m);
    auto reduce = GroupAllReduceOp::create(
        b, arg.getLoc(), arg.getType(), arg, meshRef, axes,
        b.getDenseI64ArrayAttr(*s),
        ReductionKindAttr::get(ctx, ReductionKind::Sum),
        b.getStringAttr("shared " + nameOf(arg) +
                        ": sum the gradients of stages " + members));
    arg.replaceAllUsesExcept(reduce.getResult(), reduce);
  }

  // 2. The gradient norm: this stage's gradients (a shared one counted on
  //    its first stage only), summed over the pipeline.
  SmallVector<SumSquaresOp> sums(func.getOps<SumSquaresOp>());
  for (SumSquaresOp sum : sums) {
    SmallVector<Value> kept;
    for (Value g : sum.getInputs()) {
      BlockArgument arg = sourceArgument(g);
      const std::vector<int64_t> *s = arg ? ownersOf(arg) : nullptr;
      if (s && owned(arg) && s->front() == stage)
        kept.push_back(g);
    }
    b.setInsertionPoint(sum);
    Value local;
    if (kept.empty())
      local = FillOp::create(b, sum.getLoc(), sum.getType(),
                             b.getF64FloatAttr(0.0));
    else
      local = SumSquaresOp::create(b, sum.getLoc(), sum.getType(), kept);
    sum.getResult().replaceAllUsesWith(local);
    sum.erase();
  }
  if (stages > 1)
    for (ClipCoefOp clip : func.getOps<ClipCoefOp>()) {
      b.setInsertionPoint(clip);
      auto reduce = AllReduceOp::create(
          b, clip.getLoc(), clip.getSumsq(), meshRef, axes,
          ReductionKindAttr::get(ctx, ReductionKind::Sum),
          b.getStringAttr("gradient norm: sum of squares over the pipeline "
                          "stages"));
      clip.getSumsqMutable().assign(reduce.getResult());
    }

  // 3. Keep the results of this stage's parameters (and the norm).
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  SmallVector<Value> results;
  SmallVector<int64_t> updatesOf; // -1: no loom.updates
  for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
    auto updates =
        func.getResultAttrOfType<IntegerAttr>(i, LoomDialect::kUpdatesAttr);
    if (updates && !owned(entry.getArgument(updates.getInt())))
      continue;
    results.push_back(ret.getOperand(i));
    updatesOf.push_back(updates ? updates.getInt() : -1);
  }
  b.setInsertionPoint(ret);
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();

  // 4. Drop what no longer contributes, then the unused arguments.
  bool changed = true;
  while (changed) {
    changed = false;
    SmallVector<Operation *> ops;
    for (Operation &op : entry.without_terminator())
      ops.push_back(&op);
    for (Operation *op : llvm::reverse(ops))
      if (op->use_empty() && isPure(op)) {
        op->erase();
        changed = true;
      }
  }
  llvm::BitVector unused(func.getNumArguments());
  SmallVector<int64_t> newIndex(func.getNumArguments(), -1);
  int64_t next = 0;
  for (BlockArgument arg : entry.getArguments()) {
    bool keep = !arg.use_empty() ||
                llvm::is_contained(updatesOf, int64_t(arg.getArgNumber()));
    if (keep)
      newIndex[arg.getArgNumber()] = next++;
    else
      unused.set(arg.getArgNumber());
  }
  if (failed(func.eraseArguments(unused)))
    return func.emitOpError() << "could not drop the arguments of other "
                                 "stages";
  func.setFunctionType(FunctionType::get(
      ctx, func.getArgumentTypes(),
      ValueRange(entry.getTerminator()->getOperands()).getTypes()));
  SmallVector<DictionaryAttr> resultAttrs;
  for (int64_t u : updatesOf) {
    NamedAttrList attrs;
    if (u >= 0)
      attrs.set(LoomDialect::kUpdatesAttr, b.getI64IntegerAttr(newIndex[u]));
    resultAttrs.push_back(attrs.getDictionary(ctx));
  }
  func.setAllResultAttrs(resultAttrs);
  return func;
}

