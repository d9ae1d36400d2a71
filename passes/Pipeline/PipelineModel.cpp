//===- PipelineModel.cpp - The module as the simulator sees it --*- C++ -*-===//

#include "passes/Pipeline/PipelineModel.h"

#include "mlir/IR/SymbolTable.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::loom;

static int64_t tensorBytes(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  return tensor.getNumElements() *
         std::max<int64_t>(1, (tensor.getElementTypeBitWidth() + 7) / 8);
}

double CostModel::seconds(Operation *op) const {
  auto cost = dyn_cast<CostOpInterface>(op);
  if (!cost)
    return 0.0;
  double flops = static_cast<double>(cost.getFlops());
  double bytes = static_cast<double>(cost.getBytesAccessed());
  return std::max(peakFlopsPerSecond > 0 ? flops / peakFlopsPerSecond : 0.0,
                  memoryBytesPerSecond > 0 ? bytes / memoryBytesPerSecond
                                           : 0.0);
}

double CostModel::seconds(func::FuncOp func) const {
  double total = 0;
  if (func.isExternal())
    return total;
  for (Operation &op : func.getBody().front())
    total += seconds(&op);
  return total;
}

CostModel mlir::loom::costModelOf(PipelineScheduleOp schedule) {
  CostModel costs;
  if (auto machine = schedule->getAttrOfType<DictionaryAttr>(
          LoomDialect::kCostModelAttr)) {
    if (auto peak = machine.getAs<FloatAttr>("peak_tflops"))
      costs.peakFlopsPerSecond = peak.getValueAsDouble() * 1e12;
    if (auto bandwidth = machine.getAs<FloatAttr>("bandwidth_gbs"))
      costs.memoryBytesPerSecond = bandwidth.getValueAsDouble() * 1e9;
  }
  return costs;
}

/// The sends and receives of `func`'s top level, in program order.
static LogicalResult collectComm(func::FuncOp func,
                                 SmallVectorImpl<CommEvent> &events) {
  if (func.isExternal())
    return success();
  for (Operation &op : func.getBody().front()) {
    if (auto send = dyn_cast<SendOp>(op))
      events.push_back({true, static_cast<int64_t>(send.getPeer()),
                        static_cast<int64_t>(send.getTag()),
                        tensorBytes(send.getInput().getType())});
    else if (auto recv = dyn_cast<RecvOp>(op))
      events.push_back({false, static_cast<int64_t>(recv.getPeer()),
                        static_cast<int64_t>(recv.getTag()),
                        tensorBytes(recv.getResult().getType())});
  }
  return success();
}

FailureOr<PipelineModel>
mlir::loom::buildPipelineModel(PipelineScheduleOp schedule,
                               const CostModel &costs) {
  PipelineModel model;
  model.stages = schedule.getStages();
  model.virtualStages = schedule.getVirtualStages();
  model.microbatches = schedule.getMicrobatches();
  model.linkBytesPerSecond = costs.linkBytesPerSecond;
  SymbolTableCollection symbols;
  auto lookup = [&](Attribute ref) -> func::FuncOp {
    return symbols.lookupNearestSymbolFrom<func::FuncOp>(
        schedule, cast<FlatSymbolRefAttr>(ref));
  };
  model.forwardOnly = schedule.isForwardOnly();
  for (auto [k, fwdRef] : llvm::enumerate(schedule.getForward())) {
    // A forward-only pipeline (an evaluation) has no backward functions.
    func::FuncOp fwd = lookup(fwdRef);
    func::FuncOp bwd =
        model.forwardOnly ? func::FuncOp() : lookup(schedule.getBackward()[k]);
    if (!fwd || (!model.forwardOnly && !bwd))
      return schedule.emitOpError() << "names a chunk function that does "
                                       "not exist";
    ChunkModel chunk;
    chunk.forwardSeconds = costs.seconds(fwd);
    if (bwd)
      chunk.backwardSeconds = costs.seconds(bwd);
    if (failed(collectComm(fwd, chunk.forwardComm)) ||
        (bwd && failed(collectComm(bwd, chunk.backwardComm))))
      return failure();
    // The planned slot once buffers are planned (what the runtime takes
    // per micro-batch in flight); before, the kept values' bytes.
    if (auto slot =
            fwd->getAttrOfType<IntegerAttr>(LoomDialect::kStashBytesAttr))
      chunk.stashBytes = slot.getInt();
    else
      for (unsigned i = 0; i < fwd.getNumResults(); ++i)
        if (fwd.getResultAttr(i, LoomDialect::kStashAttr))
          chunk.stashBytes += tensorBytes(fwd.getResultTypes()[i]);
    model.chunks.push_back(std::move(chunk));
  }
  for (Attribute list : schedule.getActions())
    model.actions.push_back(
        decodePipelineActions(cast<DenseI64ArrayAttr>(list)));
  return model;
}

LogicalResult mlir::loom::checkPipelineSchedule(PipelineScheduleOp schedule,
                                                const CostModel &costs,
                                                Timeline *timeline,
                                                PipelineModel *modelOut) {
  FailureOr<PipelineModel> model = buildPipelineModel(schedule, costs);
  if (failed(model))
    return failure();
  Timeline local;
  std::string error;
  if (!simulatePipeline(*model, timeline ? *timeline : local, error))
    return schedule.emitOpError() << "schedule \"" << schedule.getSchedule()
                                  << "\" fails: " << error;
  if (modelOut)
    *modelOut = std::move(*model);
  return success();
}
