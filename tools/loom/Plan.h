//===- Plan.h - `loom plan`: search parallel plans --------------*- C++ -*-===//
//
// `loom plan --config CFG.json --gpus G --gpu-mem-gb M --batch B ...`:
// enumerates dp x tp x pp meshes, ZeRO stages, micro-batches, pipeline
// schedules and recomputation, predicts each with the cost model of
// PlanModel.h, and prints the best plans that fit (or the best as JSON).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_TOOLS_LOOM_PLAN_H
#define LOOM_TOOLS_LOOM_PLAN_H

#include <string>
#include <vector>

namespace loom::cli {

/// The usage text of `loom plan`.
extern const char *const kPlanUsage;

/// Runs `loom plan` with the arguments after the subcommand; returns the
/// process exit code (errors are printed on stderr).
int runPlan(const std::vector<std::string> &args);

} // namespace loom::cli

#endif // LOOM_TOOLS_LOOM_PLAN_H
