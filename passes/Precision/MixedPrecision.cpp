//===- MixedPrecision.cpp - bf16 compute, fp32 master weights ---*- C++ -*-===//
//
// `--loom-mixed-precision`: Megatron's / the ZeRO paper's bf16 mixed
// precision, as types on the training step. The forward and backward read
// bf16 parameters and produce bf16 activations and gradients; the optimizer
// keeps fp32 master weights and moments and casts each updated master into
// the bf16 parameter. Model state is then 2 + 2 + 12 bytes per parameter
// (16Φ), which ZeRO-1/2/3 shard as 4Φ+12Φ/N, 2Φ+14Φ/N and 16Φ/N: the
// master is sharded like the moments (its role is training state to
// --loom-zero), so ZeRO-1/2 cast the master's shard and all-gather the bf16
// parameter, half of fp32's bytes. With grad-precision=fp32 the gradient
// accumulators stay f32 (Megatron's --accumulate-allreduce-grads-in-fp32):
// each micro-batch's bf16 gradient is widened before it is accumulated, and
// the data-parallel reductions run after the (exact) widening, in fp32.
//
// Runs after --loom-autodiff (or on a forward-only model, for evaluation)
// and before recomputation, tensor parallelism, ZeRO and partitioning,
// which see bf16 values like any others.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "loom-mixed-precision"

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMMIXEDPRECISION
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

/// The bf16 version of `type` when it is an f32 tensor of rank >= 1 (what
/// mixed precision narrows); null otherwise. Rank-0 scalars (the loss, its
/// seed gradient, lr, step, the norm and the clip coefficient) stay f32.
RankedTensorType narrowed(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || tensor.getRank() == 0 || !tensor.getElementType().isF32())
    return RankedTensorType();
  return RankedTensorType::get(tensor.getShape(),
                               BFloat16Type::get(type.getContext()));
}

/// Fails with a diagnostic on `func` when a float tensor in it is not f32
/// (already converted, or a precision this pass does not handle).
LogicalResult checkConvertible(func::FuncOp func) {
  auto check = [&](Value v, Operation *where) -> LogicalResult {
    auto tensor = dyn_cast<RankedTensorType>(v.getType());
    if (!tensor || !isa<FloatType>(tensor.getElementType()) ||
        tensor.getElementType().isF32())
      return success();
    if (tensor.getElementType().isBF16())
      return where->emitOpError()
             << "already has a bf16 value (" << tensor
             << "); --loom-mixed-precision converts an f32 graph, once";
    return where->emitOpError()
           << "has a value of type " << tensor
           << "; --loom-mixed-precision converts f32 graphs only (convert the "
              "model to f32 first)";
  };
  for (BlockArgument arg : func.getArguments())
    if (failed(check(arg, func)))
      return failure();
  WalkResult walk = func.walk([&](Operation *op) {
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          if (failed(check(arg, op)))
            return WalkResult::interrupt();
    for (Value result : op->getResults())
      if (failed(check(result, op)))
        return WalkResult::interrupt();
    return WalkResult::advance();
  });
  return failure(walk.wasInterrupted());
}

/// Narrows every f32 tensor of rank >= 1 in `func` (arguments, block
/// arguments of nested regions, results) to bf16, except those in `keep`,
/// and updates its type.
void narrowFunction(func::FuncOp func, const llvm::DenseSet<Value> &keep) {
  auto narrow = [&](Value v) {
    if (keep.contains(v))
      return;
    if (RankedTensorType bf16 = narrowed(v.getType()))
      v.setType(bf16);
  };
  for (BlockArgument arg : func.getArguments())
    narrow(arg);
  func.walk([&](Operation *op) {
    for (Region &region : op->getRegions())
      for (Block &block : region)
        for (BlockArgument arg : block.getArguments())
          narrow(arg);
    for (Value result : op->getResults())
      narrow(result);
  });
  Operation *ret = func.getBody().front().getTerminator();
  func.setFunctionType(FunctionType::get(
      func.getContext(), func.getBody().front().getArgumentTypes(),
      ret->getOperandTypes()));
}

/// Adds to `keep` every attention's log-sum-exp in `func` and the block
/// results and block arguments that carry it from the forward block to the
/// backward block: row statistics stay f32 (loom.attention's contract), as
/// FlashAttention keeps them in fp32 next to bf16 activations.
void keepRowStatisticsF32(func::FuncOp func, llvm::DenseSet<Value> &keep) {
  SmallVector<Value> work;
  func.walk([&](AttentionOp att) {
    if (Value lse = att.getLse())
      work.push_back(lse);
  });
  // Follow each statistic's uses: a yield hands it to its block's result,
  // a block operand to the block's argument.
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!keep.insert(v).second)
      continue;
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (isa<YieldOp>(user))
        work.push_back(user->getParentOp()->getResult(use.getOperandNumber()));
      else if (auto block = dyn_cast<BlockOp>(user))
        work.push_back(block.getBody().getArgument(use.getOperandNumber()));
    }
  }
}

/// One gradient accumulation of the micro-batch function: `add` sums the
/// accumulator argument and the micro-batch's gradient (operand
/// `gradOperand`).
struct Accumulation {
  AddOp add;
  unsigned gradOperand;
};

/// The micro-batch function's gradient accumulations: each `role = grad`
/// argument is read once, by the top-level `loom.add` of this micro-batch's
/// gradient (as --loom-autodiff builds it), whose result is returned as the
/// argument's in-place update. With fp32 gradients these stay f32 (into
/// `keep`) and the gradient is widened before the add. Fails with a
/// diagnostic when the function is not shaped that way.
LogicalResult findAccumulations(func::FuncOp func,
                                SmallVectorImpl<Accumulation> &accumulations,
                                llvm::DenseSet<Value> &keep) {
  Block &entry = func.getBody().front();
  Operation *ret = entry.getTerminator();
  for (BlockArgument arg : entry.getArguments()) {
    auto role = func.getArgAttrOfType<RoleAttr>(arg.getArgNumber(),
                                                LoomDialect::kRoleAttr);
    if (!role || role.getValue() != Role::Grad)
      continue;
    auto add = arg.hasOneUse() ? dyn_cast<AddOp>(*arg.getUsers().begin())
                               : AddOp();
    bool returned = add && add->getBlock() == &entry &&
                    add.getLhs().getType() == add.getRhs().getType() &&
                    llvm::all_of(add->getUses(), [&](OpOperand &use) {
                      if (use.getOwner() != ret)
                        return false;
                      auto updates = func.getResultAttrOfType<IntegerAttr>(
                          use.getOperandNumber(), LoomDialect::kUpdatesAttr);
                      return updates &&
                             updates.getInt() == arg.getArgNumber();
                    });
    if (!returned) {
      auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                    LoomDialect::kNameAttr);
      return func.emitOpError()
             << "has gradient accumulator '"
             << (name ? name.getValue().str()
                      : "#" + std::to_string(arg.getArgNumber()))
             << "' that is not read once by a top-level loom.add returned "
                "as its update; grad-precision=fp32 needs the micro-batch "
                "function as --loom-autodiff builds it";
    }
    accumulations.push_back({add, add.getLhs() == arg ? 1u : 0u});
    keep.insert(arg);
    keep.insert(add.getResult());
  }
  return success();
}

/// After narrowing: each accumulation adds the widened (exact) bf16
/// gradient to its f32 accumulator. The cast goes below the pads that carry
/// the gradient into the table's shape (slice_grad: wpe's seq rows written
/// into zeros of the whole table): a pad commutes with the widening, and the
/// partitioner reduces a partial sum before a pad, so that reduction moves
/// fp32 too.
void widenAccumulatedGradients(ArrayRef<Accumulation> accumulations) {
  for (auto [add, g] : accumulations) {
    SmallVector<SliceGradOp> pads;
    Value grad = add->getOperand(g);
    while (auto pad = grad.getDefiningOp<SliceGradOp>()) {
      if (!grad.hasOneUse())
        break;
      pads.push_back(pad);
      grad = pad.getDout();
    }
    Operation *user = pads.empty() ? add.getOperation() : pads.back();
    OpBuilder b(user);
    Location loc = add.getLoc();
    if (auto named = dyn_cast<NameLoc>(loc))
      loc = NameLoc::get(
          StringAttr::get(add.getContext(), named.getName().str() + ".fp32"));
    Type f32 = add.getResult().getType().getElementType();
    auto widened = CastOp::create(
        b, loc, cast<RankedTensorType>(grad.getType()).clone(f32), grad);
    grad.replaceUsesWithIf(widened.getResult(), [&](OpOperand &use) {
      return use.getOwner() == user;
    });
    for (SliceGradOp pad : pads)
      pad.getResult().setType(pad.getResult().getType().clone(f32));
  }
}

struct LoomMixedPrecisionPass
    : mlir::loom::impl::LoomMixedPrecisionBase<LoomMixedPrecisionPass> {
  using Base::Base;

  LogicalResult convertUpdate(func::FuncOp update);
  void runOnOperation() override;
};

/// The optimizer update: bf16 parameters and gradients, a new fp32 master
/// argument per parameter (appended, so the loom.updates indices stay
/// valid), each AdamW rewritten to update the master and followed by the
/// cast of the new master into the parameter.
LogicalResult LoomMixedPrecisionPass::convertUpdate(func::FuncOp update) {
  MLIRContext *ctx = update.getContext();
  Block &entry = update.getBody().front();
  auto ret = cast<func::ReturnOp>(entry.getTerminator());
  OpBuilder b(ctx);

  // 1. Each parameter gets its master: f32, the parameter's shape, named
  //    after it. The parameter may be read only by its AdamW (as the
  //    weights it updates) and returned (a parameter without gradient).
  SmallVector<BlockArgument> params;
  for (BlockArgument arg : entry.getArguments()) {
    auto role = update.getArgAttrOfType<RoleAttr>(arg.getArgNumber(),
                                                  LoomDialect::kRoleAttr);
    if (!role || role.getValue() != Role::Param)
      continue;
    for (OpOperand &use : arg.getUses()) {
      // Operand 0 of loom.adamw is the weights it updates.
      if ((isa<AdamWOp>(use.getOwner()) && use.getOperandNumber() == 0) ||
          isa<func::ReturnOp>(use.getOwner()))
        continue;
      return use.getOwner()->emitOpError()
             << "reads parameter '"
             << update
                    .getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                  LoomDialect::kNameAttr)
                    .getValue()
             << "' in the optimizer update; --loom-mixed-precision expects "
                "only loom.adamw to read it (the fp32 master replaces it "
                "there)";
    }
    params.push_back(arg);
  }
  // All at once: inserting arguments one by one rebuilds the argument
  // attribute list each time, quadratic in a deep model's parameter count.
  unsigned first = update.getNumArguments();
  SmallVector<unsigned> indices(params.size(), first);
  SmallVector<Type> types;
  SmallVector<DictionaryAttr> attrs;
  SmallVector<Location> locs;
  for (BlockArgument param : params) {
    auto name = update.getArgAttrOfType<StringAttr>(param.getArgNumber(),
                                                    LoomDialect::kNameAttr);
    types.push_back(param.getType());
    attrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr(LoomDialect::kNameAttr, name),
         b.getNamedAttr(LoomDialect::kRoleAttr,
                        RoleAttr::get(ctx, Role::Master))}));
    locs.push_back(
        NameLoc::get(StringAttr::get(ctx, name.getValue() + ".master")));
  }
  // Appending to a function with a body cannot fail.
  LogicalResult inserted = update.insertArguments(indices, types, attrs, locs);
  assert(succeeded(inserted) && "appending the master arguments failed");
  (void)inserted;
  llvm::DenseMap<Value, Value> masterOf;
  for (auto [i, param] : llvm::enumerate(params))
    masterOf[param] = entry.getArgument(first + i);

  // 2. AdamW updates the master (reading the bf16 gradient); the parameter
  //    is the cast of the new master.
  SmallVector<AdamWOp> adamws(update.getOps<AdamWOp>());
  llvm::DenseMap<Value, Value> newMasterOf;
  for (AdamWOp adamw : adamws) {
    Value master = masterOf.lookup(adamw.getParam());
    if (!master)
      return adamw.emitOpError()
             << "updates a value that is not a parameter argument of the "
                "optimizer update; --loom-mixed-precision cannot give it "
                "master weights";
    b.setInsertionPoint(adamw);
    auto mixed = AdamWOp::create(
        b, adamw.getLoc(), master, adamw.getGrad(), adamw.getM(), adamw.getV(),
        adamw.getLr(), adamw.getStep(), adamw.getCoef(),
        adamw.getBeta1().convertToDouble(), adamw.getBeta2().convertToDouble(),
        adamw.getEps().convertToDouble(),
        adamw.getWeightDecay().convertToDouble());
    Location castLoc = adamw.getLoc();
    if (auto named = dyn_cast<NameLoc>(castLoc))
      castLoc =
          NameLoc::get(StringAttr::get(ctx, named.getName().str() + ".cast"));
    auto cast = CastOp::create(b, castLoc, narrowed(master.getType()),
                               mixed.getNewParam());
    adamw.getNewParam().replaceAllUsesWith(cast.getResult());
    adamw.getNewM().replaceAllUsesWith(mixed.getNewM());
    adamw.getNewV().replaceAllUsesWith(mixed.getNewV());
    newMasterOf[master] = mixed.getNewParam();
    adamw.erase();
  }

  // 3. Parameters and gradients (and anything computed from them) become
  //    bf16; the moments, masters and scalars stay f32, and so do the
  //    gradients with grad-precision=fp32.
  bool bf16Grads = gradPrecision == "bf16";
  for (BlockArgument arg : entry.getArguments()) {
    auto role = update.getArgAttrOfType<RoleAttr>(arg.getArgNumber(),
                                                  LoomDialect::kRoleAttr);
    if (role && (role.getValue() == Role::Param ||
                 (bf16Grads && role.getValue() == Role::Grad)))
      if (RankedTensorType bf16 = narrowed(arg.getType()))
        arg.setType(bf16);
  }

  // 4. Return every master too (updated in place: loom.updates), so the
  //    runtime keeps each one, also a parameter's without gradient.
  SmallVector<Value> results(ret.getOperands());
  SmallVector<DictionaryAttr> resultAttrs;
  update.getAllResultAttrs(resultAttrs);
  for (BlockArgument param : params) {
    Value master = masterOf.lookup(param);
    Value updated = newMasterOf.lookup(master);
    results.push_back(updated ? updated : master);
    resultAttrs.push_back(b.getDictionaryAttr({b.getNamedAttr(
        LoomDialect::kUpdatesAttr,
        b.getI64IntegerAttr(cast<BlockArgument>(master).getArgNumber()))}));
  }
  b.setInsertionPoint(ret);
  func::ReturnOp::create(b, ret.getLoc(), results);
  ret.erase();
  update.setFunctionType(FunctionType::get(ctx, entry.getArgumentTypes(),
                                           ValueRange(results).getTypes()));
  update.setAllResultAttrs(resultAttrs);
  return success();
}

void LoomMixedPrecisionPass::runOnOperation() {
  ModuleOp module = getOperation();
  if (dtype != "bf16") {
    module.emitError() << "loom-mixed-precision: dtype '" << dtype
                       << "' is not supported; use bf16 (or fp32, which needs "
                          "no mixed precision)";
    return signalPassFailure();
  }
  if (gradPrecision != "bf16" && gradPrecision != "fp32") {
    module.emitError() << "loom-mixed-precision: grad-precision '"
                       << gradPrecision
                       << "' is not supported; use bf16 (the ZeRO paper's "
                          "2-byte gradients) or fp32 (accumulated and "
                          "reduced in fp32)";
    return signalPassFailure();
  }
  // 1. Which functions: the training step's micro-batch and update
  //    functions (--loom-autodiff), or a forward-only model (evaluation).
  SmallVector<func::FuncOp> compute, updates;
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    if (func->hasAttr(LoomDialect::kPipelineAttr) ||
        func->hasAttr(LoomDialect::kPartitionedAttr)) {
      func.emitOpError()
          << "is already "
          << (func->hasAttr(LoomDialect::kPipelineAttr) ? "a pipeline stage"
                                                        : "partitioned")
          << "; run --loom-mixed-precision after --loom-autodiff and before "
             "--loom-tensor-parallel, --loom-zero, --loom-partition and "
             "--loom-pipeline";
      return signalPassFailure();
    }
    auto train = func->getAttrOfType<DictionaryAttr>(LoomDialect::kTrainAttr);
    auto phase = train ? train.getAs<StringAttr>("phase") : StringAttr();
    if (phase && phase.getValue() == "update")
      updates.push_back(func);
    else if ((phase && phase.getValue() == "microbatch") ||
             (!train && func->hasAttr(LoomDialect::kModelAttr)))
      compute.push_back(func);
  }
  if (compute.empty()) {
    module.emitError()
        << "loom-mixed-precision: found no model function (loom.model) or "
           "training step (loom.train, from --loom-autodiff) to convert";
    return signalPassFailure();
  }
  for (func::FuncOp func : llvm::concat<func::FuncOp>(compute, updates))
    if (failed(checkConvertible(func)))
      return signalPassFailure();

  // 2. The forward and backward compute in bf16; the update keeps fp32
  //    master weights.
  for (func::FuncOp func : compute) {
    SmallVector<Accumulation> accumulations;
    llvm::DenseSet<Value> keep;
    if (gradPrecision == "fp32" &&
        failed(findAccumulations(func, accumulations, keep)))
      return signalPassFailure();
    keepRowStatisticsF32(func, keep);
    narrowFunction(func, keep);
    widenAccumulatedGradients(accumulations);
    LLVM_DEBUG(llvm::dbgs() << "bf16: @" << func.getSymName() << " ("
                            << accumulations.size()
                            << " fp32 gradient accumulators)\n");
  }
  for (func::FuncOp update : updates)
    if (failed(convertUpdate(update)))
      return signalPassFailure();
}

} // namespace
