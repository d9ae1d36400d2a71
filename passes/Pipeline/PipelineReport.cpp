//===- PipelineReport.cpp - Bubble and activations in flight ----*- C++ -*-===//
//
// `--loom-pipeline-report`: simulates the module's pipeline schedule on the
// cost model and prints what a user checks before launch: the cut, the
// bubble fraction next to the formula for equal stages, and the
// activations each stage keeps in flight.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/Pipeline/PipelineModel.h"
#include "passes/Pipeline/ScheduleSvg.h"
#include "passes/Pipeline/Schedules.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMPIPELINEREPORT
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

/// One simulated schedule of the report.
struct Scenario {
  std::string name;      // "1f1b", "gpipe", "1f1b (one chunk per stage)"
  ScheduleKind kind;
  int64_t virtualStages; // of this scenario
  PipelineModel model;
  Timeline timeline;
};

/// `model` with the chunks of each stage merged into one (the same layers
/// per stage without interleaving), neighbours exchanging one message each
/// way per micro-batch.
PipelineModel mergeChunks(const PipelineModel &model) {
  PipelineModel merged;
  int64_t p = model.stages;
  merged.stages = p;
  merged.virtualStages = 1;
  merged.microbatches = model.microbatches;
  merged.linkBytesPerSecond = model.linkBytesPerSecond;
  for (int64_t s = 0; s < p; ++s) {
    ChunkModel chunk;
    for (int64_t j = 0; j < model.virtualStages; ++j) {
      const ChunkModel &c = model.chunks[j * p + s];
      chunk.forwardSeconds += c.forwardSeconds;
      chunk.backwardSeconds += c.backwardSeconds;
      chunk.stashBytes += c.stashBytes;
    }
    if (s > 0) {
      chunk.forwardComm.push_back({false, s - 1, 0, 0});
      chunk.backwardComm.push_back({true, s - 1, 1, 0});
    }
    if (s + 1 < p) {
      chunk.forwardComm.push_back({true, s + 1, 0, 0});
      chunk.backwardComm.insert(chunk.backwardComm.begin(),
                                {false, s + 1, 1, 0});
    }
    merged.chunks.push_back(std::move(chunk));
  }
  return merged;
}

std::string micros(double seconds) {
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format("%.4g", seconds * 1e6) << " us";
  return s;
}

std::string fraction(double f) {
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format("%.4f", f);
  return s;
}

struct LoomPipelineReportPass
    : mlir::loom::impl::LoomPipelineReportBase<LoomPipelineReportPass> {
  using Base::Base;

  void runOnOperation() override;
};

void LoomPipelineReportPass::runOnOperation() {
  ModuleOp module = getOperation();
  SmallVector<PipelineScheduleOp> schedules(
      module.getOps<PipelineScheduleOp>());
  if (schedules.size() != 1) {
    mlir::emitError(module.getLoc()) << "loom-pipeline-report: expected one "
                          "loom.pipeline_schedule, found "
                       << schedules.size() << "; run --loom-pipeline first";
    return signalPassFailure();
  }
  PipelineScheduleOp op = schedules.front();
  // The machine the cut was made for, unless the options name another.
  CostModel costs = costModelOf(op);
  if (peakTflops.hasValue())
    costs.peakFlopsPerSecond = peakTflops * 1e12;
  if (bandwidthGbs.hasValue())
    costs.memoryBytesPerSecond = bandwidthGbs * 1e9;
  costs.linkBytesPerSecond = linkGbs * 1e9;

  // 1. The schedule of the module, then the comparison.
  std::vector<Scenario> scenarios(1);
  scenarios.reserve(2); // `main` stays valid while comparing
  Scenario &main = scenarios.front();
  main.name = op.getSchedule().str();
  main.kind = *parseScheduleKind(op.getSchedule());
  main.virtualStages = op.getVirtualStages();
  if (failed(checkPipelineSchedule(op, costs, &main.timeline, &main.model)))
    return signalPassFailure();
  int64_t p = op.getStages(), m = op.getMicrobatches();
  auto compare = [&](std::string name, ScheduleKind kind,
                     PipelineModel model) -> LogicalResult {
    Scenario s;
    s.name = std::move(name);
    s.kind = kind;
    s.virtualStages = model.virtualStages;
    model.actions.clear();
    for (int64_t stage = 0; stage < p; ++stage)
      model.actions.push_back(
          buildStageActions(kind, stage, p, model.virtualStages, m));
    std::string error;
    if (!simulatePipeline(model, s.timeline, error))
      return op.emitOpError() << "comparison schedule " << s.name
                              << " fails: " << error;
    s.model = std::move(model);
    scenarios.push_back(std::move(s));
    return success();
  };
  LogicalResult compared = success();
  if (main.model.forwardOnly) {
    // An evaluation: every schedule runs the same forwards; nothing to
    // compare.
  } else if (main.kind == ScheduleKind::OneFOneB)
    compared = compare("gpipe", ScheduleKind::GPipe, main.model);
  else if (main.kind == ScheduleKind::GPipe && m >= p)
    compared = compare("1f1b", ScheduleKind::OneFOneB, main.model);
  else if (main.kind == ScheduleKind::Interleaved)
    compared = compare("1f1b (one chunk per stage)", ScheduleKind::OneFOneB,
                       mergeChunks(main.model));
  if (failed(compared))
    return signalPassFailure();

  // 2. Print.
  int64_t v = op.getVirtualStages();
  if (!print) {
    // Only checked (above) and drawn (below).
  } else if (json) {
    llvm::json::Array chunks;
    for (auto [k, chunk] : llvm::enumerate(main.model.chunks)) {
      llvm::json::Array names;
      for (Attribute name : cast<ArrayAttr>(op.getUnits()[k]))
        names.push_back(cast<StringAttr>(name).str());
      chunks.push_back(llvm::json::Object{
          {"chunk", int64_t(k)},
          {"stage", int64_t(k) % p},
          {"units", std::move(names)},
          {"forward_seconds", chunk.forwardSeconds},
          {"backward_seconds", chunk.backwardSeconds},
          {"stash_bytes", chunk.stashBytes}});
    }
    llvm::json::Array list;
    for (const Scenario &s : scenarios) {
      llvm::json::Array stageList;
      for (auto [i, st] : llvm::enumerate(s.timeline.stages))
        stageList.push_back(llvm::json::Object{
            {"stage", int64_t(i)},
            {"busy_seconds", st.busySeconds},
            {"idle_seconds", st.idleSeconds},
            {"peak_in_flight", st.peakInFlight},
            {"peak_stash_bytes", st.peakStashBytes}});
      list.push_back(llvm::json::Object{
          {"schedule", s.name},
          {"virtual_stages", s.virtualStages},
          {"step_seconds", s.timeline.makespan},
          {"bubble_fraction", s.timeline.bubbleFraction()},
          {"formula_bubble_fraction",
           analyticBubbleFraction(s.kind, p, s.virtualStages, m)},
          {"bubble_overhead", s.timeline.bubbleOverhead()},
          {"stages", std::move(stageList)}});
    }
    llvm::json::Object root{{"schedule", op.getSchedule().str()},
                            {"stages", p},
                            {"virtual_stages", v},
                            {"microbatches", m},
                            {"forward_only", main.model.forwardOnly},
                            {"chunks", std::move(chunks)},
                            {"schedules", std::move(list)}};
    llvm::outs() << llvm::formatv("{0:2}", llvm::json::Value(std::move(root)))
                 << "\n";
  } else {
    raw_ostream &os = llvm::outs();
    os << "loom pipeline report: " << op.getSchedule() << ", " << p
       << " stage" << (p == 1 ? "" : "s");
    if (v > 1)
      os << " x " << v << " virtual";
    os << ", " << m << " micro-batch" << (m == 1 ? "" : "es")
       << (main.model.forwardOnly ? ", forward-only (evaluation)" : "") << "\n";
    for (auto [k, chunk] : llvm::enumerate(main.model.chunks)) {
      os << "  chunk " << k << " on stage " << int64_t(k) % p << ":";
      for (auto [i, name] : llvm::enumerate(cast<ArrayAttr>(op.getUnits()[k])))
        os << (i ? ", " : " ") << cast<StringAttr>(name).getValue();
      os << "; forward " << micros(chunk.forwardSeconds);
      if (!main.model.forwardOnly)
        os << ", backward " << micros(chunk.backwardSeconds) << ", stash "
           << chunk.stashBytes << " bytes";
      os << "\n";
    }
    for (const Scenario &s : scenarios) {
      os << "  schedule " << s.name << ": step "
         << micros(s.timeline.makespan) << ", bubble fraction "
         << fraction(s.timeline.bubbleFraction())
         << " (equal stages: " << fraction(analyticBubbleFraction(
                                     s.kind, p, s.virtualStages, m))
         << "), bubble overhead " << fraction(s.timeline.bubbleOverhead())
         << "\n";
      for (auto [i, st] : llvm::enumerate(s.timeline.stages)) {
        os << "    stage " << i << ": busy " << micros(st.busySeconds)
           << ", idle " << micros(st.idleSeconds);
        // Forward-only, a stage keeps no micro-batch between actions.
        if (!s.model.forwardOnly)
          os << ", in flight <= " << st.peakInFlight << " micro-batch"
             << (st.peakInFlight == 1 ? "" : "es") << " (" << st.peakStashBytes
             << " bytes)";
        os << "\n";
      }
    }
  }

  // 3. The drawing.
  if (!svg.empty()) {
    std::error_code ec;
    llvm::raw_fd_ostream file(svg, ec, llvm::sys::fs::OF_Text);
    if (ec) {
      mlir::emitError(module.getLoc()) << "loom-pipeline-report: cannot write '" << svg
                         << "': " << ec.message();
      return signalPassFailure();
    }
    std::string title = op.getSchedule().str() + ": " + std::to_string(p) +
                        " stages, " + std::to_string(m) + " micro-batches" +
                        (v > 1 ? ", " + std::to_string(v) + " chunks per stage"
                               : "") +
                        ", bubble " +
                        fraction(main.timeline.bubbleFraction());
    writeScheduleSvg(main.model, main.timeline, title, file);
  }
  markAllAnalysesPreserved();
}

} // namespace
