//===- StageUpdate.h - The optimizer update of a stage ----------*- C++ -*-===//

#ifndef LOOM_PASSES_PIPELINE_STAGEUPDATE_H
#define LOOM_PASSES_PIPELINE_STAGEUPDATE_H

#include "dialects/Loom/IR/LoomOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <map>
#include <string>
#include <vector>

namespace mlir::loom {

/// `update` (the training step's optimizer function) restricted to the
/// parameters of pipeline stage `stage` of `stages`, as a new function
/// `<update>_stage<stage>` next to it: `owners` lists, per parameter name,
/// the stages holding it (sorted). Collectives run on `axis` of `mesh`.
FailureOr<func::FuncOp>
buildStageUpdate(func::FuncOp update, int64_t stage, int64_t stages,
                 const std::map<std::string, std::vector<int64_t>> &owners,
                 MeshOp mesh, StringRef axis);

} // namespace mlir::loom

#endif // LOOM_PASSES_PIPELINE_STAGEUPDATE_H
