//===- Autodiff.cpp - Forward model -> training step ------------*- C++ -*-===//
//
// `--loom-autodiff`: the training step is derived by the compiler, once and
// generically, from the forward graph and the ops' gradient rules.
//
//===----------------------------------------------------------------------===//

#include "passes/Autodiff/ReverseMode.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMAUTODIFF
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

/// A parameter argument of the model function.
struct ParamArg {
  unsigned index;
  StringAttr name;
  RankedTensorType type;
  /// Rank of the tensor as checkpoints (and PyTorch) see it: its
  /// loom.checkpoint_shape when the type regroups it (GPT-2's c_attn bias is
  /// [3, C] here, [3C] in HF), else the type's rank.
  int64_t checkpointRank;
};

NamedAttribute roleAttr(Builder &b, Role role) {
  return b.getNamedAttr(LoomDialect::kRoleAttr,
                        RoleAttr::get(b.getContext(), role));
}

DictionaryAttr stateArgAttrs(Builder &b, Role role, StringAttr name) {
  return b.getDictionaryAttr(
      {b.getNamedAttr(LoomDialect::kNameAttr, name), roleAttr(b, role)});
}

/// Every attention in `func` also returns its f32 log-sum-exp ([B, NH, T]),
/// so its gradient reads the forward's output and statistics instead of
/// re-running the forward (FlashAttention-2's backward). The statistics are
/// one float per query row and head, 1/(hs) of the output's elements, kept
/// like any other saved activation.
void keepAttentionStatistics(func::FuncOp func) {
  SmallVector<AttentionOp> attentions;
  func.walk([&](AttentionOp att) {
    if (!att.getLse())
      attentions.push_back(att);
  });
  for (AttentionOp att : attentions) {
    ArrayRef<int64_t> qkv = att.getQkv().getType().getShape();
    auto lseType = RankedTensorType::get(
        {qkv[0], static_cast<int64_t>(att.getNumHeads()), qkv[1]},
        Float32Type::get(att.getContext()));
    OpBuilder b(att);
    auto withLse =
        AttentionOp::create(b, att.getLoc(), att.getResult().getType(), lseType,
                            att.getQkv(), att.getNumHeadsAttr());
    withLse->setDiscardableAttrs(att->getDiscardableAttrDictionary());
    att.getResult().replaceAllUsesWith(withLse.getResult());
    att.erase();
  }
}

/// Sets `loom.updates` = updates[k] on result first + k of `func`, all in
/// one go: setResultAttr rebuilds the whole result attribute list per call,
/// quadratic in the parameter count.
void setUpdatesAttrs(func::FuncOp func, unsigned first,
                     ArrayRef<int64_t> updates) {
  Builder b(func.getContext());
  SmallVector<DictionaryAttr> resultAttrs;
  for (unsigned i = 0; i < func.getNumResults(); ++i) {
    NamedAttrList attrs(func.getResultAttrDict(i));
    if (i >= first && i - first < updates.size())
      attrs.set(LoomDialect::kUpdatesAttr,
                b.getI64IntegerAttr(updates[i - first]));
    resultAttrs.push_back(attrs.getDictionary(func.getContext()));
  }
  func.setAllResultAttrs(resultAttrs);
}

struct LoomAutodiffPass
    : mlir::loom::impl::LoomAutodiffBase<LoomAutodiffPass> {
  using Base::Base;

  void runOnOperation() override {
    if (microbatches < 1) {
      getOperation().emitError()
          << "loom-autodiff: microbatches must be >= 1, got "
          << static_cast<int64_t>(microbatches);
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> models;
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (func->hasAttr(LoomDialect::kModelAttr) &&
          !func->hasAttr(LoomDialect::kTrainAttr))
        models.push_back(func);
    if (models.empty()) {
      getOperation().emitError()
          << "loom-autodiff: no model function (a func.func with loom.model "
             "that returns the loss)";
      return signalPassFailure();
    }
    for (func::FuncOp model : models)
      if (failed(deriveTrainingStep(model)))
        return signalPassFailure();
  }

  LogicalResult deriveTrainingStep(func::FuncOp model);
  LogicalResult buildMicrobatchFunction(func::FuncOp model,
                                        ArrayRef<ParamArg> params,
                                        SmallVectorImpl<bool> &hasGrad);
  void buildUpdateFunction(func::FuncOp model, ArrayRef<ParamArg> params,
                           ArrayRef<bool> hasGrad);
};

LogicalResult LoomAutodiffPass::deriveTrainingStep(func::FuncOp model) {
  // 1. The loss: exactly one scalar float result.
  FunctionType type = model.getFunctionType();
  auto loss = type.getNumResults() == 1
                  ? dyn_cast<RankedTensorType>(type.getResult(0))
                  : RankedTensorType();
  if (!loss || loss.getRank() != 0 || !isa<FloatType>(loss.getElementType()))
    return model.emitOpError()
           << "must return the loss as one scalar float tensor "
              "(tensor<f32>) to be differentiated, but returns "
           << type.getResults();

  SmallVector<ParamArg> params;
  for (BlockArgument arg : model.getArguments()) {
    auto role =
        model.getArgAttrOfType<RoleAttr>(arg.getArgNumber(), LoomDialect::kRoleAttr);
    if (!role || role.getValue() != Role::Param)
      continue;
    auto type = cast<RankedTensorType>(arg.getType());
    std::optional<SmallVector<int64_t>> checkpointShape =
        getCheckpointShape(model, arg.getArgNumber());
    params.push_back({arg.getArgNumber(),
                      model.getArgAttrOfType<StringAttr>(
                          arg.getArgNumber(), LoomDialect::kNameAttr),
                      type,
                      checkpointShape ? int64_t(checkpointShape->size())
                                      : type.getRank()});
  }
  if (params.empty())
    return model.emitOpError() << "has no parameters (arguments with "
                                  "loom.role = #loom.role<param>) to train";

  SmallVector<bool> hasGrad;
  if (failed(buildMicrobatchFunction(model, params, hasGrad)))
    return failure();
  if (llvm::none_of(hasGrad, [](bool g) { return g; }))
    return model.emitOpError()
           << "has no parameter that influences the loss; there is nothing "
              "to train";
  buildUpdateFunction(model, params, hasGrad);
  model.erase();
  return success();
}

LogicalResult
LoomAutodiffPass::buildMicrobatchFunction(func::FuncOp model,
                                          ArrayRef<ParamArg> params,
                                          SmallVectorImpl<bool> &hasGrad) {
  OpBuilder b(model);
  MLIRContext *ctx = model.getContext();
  auto train = cast<func::FuncOp>(b.clone(*model));
  train.setSymName((model.getSymName() + "_train").str());
  train->setAttr(LoomDialect::kTrainAttr,
                 b.getDictionaryAttr(
                     {b.getNamedAttr("phase", b.getStringAttr("microbatch")),
                      b.getNamedAttr("microbatches",
                                     b.getI64IntegerAttr(microbatches))}));
  keepAttentionStatistics(train);

  // 1. Gradient accumulators: one argument per parameter.
  unsigned firstAcc = train.getNumArguments();
  SmallVector<unsigned> accIndices;
  SmallVector<Type> accTypes;
  SmallVector<DictionaryAttr> accAttrs;
  SmallVector<Location> accLocs;
  for (const ParamArg &p : params) {
    accIndices.push_back(firstAcc);
    accTypes.push_back(p.type);
    accAttrs.push_back(stateArgAttrs(b, Role::Grad, p.name));
    accLocs.push_back(NameLoc::get(
        StringAttr::get(ctx, p.name.getValue() + ".grad_accumulator")));
  }
  if (failed(train.insertArguments(accIndices, accTypes, accAttrs, accLocs)))
    return train.emitOpError() << "could not add gradient accumulators";

  // 2. Backward, seeded with 1/M at the loss.
  Block &entry = train.getBody().front();
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  Value lossValue = ret.getOperand(0);
  b.setInsertionPoint(ret);
  Location seedLoc = NameLoc::get(StringAttr::get(ctx, "loss.seed"));
  Value seed = FillOp::create(b, seedLoc, lossValue.getType(),
                              b.getF64FloatAttr(1.0 / double(microbatches)));
  GradientMap grads;
  grads.accumulate(b, seedLoc, lossValue, seed);
  if (failed(differentiateBlock(entry, b, grads))) {
    train.erase();
    return failure();
  }

  // 3. Accumulate into the accumulators; return loss + updated accumulators.
  SmallVector<Value> results{lossValue};
  for (auto [i, p] : llvm::enumerate(params)) {
    Value acc = entry.getArgument(firstAcc + i);
    Value g = grads.lookup(entry.getArgument(p.index));
    hasGrad.push_back(static_cast<bool>(g));
    if (!g) {
      train.emitWarning() << "parameter '" << p.name.getValue()
                          << "' does not influence the loss; it gets no "
                             "gradient and no update";
      results.push_back(acc);
      continue;
    }
    Location loc = NameLoc::get(
        StringAttr::get(ctx, p.name.getValue() + ".grad_accumulate"));
    results.push_back(AddOp::create(b, loc, acc.getType(), acc, g));
  }
  b.setInsertionPoint(ret);
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();
  SmallVector<Type> resultTypes = llvm::to_vector(ValueRange(results).getTypes());
  train.setFunctionType(b.getFunctionType(train.getArgumentTypes(), resultTypes));
  SmallVector<int64_t> accumulators;
  for (unsigned i = 0; i < params.size(); ++i)
    accumulators.push_back(firstAcc + i);
  setUpdatesAttrs(train, /*first=*/1, accumulators);
  return success();
}

void LoomAutodiffPass::buildUpdateFunction(func::FuncOp model,
                                           ArrayRef<ParamArg> params,
                                           ArrayRef<bool> hasGrad) {
  OpBuilder b(model);
  MLIRContext *ctx = model.getContext();
  auto scalar = RankedTensorType::get({}, b.getF32Type());

  // Arguments: params, grads, m, v (each in parameter order), lr, step.
  SmallVector<Type> argTypes;
  SmallVector<DictionaryAttr> argAttrs;
  for (Role role : {Role::Param, Role::Grad, Role::AdamM, Role::AdamV})
    for (const ParamArg &p : params) {
      argTypes.push_back(p.type);
      if (role == Role::Param)
        argAttrs.push_back(model.getArgAttrDict(p.index));
      else
        argAttrs.push_back(stateArgAttrs(b, role, p.name));
    }
  for (auto [role, name] : {std::pair{Role::LearningRate, "lr"},
                            std::pair{Role::Step, "step"}}) {
    argTypes.push_back(scalar);
    argAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr(LoomDialect::kNameAttr, b.getStringAttr(name)),
         roleAttr(b, role)}));
  }

  auto update = func::FuncOp::create(
      b, NameLoc::get(StringAttr::get(ctx, "optimizer")),
      (model.getSymName() + "_update").str(), b.getFunctionType(argTypes, {}));
  update->setAttr(LoomDialect::kTrainAttr,
                  b.getDictionaryAttr(
                      {b.getNamedAttr("phase", b.getStringAttr("update"))}));
  update.setAllArgAttrs(argAttrs);
  Block *entry = update.addEntryBlock();
  b.setInsertionPointToStart(entry);
  size_t n = params.size();
  auto arg = [&](size_t group, size_t i) {
    return entry->getArgument(group * n + i);
  };
  Value lr = entry->getArgument(4 * n), step = entry->getArgument(4 * n + 1);

  // 1. Global gradient norm over the parameters that have gradients: a sum
  //    of squares (which shards with the gradients and is reduced as one
  //    scalar), then the norm and the clipping coefficient.
  SmallVector<Value> gradsWithValues;
  for (size_t i = 0; i < n; ++i)
    if (hasGrad[i])
      gradsWithValues.push_back(arg(1, i));
  auto sumSquares = SumSquaresOp::create(
      b, NameLoc::get(StringAttr::get(ctx, "grad_sum_squares")), scalar,
      gradsWithValues);
  auto clip = ClipCoefOp::create(
      b, NameLoc::get(StringAttr::get(ctx, "clip_coef")), scalar, scalar,
      sumSquares.getResult(), b.getF64FloatAttr(maxNorm));

  // 2. AdamW per parameter; decay only on rank >= 2 (nanoGPT convention,
  //    on the checkpoint's rank).
  SmallVector<Value> results(3 * n);
  SmallVector<int64_t> updates(3 * n);
  for (size_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < 3; ++k) {
      size_t group = k == 0 ? 0 : k + 1; // param, m, v
      results[k * n + i] = arg(group, i);
      updates[k * n + i] = group * n + i;
    }
    if (!hasGrad[i])
      continue;
    double decay = params[i].checkpointRank >= 2 ? weightDecay : 0.0;
    auto adamw = AdamWOp::create(
        b,
        NameLoc::get(StringAttr::get(ctx, params[i].name.getValue() + ".adamw")),
        arg(0, i), arg(1, i), arg(2, i), arg(3, i), lr, step, clip.getCoef(),
        beta1, beta2, eps, decay);
    results[i] = adamw.getNewParam();
    results[n + i] = adamw.getNewM();
    results[2 * n + i] = adamw.getNewV();
  }
  results.push_back(clip.getNorm());
  func::ReturnOp::create(b, update.getLoc(), results);
  update.setFunctionType(b.getFunctionType(
      argTypes, llvm::to_vector(ValueRange(results).getTypes())));
  setUpdatesAttrs(update, /*first=*/0, updates);
}

} // namespace
