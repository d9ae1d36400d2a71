//===- ProgramEmitter.cpp - Planned IR -> runtime program file -*- C++ -*-===//
//
// Walks each planned function in execution order (ExecutionOrder) and writes
// buffers, parameters and instructions in the FlatBuffers schema shared with
// the runtime, wrapped in the checksummed envelope.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/ProgramEmitter.h"

#include "dialects/Loom/IR/LoomOps.h"
#include "passes/Lowering/ExecutionOrder.h"
#include "runtime/program/program_envelope.h"
#include "runtime/program/program_generated.h"

#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Format.h"

using namespace mlir;
using namespace mlir::loom;
namespace fb = ::loom::program;

namespace {

/// Builds one stage's tables.
class StageEmitter {
public:
  StageEmitter(flatbuffers::FlatBufferBuilder &fbb, MeshOp mesh)
      : fbb(fbb), mesh(mesh) {}

  FailureOr<flatbuffers::Offset<fb::Stage>> emit(func::FuncOp func,
                                                 unsigned index);

private:
  struct BufferDesc {
    std::string name;
    int64_t offset;
    SmallVector<int64_t> shape;
    fb::DType dtype;
  };

  unsigned addBuffer(std::string name, int64_t offset, RankedTensorType type) {
    fb::DType dtype = type.getElementType().isInteger(32) ? fb::DType::I32
                                                          : fb::DType::F32;
    buffers.push_back({std::move(name), offset,
                       SmallVector<int64_t>(type.getShape()), dtype});
    return buffers.size() - 1;
  }
  FailureOr<unsigned> bufferOf(Value v, Operation *user);
  FailureOr<flatbuffers::Offset<fb::Instruction>>
  emitInstruction(Operation *op);
  FailureOr<std::vector<uint32_t>> meshAxes(Operation *op, ArrayAttr axes);

  flatbuffers::FlatBufferBuilder &fbb;
  MeshOp mesh;
  ExecutionOrder order;
  std::vector<BufferDesc> buffers;
  llvm::DenseMap<Value, unsigned> bufferIndex;
};

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

fb::Opcode opcodeOf(Operation *op) {
  return llvm::TypeSwitch<Operation *, fb::Opcode>(op)
      .Case<EmbeddingOp>([](auto) { return fb::Opcode::Embedding; })
      .Case<AddOp>([](auto) { return fb::Opcode::Add; })
      .Case<LinearOp>([](auto) { return fb::Opcode::Linear; })
      .Case<MatmulOp>([](auto) { return fb::Opcode::Matmul; })
      .Case<LayerNormOp>([](auto) { return fb::Opcode::LayerNorm; })
      .Case<GeluOp>([](auto) { return fb::Opcode::Gelu; })
      .Case<AttentionOp>([](auto) { return fb::Opcode::Attention; })
      .Case<SoftmaxOp>([](auto) { return fb::Opcode::Softmax; })
      .Case<CrossEntropyOp>([](auto) { return fb::Opcode::CrossEntropy; })
      .Case<ReshapeOp>([](auto) { return fb::Opcode::Copy; })
      .Case<TransposeOp>([](auto) { return fb::Opcode::Transpose; })
      .Case<SliceOp>([](auto) { return fb::Opcode::Slice; })
      .Case<ConcatOp>([](auto) { return fb::Opcode::Concat; })
      .Case<AllReduceOp>([](auto) { return fb::Opcode::AllReduce; })
      .Case<AllGatherOp>([](auto) { return fb::Opcode::AllGather; })
      .Case<ReduceScatterOp>([](auto) { return fb::Opcode::ReduceScatter; })
      .Case<AllToAllOp>([](auto) { return fb::Opcode::AllToAll; })
      .Case<SendOp>([](auto) { return fb::Opcode::Send; })
      .Case<RecvOp>([](auto) { return fb::Opcode::Recv; });
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
  for (auto [result, offset] : llvm::zip(op->getResults(), offsets.asArrayRef())) {
    unsigned index =
        addBuffer(name, offset, cast<RankedTensorType>(result.getType()));
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

  // Opcode-specific attributes.
  double epsilon = 0.0;
  int64_t numHeads = 0, dim = 0, dim2 = 0, offset = 0, peer = 0, tag = 0;
  bool transposeRhs = false;
  std::vector<int64_t> permutation;
  std::vector<uint32_t> axes;
  fb::Reduction reduction = fb::Reduction::Sum;
  StringRef reason;
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
          .Case([&](LayerNormOp ln) {
            epsilon = ln.getEpsilon().convertToDouble();
            return success();
          })
          .Case([&](AttentionOp att) {
            numHeads = att.getNumHeads();
            return success();
          })
          .Case([&](MatmulOp mm) {
            transposeRhs = mm.getTransposeRhs();
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
          .Case([&](AllReduceOp c) {
            reduction = reductionOf(c.getReduction());
            return collective(c.getAxes(), c.getReason());
          })
          .Case([&](AllGatherOp c) {
            dim = c.getDim();
            return collective(c.getAxes(), c.getReason());
          })
          .Case([&](ReduceScatterOp c) {
            dim = c.getDim();
            reduction = reductionOf(c.getReduction());
            return collective(c.getAxes(), c.getReason());
          })
          .Case([&](AllToAllOp c) {
            dim = c.getSplitDim();
            dim2 = c.getConcatDim();
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
      fbb, opcodeOf(op), &inputs, &outputs, &scratch, name.c_str(), epsilon,
      numHeads, transposeRhs, dim, dim2, offset,
      permutation.empty() ? nullptr : &permutation,
      axes.empty() ? nullptr : &axes, reduction, peer, tag,
      reason.empty() ? nullptr : reason.str().c_str());
}

FailureOr<flatbuffers::Offset<fb::Stage>>
StageEmitter::emit(func::FuncOp func, unsigned index) {
  FailureOr<ExecutionOrder> linear = linearize(func);
  if (failed(linear))
    return failure();
  order = std::move(*linear);
  auto arena = func->getAttrOfType<IntegerAttr>(LoomDialect::kArenaBytesAttr);

  // 1. Arguments: parameters, token ids, targets.
  std::vector<flatbuffers::Offset<fb::Param>> params;
  int32_t tokens = -1, targets = -1, loss = -1;
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
    auto name = func.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
    std::string label = name ? name.str() : "arg" + std::to_string(i);
    unsigned buffer = addBuffer(label, offset.getInt(), type);
    bufferIndex[arg] = buffer;
    auto role = func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
    if (!role)
      return func.emitOpError() << "argument #" << i
                                << " has no loom.role (param, input or "
                                   "target); the runtime cannot feed it";
    switch (role.getValue()) {
    case Role::Param: {
      auto init = func.getArgAttrOfType<InitAttr>(i, LoomDialect::kInitAttr);
      fb::InitKind kind = init.getKind() == InitKind::Normal ? fb::InitKind::Normal
                          : init.getKind() == InitKind::Zeros ? fb::InitKind::Zeros
                                                              : fb::InitKind::Ones;
      std::vector<int64_t> shape(type.getShape().begin(), type.getShape().end());
      std::vector<int64_t> sliceOffset(shape.size(), 0);
      params.push_back(fb::CreateParamDirect(
          fbb, label.c_str(), &shape, &sliceOffset, buffer, kind,
          init.getStd().convertToDouble(),
          /*decay=*/type.getRank() >= 2));
      break;
    }
    case Role::Input:
      tokens = buffer;
      break;
    case Role::Target:
      targets = buffer;
      break;
    }
  }

  // 2. Instructions, in execution order; views get a buffer, no instruction.
  std::vector<flatbuffers::Offset<fb::Instruction>> instructions;
  for (Operation *op : order.ops) {
    if (isView(op)) {
      auto source = bufferOf(op->getOperand(0), op);
      if (failed(source))
        return failure();
      bufferIndex[op->getResult(0)] =
          addBuffer(nameOf(op), buffers[*source].offset,
                    cast<RankedTensorType>(op->getResult(0).getType()));
      continue;
    }
    FailureOr<flatbuffers::Offset<fb::Instruction>> inst = emitInstruction(op);
    if (failed(inst))
      return failure();
    instructions.push_back(*inst);
  }
  if (order.returned.size() == 1) {
    FailureOr<unsigned> index = bufferOf(order.returned.front(), func);
    if (failed(index))
      return failure();
    loss = *index;
  }

  // 3. The buffer table (after instructions: they add buffers).
  std::vector<flatbuffers::Offset<fb::Buffer>> bufferTable;
  for (const BufferDesc &b : buffers) {
    std::vector<int64_t> shape(b.shape.begin(), b.shape.end());
    bufferTable.push_back(fb::CreateBufferDirect(fbb, b.name.c_str(), b.offset,
                                                 &shape, b.dtype));
  }
  return fb::CreateStageDirect(fbb, index, arena.getInt(), &bufferTable,
                               &params, tokens, targets, loss, &instructions);
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

  flatbuffers::FlatBufferBuilder fbb(1 << 16);
  std::vector<flatbuffers::Offset<fb::Stage>> stages;
  for (auto [i, func] : llvm::enumerate(planned)) {
    StageEmitter emitter(fbb, mesh);
    FailureOr<flatbuffers::Offset<fb::Stage>> stage = emitter.emit(func, i);
    if (failed(stage))
      return failure();
    stages.push_back(*stage);
  }

  // Model and step shape, from the first stage's loom.model.
  auto config =
      planned.front()->getAttrOfType<DictionaryAttr>(LoomDialect::kModelAttr);
  if (!config)
    return planned.front().emitOpError()
           << "has no loom.model configuration; import the model with "
              "loom-translate --import-gpt-config";
  auto get = [&](StringRef key) -> int64_t {
    auto value = config.getAs<IntegerAttr>(key);
    return value ? value.getInt() : 0;
  };
  auto model = fb::CreateModelInfo(fbb, get("n_layer"), get("n_head"),
                                   get("n_embd"), get("vocab_size"),
                                   get("n_positions"), get("batch"), get("seq"));
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
       << " instructions\n";
    os << "  tokens %" << stage->tokens() << " targets %" << stage->targets()
       << " loss %" << stage->loss() << "\n";
    for (flatbuffers::uoffset_t i = 0; i < numBuffers; ++i) {
      const fb::Buffer *b = stage->buffers()->Get(i);
      os << "  buffer %" << i << " @" << b->offset() << " "
         << fb::EnumNameDType(b->dtype()) << " ";
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
        os << (p->decay() ? " decay" : "") << "\n";
      }
    if (stage->instructions()) {
      flatbuffers::uoffset_t i = 0;
      for (const fb::Instruction *inst : *stage->instructions()) {
        os << "  " << i++ << ": " << fb::EnumNameOpcode(inst->opcode()) << " ";
        printList(os, inst->inputs(), "%");
        os << " -> ";
        printList(os, inst->outputs(), "%");
        if (inst->scratch() && inst->scratch()->size()) {
          os << " scratch ";
          printList(os, inst->scratch(), "%");
        }
        os << " " << (inst->name() ? inst->name()->str() : "");
        if (inst->reason())
          os << " reason=\"" << inst->reason()->str() << "\"";
        os << "\n";
      }
    }
  }
  return true;
}
