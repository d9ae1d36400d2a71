//===- Pipeline.cpp - Cut the step into pipeline stages ---------*- C++ -*-===//
//
// `--loom-pipeline`: the micro-batch function of a training step becomes, per
// model chunk, a forward and a backward function; the optimizer update
// becomes one function per stage; a `loom.pipeline_schedule` records the
// cut and the order in which each stage runs its actions. With
// forward-only, an evaluation function becomes one forward function per
// chunk and the schedule keeps only the forward actions.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/Sharding/GradientReduction.h"
#include "passes/Pipeline/PipelineModel.h"
#include "passes/Pipeline/Schedules.h"
#include "passes/Pipeline/StageCut.h"
#include "passes/Pipeline/StageUpdate.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Debug.h"
#include "llvm/Support/Format.h"

#include <map>
#include <set>

#define DEBUG_TYPE "loom-pipeline"

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMPIPELINE
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

enum Part { Forward = 0, Backward = 1 };

/// One function under construction: a forward or a backward of a chunk.
struct ChunkFunc {
  func::FuncOp func;
  Block *entry = nullptr;
  IRMapping mapping;
  /// Train argument index -> argument of this function.
  llvm::DenseMap<unsigned, Value> args;
  SmallVector<DictionaryAttr> argAttrs;
  /// Where the next receive goes (after the previous ones).
  Operation *lastRecv = nullptr;
  /// Results (values in this function) and their attributes.
  SmallVector<Value> results;
  SmallVector<NamedAttrList> resultAttrs;
  int64_t numStashed = 0;
  /// The gradient accumulations built here (buildAccumulation), in
  /// creation order: each tree's adds before its root.
  SmallVector<Operation *> accumulationOps;

  /// Moves each accumulation right after the latest of its operands, so a
  /// gradient is added to its accumulator as soon as it exists (as
  /// PyTorch's AccumulateGrad does) and its bytes are free again, instead
  /// of every weight gradient of the chunk being held to the end of its
  /// backward.
  void hoistAccumulations();

  /// Sorts the arguments as a reader expects them: parameters, token ids,
  /// targets, gradient accumulators, stashed activations (each group in
  /// the training step's order); remaps the results' loom.updates.
  void sortArguments(func::FuncOp train);
};

/// Position of a role in the argument order of a stage function.
static int roleRank(DictionaryAttr attrs) {
  auto role = attrs ? attrs.getAs<RoleAttr>(LoomDialect::kRoleAttr) : RoleAttr();
  if (!role)
    return 9;
  switch (role.getValue()) {
  case Role::Param:
    return 0;
  case Role::Input:
    return 1;
  case Role::Target:
    return 2;
  case Role::Grad:
    return 3;
  case Role::Stash:
    return 4;
  default:
    return 5;
  }
}

void ChunkFunc::sortArguments(func::FuncOp train) {
  unsigned n = entry->getNumArguments();
  llvm::DenseMap<Value, unsigned> trainIndex;
  for (auto [index, value] : args)
    trainIndex[value] = index;
  SmallVector<unsigned> order(n);
  for (unsigned i = 0; i < n; ++i)
    order[i] = i;
  auto key = [&](unsigned i) {
    Value arg = entry->getArgument(i);
    auto it = trainIndex.find(arg);
    return std::make_pair(roleRank(argAttrs[i]),
                          it == trainIndex.end() ? i : it->second);
  };
  llvm::stable_sort(order, [&](unsigned a, unsigned b) {
    return key(a) < key(b);
  });
  auto *sorted = new Block();
  SmallVector<DictionaryAttr> sortedAttrs;
  SmallVector<int64_t> newIndex(n);
  for (auto [k, i] : llvm::enumerate(order)) {
    BlockArgument old = entry->getArgument(i);
    sorted->addArgument(old.getType(), old.getLoc());
    sortedAttrs.push_back(argAttrs[i]);
    newIndex[i] = k;
  }
  for (auto [k, i] : llvm::enumerate(order))
    entry->getArgument(i).replaceAllUsesWith(sorted->getArgument(k));
  sorted->getOperations().splice(sorted->end(), entry->getOperations());
  func.getBody().push_front(sorted);
  entry->erase();
  entry = sorted;
  argAttrs = std::move(sortedAttrs);
  args.clear();
  MLIRContext *ctx = func.getContext();
  for (NamedAttrList &attrs : resultAttrs)
    if (auto updates = dyn_cast_or_null<IntegerAttr>(
            attrs.get(LoomDialect::kUpdatesAttr)))
      attrs.set(LoomDialect::kUpdatesAttr,
                IntegerAttr::get(IntegerType::get(ctx, 64),
                                 newIndex[updates.getInt()]));
}

/// Builds the stage functions of one training step (or, `forwardOnly`, of
/// one evaluation: forward functions only).
class StageBuilder {
public:
  StageBuilder(func::FuncOp train, const StepCut &cut,
               ArrayRef<int64_t> chunkOfUnit, int64_t stages, MeshOp mesh,
               StringRef axis, bool forwardOnly)
      : train(train), cut(cut), chunkOfUnit(chunkOfUnit), stages(stages),
        mesh(mesh), axis(axis), forwardOnly(forwardOnly),
        b(train.getContext()) {}

  LogicalResult build(StringRef modelName, int64_t microbatches);

  /// funcs[chunk][part] (forward-only: no backward function).
  std::vector<std::array<ChunkFunc, 2>> funcs;

private:
  int64_t chunkOf(Operation *op) const {
    return chunkOfUnit[cut.unitOf.lookup(op)];
  }
  int64_t stageOf(int64_t chunk) const { return chunk % stages; }
  FailureOr<Value> resolve(Value v, int64_t chunk, Part part, Operation *user);
  Value argument(int64_t chunk, Part part, unsigned index);
  FailureOr<Value> transfer(Value v, int64_t chunk, Part part,
                            Operation *user);
  Value stash(Value inForward, int64_t chunk);
  LogicalResult cloneInto(Operation *op, int64_t chunk, Part part);
  LogicalResult buildAccumulation(const Accumulation &a, int64_t chunk);

  func::FuncOp train;
  const StepCut &cut;
  ArrayRef<int64_t> chunkOfUnit;
  int64_t stages;
  MeshOp mesh;
  StringRef axis;
  bool forwardOnly;
  OpBuilder b;
  int64_t nextTag = 0;
  /// (value, chunk, part) -> value carried there by send / recv.
  std::map<std::tuple<void *, int64_t, int>, Value> transferred;
  /// (chunk, forward value) -> the backward's stash argument.
  std::map<std::pair<int64_t, void *>, Value> stashed;
};

Value StageBuilder::argument(int64_t chunk, Part part, unsigned index) {
  ChunkFunc &f = funcs[chunk][part];
  auto it = f.args.find(index);
  if (it != f.args.end())
    return it->second;
  BlockArgument trainArg = train.getArgument(index);
  Value arg = f.entry->addArgument(trainArg.getType(), trainArg.getLoc());
  f.args[index] = arg;
  f.argAttrs.push_back(train.getArgAttrDict(index));
  return arg;
}

Value StageBuilder::stash(Value inForward, int64_t chunk) {
  auto key = std::make_pair(chunk, inForward.getAsOpaquePointer());
  if (auto it = stashed.find(key); it != stashed.end())
    return it->second;
  ChunkFunc &fwd = funcs[chunk][Forward];
  ChunkFunc &bwd = funcs[chunk][Backward];
  std::string name = "chunk" + std::to_string(chunk) + ".stash" +
                     std::to_string(fwd.numStashed++);
  StringAttr nameAttr = b.getStringAttr(name);
  fwd.results.push_back(inForward);
  NamedAttrList attrs;
  attrs.set(LoomDialect::kStashAttr, nameAttr);
  fwd.resultAttrs.push_back(attrs);
  Value arg = bwd.entry->addArgument(inForward.getType(), inForward.getLoc());
  bwd.argAttrs.push_back(b.getDictionaryAttr(
      {b.getNamedAttr(LoomDialect::kNameAttr, nameAttr),
       b.getNamedAttr(LoomDialect::kRoleAttr,
                      RoleAttr::get(b.getContext(), Role::Stash))}));
  stashed[key] = arg;
  return arg;
}

FailureOr<Value> StageBuilder::transfer(Value v, int64_t chunk, Part part,
                                        Operation *user) {
  auto key = std::make_tuple(v.getAsOpaquePointer(), chunk, int(part));
  if (auto it = transferred.find(key); it != transferred.end())
    return it->second;
  // Forward values travel up the chunks, backward values down.
  int64_t from = part == Forward ? chunk - 1 : chunk + 1;
  FailureOr<Value> source = resolve(v, from, part, user);
  if (failed(source))
    return failure();
  int64_t tag = nextTag++;
  auto axes = b.getStrArrayAttr({axis});
  auto meshRef = FlatSymbolRefAttr::get(mesh.getSymNameAttr());
  std::string what = part == Forward ? "activation" : "activation gradient";
  std::string reason = what + " from chunk " + std::to_string(from) +
                       " to chunk " + std::to_string(chunk);
  // 1. The send, right after the value exists in the sender.
  ChunkFunc &sender = funcs[from][part];
  OpBuilder sb(b.getContext());
  if (Operation *def = source->getDefiningOp())
    sb.setInsertionPointAfter(def);
  else
    sb.setInsertionPointToStart(sender.entry);
  SendOp::create(sb, v.getLoc(), *source, meshRef, axes,
                 b.getI64IntegerAttr(stageOf(chunk)), b.getI64IntegerAttr(tag),
                 b.getStringAttr(reason));
  // 2. The receive, with the earlier receives at the start of the receiver.
  ChunkFunc &receiver = funcs[chunk][part];
  OpBuilder rb(b.getContext());
  if (receiver.lastRecv)
    rb.setInsertionPointAfter(receiver.lastRecv);
  else
    rb.setInsertionPointToStart(receiver.entry);
  auto recv = RecvOp::create(rb, v.getLoc(), v.getType(), meshRef, axes,
                             b.getI64IntegerAttr(stageOf(from)),
                             b.getI64IntegerAttr(tag), b.getStringAttr(reason));
  receiver.lastRecv = recv;
  transferred[key] = recv.getResult();
  return recv.getResult();
}

FailureOr<Value> StageBuilder::resolve(Value v, int64_t chunk, Part part,
                                       Operation *user) {
  if (auto arg = dyn_cast<BlockArgument>(v)) {
    if (arg.getOwner() != &train.getBody().front())
      return user->emitOpError() << "uses a value of an enclosing region";
    return argument(chunk, part, arg.getArgNumber());
  }
  Operation *def = v.getDefiningOp();
  if (cut.accumulationOps.contains(def))
    return user->emitOpError()
           << "reads a gradient accumulation, which --loom-pipeline splits "
              "per stage";
  int64_t owner = chunkOf(def);
  bool definedForward = cut.forward.contains(def);
  if (definedForward && part == Backward) {
    // A forward value in a backward: kept from this chunk's forward.
    FailureOr<Value> inForward = resolve(v, chunk, Forward, user);
    if (failed(inForward))
      return failure();
    return stash(*inForward, chunk);
  }
  if (!definedForward && part == Forward)
    return user->emitOpError() << "is a forward op that reads a backward "
                                  "value";
  if (owner == chunk) {
    Value mapped = funcs[chunk][part].mapping.lookupOrNull(v);
    if (!mapped)
      return user->emitOpError() << "reads a value before it is computed in "
                                    "chunk "
                                 << chunk;
    return mapped;
  }
  bool upstream = part == Forward ? owner < chunk : owner > chunk;
  if (!upstream)
    return user->emitOpError()
           << "in chunk " << chunk << " reads a "
           << (part == Forward ? "forward" : "backward")
           << " value of chunk " << owner
           << ", which runs after it; a pipeline passes forward values to "
              "later chunks and gradients to earlier ones";
  return transfer(v, chunk, part, user);
}

LogicalResult StageBuilder::cloneInto(Operation *op, int64_t chunk,
                                      Part part) {
  ChunkFunc &f = funcs[chunk][part];
  for (Value operand : op->getOperands()) {
    FailureOr<Value> local = resolve(operand, chunk, part, op);
    if (failed(local))
      return failure();
    f.mapping.map(operand, *local);
  }
  OpBuilder ob(b.getContext());
  ob.setInsertionPointToEnd(f.entry);
  Operation *clone = ob.clone(*op, f.mapping);
  (void)clone;
  return success();
}

void ChunkFunc::hoistAccumulations() {
  for (Operation *op : accumulationOps) {
    Operation *after = nullptr;
    for (Value operand : op->getOperands())
      if (Operation *def = operand.getDefiningOp())
        if (def->getBlock() == entry && (!after || after->isBeforeInBlock(def)))
          after = def;
    if (after)
      op->moveAfter(after);
    else
      op->moveBefore(&entry->front());
  }
}

LogicalResult StageBuilder::buildAccumulation(const Accumulation &a,
                                              int64_t chunk) {
  // The chunk's own contributions, through the same adds and all-reduces.
  ChunkFunc &f = funcs[chunk][Backward];
  llvm::DenseMap<Value, int> unitOfLeaf;
  for (auto [leaf, unit] : a.leaves)
    unitOfLeaf[leaf] = unit;
  llvm::DenseSet<Operation *> inner(a.inner.begin(), a.inner.end());
  OpBuilder ob(b.getContext());
  ob.setInsertionPointToEnd(f.entry);
  std::function<FailureOr<Value>(Value)> prune =
      [&](Value node) -> FailureOr<Value> {
    Operation *def = node.getDefiningOp();
    if (!def || !inner.contains(def)) {
      if (chunkOfUnit[unitOfLeaf.lookup(node)] != chunk)
        return Value();
      return resolve(node, chunk, Backward, a.root);
    }
    SmallVector<Value> operands;
    for (Value operand : def->getOperands()) {
      FailureOr<Value> local = prune(operand);
      if (failed(local))
        return failure();
      if (*local)
        operands.push_back(*local);
    }
    if (operands.empty())
      return Value();
    if (isa<AddOp>(def) && operands.size() == 1)
      return operands.front();
    IRMapping m;
    for (auto [operand, local] : llvm::zip(def->getOperands(), operands))
      m.map(operand, local);
    Operation *clone = ob.clone(*def, m);
    f.accumulationOps.push_back(clone);
    return clone->getResult(0);
  };
  FailureOr<Value> g = prune(a.root->getOperand(1));
  if (failed(g))
    return failure();
  if (!*g)
    return success();
  Value acc = argument(chunk, Backward, a.accumulator);
  IRMapping m;
  m.map(a.root->getOperand(0), acc);
  m.map(a.root->getOperand(1), *g);
  Operation *root = ob.clone(*a.root, m);
  f.accumulationOps.push_back(root);
  Value updated = root->getResult(0);
  f.results.push_back(updated);
  NamedAttrList attrs;
  // The argument index is final: it is set after all arguments exist.
  attrs.set(LoomDialect::kUpdatesAttr,
            b.getI64IntegerAttr(cast<BlockArgument>(acc).getArgNumber()));
  f.resultAttrs.push_back(attrs);
  return success();
}

LogicalResult StageBuilder::build(StringRef modelName, int64_t microbatches) {
  MLIRContext *ctx = train.getContext();
  int64_t chunks = chunkOfUnit.empty() ? 0 : chunkOfUnit.back() + 1;
  b.setInsertionPoint(train);
  // 1. Empty functions, one forward and one backward per chunk (only the
  //    forward when forward-only).
  SmallVector<Part> parts{Forward};
  if (!forwardOnly)
    parts.push_back(Backward);
  funcs.resize(chunks);
  for (int64_t c = 0; c < chunks; ++c)
    for (Part part : parts) {
      std::string name = (modelName + (part == Forward ? "_fwd" : "_bwd") +
                          std::to_string(c))
                             .str();
      auto func = func::FuncOp::create(b, train.getLoc(), name,
                                       b.getFunctionType({}, {}));
      for (NamedAttribute attr : train->getDiscardableAttrs())
        func->setAttr(attr.getName(), attr.getValue());
      func->setAttr(LoomDialect::kTrainAttr,
                    b.getDictionaryAttr(
                        {b.getNamedAttr("phase",
                                        b.getStringAttr(part == Forward
                                                            ? "forward"
                                                            : "backward")),
                         b.getNamedAttr("microbatches",
                                        b.getI64IntegerAttr(microbatches))}));
      func->setAttr(LoomDialect::kPipelineAttr,
                    b.getDictionaryAttr(
                        {b.getNamedAttr("stage", b.getI64IntegerAttr(c % stages)),
                         b.getNamedAttr("chunk", b.getI64IntegerAttr(c))}));
      funcs[c][part].func = func;
      funcs[c][part].entry = func.addEntryBlock();
    }

  // 2. Forward ops in order, chunk by chunk (a chunk's forward reads the
  //    earlier chunks'); backward ops from the last chunk down.
  Block &body = train.getBody().front();
  auto ret = cast<func::ReturnOp>(body.getTerminator());
  for (int64_t c = 0; c < chunks; ++c)
    for (Operation &op : body.without_terminator())
      if (cut.forward.contains(&op) && chunkOf(&op) == c)
        if (failed(cloneInto(&op, c, Forward)))
          return failure();
  Value loss = ret.getOperand(0);
  int64_t lossChunk = chunkOf(loss.getDefiningOp());
  {
    ChunkFunc &f = funcs[lossChunk][Forward];
    f.results.insert(f.results.begin(), f.mapping.lookup(loss));
    f.resultAttrs.insert(f.resultAttrs.begin(), NamedAttrList());
  }
  if (forwardOnly)
    for (Operation &op : body.without_terminator())
      if (!cut.forward.contains(&op))
        return op.emitOpError()
               << "does not feed the loss; a forward-only pipeline runs "
                  "only the ops the loss depends on";
  for (int64_t c = forwardOnly ? -1 : chunks - 1; c >= 0; --c) {
    for (Operation &op : body.without_terminator())
      if (!cut.forward.contains(&op) && !cut.accumulationOps.contains(&op) &&
          chunkOf(&op) == c)
        if (failed(cloneInto(&op, c, Backward)))
          return failure();
    for (const Accumulation &a : cut.accumulations)
      if (failed(buildAccumulation(a, c)))
        return failure();
    funcs[c][Backward].hoistAccumulations();
  }

  // 3. Returns and signatures.
  for (int64_t c = 0; c < chunks; ++c)
    for (Part part : parts) {
      ChunkFunc &f = funcs[c][part];
      f.sortArguments(train);
      OpBuilder rb(ctx);
      rb.setInsertionPointToEnd(f.entry);
      func::ReturnOp::create(rb, train.getLoc(), f.results);
      f.func.setFunctionType(b.getFunctionType(
          f.entry->getArgumentTypes(), ValueRange(f.results).getTypes()));
      f.func.setAllArgAttrs(f.argAttrs);
      SmallVector<DictionaryAttr> resultAttrs;
      for (NamedAttrList &attrs : f.resultAttrs)
        resultAttrs.push_back(attrs.getDictionary(ctx));
      f.func.setAllResultAttrs(resultAttrs);
    }

  // 4. Each chunk accumulates only gradients of parameters its forward
  //    reads: a parameter is updated by the stages that hold it, so an
  //    accumulation anywhere else would be lost. (A gradient that reaches its
  //    accumulator through an op the accumulation tree does not follow is
  //    placed by that op's position, in the embedding chunk.)
  for (int64_t c = 0; !forwardOnly && c < chunks; ++c) {
    auto namesWithRole = [](func::FuncOp func, Role want) {
      llvm::StringSet<> names;
      for (unsigned i = 0; i < func.getNumArguments(); ++i) {
        auto role = func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
        auto name = func.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
        if (role && name && role.getValue() == want)
          names.insert(name.getValue());
      }
      return names;
    };
    llvm::StringSet<> held = namesWithRole(funcs[c][Forward].func, Role::Param);
    for (const auto &grad : namesWithRole(funcs[c][Backward].func, Role::Grad))
      if (!held.contains(grad.getKey()))
        return train.emitOpError()
               << "accumulates the gradient of '" << grad.getKey()
               << "' in chunk " << c
               << ", whose forward does not read that parameter, so the "
                  "stage that updates it would never see it; the gradient "
                  "reaches its accumulator through an op --loom-pipeline "
                  "cannot split per chunk (it follows loom.add, sum "
                  "all-reduces and reduce-scatters, local slices and "
                  "widening casts)";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

struct LoomPipelinePass
    : mlir::loom::impl::LoomPipelineBase<LoomPipelinePass> {
  using Base::Base;

  void runOnOperation() override;
  LogicalResult pipeline(func::FuncOp train, func::FuncOp update);
  CostModel costModel() const {
    CostModel costs;
    costs.peakFlopsPerSecond = peakTflops * 1e12;
    costs.memoryBytesPerSecond = bandwidthGbs * 1e9;
    return costs;
  }
};

void LoomPipelinePass::runOnOperation() {
  ModuleOp module = getOperation();
  func::FuncOp train, update;
  if (forwardOnly) {
    // An evaluation: the one function with a body, returning the loss.
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (func->hasAttr(LoomDialect::kTrainAttr) ||
          func->hasAttr(LoomDialect::kPipelineAttr)) {
        func.emitOpError() << "is part of a training step or already a "
                              "pipeline stage; forward-only cuts a model "
                              "function that returns the loss (drop "
                              "forward-only to pipeline a training step)";
        return signalPassFailure();
      }
      if (train) {
        func.emitOpError() << "is a second function; a forward-only "
                              "pipeline cuts one evaluation";
        return signalPassFailure();
      }
      train = func;
    }
    if (!train) {
      mlir::emitError(module.getLoc())
          << "loom-pipeline: forward-only needs a model function that "
             "returns the loss; the module has none";
      return signalPassFailure();
    }
    if (failed(pipeline(train, update)))
      return signalPassFailure();
    return;
  }
  for (auto func : module.getOps<func::FuncOp>()) {
    auto phase = func->getAttrOfType<DictionaryAttr>(LoomDialect::kTrainAttr);
    StringAttr name = phase ? phase.getAs<StringAttr>("phase") : StringAttr();
    if (!name)
      continue;
    if (name.getValue() == "microbatch") {
      if (train) {
        func.emitOpError() << "is a second training step; --loom-pipeline "
                              "cuts one";
        return signalPassFailure();
      }
      train = func;
    } else if (name.getValue() == "update" &&
               !func->hasAttr(LoomDialect::kPipelineAttr)) {
      update = func;
    } else if (name.getValue() == "forward" ||
               name.getValue() == "backward") {
      func.emitOpError() << "is already a pipeline stage function; run "
                            "--loom-pipeline once";
      return signalPassFailure();
    }
  }
  if (!train || !update) {
    mlir::emitError(module.getLoc()) << "loom-pipeline: no training step (a micro-batch "
                          "function and an update function with loom.train); "
                          "run --loom-autodiff first";
    return signalPassFailure();
  }
  if (failed(pipeline(train, update)))
    return signalPassFailure();
}

LogicalResult LoomPipelinePass::pipeline(func::FuncOp train,
                                         func::FuncOp update) {
  ModuleOp module = getOperation();
  MLIRContext *ctx = module.getContext();
  // Errors point at the training step (not the whole module).
  auto error = [&] { return mlir::emitError(train.getLoc()); };
  // 1. Options.
  std::optional<ScheduleKind> kind = parseScheduleKind(schedule);
  if (!kind)
    return error() << "loom-pipeline: unknown schedule '"
                              << schedule
                              << "'; use gpipe, 1f1b or interleaved";
  if (!(peakTflops > 0) || !(bandwidthGbs > 0)) {
    std::string got;
    llvm::raw_string_ostream(got)
        << llvm::format("%g and %g", double(peakTflops), double(bandwidthGbs));
    return error() << "loom-pipeline: peak-tflops and bandwidth-gbs must be "
                      "positive, got "
                   << got;
  }
  int64_t p = stages, v = virtualStages;
  if (p < 1 || v < 1)
    return error()
           << "loom-pipeline: stages and virtual-stages must be >= 1, got "
           << p << " and " << v;
  if (*kind == ScheduleKind::Interleaved && v < 2)
    return error()
           << "loom-pipeline: schedule=interleaved needs virtual-stages >= 2 "
              "(with one chunk per stage it is 1f1b)";
  if (*kind != ScheduleKind::Interleaved && v != 1)
    return error()
           << "loom-pipeline: virtual-stages=" << v
           << " needs schedule=interleaved (gpipe and 1f1b run one chunk "
              "per stage)";
  auto trainAttr = train->getAttrOfType<DictionaryAttr>(LoomDialect::kTrainAttr);
  int64_t stepMicrobatches = 1;
  if (auto m = trainAttr ? trainAttr.getAs<IntegerAttr>("microbatches")
                         : IntegerAttr())
    stepMicrobatches = m.getInt();
  int64_t m = microbatches == 0 ? stepMicrobatches : int64_t(microbatches);
  if (m < 1)
    return error() << "loom-pipeline: microbatches must be >= 1, got " << m;
  // An evaluation has no loss seed: any count of micro-batches splits it.
  if (!forwardOnly && m != stepMicrobatches)
    return error()
           << "loom-pipeline: microbatches=" << m
           << " but the training step was derived for " << stepMicrobatches
           << " (--loom-autodiff microbatches=" << stepMicrobatches
           << " seeds each micro-batch's loss with 1/" << stepMicrobatches
           << "); use the same count";

  // 2. The mesh axis the stages lie on.
  MeshOp mesh;
  for (MeshOp candidate : module.getOps<MeshOp>()) {
    if (mesh)
      return candidate.emitOpError() << "is a second mesh; --loom-pipeline "
                                        "needs exactly one";
    mesh = candidate;
  }
  if (!mesh) {
    OpBuilder mb(ctx);
    mb.setInsertionPointToStart(module.getBody());
    mesh = MeshOp::create(
        mb, module.getLoc(), "mesh",
        MeshAttr::get(ctx, {mb.getStringAttr(axis)}, {p}));
  }
  std::optional<unsigned> axisIndex = mesh.getShape().findAxis(axis);
  if (!axisIndex)
    return mesh.emitOpError() << "has no axis '" << axis
                              << "' for the pipeline stages (axes: "
                              << mesh.getShape().axisNamesForDiagnostic()
                              << ")";
  if (mesh.getShape().getAxisSizes()[*axisIndex] != p)
    return mesh.emitOpError()
           << "axis " << axis << " has size "
           << mesh.getShape().getAxisSizes()[*axisIndex] << " but stages="
           << p;

  // 3. Units and their costs; the cut.
  CostModel costs = costModel();
  FailureOr<StepCut> cut = analyzeStep(train, costs);
  if (failed(cut))
    return failure();
  int64_t numUnits = cut->units.size();
  if (p * v > numUnits)
    return error()
           << "loom-pipeline: " << p << " stages"
           << (v > 1 ? " x " + std::to_string(v) + " virtual stages" : "")
           << " need " << p * v << " chunks but the model has "
           << cut->numBlocks << " blocks + embedding + head = " << numUnits
           << " units; use at most " << numUnits / v << " stages";
  if (v > 1 && cut->numBlocks % v != 0)
    return error()
           << "loom-pipeline: virtual-stages=" << v << " does not divide the "
           << cut->numBlocks << " layers";
  // (Forward-only, every schedule runs its forwards in order; 1F1B's
  // warm-up bound does not apply.)
  if (!forwardOnly && *kind != ScheduleKind::GPipe && m < p)
    return error()
           << "loom-pipeline: schedule=" << schedule << " needs at least as "
           << "many micro-batches as stages (microbatches=" << m
           << " < stages=" << p
           << "); use more micro-batches or schedule=gpipe";
  if (*kind == ScheduleKind::Interleaved && m % p != 0)
    return error()
           << "loom-pipeline: schedule=interleaved needs microbatches (" << m
           << ") divisible by stages (" << p << "), as Megatron-LM's";
  SmallVector<int64_t> starts = balanceUnits(cut->units, p * v);
  SmallVector<int64_t> chunkOfUnit(numUnits, 0);
  for (int64_t c = 0; c < p * v; ++c) {
    int64_t end = c + 1 < p * v ? starts[c + 1] : numUnits;
    for (int64_t u = starts[c]; u < end; ++u)
      chunkOfUnit[u] = c;
  }
  LLVM_DEBUG({
    for (auto [u, unit] : llvm::enumerate(cut->units))
      llvm::dbgs() << "unit " << unit.name << " fwd " << unit.forwardSeconds
                   << " bwd " << unit.backwardSeconds << " -> chunk "
                   << chunkOfUnit[u] << "\n";
  });

  // 4. Stage functions.
  StringRef modelName = train.getSymName();
  modelName.consume_back("_train");
  StageBuilder builder(train, *cut, chunkOfUnit, p, mesh, axis, forwardOnly);
  if (failed(builder.build(modelName, m)))
    return failure();

  // 5. Every block in exactly one chunk (forward), its backward in the same.
  llvm::StringMap<SmallVector<int64_t>> placed;
  for (auto [c, pair] : llvm::enumerate(builder.funcs))
    for (ChunkFunc &f : pair)
      if (f.func)
        f.func.walk([&, c = c](BlockOp block) {
          placed[block.getLabel()].push_back(c);
        });
  for (auto [u, unit] : llvm::enumerate(cut->units)) {
    if (u == 0 || u + 1 == cut->units.size())
      continue;
    auto fwd = placed.lookup(unit.name);
    auto bwd = placed.lookup(unit.name + ".grad");
    if (fwd.size() != 1 || bwd.size() > 1 ||
        (bwd.size() == 1 && bwd.front() != fwd.front()))
      return train.emitOpError()
             << "block '" << unit.name << "' landed in " << fwd.size()
             << " forward and " << bwd.size()
             << " backward chunks; each must be in exactly one";
  }

  // 5. Per-stage updates (none forward-only); the parameters each stage
  //    holds.
  std::map<std::string, std::vector<int64_t>> owners;
  for (auto [c, pair] : llvm::enumerate(builder.funcs))
    for (ChunkFunc &f : pair)
      for (unsigned i = 0; f.func && i < f.func.getNumArguments(); ++i) {
        auto role =
            f.func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
        auto name =
            f.func.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
        if (!role || role.getValue() != Role::Param || !name)
          continue;
        std::vector<int64_t> &s = owners[name.str()];
        if (!llvm::is_contained(s, int64_t(c) % p))
          s.push_back(int64_t(c) % p);
      }
  for (auto &[name, s] : owners)
    llvm::sort(s);
  SmallVector<Attribute> updates;
  SmallVector<func::FuncOp> stageUpdates;
  for (int64_t s = 0; update && s < p; ++s) {
    FailureOr<func::FuncOp> stageUpdate =
        buildStageUpdate(update, s, p, owners, mesh, axis);
    if (failed(stageUpdate))
      return failure();
    updates.push_back(FlatSymbolRefAttr::get(stageUpdate->getSymNameAttr()));
    stageUpdates.push_back(*stageUpdate);
  }
  if (reduceOncePerStep && !forwardOnly) {
    SmallVector<func::FuncOp> backwardFuncs;
    for (auto &pair : builder.funcs)
      backwardFuncs.push_back(pair[Backward].func);
    reduceGradientsOncePerStep(backwardFuncs, stageUpdates, p, axis,
                               /*onlyWhereScattered=*/false,
                               /*wholeInLastMicrobatch=*/true);
  }

  // 6. The schedule, checked by simulation.
  OpBuilder sb(ctx);
  sb.setInsertionPointToEnd(module.getBody());
  SmallVector<Attribute> forward, backward, units, actions;
  for (int64_t c = 0; c < p * v; ++c) {
    forward.push_back(
        FlatSymbolRefAttr::get(builder.funcs[c][Forward].func.getSymNameAttr()));
    if (!forwardOnly)
      backward.push_back(FlatSymbolRefAttr::get(
          builder.funcs[c][Backward].func.getSymNameAttr()));
    SmallVector<StringRef> names;
    for (int64_t u = 0; u < numUnits; ++u)
      if (chunkOfUnit[u] == c)
        names.push_back(cut->units[u].name);
    units.push_back(sb.getStrArrayAttr(names));
  }
  for (int64_t s = 0; s < p; ++s) {
    SmallVector<PipelineAction> stageActions =
        buildStageActions(*kind, s, p, v, m);
    // Forward-only: the schedule's forwards, in its order.
    if (forwardOnly)
      llvm::erase_if(stageActions,
                     [](const PipelineAction &a) { return a.backward; });
    actions.push_back(encodePipelineActions(ctx, stageActions));
  }
  auto scheduleOp = PipelineScheduleOp::create(
      sb, train.getLoc(), sb.getStringAttr(schedule), sb.getI64IntegerAttr(p),
      sb.getI64IntegerAttr(v), sb.getI64IntegerAttr(m),
      sb.getArrayAttr(forward), sb.getArrayAttr(backward),
      sb.getArrayAttr(updates), sb.getArrayAttr(units),
      sb.getArrayAttr(actions));
  // The machine the cut assumed, for the program's predicted timeline.
  scheduleOp->setAttr(
      LoomDialect::kCostModelAttr,
      sb.getDictionaryAttr(
          {sb.getNamedAttr("peak_tflops", sb.getF64FloatAttr(peakTflops)),
           sb.getNamedAttr("bandwidth_gbs",
                           sb.getF64FloatAttr(bandwidthGbs))}));
  train.erase();
  if (update)
    update.erase();
  if (failed(scheduleOp.verify()) ||
      failed(checkPipelineSchedule(scheduleOp, costs)))
    return failure();
  return success();
}

} // namespace
