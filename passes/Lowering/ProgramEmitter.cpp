//===- ProgramEmitter.cpp - Planned IR -> runtime program file --*- C++ -*-===//
//
// Walks each planned function in execution order (ExecutionOrder) and writes
// buffers, parameters and instructions in the FlatBuffers schema shared with
// the runtime, wrapped in the checksummed envelope.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/ProgramEmitter.h"

#include "dialects/Loom/IR/LoomOps.h"
#include "passes/Analysis/RankFigures.h"
#include "passes/Lowering/ExecutionOrder.h"
#include "passes/Pipeline/PipelineModel.h"
#include "runtime/program/program_envelope.h"
#include "runtime/program/program_generated.h"

#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Format.h"

#include <map>
#include <set>

using namespace mlir;
using namespace mlir::loom;
namespace fb = ::loom::program;

namespace {

/// Builds one stage's tables.
class StageEmitter {
public:
  StageEmitter(flatbuffers::FlatBufferBuilder &fbb, MeshOp mesh)
      : fbb(fbb), mesh(mesh) {}

  /// What a pipeline stage adds to its Stage table.
  struct PipelineInfo {
    mutable PipelineScheduleOp schedule; // accessors are not const
    double stepSeconds = 0, idleFraction = 0;
    int64_t stashPeakBytes = -1;
  };

  /// Emits one stage from `funcs`: an eval program's single function, a
  /// training step's micro-batch and update functions (loom.train), or a
  /// pipeline stage's chunk functions and update (with `pipeline`).
  FailureOr<flatbuffers::Offset<fb::Stage>>
  emit(ArrayRef<func::FuncOp> funcs, unsigned index,
       const PipelineInfo *pipeline = nullptr);

private:
  struct BufferDesc {
    std::string name;
    int64_t offset;
    SmallVector<int64_t> shape;
    fb::DType dtype;
    bool inStash; // offset is in the chunk's stash slot (Buffer.stash)
  };

  unsigned addBuffer(std::string name, int64_t offset, RankedTensorType type,
                     bool inStash = false) {
    Type element = type.getElementType();
    fb::DType dtype = element.isInteger(32) ? fb::DType::I32
                      : element.isBF16()    ? fb::DType::BF16
                                            : fb::DType::F32;
    buffers.push_back({std::move(name), offset,
                       SmallVector<int64_t>(type.getShape()), dtype, inStash});
    return buffers.size() - 1;
  }
  FailureOr<unsigned> bufferOf(Value v, Operation *user);
  LogicalResult addArguments(func::FuncOp func);
  FailureOr<std::vector<flatbuffers::Offset<fb::Instruction>>>
  emitBody(func::FuncOp func);
  FailureOr<flatbuffers::Offset<fb::Instruction>>
  emitInstruction(Operation *op);
  FailureOr<std::vector<uint32_t>> meshAxes(Operation *op, ArrayAttr axes);
  FailureOr<flatbuffers::Offset<fb::Pipeline>>
  emitPipeline(ArrayRef<func::FuncOp> funcs, const PipelineInfo &info);

  flatbuffers::FlatBufferBuilder &fbb;
  MeshOp mesh;
  ExecutionOrder order;
  std::vector<BufferDesc> buffers;
  llvm::DenseMap<Value, unsigned> bufferIndex;
  /// Argument buffers by storageKey, shared by the functions of a stage.
  std::map<std::string, unsigned> argumentBuffers;
  /// Results that overwrite an argument in place (loom.updates) -> the
  /// argument's buffer: the runtime sees the same buffer as in and out.
  llvm::DenseMap<Value, unsigned> inPlace;
};

/// The sharding of each argument with a role and a name, keyed by both
/// (the first such argument wins), so every parameter finds its own,
/// its gradient's and its moments' shardings without a scan over all
/// arguments (quadratic in the parameter count).
using ShardingsByRoleAndName =
    llvm::DenseMap<std::pair<unsigned, StringAttr>, ShardingAttr>;

ShardingsByRoleAndName shardingsByRoleAndName(func::FuncOp func) {
  ShardingsByRoleAndName shardings;
  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto role = func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
    auto name = func.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
    if (role && name)
      shardings.try_emplace(
          {static_cast<unsigned>(role.getValue()), name},
          func.getArgAttrOfType<ShardingAttr>(i, LoomDialect::kShardingAttr));
  }
  return shardings;
}

/// A readable name for an op: its NameLoc ("h.0.attn.c_attn") or op name.
std::string nameOf(Operation *op) {
  Location loc = op->getLoc();
  if (auto fused = dyn_cast<FusedLoc>(loc))
    if (!fused.getLocations().empty())
      loc = fused.getLocations().front();
  if (auto named = dyn_cast<NameLoc>(loc))
    return named.getName().str();
  if (auto file = dyn_cast<FileLineColLoc>(loc))
    return (op->getName().getStringRef() + "@" + file.getFilename().getValue() +
            ":" + Twine(file.getLine()))
        .str();
  return op->getName().getStringRef().str();
}

fb::Reduction reductionOf(ReductionKind kind) {
  switch (kind) {
  case ReductionKind::Sum:
    return fb::Reduction::Sum;
  case ReductionKind::Max:
    return fb::Reduction::Max;
  case ReductionKind::Min:
    return fb::Reduction::Min;
  case ReductionKind::Avg:
    return fb::Reduction::Avg;
  }
  llvm_unreachable("unknown reduction");
}

} // namespace

std::optional<fb::Opcode> mlir::loom::opcodeOf(Operation *op) {
  return llvm::TypeSwitch<Operation *, std::optional<fb::Opcode>>(op)
      .Case<EmbeddingOp>([](auto) { return fb::Opcode::Embedding; })
      .Case<AddOp>([](auto) { return fb::Opcode::Add; })
      .Case<LinearOp>([](auto) { return fb::Opcode::Linear; })
      .Case<MatmulOp>([](auto) { return fb::Opcode::Matmul; })
      .Case<LayerNormOp>([](auto) { return fb::Opcode::LayerNorm; })
      .Case<GeluOp>([](auto) { return fb::Opcode::Gelu; })
      .Case<AttentionOp>([](auto) { return fb::Opcode::Attention; })
      .Case<RowMaxOp>([](auto) { return fb::Opcode::RowMax; })
      .Case<CrossEntropySumsOp>(
          [](auto) { return fb::Opcode::CrossEntropySums; })
      .Case<CrossEntropyFromSumsOp>(
          [](auto) { return fb::Opcode::CrossEntropyFromSums; })
      .Case<CrossEntropySumsGradOp>(
          [](auto) { return fb::Opcode::CrossEntropySumsGrad; })
      .Case<SoftmaxOp>([](auto) { return fb::Opcode::Softmax; })
      .Case<CrossEntropyOp>([](auto) { return fb::Opcode::CrossEntropy; })
      .Case<ReshapeOp>([](auto) { return fb::Opcode::Copy; })
      .Case<TransposeOp>([](auto) { return fb::Opcode::Transpose; })
      .Case<SliceOp>([](auto) { return fb::Opcode::Slice; })
      .Case<ConcatOp>([](auto) { return fb::Opcode::Concat; })
      .Case<CastOp>([](auto) { return fb::Opcode::Cast; })
      .Case<WaitOp>([](auto) { return fb::Opcode::Wait; })
      .Case<AllReduceOp, GroupAllReduceOp>(
          [](auto) { return fb::Opcode::AllReduce; })
      .Case<AllGatherOp>([](auto) { return fb::Opcode::AllGather; })
      .Case<ReduceScatterOp>([](auto) { return fb::Opcode::ReduceScatter; })
      .Case<AllToAllOp>([](auto) { return fb::Opcode::AllToAll; })
      .Case<SendOp>([](auto) { return fb::Opcode::Send; })
      .Case<LocalSliceOp>([](auto) { return fb::Opcode::LocalSlice; })
      .Case<RecvOp>([](auto) { return fb::Opcode::Recv; })
      .Case<EmbeddingGradOp>([](auto) { return fb::Opcode::EmbeddingGrad; })
      .Case<ReduceLeadingOp>([](auto) { return fb::Opcode::ReduceLeading; })
      .Case<LinearGradOp>([](auto) { return fb::Opcode::LinearGrad; })
      .Case<MatmulGradOp>([](auto) { return fb::Opcode::MatmulGrad; })
      .Case<LayerNormGradOp>([](auto) { return fb::Opcode::LayerNormGrad; })
      .Case<GeluGradOp>([](auto) { return fb::Opcode::GeluGrad; })
      .Case<AttentionGradOp>([](auto) { return fb::Opcode::AttentionGrad; })
      .Case<SoftmaxGradOp>([](auto) { return fb::Opcode::SoftmaxGrad; })
      .Case<CrossEntropyGradOp>(
          [](auto) { return fb::Opcode::CrossEntropyGrad; })
      .Case<SliceGradOp>([](auto) { return fb::Opcode::SliceGrad; })
      .Case<FillOp>([](auto) { return fb::Opcode::Fill; })
      .Case<SumSquaresOp>([](auto) { return fb::Opcode::SumSquares; })
      .Case<ClipCoefOp>([](auto) { return fb::Opcode::ClipCoef; })
      .Case<AdamWOp>([](auto) { return fb::Opcode::AdamW; })
      .Default([](Operation *) { return std::nullopt; });
}

FailureOr<unsigned> StageEmitter::bufferOf(Value v, Operation *user) {
  auto it = bufferIndex.find(order.representative(v));
  if (it == bufferIndex.end())
    return user->emitOpError()
           << "uses a value with no planned buffer; run --loom-plan-buffers "
              "on the final IR";
  return it->second;
}

FailureOr<std::vector<uint32_t>> StageEmitter::meshAxes(Operation *op,
                                                        ArrayAttr axes) {
  if (!mesh)
    return op->emitOpError() << "is a collective but the module declares no "
                                "loom.mesh";
  std::vector<uint32_t> indices;
  for (Attribute axis : axes) {
    std::optional<unsigned> i =
        mesh.getShape().findAxis(cast<StringAttr>(axis).getValue());
    if (!i)
      return op->emitOpError() << "names an axis missing from @"
                               << mesh.getSymName();
    indices.push_back(*i);
  }
  return indices;
}

FailureOr<flatbuffers::Offset<fb::Instruction>>
StageEmitter::emitInstruction(Operation *op) {
  std::vector<uint32_t> inputs, outputs, scratch;
  for (Value operand : op->getOperands()) {
    FailureOr<unsigned> index = bufferOf(operand, op);
    if (failed(index))
      return failure();
    inputs.push_back(*index);
  }
  auto offsets = op->getAttrOfType<DenseI64ArrayAttr>(LoomDialect::kOffsetsAttr);
  if (!offsets || offsets.size() != op->getNumResults())
    return op->emitOpError() << "has no loom.offsets; run --loom-plan-buffers "
                                "on the final IR";
  std::string name = nameOf(op);
  auto inStash = op->getAttrOfType<DenseBoolArrayAttr>(LoomDialect::kInStashAttr);
  for (auto [i, result, offset] :
       llvm::enumerate(op->getResults(), offsets.asArrayRef())) {
    auto it = inPlace.find(result);
    unsigned index =
        reducesInPlace(op) ? inputs[i]
        : it != inPlace.end()
            ? it->second
            : addBuffer(name, offset, cast<RankedTensorType>(result.getType()),
                        inStash && inStash[i]);
    bufferIndex[result] = index;
    outputs.push_back(index);
  }
  SmallVector<RankedTensorType> scratchTypes = getScratchTypes(op);
  auto scratchOffsets =
      op->getAttrOfType<DenseI64ArrayAttr>(LoomDialect::kScratchOffsetsAttr);
  size_t planned = scratchOffsets ? scratchOffsets.size() : 0;
  if (planned != scratchTypes.size())
    return op->emitOpError() << "needs " << scratchTypes.size()
                             << " scratch buffers but " << planned
                             << " were planned; re-run --loom-plan-buffers";
  for (auto [i, type] : llvm::enumerate(scratchTypes))
    scratch.push_back(addBuffer(name + ".scratch" + std::to_string(i),
                                scratchOffsets[i], type));

  std::optional<fb::Opcode> opcode = opcodeOf(op);
  if (!opcode)
    return op->emitOpError() << "has no runtime instruction; the program "
                                "format cannot express it";

  // Opcode-specific attributes.
  double epsilon = 0.0, value = 0.0, maxNorm = 0.0, beta1 = 0.0, beta2 = 0.0,
         adamEps = 0.0, weightDecay = 0.0;
  int64_t numHeads = 0, dim = 0, dim2 = 0, offset = 0, peer = 0, tag = 0;
  bool transposeRhs = false, async = false, lastMicrobatchOnly = false;
  std::vector<int64_t> permutation, members, memberDims;
  std::vector<uint32_t> axes;
  fb::Reduction reduction = fb::Reduction::Sum;
  StringRef reason;
  // A bucket's split dimensions: `dim` when the members share one,
  // member_dims as well when they differ.
  auto splitDims = [&](ArrayRef<int64_t> dims) {
    dim = dims.front();
    if (!llvm::all_equal(dims))
      memberDims.assign(dims.begin(), dims.end());
  };
  auto collective = [&](ArrayAttr axesAttr, std::optional<StringRef> why)
      -> LogicalResult {
    FailureOr<std::vector<uint32_t>> indices = meshAxes(op, axesAttr);
    if (failed(indices))
      return failure();
    axes = *indices;
    reason = why.value_or("");
    return success();
  };
  LogicalResult ok =
      llvm::TypeSwitch<Operation *, LogicalResult>(op)
          .Case([&](EmbeddingOp e) {
            // Vocab-parallel: the axes splitting the table's rows.
            if (ArrayAttr rows = e.getRowAxesAttr())
              return collective(rows, std::nullopt);
            return success();
          })
          .Case<LayerNormOp, LayerNormGradOp>([&](auto ln) {
            epsilon = ln.getEpsilon().convertToDouble();
            return success();
          })
          .Case<AttentionOp, AttentionGradOp>([&](auto att) {
            numHeads = att.getNumHeads();
            return success();
          })
          .Case<MatmulOp, MatmulGradOp>([&](auto mm) {
            transposeRhs = mm.getTransposeRhs();
            return success();
          })
          .Case([&](SliceGradOp s) {
            dim = s.getDim();
            offset = s.getOffset();
            return success();
          })
          .Case<CrossEntropyOp, CrossEntropyGradOp, CrossEntropyFromSumsOp>(
              [&](auto ce) {
                value = static_cast<double>(ce.getNumTokens().value_or(0));
                return success();
              })
          .Case([&](RowMaxOp max) {
            // Padded and vocab-parallel: the axes splitting the columns.
            if (ArrayAttr vocab = max.getVocabAxesAttr())
              return collective(vocab, std::nullopt);
            return success();
          })
          .Case([&](CrossEntropySumsOp ce) {
            // Vocab-parallel: the axes splitting the logits' columns.
            if (ArrayAttr vocab = ce.getVocabAxesAttr())
              return collective(vocab, std::nullopt);
            return success();
          })
          .Case([&](CrossEntropySumsGradOp ce) {
            value = static_cast<double>(ce.getNumTokens().value_or(0));
            if (ArrayAttr vocab = ce.getVocabAxesAttr())
              return collective(vocab, std::nullopt);
            return success();
          })
          .Case([&](FillOp fill) {
            value = fill.getValue().convertToDouble();
            return success();
          })
          .Case([&](ClipCoefOp clip) {
            maxNorm = clip.getMaxNorm().convertToDouble();
            return success();
          })
          .Case([&](AdamWOp adamw) {
            beta1 = adamw.getBeta1().convertToDouble();
            beta2 = adamw.getBeta2().convertToDouble();
            adamEps = adamw.getEps().convertToDouble();
            weightDecay = adamw.getWeightDecay().convertToDouble();
            return success();
          })
          .Case([&](TransposeOp t) {
            permutation.assign(t.getPermutation().begin(),
                               t.getPermutation().end());
            return success();
          })
          .Case([&](SliceOp s) {
            dim = s.getDim();
            offset = s.getOffset();
            return success();
          })
          .Case([&](ConcatOp c) {
            dim = c.getDim();
            return success();
          })
          .Case([&](WaitOp w) {
            reason = w.getReason().value_or("");
            return success();
          })
          .Case([&](AllReduceOp c) {
            reduction = reductionOf(c.getReduction());
            async = c.getAsync();
            lastMicrobatchOnly = c.getLastMicrobatch();
            return collective(c.getAxes(), c.getReason());
          })
          .Case([&](GroupAllReduceOp c) {
            reduction = reductionOf(c.getReduction());
            members.assign(c.getMembers().begin(), c.getMembers().end());
            return collective(c.getAxes(), c.getReason());
          })
          .Case([&](AllGatherOp c) {
            splitDims(c.getDims());
            async = c.getAsync();
            return collective(c.getAxes(), c.getReason());
          })
          .Case([&](ReduceScatterOp c) {
            splitDims(c.getDims());
            reduction = reductionOf(c.getReduction());
            async = c.getAsync();
            lastMicrobatchOnly = c.getLastMicrobatch();
            return collective(c.getAxes(), c.getReason());
          })
          .Case([&](AllToAllOp c) {
            dim = c.getSplitDim();
            dim2 = c.getConcatDim();
            return collective(c.getAxes(), c.getReason());
          })
          .Case([&](LocalSliceOp c) {
            dim = c.getDim();
            return collective(c.getAxes(), c.getReason());
          })
          .Case([&](SendOp c) {
            peer = c.getPeer();
            tag = c.getTag();
            return collective(c.getAxes(), c.getReason());
          })
          .Case([&](RecvOp c) {
            peer = c.getPeer();
            tag = c.getTag();
            return collective(c.getAxes(), c.getReason());
          })
          .Default([](Operation *) { return success(); });
  if (failed(ok))
    return failure();

  return fb::CreateInstructionDirect(
      fbb, *opcode, &inputs, &outputs, &scratch, name.c_str(), epsilon,
      numHeads, transposeRhs, dim, dim2, offset,
      permutation.empty() ? nullptr : &permutation,
      axes.empty() ? nullptr : &axes, reduction, peer, tag,
      reason.empty() ? nullptr : reason.str().c_str(), value, maxNorm, beta1,
      beta2, adamEps, weightDecay, async,
      members.empty() ? nullptr : &members, lastMicrobatchOnly,
      memberDims.empty() ? nullptr : &memberDims);
}

LogicalResult StageEmitter::addArguments(func::FuncOp func) {
  for (BlockArgument arg : func.getArguments()) {
    unsigned i = arg.getArgNumber();
    auto offset = func.getArgAttrOfType<IntegerAttr>(i, LoomDialect::kOffsetAttr);
    if (!offset)
      return func.emitOpError() << "argument #" << i
                                << " has no loom.offset; run "
                                   "--loom-plan-buffers on the final IR";
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type)
      return func.emitOpError() << "argument #" << i << " is not a tensor";
    if (!func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr))
      return func.emitOpError() << "argument #" << i
                                << " has no loom.role (param, input or "
                                   "target); the runtime cannot feed it";
    std::string key = storageKey(func, arg);
    auto it = argumentBuffers.find(key);
    if (it == argumentBuffers.end()) {
      auto name = func.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
      std::string label = name ? name.str() : "arg" + std::to_string(i);
      Role role =
          func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr).getValue();
      if (role == Role::Grad || role == Role::AdamM || role == Role::AdamV ||
          role == Role::Master)
        label = key; // "grad:wte.weight", "adam_m:wte.weight", ...
      // A backward's stash argument is read in the micro-batch's slot.
      it = argumentBuffers
               .emplace(key, addBuffer(label, offset.getInt(), type,
                                       role == Role::Stash))
               .first;
    }
    bufferIndex[arg] = it->second;
  }
  return success();
}

FailureOr<std::vector<flatbuffers::Offset<fb::Instruction>>>
StageEmitter::emitBody(func::FuncOp func) {
  FailureOr<ExecutionOrder> linear = linearize(func);
  if (failed(linear))
    return failure();
  order = std::move(*linear);
  for (auto [i, value] : llvm::enumerate(order.returned))
    if (auto updates = func.getResultAttrOfType<IntegerAttr>(
            i, LoomDialect::kUpdatesAttr))
      if (!isa<BlockArgument>(value)) {
        unsigned argBuffer =
            bufferIndex.lookup(func.getArgument(updates.getInt()));
        // A block's result is the op result it yields (the instruction
        // that writes it).
        Value written = order.representative(value);
        inPlace[written] = argBuffer;
        // An in-place reduction's input is written where its result is.
        if (auto r = dyn_cast<OpResult>(written);
            r && reducesInPlace(r.getOwner()))
          inPlace[r.getOwner()->getOperand(r.getResultNumber())] = argBuffer;
      }

  // Instructions in execution order; views get a buffer, no instruction.
  std::vector<flatbuffers::Offset<fb::Instruction>> instructions;
  for (Operation *op : order.ops) {
    if (isView(op)) {
      auto source = bufferOf(op->getOperand(0), op);
      if (failed(source))
        return failure();
      bufferIndex[op->getResult(0)] =
          addBuffer(nameOf(op), buffers[*source].offset,
                    cast<RankedTensorType>(op->getResult(0).getType()),
                    buffers[*source].inStash);
      continue;
    }
    FailureOr<flatbuffers::Offset<fb::Instruction>> inst = emitInstruction(op);
    if (failed(inst))
      return failure();
    instructions.push_back(*inst);
  }
  return instructions;
}

FailureOr<flatbuffers::Offset<fb::Stage>>
StageEmitter::emit(ArrayRef<func::FuncOp> funcs, unsigned index,
                   const PipelineInfo *pipelineInfo) {
  func::FuncOp step = funcs.front(), update;
  int64_t microbatches = 1;
  for (func::FuncOp func : funcs) {
    auto train = func->getAttrOfType<DictionaryAttr>(LoomDialect::kTrainAttr);
    if (!train)
      continue;
    if (train.getAs<StringAttr>("phase").getValue() == "update") {
      update = func;
    } else {
      if (train.getAs<StringAttr>("phase").getValue() == "microbatch")
        step = func;
      if (auto m = train.getAs<IntegerAttr>("microbatches"))
        microbatches = m.getInt();
    }
  }
  auto arena = step->getAttrOfType<IntegerAttr>(LoomDialect::kArenaBytesAttr);

  // 1. Arguments of every function, then the instruction streams (a
  //    pipeline stage: one forward and one backward list per chunk).
  for (func::FuncOp func : funcs)
    if (failed(addArguments(func)))
      return failure();
  std::vector<flatbuffers::Offset<fb::Instruction>> stepInstructions;
  int32_t loss = -1;
  flatbuffers::Offset<fb::Pipeline> pipeline = 0;
  if (pipelineInfo) {
    FailureOr<flatbuffers::Offset<fb::Pipeline>> emitted =
        emitPipeline(funcs, *pipelineInfo);
    if (failed(emitted))
      return failure();
    pipeline = *emitted;
  } else {
    auto instructions = emitBody(step);
    if (failed(instructions))
      return failure();
    stepInstructions = std::move(*instructions);
    if (!order.returned.empty()) {
      FailureOr<unsigned> lossIndex = bufferOf(order.returned.front(), step);
      if (failed(lossIndex))
        return failure();
      loss = *lossIndex;
    }
  }
  std::vector<flatbuffers::Offset<fb::Instruction>> updateInstructions;
  int32_t gradNorm = -1;
  if (update) {
    auto emitted = emitBody(update);
    if (failed(emitted))
      return failure();
    updateInstructions = std::move(*emitted);
    for (auto [i, value] : llvm::enumerate(order.returned))
      if (!update.getResultAttr(i, LoomDialect::kUpdatesAttr))
        gradNorm = bufferIndex.lookup(value);
  }

  // 2. The parameter table, with each parameter's training state.
  auto bufferFor = [&](Role role, StringRef name) -> int32_t {
    auto it = argumentBuffers.find(
        (stringifyRole(role) + ":" + name).str());
    return it == argumentBuffers.end() ? -1 : static_cast<int32_t>(it->second);
  };
  std::vector<flatbuffers::Offset<fb::Param>> params;
  int32_t tokens = -1, targets = -1;
  // The step's functions (a pipeline stage has several), each argument
  // once by role and name.
  ShardingsByRoleAndName stepShardings;
  SmallVector<std::pair<func::FuncOp, BlockArgument>> stepArgs;
  std::set<std::string> seenArgs;
  for (func::FuncOp func : funcs) {
    if (func == update)
      continue;
    for (auto &entry : shardingsByRoleAndName(func))
      stepShardings.try_emplace(entry.first, entry.second);
    for (BlockArgument arg : func.getArguments())
      if (seenArgs.insert(storageKey(func, arg)).second)
        stepArgs.push_back({func, arg});
  }
  ShardingsByRoleAndName updateShardings =
      update ? shardingsByRoleAndName(update) : ShardingsByRoleAndName();
  for (auto [owner, arg] : stepArgs) {
    func::FuncOp step = owner;
    unsigned i = arg.getArgNumber();
    Role role =
        step.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr).getValue();
    if (role == Role::Input)
      tokens = bufferIndex.lookup(arg);
    if (role == Role::Target)
      targets = bufferIndex.lookup(arg);
    if (role != Role::Param)
      continue;
    auto type = cast<RankedTensorType>(arg.getType());
    auto name = step.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
    auto init = step.getArgAttrOfType<InitAttr>(i, LoomDialect::kInitAttr);
    // Partitioned programs keep each argument's global sharding: the
    // runtime places this rank's slice of parameters and optimizer state.
    auto shardingOf = [&](const ShardingsByRoleAndName &shardings,
                          Role role) -> ShardingAttr {
      return shardings.lookup({static_cast<unsigned>(role), name});
    };
    auto dimShardings = [&](ShardingAttr sharding)
        -> flatbuffers::Offset<
            flatbuffers::Vector<flatbuffers::Offset<fb::DimSharding>>> {
      if (!sharding || !mesh)
        return 0;
      bool split = false;
      std::vector<flatbuffers::Offset<fb::DimSharding>> dims;
      for (unsigned d = 0; d < sharding.getRank(); ++d) {
        std::vector<uint32_t> axes;
        for (StringRef axis : sharding.getDimAxes(d))
          if (std::optional<unsigned> k = mesh.getShape().findAxis(axis))
            axes.push_back(*k);
        split |= !axes.empty();
        dims.push_back(fb::CreateDimShardingDirect(fbb, &axes));
      }
      return split ? fbb.CreateVector(dims) : 0;
    };
    ShardingAttr paramSharding = shardingOf(stepShardings, Role::Param);
    ShardingAttr gradSharding = shardingOf(stepShardings, Role::Grad);
    ShardingAttr momentSharding =
        update ? shardingOf(updateShardings, Role::AdamM) : ShardingAttr();
    // The global shape: the local one times each dimension's split.
    SmallVector<int64_t> globalShape(type.getShape());
    if (paramSharding && mesh)
      for (unsigned d = 0; d < paramSharding.getRank(); ++d)
        for (StringRef axis : paramSharding.getDimAxes(d))
          if (std::optional<unsigned> k = mesh.getShape().findAxis(axis))
            globalShape[d] *= mesh.getShape().getAxisSizes()[*k];
    fb::InitKind kind = init.getKind() == InitKind::Normal ? fb::InitKind::Normal
                        : init.getKind() == InitKind::Zeros ? fb::InitKind::Zeros
                                                            : fb::InitKind::Ones;
    std::vector<int64_t> shape(globalShape.begin(), globalShape.end());
    std::vector<int64_t> sliceOffset(shape.size(), 0);
    std::vector<int64_t> checkpointShape;
    if (std::optional<SmallVector<int64_t>> hf = getCheckpointShape(step, i))
      checkpointShape.assign(hf->begin(), hf->end());
    int64_t unpaddedRows = 0;
    if (auto rows = step.getArgAttrOfType<IntegerAttr>(
            i, LoomDialect::kUnpaddedRowsAttr))
      unpaddedRows = rows.getInt();
    auto paramDims = dimShardings(paramSharding);
    auto gradDims = dimShardings(gradSharding);
    auto momentDims = dimShardings(momentSharding);
    // Weight decay follows the checkpoint's rank (nanoGPT: >= 2-D).
    size_t checkpointRank =
        checkpointShape.empty() ? shape.size() : checkpointShape.size();
    params.push_back(fb::CreateParam(
        fbb, fbb.CreateString(name.str()), fbb.CreateVector(shape),
        fbb.CreateVector(sliceOffset), bufferIndex.lookup(arg), kind,
        init.getStd().convertToDouble(), /*decay=*/checkpointRank >= 2,
        bufferFor(Role::Grad, name), bufferFor(Role::AdamM, name),
        bufferFor(Role::AdamV, name), paramDims, gradDims, momentDims,
        checkpointShape.empty() ? 0 : fbb.CreateVector(checkpointShape),
        unpaddedRows, bufferFor(Role::Master, name)));
  }

  // 3. The buffer table (last: instructions add buffers).
  std::vector<flatbuffers::Offset<fb::Buffer>> bufferTable;
  for (const BufferDesc &b : buffers) {
    std::vector<int64_t> shape(b.shape.begin(), b.shape.end());
    bufferTable.push_back(fb::CreateBufferDirect(fbb, b.name.c_str(), b.offset,
                                                 &shape, b.dtype, b.inStash));
  }
  // 4. What a rank running this stage will hold and send, as --loom-report
  //    predicts it, for loom-run to report next to what it measures.
  RankFigures figures = measureRankFigures(funcs, mesh);
  if (pipelineInfo) // the runtime all-reduces the loss over the pipeline
    figures.sentBytes["all_reduce"] +=
        pipelineLossReduceBytes(pipelineInfo->schedule.getStages());
  auto sentBytes = [&](const char *kind) { return figures.sentBytes.at(kind); };
  auto predictions = fb::CreatePredictions(
      fbb, figures.modelStateBytes(),
      fb::CreateSentBytes(fbb, sentBytes("all_reduce"), sentBytes("all_gather"),
                          sentBytes("reduce_scatter"), sentBytes("all_to_all"),
                          sentBytes("send")));
  return fb::CreateStageDirect(
      fbb, index, arena.getInt(), &bufferTable, &params, tokens, targets, loss,
      &stepInstructions, microbatches,
      update ? &updateInstructions : nullptr,
      bufferFor(Role::LearningRate, "lr"), bufferFor(Role::Step, "step"),
      gradNorm, predictions, pipeline);
}

FailureOr<flatbuffers::Offset<fb::Pipeline>>
StageEmitter::emitPipeline(ArrayRef<func::FuncOp> funcs,
                           const PipelineInfo &info) {
  // 1. The stage's chunks, in local order (global index stage + j*stages).
  std::map<int64_t, std::pair<func::FuncOp, func::FuncOp>> chunkFuncs;
  for (func::FuncOp func : funcs) {
    auto where = func->getAttrOfType<DictionaryAttr>(LoomDialect::kPipelineAttr);
    auto chunk = where ? where.getAs<IntegerAttr>("chunk") : IntegerAttr();
    auto train = func->getAttrOfType<DictionaryAttr>(LoomDialect::kTrainAttr);
    if (!chunk || !train)
      continue;
    bool forward = train.getAs<StringAttr>("phase").getValue() == "forward";
    (forward ? chunkFuncs[chunk.getInt()].first
             : chunkFuncs[chunk.getInt()].second) = func;
  }
  std::map<int64_t, int64_t> localOf;
  std::vector<flatbuffers::Offset<fb::PipelineChunk>> chunks;
  // An evaluation's pipeline has forward functions only.
  const bool forwardOnly = info.schedule.isForwardOnly();
  for (auto &[global, pair] : chunkFuncs) {
    auto [fwd, bwd] = pair;
    if (!fwd || (!forwardOnly && !bwd))
      return func::FuncOp(funcs.front()).emitOpError()
             << "pipeline chunk " << global
             << " needs both a forward and a backward function";
    localOf[global] = localOf.size();
    // 2. The forward: its loss (a result without loom.stash) and what it
    //    stashes, by name.
    auto forward = emitBody(fwd);
    if (failed(forward))
      return failure();
    int32_t loss = -1;
    std::vector<uint32_t> stashOut, stashIn;
    std::vector<std::string> stashNames;
    for (auto [i, value] : llvm::enumerate(order.returned)) {
      FailureOr<unsigned> buffer = bufferOf(value, fwd);
      if (failed(buffer))
        return failure();
      if (auto name = fwd.getResultAttrOfType<StringAttr>(
              i, LoomDialect::kStashAttr)) {
        stashOut.push_back(*buffer);
        stashNames.push_back(name.str());
      } else {
        loss = *buffer;
      }
    }
    FailureOr<std::vector<flatbuffers::Offset<fb::Instruction>>> backward =
        std::vector<flatbuffers::Offset<fb::Instruction>>();
    if (bwd)
      backward = emitBody(bwd);
    if (failed(backward))
      return failure();
    for (const std::string &name : stashNames) {
      auto it = argumentBuffers.find((stringifyRole(Role::Stash) + ":" + name).str());
      if (it == argumentBuffers.end())
        return bwd.emitOpError() << "has no stash argument '" << name
                                 << "' for what its forward keeps";
      stashIn.push_back(it->second);
    }
    auto slotBytes = fwd->getAttrOfType<IntegerAttr>(LoomDialect::kStashBytesAttr);
    if (!stashOut.empty() && !slotBytes)
      return fwd.emitOpError() << "keeps values for its backward but has no "
                                  "loom.stash_bytes; run --loom-plan-buffers "
                                  "on the final IR";
    chunks.push_back(fb::CreatePipelineChunkDirect(
        fbb, global, &*forward, &*backward, &stashOut, &stashIn, loss,
        slotBytes ? static_cast<uint64_t>(slotBytes.getInt()) : 0));
  }
  // 3. The stage's actions (local chunk indices, as the schedule's).
  int64_t stage = -1;
  if (auto where = func::FuncOp(funcs.front())->getAttrOfType<DictionaryAttr>(
          LoomDialect::kPipelineAttr))
    stage = where.getAs<IntegerAttr>("stage").getInt();
  auto encoded = dyn_cast_or_null<DenseI64ArrayAttr>(
      stage >= 0 && stage < static_cast<int64_t>(info.schedule.getActions().size())
          ? info.schedule.getActions()[stage]
          : Attribute());
  if (!encoded)
    return info.schedule.emitOpError() << "has no actions for stage " << stage;
  std::vector<fb::PipelineAction> actions;
  for (const PipelineAction &a : decodePipelineActions(encoded))
    actions.emplace_back(static_cast<uint32_t>(a.chunk),
                         static_cast<uint32_t>(a.microbatch), a.backward);
  return fb::CreatePipelineDirect(
      fbb, info.schedule.getSchedule().str().c_str(), info.schedule.getStages(),
      info.schedule.getVirtualStages(), &chunks, &actions, info.stepSeconds,
      info.idleFraction, info.stashPeakBytes);
}

LogicalResult mlir::loom::emitProgram(ModuleOp module, llvm::raw_ostream &os) {
  SmallVector<func::FuncOp> planned;
  for (auto func : module.getOps<func::FuncOp>())
    if (func->hasAttr(LoomDialect::kArenaBytesAttr))
      planned.push_back(func);
  if (planned.empty())
    return module.emitError()
           << "no function has a buffer plan; run loom-opt "
              "--loom-plan-buffers before --loom-to-program";
  SmallVector<MeshOp> meshes(module.getOps<MeshOp>());
  if (meshes.size() > 1)
    return meshes[1].emitOpError()
           << "is a second mesh; a program runs on exactly one mesh";
  MeshOp mesh = meshes.empty() ? MeshOp() : meshes.front();

  // A training step (loom.train functions) is one stage, a pipelined one
  // one stage per pipeline stage (loom.pipeline); otherwise each planned
  // function is one.
  SmallVector<SmallVector<func::FuncOp>> groups;
  SmallVector<func::FuncOp> trainingStep;
  std::map<int64_t, SmallVector<func::FuncOp>> pipelineStages;
  for (func::FuncOp func : planned) {
    if (auto where =
            func->getAttrOfType<DictionaryAttr>(LoomDialect::kPipelineAttr))
      pipelineStages[where.getAs<IntegerAttr>("stage").getInt()].push_back(
          func);
    else if (func->hasAttr(LoomDialect::kTrainAttr))
      trainingStep.push_back(func);
    else
      groups.push_back({func});
  }
  if (!trainingStep.empty())
    groups.push_back(trainingStep);
  SmallVector<PipelineScheduleOp> schedules(module.getOps<PipelineScheduleOp>());
  if (!pipelineStages.empty() && schedules.size() != 1)
    return module.emitError() << "pipeline stage functions need exactly one "
                                 "loom.pipeline_schedule";
  // The simulated timeline of the schedule: each stage's predicted bubble.
  Timeline timeline;
  if (!pipelineStages.empty() &&
      failed(checkPipelineSchedule(schedules.front(),
                                   costModelOf(schedules.front()), &timeline)))
    return failure();
  flatbuffers::FlatBufferBuilder fbb(1 << 16);
  std::vector<flatbuffers::Offset<fb::Stage>> stages;
  for (auto [i, group] : llvm::enumerate(groups)) {
    StageEmitter emitter(fbb, mesh);
    FailureOr<flatbuffers::Offset<fb::Stage>> stage = emitter.emit(group, i);
    if (failed(stage))
      return failure();
    stages.push_back(*stage);
  }
  for (auto &[index, group] : pipelineStages) {
    StageEmitter emitter(fbb, mesh);
    StageEmitter::PipelineInfo info;
    info.schedule = schedules.front();
    info.stepSeconds = timeline.makespan;
    if (index < static_cast<int64_t>(timeline.stages.size()) &&
        timeline.makespan > 0)
      info.idleFraction =
          timeline.stages[index].idleSeconds / timeline.makespan;
    if (index < static_cast<int64_t>(timeline.stages.size()))
      info.stashPeakBytes = timeline.stages[index].peakStashBytes;
    FailureOr<flatbuffers::Offset<fb::Stage>> stage =
        emitter.emit(group, index, &info);
    if (failed(stage))
      return failure();
    stages.push_back(*stage);
    groups.push_back(group);
  }

  // Model and step shape, from the first stage's loom.model.
  func::FuncOp modelFunc = groups.front().front();
  for (func::FuncOp func : groups.front())
    if (func->hasAttr(LoomDialect::kModelAttr))
      modelFunc = func;
  auto config = modelFunc->getAttrOfType<DictionaryAttr>(LoomDialect::kModelAttr);
  int64_t microbatches = 1;
  if (auto train = modelFunc->getAttrOfType<DictionaryAttr>(LoomDialect::kTrainAttr))
    if (auto m = train.getAs<IntegerAttr>("microbatches"))
      microbatches = m.getInt();
  if (!config)
    return modelFunc.emitOpError()
           << "has no loom.model configuration; import the model with "
              "loom-translate --import-gpt-config";
  auto get = [&](StringRef key) -> int64_t {
    auto value = config.getAs<IntegerAttr>(key);
    return value ? value.getInt() : 0;
  };
  // The runtime masks logit columns from ModelInfo.vocab_size on: a padded
  // loss must agree with it.
  for (ArrayRef<func::FuncOp> group : groups)
    for (func::FuncOp func : group) {
      WalkResult walk = func.walk([&](Operation *op) {
        auto loss = dyn_cast<VocabMaskOpInterface>(op);
        IntegerAttr vocabAttr = loss ? loss.getVocabSizeAttr() : IntegerAttr();
        if (!vocabAttr || vocabAttr.getInt() == get("vocab_size"))
          return WalkResult::advance();
        op->emitOpError() << "masks the logit columns from vocab_size = "
                          << vocabAttr.getInt() << " on, but the model's loom.model has "
                          << "vocab_size = " << get("vocab_size")
                          << "; the program masks by the model's, so they "
                             "must agree";
        return WalkResult::interrupt();
      });
      if (walk.wasInterrupted())
        return failure();
    }
  auto model = fb::CreateModelInfo(fbb, get("n_layer"), get("n_head"),
                                   get("n_embd"), get("vocab_size"),
                                   get("n_positions"),
                                   get("batch") * microbatches, get("seq"));
  std::vector<flatbuffers::Offset<fb::MeshAxis>> axes;
  if (mesh)
    for (auto [name, size] : llvm::zip(mesh.getShape().getAxisNames(),
                                       mesh.getShape().getAxisSizes()))
      axes.push_back(fb::CreateMeshAxisDirect(fbb, name.str().c_str(), size));
  auto program = fb::CreateProgramDirect(fbb, ::loom::program::kFormatVersion,
                                         "loom-translate", model, &axes,
                                         &stages);
  fb::FinishProgramBuffer(fbb, program);
  std::string file = ::loom::program::encodeProgramFile(fbb.GetBufferPointer(),
                                                        fbb.GetSize());
  os.write(file.data(), file.size());
  return success();
}

//===----------------------------------------------------------------------===//
// Text dump
//===----------------------------------------------------------------------===//

template <typename T>
static void printList(llvm::raw_ostream &os, const flatbuffers::Vector<T> *v,
                      StringRef prefix = "") {
  os << "[";
  if (v)
    for (flatbuffers::uoffset_t i = 0; i < v->size(); ++i)
      os << (i ? ", " : "") << prefix << v->Get(i);
  os << "]";
}

static void printInstructions(
    llvm::raw_ostream &os,
    const flatbuffers::Vector<flatbuffers::Offset<fb::Instruction>> *list,
    StringRef prefix) {
  if (!list)
    return;
  flatbuffers::uoffset_t i = 0;
  for (const fb::Instruction *inst : *list) {
    os << "  " << prefix << i++ << ": " << fb::EnumNameOpcode(inst->opcode())
       << " ";
    printList(os, inst->inputs(), "%");
    os << " -> ";
    printList(os, inst->outputs(), "%");
    if (inst->scratch() && inst->scratch()->size()) {
      os << " scratch ";
      printList(os, inst->scratch(), "%");
    }
    os << " " << (inst->name() ? inst->name()->str() : "");
    switch (inst->opcode()) {
    case fb::Opcode::Fill:
      os << " value=" << llvm::format("%g", inst->value());
      break;
    case fb::Opcode::ClipCoef:
      os << " max_norm=" << llvm::format("%g", inst->max_norm());
      break;
    case fb::Opcode::AdamW:
      os << " weight_decay=" << llvm::format("%g", inst->weight_decay());
      break;
    default:
      break;
    }
    if (inst->members() && inst->members()->size()) {
      os << " members=";
      printList(os, inst->members());
    }
    if (inst->member_dims() && inst->member_dims()->size()) {
      os << " member_dims=";
      printList(os, inst->member_dims());
    }
    if (inst->async_collective())
      os << " async";
    if (inst->last_microbatch_only())
      os << " last_microbatch_only";
    if (inst->reason())
      os << " reason=\"" << inst->reason()->str() << "\"";
    os << "\n";
  }
}

bool mlir::loom::dumpProgram(StringRef file, llvm::raw_ostream &os,
                             std::string &error) {
  std::string bytes = file.str();
  const uint8_t *payload = nullptr;
  size_t size = 0;
  if (!::loom::program::decodeProgramFile(bytes, &payload, &size, &error))
    return false;
  flatbuffers::Verifier verifier(payload, size);
  if (!fb::VerifyProgramBuffer(verifier)) {
    error = "program payload fails FlatBuffers verification";
    return false;
  }
  const fb::Program *program = fb::GetProgram(payload);
  os << "loom program v" << program->format_version() << " by "
     << (program->producer() ? program->producer()->str() : "?") << "\n";
  if (const fb::ModelInfo *m = program->model())
    os << "model: n_layer=" << m->n_layer() << " n_head=" << m->n_head()
       << " n_embd=" << m->n_embd() << " vocab_size=" << m->vocab_size()
       << " n_positions=" << m->n_positions() << " batch=" << m->batch()
       << " seq=" << m->seq() << "\n";
  os << "mesh:";
  if (!program->mesh() || program->mesh()->size() == 0)
    os << " single rank";
  else
    for (const fb::MeshAxis *axis : *program->mesh())
      os << " " << (axis->name() ? axis->name()->str() : "?") << "="
         << axis->size();
  os << "\n";
  if (!program->stages())
    return true;
  for (const fb::Stage *stage : *program->stages()) {
    size_t numBuffers = stage->buffers() ? stage->buffers()->size() : 0;
    os << "stage " << stage->index() << ": arena " << stage->arena_bytes()
       << " bytes, " << numBuffers << " buffers, "
       << (stage->params() ? stage->params()->size() : 0) << " params, "
       << (stage->instructions() ? stage->instructions()->size() : 0)
       << " instructions";
    if (stage->update_instructions() && stage->update_instructions()->size())
      os << " x " << stage->microbatches() << " microbatches, "
         << stage->update_instructions()->size() << " update instructions";
    os << "\n";
    os << "  tokens %" << stage->tokens() << " targets %" << stage->targets()
       << " loss %" << stage->loss();
    if (stage->lr() >= 0)
      os << " lr %" << stage->lr() << " step %" << stage->step()
         << " grad_norm %" << stage->grad_norm();
    os << "\n";
    if (const fb::Predictions *p = stage->predictions()) {
      os << "  predicted: model state " << p->model_state_bytes()
         << " bytes; sent per step";
      if (const fb::SentBytes *sent = p->sent_bytes_per_step())
        os << " all_reduce " << sent->all_reduce() << ", all_gather "
           << sent->all_gather() << ", reduce_scatter "
           << sent->reduce_scatter() << ", all_to_all " << sent->all_to_all()
           << ", send " << sent->send() << " bytes";
      os << "\n";
    }
    for (flatbuffers::uoffset_t i = 0; i < numBuffers; ++i) {
      const fb::Buffer *b = stage->buffers()->Get(i);
      os << "  buffer %" << i << (b->stash() ? " stash@" : " @")
         << b->offset() << " " << fb::EnumNameDType(b->dtype()) << " ";
      printList(os, b->shape());
      os << " " << (b->name() ? b->name()->str() : "") << "\n";
    }
    if (stage->params())
      for (const fb::Param *p : *stage->params()) {
        os << "  param " << (p->name() ? p->name()->str() : "?") << " ";
        printList(os, p->global_shape());
        os << " slice ";
        printList(os, p->slice_offset());
        os << " %" << p->buffer() << " " << fb::EnumNameInitKind(p->init());
        if (p->init() == fb::InitKind::Normal)
          os << "(std=" << llvm::format("%.6g", p->init_std()) << ")";
        os << (p->decay() ? " decay" : "");
        if (p->grad_buffer() >= 0)
          os << " grad %" << p->grad_buffer() << " m %" << p->m_buffer()
             << " v %" << p->v_buffer();
        if (p->checkpoint_shape() && p->checkpoint_shape()->size()) {
          os << " checkpoint ";
          printList(os, p->checkpoint_shape());
        }
        if (p->unpadded_rows() > 0)
          os << " unpadded_rows " << p->unpadded_rows();
        os << "\n";
      }
    printInstructions(os, stage->instructions(), "");
    if (const fb::Pipeline *pipe = stage->pipeline()) {
      os << "  pipeline " << (pipe->schedule() ? pipe->schedule()->str() : "?")
         << ": " << pipe->stages() << " stages x " << pipe->virtual_stages()
         << ", predicted idle "
         << llvm::format("%.4f", pipe->predicted_idle_fraction())
         << " of the micro-batch phase, stash peak "
         << pipe->predicted_stash_peak_bytes() << " bytes\n";
      if (pipe->chunks())
        for (const fb::PipelineChunk *chunk : *pipe->chunks()) {
          os << "  chunk " << chunk->index() << ": loss %" << chunk->loss()
             << ", stash ";
          printList(os, chunk->stash_out(), "%");
          os << " -> ";
          printList(os, chunk->stash_in(), "%");
          os << " in a " << chunk->stash_bytes() << "-byte slot\n";
          std::string tag = "chunk" + std::to_string(chunk->index());
          printInstructions(os, chunk->forward(), tag + " forward ");
          printInstructions(os, chunk->backward(), tag + " backward ");
        }
      os << "  actions:";
      if (pipe->actions())
        for (const fb::PipelineAction *a : *pipe->actions())
          os << " " << (a->backward() ? "B" : "F") << a->microbatch()
             << (pipe->virtual_stages() > 1
                     ? "." + std::to_string(a->chunk())
                     : std::string());
      os << "\n";
    }
    if (stage->update_instructions() && stage->update_instructions()->size())
      printInstructions(os, stage->update_instructions(), "update ");
  }
  return true;
}
