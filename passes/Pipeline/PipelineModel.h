//===- PipelineModel.h - The module as the simulator sees it ----*- C++ -*-===//
//
// Reads a `loom.pipeline_schedule` and its stage functions into the
// simulator's PipelineModel: each chunk's forward and backward time from the
// ops' cost interface (a roofline per op: the larger of FLOPs over peak
// FLOP/s and bytes over memory bandwidth), its sends and receives in program
// order, and the bytes its forward stashes for its backward. Shared by
// --loom-pipeline (which balances stages with the same costs and checks
// what it built) and --loom-pipeline-report.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_PIPELINE_PIPELINEMODEL_H
#define LOOM_PASSES_PIPELINE_PIPELINEMODEL_H

#include "dialects/Loom/IR/LoomOps.h"
#include "passes/Pipeline/Simulate.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace mlir::loom {

/// The machine the costs are estimated for.
struct CostModel {
  double peakFlopsPerSecond = 100e12;
  double memoryBytesPerSecond = 2000e9;
  /// Point-to-point bandwidth between stages (<= 0: free).
  double linkBytesPerSecond = 0;

  /// Roofline seconds of one op (0 for ops without a cost, such as
  /// collectives); a loom.block costs its body.
  double seconds(Operation *op) const;
  /// Seconds of the top-level ops of `func`.
  double seconds(func::FuncOp func) const;
};

/// The machine recorded on `schedule` by --loom-pipeline (loom.cost_model),
/// or the default one.
CostModel costModelOf(PipelineScheduleOp schedule);

/// The pipeline `schedule` describes, with costs from `costs`. Fails with a
/// diagnostic on the schedule op when a function is missing or a send or
/// receive names no stage.
FailureOr<PipelineModel> buildPipelineModel(PipelineScheduleOp schedule,
                                            const CostModel &costs);

/// Simulates `schedule` (PipelineModel + simulatePipeline); emits the
/// deadlock or mismatch on the schedule op and fails, or fills `timeline`.
LogicalResult checkPipelineSchedule(PipelineScheduleOp schedule,
                                    const CostModel &costs,
                                    Timeline *timeline = nullptr,
                                    PipelineModel *model = nullptr);

} // namespace mlir::loom

#endif // LOOM_PASSES_PIPELINE_PIPELINEMODEL_H
