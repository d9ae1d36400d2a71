//===- ScheduleSvg.h - Draw a simulated pipeline schedule -------*- C++ -*-===//
//
// The figure of the pipeline papers: one row per stage, time to the right,
// a box per action (forward and backward in two colours, shaded by chunk
// when stages hold several), the micro-batch written inside; the grey
// background left uncovered is the bubble.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_PIPELINE_SCHEDULESVG_H
#define LOOM_PASSES_PIPELINE_SCHEDULESVG_H

#include "passes/Pipeline/Simulate.h"

#include "llvm/Support/raw_ostream.h"

namespace mlir::loom {

/// Writes `timeline` of `model` as a standalone SVG document; `title` is
/// printed above the rows. Every action is one `<rect class="fwd">` or
/// `<rect class="bwd">`.
void writeScheduleSvg(const PipelineModel &model, const Timeline &timeline,
                      llvm::StringRef title, llvm::raw_ostream &os);

} // namespace mlir::loom

#endif // LOOM_PASSES_PIPELINE_SCHEDULESVG_H
