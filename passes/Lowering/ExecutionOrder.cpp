//===- ExecutionOrder.cpp - The op sequence a rank executes -----*- C++ -*-===//

#include "passes/Lowering/ExecutionOrder.h"

using namespace mlir;
using namespace mlir::loom;

std::string mlir::loom::storageKey(func::FuncOp func, BlockArgument arg) {
  unsigned i = arg.getArgNumber();
  auto role = func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
  auto name = func.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
  if (role && name)
    return (stringifyRole(role.getValue()) + ":" + name.getValue()).str();
  return (func.getSymName() + "#" + Twine(i)).str();
}

bool mlir::loom::isView(Operation *op) { return isa<ReshapeOp>(op); }

bool mlir::loom::reducesInPlace(Operation *op) {
  return isLastMicrobatchReduction(op);
}

static LogicalResult appendOps(Block &block, ExecutionOrder &order) {
  for (Operation &op : block) {
    if (auto nested = dyn_cast<BlockOp>(op)) {
      Block &body = nested.getBody().front();
      for (auto [arg, input] :
           llvm::zip(body.getArguments(), nested.getInputs())) {
        order.storageOf[arg] = order.storage(input);
        order.sameAs[arg] = input;
      }
      if (failed(appendOps(body, order)))
        return failure();
      for (auto [result, yielded] :
           llvm::zip(nested.getResults(), nested.getYield().getValues())) {
        order.storageOf[result] = order.storage(yielded);
        order.sameAs[result] = yielded;
      }
      continue;
    }
    if (isa<YieldOp>(op))
      continue;
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      llvm::append_range(order.returned, ret.getOperands());
      continue;
    }
    if (!isa<LoomDialect>(op.getDialect()) || isa<MeshOp>(op))
      return op.emitOpError()
             << "cannot be executed by the Loom runtime; only loom compute "
                "and collective ops lower to instructions";
    if (isView(&op))
      order.storageOf[op.getResult(0)] = order.storage(op.getOperand(0));
    if (reducesInPlace(&op)) {
      // Skipped in all but the last micro-batch, so each result must already
      // be its input: the same storage, which nothing else may read.
      for (auto [i, input, result] :
           llvm::enumerate(op.getOperands(), op.getResults())) {
        if (!input.hasOneUse() || isa<BlockArgument>(input))
          return op.emitOpError()
                 << "reduces input #" << i
                 << " in place (last_microbatch), but it is "
                 << (isa<BlockArgument>(input) ? "an argument"
                                               : "read by other ops too")
                 << "; reduce a value only this op reads";
        order.storageOf[result] = order.storage(input);
      }
    }
    order.ops.push_back(&op);
  }
  return success();
}

FailureOr<ExecutionOrder> mlir::loom::linearize(func::FuncOp func) {
  if (func.isExternal())
    return func.emitOpError() << "has no body to lower";
  ExecutionOrder order;
  if (failed(appendOps(func.getBody().front(), order)))
    return failure();
  return order;
}

SmallVector<RankedTensorType> mlir::loom::getScratchTypes(Operation *op) {
  auto f32 = [&](ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, Float32Type::get(op->getContext()));
  };
  if (auto att = dyn_cast<AttentionOp>(op)) {
    // Row statistics [B, NH, T]: the log-sum-exp a tiled (flash) kernel
    // keeps per query row, unless the op returns them (its lse result). No
    // [B, NH, T, T] probabilities: the kernels never hold all of them at
    // once, and the gradient recomputes its own
    // (KernelBackend::attentionScratchFloats).
    if (att.getLse())
      return {};
    auto qkv = cast<RankedTensorType>(att.getQkv().getType()).getShape();
    return {f32({qkv[0], static_cast<int64_t>(att.getNumHeads()), qkv[1]})};
  }
  if (auto grad = dyn_cast<AttentionGradOp>(op)) {
    // An fp32 gradient needs the [B, NH, T] row dot products dO·O and,
    // unless the op reads the forward's (saved out, lse), the recomputed
    // forward the flash backward reads: its output [B, T, C] and [B, NH, T]
    // log-sum-exp. That is the CUDA kernels' working set
    // (KernelBackend::attentionScratchFloats), planned so that a device
    // step holds nothing beside the arena. The CPU kernels need none; a
    // bf16 gradient runs in the CUDA bf16 kernels' own memory.
    auto dout = cast<RankedTensorType>(grad.getDout().getType());
    if (!dout.getElementType().isF32())
      return {};
    const int64_t rows = dout.getShape()[0] *
                         static_cast<int64_t>(grad.getNumHeads()) *
                         dout.getShape()[1];
    if (grad.getLse())
      return {f32({rows})};
    return {f32({dout.getNumElements() + 2 * rows})};
  }
  if (auto ar = dyn_cast<AllReduceOp>(op); ar && ar.getInputs().size() > 1) {
    // A bucket travels as one contiguous buffer: its members packed.
    int64_t elements = 0;
    for (Value input : ar.getInputs())
      elements += cast<RankedTensorType>(input.getType()).getNumElements();
    return {RankedTensorType::get(
        {elements}, getElementTypeOrSelf(ar.getInputs().front().getType()))};
  }
  if (auto ag = dyn_cast<AllGatherOp>(op); ag && ag.getInputs().size() > 1) {
    // A bucket: this rank's shards packed into one buffer, every rank's
    // packed shards gathered into another, each result unpacked from it.
    int64_t elements = 0;
    for (Value input : ag.getInputs())
      elements += cast<RankedTensorType>(input.getType()).getNumElements();
    Type element = getElementTypeOrSelf(ag.getInputs().front().getType());
    return {RankedTensorType::get({elements}, element),
            RankedTensorType::get({elements * ag.getGroupSize().value_or(1)},
                                  element)};
  }
  if (auto rs = dyn_cast<ReduceScatterOp>(op);
      rs && rs.getInputs().size() > 1) {
    // A bucket: this rank's reduced blocks arrive in one buffer (unpacked
    // into the results on completion) after every member's blocks were
    // packed rank by rank into another; the inputs are free once packed.
    int64_t elements = 0;
    for (Value input : rs.getInputs())
      elements += cast<RankedTensorType>(input.getType()).getNumElements();
    Type element = getElementTypeOrSelf(rs.getInputs().front().getType());
    return {RankedTensorType::get({elements / rs.getGroupSize().value_or(1)},
                                  element),
            RankedTensorType::get({elements}, element)};
  }
  // Below: a collective of one value. Split on a non-leading dimension,
  // its blocks are not contiguous in the value, so they travel through a
  // buffer holding them rank by rank, planned here like every other tensor
  // so that the arena is the whole of the step's memory (GPT-2's wte under
  // ZeRO-3 on a data-parallel size that does not divide its 50257 rows is
  // gathered on its columns: a 154 MB buffer the plan would otherwise miss).
  auto nonLeading = [](RankedTensorType type, int64_t dim) {
    return ShapedType::getNumElements(type.getShape().take_front(dim)) != 1;
  };
  if (auto ag = dyn_cast<AllGatherOp>(op)) {
    // Every rank's block arrives rank by rank, then is unpacked into the
    // result (in flight: when the gather completes).
    auto type = cast<RankedTensorType>(ag.getInput().getType());
    if (!nonLeading(type, ag.getDim()))
      return {};
    return {RankedTensorType::get(
        {type.getNumElements() * ag.getGroupSize().value_or(1)},
        type.getElementType())};
  }
  if (auto a2a = dyn_cast<AllToAllOp>(op)) {
    // The input's blocks packed rank by rank (split dim), and the blocks
    // received rank by rank before they are unpacked along the concat dim
    // of the result.
    auto type = cast<RankedTensorType>(a2a.getInput().getType());
    const int64_t n = a2a.getGroupSize().value_or(1);
    SmallVector<int64_t> chunk(type.getShape());
    chunk[a2a.getSplitDim()] /= n;
    auto full =
        RankedTensorType::get({type.getNumElements()}, type.getElementType());
    SmallVector<RankedTensorType> scratch;
    if (nonLeading(type, a2a.getSplitDim()))
      scratch.push_back(full);
    if (nonLeading(RankedTensorType::get(chunk, type.getElementType()),
                   a2a.getConcatDim()))
      scratch.push_back(full);
    return scratch;
  }
  if (auto rs = dyn_cast<ReduceScatterOp>(op)) {
    // A split of a non-leading dimension sends its input packed block by
    // block from a buffer of its own (in flight, until it completes).
    // In place, the reduced block arrives in a buffer of its own first
    // (the input is still being sent) and is written into the input's
    // storage when the reduction completes.
    auto type = cast<RankedTensorType>(rs.getInput().getType());
    SmallVector<RankedTensorType> scratch;
    if (rs.getLastMicrobatch())
      scratch.push_back(RankedTensorType::get(
          {type.getNumElements() / rs.getGroupSize().value_or(1)},
          type.getElementType()));
    if (nonLeading(type, rs.getDim()))
      scratch.push_back(RankedTensorType::get({type.getNumElements()},
                                              type.getElementType()));
    return scratch;
  }
  if (isa<LayerNormOp, LayerNormGradOp>(op)) {
    // Per-row mean and reciprocal standard deviation (the gradient
    // recomputes them from its input).
    Value input = isa<LayerNormOp>(op) ? cast<LayerNormOp>(op).getInput()
                                       : cast<LayerNormGradOp>(op).getInput();
    auto type = cast<RankedTensorType>(input.getType());
    int64_t rows = type.getNumElements() / type.getShape().back();
    return {f32({rows}), f32({rows})};
  }
  return {};
}

bool mlir::loom::completesLater(Operation *op) {
  if (auto ar = dyn_cast<AllReduceOp>(op))
    return ar.getAsync();
  if (auto rs = dyn_cast<ReduceScatterOp>(op))
    return rs.getAsync();
  // A gather writes its result in flight (allocated from the gather on);
  // a bucket, or one value split on a non-leading dimension, also receives
  // through its scratch.
  if (auto ag = dyn_cast<AllGatherOp>(op))
    return ag.getAsync();
  return false;
}

bool mlir::loom::readsInputsUntilComplete(Operation *op) {
  // A bucket sends its packed copy; a single value is sent from its input.
  auto rs = dyn_cast<ReduceScatterOp>(op);
  return rs && rs.getAsync() && rs.getInputs().size() == 1;
}
