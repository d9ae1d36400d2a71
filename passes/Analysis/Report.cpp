//===- Report.cpp - Per-rank memory and traffic before launch ---*- C++ -*-===//
//
// `--loom-report`: the numbers a user checks before spending GPU hours —
// model state, peak memory and bytes sent per step — as measureRankFigures
// reads them off the partitioned IR (the figures the program emitter stores
// for loom-run to compare with what it counts).
//
//===----------------------------------------------------------------------===//

#include "passes/Analysis/BlockActivations.h"
#include "passes/Analysis/RankFigures.h"
#include "passes/Passes.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMREPORT
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

void printBlockTraffic(const RankFigures &fig, raw_ostream &os);

void printText(const RankFigures &fig, raw_ostream &os) {
  os << "loom report: " << (fig.mesh.empty() ? "single rank" : fig.mesh)
     << " (" << fig.ranks << " rank" << (fig.ranks == 1 ? "" : "s")
     << "), per rank:\n";
  int64_t state = fig.modelStateBytes();
  os << "  model state: " << state << " bytes";
  if (fig.params)
    os << llvm::formatv(" ({0:F2} bytes per local parameter)",
                        double(state) / double(fig.params));
  os << "\n";
  for (const char *role : {"param", "grad", "master", "adam_m", "adam_v"})
    if (auto it = fig.stateBytes.find(role); it != fig.stateBytes.end())
      os << "    " << role << ": " << it->second << "\n";
  if (fig.globalParams) {
    auto perPhi = [&](int64_t bytes) {
      return double(bytes) / double(fig.globalParams);
    };
    // Compiled in mixed precision (--loom-mixed-precision: fp32 masters),
    // the state is the ZeRO paper's figure itself; in fp32, what it would
    // be in mixed precision follows.
    bool mixed = fig.isMixedPrecision();
    std::string precision = "fp32";
    if (mixed)
      precision = fig.gradElementBytes() == 4
                      ? "bf16 mixed precision: 2-byte params, fp32 grads, "
                        "master weights and moments"
                      : "bf16 mixed precision: 2-byte params and grads; "
                        "fp32 master weights and moments";
    os << llvm::formatv("  model parameters: Phi = {0}; model state = "
                        "{1:F2} Phi bytes ({2})\n",
                        fig.globalParams, perPhi(state), precision);
    if (!mixed && fig.stateElements.count("adam_m"))
      os << llvm::formatv(
          "  in bf16 mixed precision: {0} bytes = {1:F2} Phi (2-byte params "
          "and grads; fp32 master weights and moments)\n",
          fig.mixedPrecisionStateBytes(),
          perPhi(fig.mixedPrecisionStateBytes()));
  }
  if (fig.arenaBytes >= 0)
    os << "  predicted peak: " << fig.arenaBytes << " bytes (planned arena)\n";
  else
    os << "  predicted peak: not planned (run --loom-plan-buffers first)\n";
  os << "  sent per step: " << fig.totalSentBytes() << " bytes\n";
  for (const char *kind : kCollectiveKinds)
    os << "    " << kind << ": " << fig.sentBytes.at(kind) << " bytes in "
       << fig.calls.at(kind) << " call" << (fig.calls.at(kind) == 1 ? "" : "s")
       << "\n";
  printBlockTraffic(fig, os);
}

/// The collectives of one transformer block's forward and backward
/// (`loom.block "h.N"` and "h.N.grad"): the first block's, and whether
/// every block sends the same. Megatron's tensor parallelism shows 2
/// all-reduces of b·s·h each way; sequence parallelism the same volume as
/// all-gathers plus reduce-scatters (and, in the backward, the re-gather
/// of each column-parallel linear's saved sequence shard).
struct BlockTraffic {
  std::string forward, backward;
  bool alike = true;
  size_t blocks = 0;
};

/// Where the step's traffic comes from, phase by phase (pipelined steps,
/// where ZeRO's gathers and reduce-scatters repeat with every micro-batch
/// action): "forward, 4 per step: all_gather[dp] 61952, ...".
void printPhases(const RankFigures &fig, raw_ostream &os) {
  os << "  sent per execution of each phase (bytes, by collective and "
        "axes):\n";
  // The step's order, not the alphabet's.
  static const char *const kOrder[] = {
      "microbatch", "forward", "backward", "last microbatch",
      "update",     "step",    "loss"};
  for (const char *name : kOrder) {
    auto it = fig.phases.find(name);
    if (it == fig.phases.end())
      continue;
    const RankFigures::PhaseTraffic &phase = it->second;
    os << "    " << name << ", ";
    if (phase.executions == 1)
      os << "once per step:";
    else
      os << phase.executions << " per step:";
    if (phase.bytesPerExecution.empty())
      os << " nothing";
    for (auto [i, entry] : llvm::enumerate(phase.bytesPerExecution))
      os << (i ? ", " : " ") << entry.first << " " << entry.second;
    os << "\n";
  }
}

llvm::json::Object toJson(const RankFigures &fig);

std::optional<BlockTraffic> blockTraffic(const RankFigures &fig) {
  BlockTraffic t;
  auto empty = std::map<std::string, int64_t>();
  auto of = [&](const std::string &label) -> const auto & {
    auto it = fig.blockSentBytes.find(label);
    return it == fig.blockSentBytes.end() ? empty : it->second;
  };
  for (const std::string &label : fig.blockLabels) {
    if (StringRef(label).ends_with(".grad"))
      continue;
    if (t.blocks++ == 0) {
      t.forward = label;
      t.backward = label + ".grad";
      continue;
    }
    t.alike &= of(label) == of(t.forward) &&
               of(label + ".grad") == of(t.backward);
  }
  if (!t.blocks)
    return std::nullopt;
  return t;
}

/// "all_gather 65536 bytes in 2 calls, reduce_scatter ..." for `label`.
std::string blockLine(const RankFigures &fig, const std::string &label) {
  std::string out;
  llvm::raw_string_ostream os(out);
  auto bytes = fig.blockSentBytes.find(label);
  if (bytes == fig.blockSentBytes.end())
    return "nothing";
  const auto &calls = fig.blockCalls.at(label);
  bool first = true;
  for (const char *kind : kCollectiveKinds)
    if (auto it = bytes->second.find(kind); it != bytes->second.end()) {
      int64_t n = calls.at(kind);
      os << (first ? "" : ", ") << kind << " " << it->second << " bytes in "
         << n << " call" << (n == 1 ? "" : "s");
      first = false;
    }
  return out;
}

void printBlockTraffic(const RankFigures &fig, raw_ostream &os) {
  std::optional<BlockTraffic> t = blockTraffic(fig);
  if (!t)
    return;
  os << "  sent per block (" << t->forward << " of " << t->blocks << ", "
     << (t->alike ? "every block alike" : "blocks differ") << "):\n"
     << "    forward: " << blockLine(fig, t->forward) << "\n"
     << "    backward: " << blockLine(fig, t->backward) << "\n";
}

llvm::json::Object toJson(const RankFigures &fig) {
  llvm::json::Object state, sent, calls;
  for (const auto &[role, bytes] : fig.stateBytes)
    state[role] = bytes;
  for (const auto &[kind, bytes] : fig.sentBytes)
    sent[kind] = bytes;
  for (const auto &[kind, n] : fig.calls)
    calls[kind] = n;
  llvm::json::Object phases;
  for (const auto &[name, phase] : fig.phases) {
    llvm::json::Object bytes;
    for (const auto &[key, n] : phase.bytesPerExecution)
      bytes[key] = n;
    phases[name] = llvm::json::Object{
        {"executions_per_step", phase.executions},
        {"sent_bytes_per_execution", std::move(bytes)}};
  }
  llvm::json::Object root{
      {"ranks", fig.ranks},
      {"mesh", fig.mesh},
      {"model_state_bytes", fig.modelStateBytes()},
      {"model_state_by_role", std::move(state)},
      {"local_params", fig.params},
      {"global_params", fig.globalParams},
      {"model_state_bytes_bf16_mixed", fig.mixedPrecisionStateBytes()},
      {"precision", fig.isMixedPrecision() ? "bf16" : "fp32"},
      {"grad_precision", fig.gradElementBytes() == 0   ? "none"
                         : fig.gradElementBytes() == 2 ? "bf16"
                                                       : "fp32"},
      {"predicted_peak_bytes", fig.arenaBytes},
      {"sent_bytes_per_step", std::move(sent)},
      {"collective_calls_per_step", std::move(calls)},
      {"sent_bytes_by_phase", std::move(phases)},
  };
  if (std::optional<BlockTraffic> t = blockTraffic(fig)) {
    auto kinds = [&](const std::string &label) {
      llvm::json::Object o;
      if (auto it = fig.blockSentBytes.find(label);
          it != fig.blockSentBytes.end())
        for (const auto &[kind, bytes] : it->second)
          o[kind] = bytes;
      return o;
    };
    root["sent_bytes_per_block"] = llvm::json::Object{
        {"block", t->forward},
        {"blocks", static_cast<int64_t>(t->blocks)},
        {"alike", t->alike},
        {"forward", kinds(t->forward)},
        {"backward", kinds(t->backward)}};
  }
  return root;
}

struct LoomReportPass : mlir::loom::impl::LoomReportBase<LoomReportPass> {
  using Base::Base;

  void runOnOperation() override {
    // A pipelined module: the ranks of each stage run its functions only.
    ModuleOp module = getOperation();
    auto schedules = module.getOps<PipelineScheduleOp>();
    if (schedules.empty()) {
      RankFigures fig = measureRankFigures(module);
      // Per transformer block: activations kept for the backward and the
      // tensor-parallel traffic, next to Korthikanti's / Megatron's figures.
      std::optional<BlockActivationFigures> block =
          measureBlockActivations(module);
      if (json) {
        llvm::json::Object root = toJson(fig);
        if (block)
          root["block_activations"] = blockActivationsToJson(*block);
        llvm::outs() << llvm::formatv("{0:2}",
                                      llvm::json::Value(std::move(root)))
                     << "\n";
      } else {
        printText(fig, llvm::outs());
        if (block)
          printBlockActivations(*block, llvm::outs());
      }
      markAllAnalysesPreserved();
      return;
    }
    // One figure set per pipeline stage (JSON: {"pipeline_stages": [...]}).
    int64_t stages = (*schedules.begin()).getStages();
    llvm::json::Array stageFigures;
    auto meshes = module.getOps<MeshOp>();
    MeshOp mesh = meshes.empty() ? MeshOp() : *meshes.begin();
    for (int64_t s = 0; s < stages; ++s) {
      SmallVector<func::FuncOp> funcs;
      for (auto func : module.getOps<func::FuncOp>())
        if (auto stage = func->getAttrOfType<DictionaryAttr>(
                LoomDialect::kPipelineAttr))
          if (auto index = stage.getAs<IntegerAttr>("stage");
              index && index.getInt() == s)
            funcs.push_back(func);
      RankFigures fig = measureRankFigures(funcs, mesh);
      // The runtime all-reduces the step's loss over the pipeline.
      fig.sentBytes["all_reduce"] += pipelineLossReduceBytes(stages);
      fig.calls["all_reduce"] += stages > 1 ? 1 : 0;
      if (stages > 1)
        fig.phases["loss"].bytesPerExecution["all_reduce[pp]"] +=
            pipelineLossReduceBytes(stages);
      if (json) {
        llvm::json::Object figures = toJson(fig);
        figures["stage"] = s;
        stageFigures.push_back(std::move(figures));
      } else {
        llvm::outs() << "pipeline stage " << s << ":\n";
        printText(fig, llvm::outs());
        printPhases(fig, llvm::outs());
      }
    }
    if (json)
      llvm::outs() << llvm::formatv(
                          "{0:2}",
                          llvm::json::Value(llvm::json::Object{
                              {"pipeline_stages", std::move(stageFigures)}}))
                   << "\n";
    markAllAnalysesPreserved();
  }
};

} // namespace
