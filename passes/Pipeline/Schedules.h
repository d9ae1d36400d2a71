//===- Schedules.h - GPipe, 1F1B and interleaved 1F1B -----------*- C++ -*-===//
//
// The per-stage action lists of the three pipeline schedules, as in the
// papers: GPipe (Huang et al. 2019: every forward, then every backward),
// 1F1B / PipeDream-Flush (Narayanan et al. 2021: p - s - 1 warm-up forwards
// on stage s, then one forward and one backward alternately, then the
// remaining backwards) and interleaved 1F1B with v model chunks per stage
// (Narayanan et al. 2021 §2.2; Megatron-LM's
// forward_backward_pipelining_with_interleaving).
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_PIPELINE_SCHEDULES_H
#define LOOM_PASSES_PIPELINE_SCHEDULES_H

#include "dialects/Loom/IR/PipelineActions.h"

#include "llvm/ADT/StringRef.h"

#include <optional>

namespace mlir::loom {

enum class ScheduleKind { GPipe, OneFOneB, Interleaved };

/// "gpipe", "1f1b", "interleaved" -> kind.
std::optional<ScheduleKind> parseScheduleKind(llvm::StringRef name);
llvm::StringRef scheduleKindName(ScheduleKind kind);

/// The actions of stage `stage` of `stages`, each holding `virtualStages`
/// chunks (1 unless interleaved), over `microbatches` micro-batches.
/// Interleaved needs microbatches divisible by stages (as Megatron-LM).
llvm::SmallVector<PipelineAction> buildStageActions(ScheduleKind kind,
                                                    int64_t stage,
                                                    int64_t stages,
                                                    int64_t virtualStages,
                                                    int64_t microbatches);

/// The analytic bubble fraction (idle share of the step) with equal stage
/// costs: (p - 1) / (v m + p - 1), v = 1 for GPipe and 1F1B.
double analyticBubbleFraction(ScheduleKind kind, int64_t stages,
                              int64_t virtualStages, int64_t microbatches);

} // namespace mlir::loom

#endif // LOOM_PASSES_PIPELINE_SCHEDULES_H
