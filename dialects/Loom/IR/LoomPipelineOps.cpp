//===- LoomPipelineOps.cpp - Schedule and group all-reduce ------*- C++ -*-===//
//
// The schedule's custom assembly (one line per chunk, one per stage with
// its actions), its structural verifier, and the group all-reduce of a
// parameter that lives on several pipeline stages.
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/IR/LoomOps.h"
#include "dialects/Loom/IR/PipelineActions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace mlir::loom;

//===----------------------------------------------------------------------===//
// pipeline_schedule: assembly
//===----------------------------------------------------------------------===//

/// `F3`, `B3`, `F3.1` -> action; false when `token` is not one.
static bool parseActionToken(StringRef token, PipelineAction &action) {
  if (token.size() < 2 || (token[0] != 'F' && token[0] != 'B'))
    return false;
  action.backward = token[0] == 'B';
  StringRef rest = token.drop_front();
  auto [mb, chunk] = rest.split('.');
  if (mb.empty() || mb.getAsInteger(10, action.microbatch))
    return false;
  action.chunk = 0;
  if (rest.contains('.') &&
      (chunk.empty() || chunk.getAsInteger(10, action.chunk)))
    return false;
  return true;
}

ParseResult PipelineScheduleOp::parse(OpAsmParser &parser,
                                      OperationState &result) {
  Builder &b = parser.getBuilder();
  std::string schedule;
  int64_t stages = 0, virtualStages = 0, microbatches = 0;
  if (parser.parseString(&schedule) || parser.parseKeyword("stages") ||
      parser.parseInteger(stages) || parser.parseKeyword("virtual") ||
      parser.parseInteger(virtualStages) ||
      parser.parseKeyword("microbatches") ||
      parser.parseInteger(microbatches) || parser.parseLBrace())
    return failure();

  SmallVector<Attribute> forward, backward, update, units, actions;
  SmallVector<PipelineAction> current;
  bool inStage = false;
  auto closeStage = [&] {
    if (inStage)
      actions.push_back(encodePipelineActions(b.getContext(), current));
    current.clear();
    inStage = false;
  };
  while (failed(parser.parseOptionalRBrace())) {
    SMLoc loc = parser.getCurrentLocation();
    StringRef keyword;
    if (parser.parseKeyword(&keyword))
      return failure();
    if (keyword == "chunk") {
      closeStage();
      int64_t index;
      ArrayAttr chunkUnits;
      FlatSymbolRefAttr fwd, bwd;
      if (parser.parseInteger(index) || parser.parseAttribute(chunkUnits) ||
          parser.parseKeyword("forward") || parser.parseAttribute(fwd))
        return failure();
      // A forward-only pipeline (an evaluation) has no backward functions.
      if (succeeded(parser.parseOptionalKeyword("backward")) &&
          parser.parseAttribute(bwd))
        return failure();
      if (index != static_cast<int64_t>(forward.size()))
        return parser.emitError(loc) << "expected chunk " << forward.size()
                                     << ", got chunk " << index;
      forward.push_back(fwd);
      if (bwd)
        backward.push_back(bwd);
      units.push_back(chunkUnits);
      continue;
    }
    if (keyword == "stage") {
      closeStage();
      int64_t index;
      if (parser.parseInteger(index))
        return failure();
      if (index != static_cast<int64_t>(actions.size()))
        return parser.emitError(loc) << "expected stage " << actions.size()
                                     << ", got stage " << index;
      if (succeeded(parser.parseOptionalKeyword("update"))) {
        FlatSymbolRefAttr fn;
        if (parser.parseAttribute(fn))
          return failure();
        update.push_back(fn);
      }
      if (parser.parseColon())
        return failure();
      inStage = true;
      continue;
    }
    PipelineAction action;
    if (!inStage || !parseActionToken(keyword, action))
      return parser.emitError(loc)
             << "expected 'chunk', 'stage' or an action such as F0, B0 or "
                "F0.1, got '"
             << keyword << "'";
    current.push_back(action);
  }
  closeStage();
  if (parser.parseOptionalAttrDict(result.attributes))
    return failure();

  OperationName name = result.name;
  result.addAttribute(getScheduleAttrName(name), b.getStringAttr(schedule));
  result.addAttribute(getStagesAttrName(name), b.getI64IntegerAttr(stages));
  result.addAttribute(getVirtualStagesAttrName(name),
                      b.getI64IntegerAttr(virtualStages));
  result.addAttribute(getMicrobatchesAttrName(name),
                      b.getI64IntegerAttr(microbatches));
  result.addAttribute(getForwardAttrName(name), b.getArrayAttr(forward));
  result.addAttribute(getBackwardAttrName(name), b.getArrayAttr(backward));
  result.addAttribute(getUpdateAttrName(name), b.getArrayAttr(update));
  result.addAttribute(getUnitsAttrName(name), b.getArrayAttr(units));
  result.addAttribute(getActionsAttrName(name), b.getArrayAttr(actions));
  return success();
}

void PipelineScheduleOp::print(OpAsmPrinter &p) {
  p << " \"" << getSchedule() << "\" stages " << getStages() << " virtual "
    << getVirtualStages() << " microbatches " << getMicrobatches() << " {";
  p.increaseIndent();
  for (auto [k, fwd, chunkUnits] : llvm::enumerate(getForward(), getUnits())) {
    p.printNewline();
    p << "chunk " << k << " ";
    p.printAttribute(chunkUnits);
    p << " forward ";
    p.printAttribute(fwd);
    if (k < getBackward().size()) {
      p << " backward ";
      p.printAttribute(getBackward()[k]);
    }
  }
  bool withChunk = getVirtualStages() > 1;
  for (auto [s, list] : llvm::enumerate(getActions())) {
    p.printNewline();
    p << "stage " << s;
    if (s < getUpdate().size()) {
      p << " update ";
      p.printAttribute(getUpdate()[s]);
    }
    p << " :";
    if (auto encoded = dyn_cast<DenseI64ArrayAttr>(list))
      for (const PipelineAction &a : decodePipelineActions(encoded))
        p << " " << a.str(withChunk);
  }
  p.decreaseIndent();
  p.printNewline();
  p << "}";
  p.printOptionalAttrDict(
      (*this)->getAttrs(),
      {getScheduleAttrName(), getStagesAttrName(), getVirtualStagesAttrName(),
       getMicrobatchesAttrName(), getForwardAttrName(), getBackwardAttrName(),
       getUpdateAttrName(), getUnitsAttrName(), getActionsAttrName()});
}

//===----------------------------------------------------------------------===//
// pipeline_schedule: verification
//===----------------------------------------------------------------------===//

LogicalResult PipelineScheduleOp::verify() {
  StringRef kind = getSchedule();
  if (kind != "gpipe" && kind != "1f1b" && kind != "interleaved")
    return emitOpError() << "schedule '" << kind
                         << "' is not gpipe, 1f1b or interleaved";
  int64_t p = getStages(), v = getVirtualStages(), m = getMicrobatches();
  if (p < 1 || v < 1 || m < 1)
    return emitOpError() << "needs stages, virtual and microbatches >= 1, got "
                         << p << ", " << v << ", " << m;
  int64_t chunks = p * v;
  const bool forwardOnly = isForwardOnly();
  if (static_cast<int64_t>(getForward().size()) != chunks ||
      static_cast<int64_t>(getUnits().size()) != chunks)
    return emitOpError() << "has " << getForward().size() << " chunks but "
                         << p << " stages x " << v << " virtual = " << chunks
                         << " are needed";
  if (!forwardOnly && static_cast<int64_t>(getBackward().size()) != chunks)
    return emitOpError() << "has " << getBackward().size()
                         << " backward functions for " << chunks
                         << " chunks; a training step needs one per chunk, "
                            "an evaluation (forward-only) none";
  for (auto [k, chunkUnits] : llvm::enumerate(getUnits())) {
    auto list = dyn_cast<ArrayAttr>(chunkUnits);
    if (!list || list.empty() ||
        !llvm::all_of(list, [](Attribute a) { return isa<StringAttr>(a); }))
      return emitOpError() << "chunk " << k
                           << " must list its units as non-empty strings";
  }
  if (!getUpdate().empty() && static_cast<int64_t>(getUpdate().size()) != p)
    return emitOpError() << "has " << getUpdate().size()
                         << " update functions for " << p << " stages";
  if (forwardOnly && !getUpdate().empty())
    return emitOpError() << "is forward-only (no backward functions) but has "
                            "update functions; an evaluation updates nothing";
  if (static_cast<int64_t>(getActions().size()) != p)
    return emitOpError() << "has actions for " << getActions().size()
                         << " stages but stages = " << p;
  for (auto [s, list] : llvm::enumerate(getActions())) {
    auto encoded = dyn_cast<DenseI64ArrayAttr>(list);
    if (!encoded || encoded.size() % 3 != 0)
      return emitOpError() << "stage " << s
                           << " actions must be (kind, chunk, micro-batch) "
                              "triples";
    // Every (chunk, micro-batch) once forward and once backward, forward
    // first.
    llvm::DenseSet<std::pair<int64_t, int64_t>> forwardDone, backwardDone;
    for (const PipelineAction &a : decodePipelineActions(encoded)) {
      std::string name = a.str(v > 1);
      if (a.chunk < 0 || a.chunk >= v || a.microbatch < 0 ||
          a.microbatch >= m)
        return emitOpError() << "stage " << s << " action " << name
                             << " names a chunk or micro-batch out of range ("
                             << v << " chunks per stage, " << m
                             << " micro-batches)";
      std::pair<int64_t, int64_t> key{a.chunk, a.microbatch};
      if (!a.backward) {
        if (!forwardDone.insert(key).second)
          return emitOpError() << "stage " << s << " runs " << name << " twice";
        continue;
      }
      if (forwardOnly)
        return emitOpError() << "stage " << s << " runs " << name
                             << " but the pipeline is forward-only (no "
                                "backward functions)";
      if (!forwardDone.contains(key))
        return emitOpError() << "stage " << s << " runs " << name
                             << " before its forward";
      if (!backwardDone.insert(key).second)
        return emitOpError() << "stage " << s << " runs " << name << " twice";
    }
    if (forwardOnly && static_cast<int64_t>(forwardDone.size()) != v * m)
      return emitOpError() << "stage " << s << " runs " << forwardDone.size()
                           << " forward actions but " << v << " chunks x " << m
                           << " micro-batches need one each";
    if (!forwardOnly && static_cast<int64_t>(backwardDone.size()) != v * m)
      return emitOpError() << "stage " << s << " runs "
                           << backwardDone.size() << " backward actions but "
                           << v << " chunks x " << m
                           << " micro-batches need one each";
  }
  return success();
}

LogicalResult
PipelineScheduleOp::verifySymbolUses(SymbolTableCollection &symbols) {
  for (ArrayAttr list : {getForward(), getBackward(), getUpdate()})
    for (Attribute ref : list) {
      auto sym = cast<FlatSymbolRefAttr>(ref);
      if (!symbols.lookupNearestSymbolFrom<func::FuncOp>(*this, sym))
        return emitOpError() << "refers to " << sym
                             << ", which is not a function of the module";
    }
  return success();
}

//===----------------------------------------------------------------------===//
// group_all_reduce
//===----------------------------------------------------------------------===//

LogicalResult
GroupAllReduceOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto meshOp = symbols.lookupNearestSymbolFrom<MeshOp>(*this, getMeshAttr());
  if (!meshOp)
    return emitOpError() << "refers to unknown mesh " << getMeshAttr()
                         << "; declare it with `loom.mesh`";
  if (getAxes().size() != 1)
    return emitOpError() << "must name exactly one mesh axis, whose "
                            "coordinates `members` lists";
  StringRef axis = cast<StringAttr>(getAxes()[0]).getValue();
  std::optional<unsigned> index = meshOp.getShape().findAxis(axis);
  if (!index)
    return emitOpError() << "'" << axis << "' is not an axis of mesh @"
                         << meshOp.getSymName() << " (axes: "
                         << meshOp.getShape().axisNamesForDiagnostic() << ")";
  int64_t size = meshOp.getShape().getAxisSizes()[*index];
  ArrayRef<int64_t> members = getMembers();
  if (members.size() < 2)
    return emitOpError() << "needs at least two members";
  for (auto [i, c] : llvm::enumerate(members)) {
    if (c < 0 || c >= size)
      return emitOpError() << "member " << c << " is outside axis " << axis
                           << " of size " << size;
    if (i > 0 && c <= members[i - 1])
      return emitOpError() << "members must be distinct and increasing";
  }
  return success();
}

std::optional<int64_t> GroupAllReduceOp::getGroupSize() {
  return static_cast<int64_t>(getMembers().size());
}
