//===- PlanReport.cpp - What `loom plan` prints -----------------*- C++ -*-===//
//
// The text report (table, families, rejections, the chosen plan worked out
// term by term, its placement) and the JSON of the best plan.
//
//===----------------------------------------------------------------------===//

#include "tools/loom/PlanReport.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <set>

using namespace loom::plan;

namespace {

std::string gb(double bytes) {
  return llvm::formatv("{0:f1} GB", bytes / kGB).str();
}

std::string shortPlan(const Plan &p) {
  std::string s = llvm::formatv("dp={0} tp={1} pp={2} zero={3} mb={4}", p.dp,
                                p.tp, p.pp, p.zero, p.microbatches)
                      .str();
  if (p.pp > 1) {
    s += std::string(" ") + name(p.schedule);
    if (p.virtualStages > 1)
      s += " v=" + std::to_string(p.virtualStages);
  }
  return s + " recompute=" + name(p.recompute);
}

std::string loomFlags(const Plan &p, const PlanOptions &opts) {
  std::string s = llvm::formatv("--mesh dp={0},tp={1},pp={2} --zero {3} "
                                "--microbatches {4}",
                                p.dp, p.tp, p.pp, p.zero, p.microbatches)
                      .str();
  if (p.pp > 1) {
    s += std::string(" --schedule ") + name(p.schedule);
    if (p.virtualStages > 1)
      s += " --virtual-stages " + std::to_string(p.virtualStages);
  }
  s += std::string(" --recompute ") + name(p.recompute);
  if (p.tp > 1 && opts.work.sequenceParallel)
    s += " --sequence-parallel";
  s += std::string(" --precision ") + name(opts.cluster.precision);
  if (opts.cluster.fp32Gradients)
    s += " --grad-precision fp32";
  return s;
}

std::string memoryBreakdown(const Candidate &c) {
  return "model state " + gb(c.modelStateBytes) + " + activations " +
         gb(c.activationBytes) + " + workspace " + gb(c.otherBytes);
}

void printTable(llvm::raw_ostream &os, const SearchResult &result,
                int64_t top) {
  os << llvm::formatv("{0,3} {1,4} {2,3} {3,3} {4,4} {5,6}  {6,-11} {7,2} "
                      "{8,-9} {9,9} {10,6} {11,8} {12,7} {13,8} {14,8} "
                      "{15,8}\n",
                      "#", "dp", "tp", "pp", "zero", "mb", "schedule", "v",
                      "recompute", "step_s", "MFU", "peak_GB", "bubble",
                      "tp_GB", "dp_GB", "pp_GB");
  int64_t shown = std::min<int64_t>(top, result.fitting.size());
  for (int64_t i = 0; i < shown; ++i) {
    const Candidate &c = result.fitting[i];
    const Plan &p = c.plan;
    bool pipe = p.pp > 1;
    os << llvm::formatv(
        "{0,3} {1,4} {2,3} {3,3} {4,4} {5,6}  {6,-11} {7,2} {8,-9} {9,9} "
        "{10,6} {11,8} {12,7} {13,8} {14,8} {15,8}\n",
        i + 1, p.dp, p.tp, p.pp, p.zero, p.microbatches,
        pipe ? name(p.schedule) : "-",
        pipe ? std::to_string(p.virtualStages) : std::string("-"),
        name(p.recompute), llvm::formatv("{0:f3}", c.stepS).str(),
        llvm::formatv("{0:f1}%", 100 * c.mfu).str(),
        llvm::formatv("{0:f1}", c.peakBytes / kGB).str(),
        llvm::formatv("{0:f2}%", 100 * c.bubble).str(),
        llvm::formatv("{0:f2}", c.tpBytes / kGB).str(),
        llvm::formatv("{0:f2}", c.dpBytes / kGB).str(),
        llvm::formatv("{0:f2}", c.ppBytes / kGB).str());
  }
}

/// The fastest plan that fits per (zero, tp) family, as a matrix.
void printFamilies(llvm::raw_ostream &os, const SearchResult &result) {
  std::set<int64_t> tps;
  std::set<int> zeros;
  for (const auto &[key, family] : result.families) {
    zeros.insert(key.first);
    tps.insert(key.second);
  }
  os << "fastest predicted step per family (s; \"-\": nothing fits):\n";
  os << "        ";
  for (int64_t tp : tps)
    os << llvm::formatv("{0,10}", "tp=" + std::to_string(tp));
  os << "\n";
  for (int zero : zeros) {
    os << llvm::formatv("  zero={0}", zero);
    for (int64_t tp : tps) {
      auto it = result.families.find({zero, tp});
      if (it == result.families.end() || !it->second.fastest)
        os << llvm::formatv("{0,10}", "-");
      else
        os << llvm::formatv("{0,10:f3}", it->second.fastest->stepS);
    }
    os << "\n";
  }
}

} // namespace

void loom::plan::printRejected(llvm::raw_ostream &os,
                               const SearchResult &result,
                               const PlanOptions &opts) {
  bool any = false;
  for (const auto &[key, family] : result.families) {
    if (family.fits || !family.smallest)
      continue;
    if (!any)
      os << "rejected families (no plan in them fits in "
         << gb(opts.cluster.memoryBytes) << " per GPU):\n";
    any = true;
    const Candidate &c = *family.smallest;
    os << "  zero=" << key.first << ", tp=" << key.second << ": "
       << family.evaluated << " plans, the smallest needs " << gb(c.peakBytes)
       << " (" << shortPlan(c.plan) << "): " << memoryBreakdown(c) << "\n";
  }
  if (!any)
    os << "rejected families: none (every (zero, tp) family has a plan that "
          "fits)\n";
  if (!result.excluded.empty()) {
    os << "excluded mesh choices:\n";
    for (const std::string &why : result.excluded)
      os << "  " << why << "\n";
  }
}

namespace {

void printPlacement(llvm::raw_ostream &os, const Plan &p,
                    const Cluster &cluster) {
  printPlacementGroups(os, Placement{p.dp, p.tp, p.pp, cluster.gpusPerNode});
}

void printExplanation(llvm::raw_ostream &os, const ModelShape &model,
                      const PlanOptions &opts, const SearchResult &result) {
  const Candidate &best = result.fitting.front();
  const Plan &p = best.plan;
  const Cluster &cluster = opts.cluster;
  PlanCost cost = evaluatePlan(model, cluster, opts.work, p);
  const StageMemory &st = cost.stages[cost.peakStage];
  bool sp = opts.work.sequenceParallel && p.tp > 1;

  os << "chosen plan: " << loomFlags(p, opts) << "\n";
  os << "  why: the fastest predicted step of the " << result.fitting.size()
     << " plans that fit";
  if (result.fitting.size() > 1) {
    const Candidate &next = result.fitting[1];
    if (next.stepS > best.stepS)
      os << llvm::formatv("; the runner-up ({0}) is {1:f2}% slower",
                          shortPlan(next.plan),
                          100 * (next.stepS / best.stepS - 1));
    else
      os << llvm::formatv("; the runner-up ({0}) is as fast but sends "
                          "{1:f2} GB per GPU per step instead of {2:f2} GB",
                          shortPlan(next.plan),
                          (next.tpBytes + next.dpBytes + next.ppBytes) / kGB,
                          (best.tpBytes + best.dpBytes + best.ppBytes) / kGB);
  }
  if (result.fastest && result.fastest->peakBytes > cluster.memoryBytes)
    os << llvm::formatv("; the fastest plan ignoring memory ({0}, {1:f3} s) "
                        "needs {2} > {3}",
                        shortPlan(result.fastest->plan), result.fastest->stepS,
                        gb(result.fastest->peakBytes), gb(cluster.memoryBytes));
  os << "\n";

  // Memory.
  os << "  memory per GPU on stage " << cost.peakStage << " (the peak of "
     << p.pp << " stage" << (p.pp > 1 ? "s" : "") << "):\n";
  os << llvm::formatv("    params       {0} layers x {1}/tp {2}", st.layers,
                      model.paramsPerBlock, p.tp);
  if (cost.peakStage == 0)
    os << " + wte + wpe";
  if (cost.peakStage == p.pp - 1)
    os << (p.pp > 1 ? " + wte (tied) + ln_f" : " + ln_f");
  os << llvm::formatv(" = {0} per GPU as Loom shards them\n",
                      (int64_t)std::llround(st.paramsPerGpu));
  const double perParam =
      modelStateBytesPerParam(p.zero, p.dp, cluster.stateBytes());
  os << llvm::formatv(
      "    model state  {0} (ZeRO-{1}, N = dp = {2}, {3}) = "
      "{4:f2} x Φ_stage/t ({7} params) = {5} bytes = {6} by the formula\n",
      modelStateFormula(p.zero, cluster.stateBytes()),
      p.zero, p.dp,
      cluster.precision == Precision::FP32 ? "fp32"
      : cluster.fp32Gradients              ? "bf16 mixed precision, fp32 grads"
                                           : "bf16 mixed precision",
      perParam, (int64_t)std::llround(st.formulaModelStateBytes),
      gb(st.formulaModelStateBytes),
      (int64_t)std::llround(st.formulaModelStateBytes / perParam));
  auto signedBytes = [](double bytes) {
    return llvm::formatv("{0}{1}", bytes < 0 ? "-" : "+",
                         (int64_t)std::llround(std::fabs(bytes)))
        .str();
  };
  std::string parts;
  auto part = [&](double bytes, const std::string &why) {
    if (std::fabs(bytes) < 0.5)
      return;
    parts += (parts.empty() ? ": " : ", ") + signedBytes(bytes) + " " + why;
  };
  part(st.vocabPaddingBytes,
       llvm::formatv("for the vocabulary padded to {0} rows per GPU",
                     (int64_t)cost.vocabRowsPerGpu)
           .str());
  part(st.tpReplicatedBytes,
       "for the layer norms, biases and wpe tp keeps whole");
  part(st.dpWholeBytes, "for the tensors ZeRO cannot split over dp");
  if (parts.empty())
    os << llvm::formatv("                 Loom's program: {0} bytes, the "
                        "formula's\n",
                        (int64_t)std::llround(st.modelStateBytes));
  else
    os << llvm::formatv(
        "                 Loom's program: {0} bytes = {1} ({2:f3}% off the "
        "formula{3})\n",
        (int64_t)std::llround(st.modelStateBytes), gb(st.modelStateBytes),
        st.formulaModelStateBytes > 0
            ? 100 * (st.modelStateBytes / st.formulaModelStateBytes - 1)
            : 0.0,
        parts);
  os << llvm::formatv(
      "    activations  {0} = {1} bytes per layer per "
      "micro-batch as Loom keeps them (s={2} b={3} h={4} a={5} t={6}{7}{8})\n",
      loomActivationFormula(p.tp, opts.work.sequenceParallel, p.recompute),
      (int64_t)std::llround(cost.activationBytesPerLayer), opts.work.seq,
      (int64_t)cost.microbatchRows, model.hidden, model.heads, p.tp,
      sp ? ", sequence parallel" : "",
      cluster.precision == Precision::FP32 ? ", x2 in fp32" : "");
  os << llvm::formatv(
      "                 Korthikanti et al.'s {0} = {1} bytes for Megatron: "
      "Loom has no dropout masks and recomputes the attention scores{2}\n",
      activationFormula(p.tp, opts.work.sequenceParallel, p.recompute),
      (int64_t)std::llround(cost.formulaActivationBytesPerLayer),
      p.recompute == Recompute::Selective ? " and (selective) the MLP's GELU"
                                          : "");
  os << llvm::formatv("                 x {0} layers x {1:f2} micro-batches "
                      "in flight{2} = {3}\n",
                      st.layers, microbatchesInFlight(p, cost.peakStage),
                      cost.peakStage == p.pp - 1
                          ? " + the LM head's logits and their gradient"
                          : "",
                      gb(st.activationBytes));
  if (st.gatheredBytes > 0)
    os << "    gathered     ZeRO-3: 3 blocks of parameters/gradients "
          "unsharded (current, prefetched, gradients) = "
       << gb(st.gatheredBytes) << "\n";
  os << "    workspace    " << gb(kWorkspaceBytes) << " + "
     << llvm::formatv("{0:f0}", 100 * kFragmentation)
     << "% fragmentation = " << gb(st.workspaceBytes) << "\n";
  os << "    peak         " << gb(cost.peakBytes) << " of "
     << gb(cluster.memoryBytes) << "\n";

  // Time.
  double micro = cost.microbatchComputeS + cost.microbatchTpS +
                 cost.microbatchZeroS + cost.microbatchP2pS;
  double slots =
      double(p.microbatches) +
      double(p.pp - 1) / double(std::max<int64_t>(p.virtualStages, 1));
  os << "  time per step (slowest stage " << cost.slowestStage << "):\n";
  os << llvm::formatv("    micro-batch  compute {0:f2} ms (at {1:f1}% of "
                      "peak) + TP {2:f2} ms + ZeRO {3:f2} ms (for {6:f2} ms "
                      "of traffic) + p2p {4:f2} ms = {5:f2} ms\n",
                      1e3 * cost.microbatchComputeS,
                      100 * cost.computeEfficiency, 1e3 * cost.microbatchTpS,
                      1e3 * cost.microbatchZeroS, 1e3 * cost.microbatchP2pS,
                      1e3 * micro, 1e3 * cost.microbatchZeroTotalS);
  if (p.tp > 1) {
    const StageTraffic &tr = cost.stageTraffic[cost.slowestStage];
    os << llvm::formatv(
        "    tp traffic   {0} bytes per GPU per step on stage {1}; Megatron's "
        "formula (4 all-reduces of b·s·h per layer{2}) gives {3}: {4:f2}% "
        "more for {5}\n",
        (int64_t)std::llround(tr.tp), cost.slowestStage,
        sp ? ", sequence parallelism the same volume" : "",
        (int64_t)std::llround(tr.formulaTp),
        tr.formulaTp > 0 ? 100 * (tr.tp / tr.formulaTp - 1) : 0.0,
        sp ? "the backward's re-gather of each column-parallel linear's "
             "sequence shard (2 all-gathers per layer) and the embedding / "
             "LM head / cross-entropy collectives"
           : "the embedding / LM head / cross-entropy collectives");
  }
  os << llvm::formatv("    pipeline     x (m + (p-1)/v) = {0:f2} slots = "
                      "{1:f3} s, bubble {2:f2}%\n",
                      slots, micro * slots, 100 * cost.bubble);
  os << llvm::formatv("    dp           + {0:f3} s once per step; {1:f3} s "
                      "of DP traffic in all (ring over {2} rank{3}, {4})\n",
                      cost.dpExposedS, cost.dpTotalS, p.dp, p.dp > 1 ? "s" : "",
                      cost.dpCrossesNodes ? "crosses nodes" : "inside a node");
  if (!cost.dpExposedReason.empty())
    os << llvm::formatv("                 {0:f3} s exposed because {1}\n",
                        cost.dpExposedS, cost.dpExposedReason);
  if (p.pp > 1)
    os << llvm::formatv("    embedding    {0:f3} s (tied wte gradient "
                        "all-reduced between the first and last stage)\n",
                        cost.embeddingSyncS);
  os << llvm::formatv("    step         {0:f3} s; MFU = {1:e} model FLOPs / "
                      "({0:f3} s x {2} GPUs x {3:f0} TFLOP/s) = {4:f1}%\n",
                      cost.stepS, cost.modelFlops, cluster.gpus,
                      cluster.peakFlops / 1e12, 100 * cost.mfu);
}

} // namespace

void loom::plan::printPlanJson(llvm::raw_ostream &os, const ModelShape &model,
                               const PlanOptions &opts,
                               const SearchResult &result,
                               double importSeconds) {
  const Candidate &best = result.fitting.front();
  const Plan &p = best.plan;
  PlanCost cost = evaluatePlan(model, opts.cluster, opts.work, p);
  const StageMemory &st = cost.stages[cost.peakStage];
  auto round = [](double v) { return (int64_t)std::llround(v); };
  llvm::json::Object root{
      {"mesh", llvm::json::Object{{"dp", p.dp}, {"tp", p.tp}, {"pp", p.pp}}},
      {"zero", p.zero},
      {"microbatches", p.microbatches},
      {"schedule", name(p.schedule)},
      {"virtual_stages", p.virtualStages},
      {"recompute", name(p.recompute)},
      {"sequence_parallel", p.tp > 1 && opts.work.sequenceParallel},
      {"precision", name(opts.cluster.precision)},
      {"grad_precision",
       opts.cluster.gradientBytes() == 4.0 ? "fp32" : "bf16"},
      {"predicted_peak_bytes_per_gpu", round(cost.peakBytes)},
      {"predicted_step_s", cost.stepS},
      {"predicted_mfu", cost.mfu},
      {"predicted_bubble", cost.bubble},
      {"predicted_dp_exposed_s", cost.dpExposedS},
      {"predicted_dp_traffic_s", cost.dpTotalS},
      {"dp_exposed_because", cost.dpExposedReason},
      {"traffic_bytes_per_gpu_per_step",
       llvm::json::Object{{"tp", round(cost.tpBytes)},
                          {"dp", round(cost.dpBytes)},
                          {"pp", round(cost.ppBytes)}}},
      {"crosses_nodes",
       llvm::json::Object{{"tp", cost.tpCrossesNodes},
                          {"dp", cost.dpCrossesNodes},
                          {"pp", cost.ppCrossesNodes}}},
      {"memory",
       llvm::json::Object{
           {"peak_stage", cost.peakStage},
           {"params_per_gpu", round(st.paramsPerGpu)},
           {"model_state_formula",
            modelStateFormula(p.zero, opts.cluster.stateBytes())},
           {"model_state_bytes", round(st.modelStateBytes)},
           {"formula_model_state_bytes", round(st.formulaModelStateBytes)},
           {"vocab_rows_per_gpu", round(cost.vocabRowsPerGpu)},
           {"activation_formula",
            activationFormula(p.tp, opts.work.sequenceParallel, p.recompute)},
           {"activation_bytes_per_layer",
            round(cost.formulaActivationBytesPerLayer)},
           {"loom_activation_formula",
            loomActivationFormula(p.tp, opts.work.sequenceParallel,
                                  p.recompute)},
           {"loom_activation_bytes_per_layer",
            round(cost.activationBytesPerLayer)},
           {"activation_bytes", round(st.activationBytes)},
           {"gathered_bytes", round(st.gatheredBytes)},
           {"workspace_bytes", round(st.workspaceBytes)},
           {"stages",
            [&] {
              llvm::json::Array a;
              for (size_t i = 0; i < cost.stages.size(); ++i) {
                const StageMemory &s = cost.stages[i];
                a.push_back(llvm::json::Object{
                    {"layers", s.layers},
                    {"params_per_gpu", round(s.paramsPerGpu)},
                    {"microbatches_in_flight", microbatchesInFlight(p, i)},
                    {"model_state_bytes", round(s.modelStateBytes)},
                    {"formula_model_state_bytes",
                     round(s.formulaModelStateBytes)},
                    {"model_state_vs_formula",
                     llvm::json::Object{
                         {"vocab_padding", round(s.vocabPaddingBytes)},
                         {"tp_replicated", round(s.tpReplicatedBytes)},
                         {"dp_whole", round(s.dpWholeBytes)}}},
                    {"traffic_bytes_per_step",
                     llvm::json::Object{
                         {"tp", round(cost.stageTraffic[i].tp)},
                         {"dp", round(cost.stageTraffic[i].dp)},
                         {"pp", round(cost.stageTraffic[i].pp)},
                         {"tp_formula",
                          round(cost.stageTraffic[i].formulaTp)}}},
                    {"activation_bytes", round(s.activationBytes)},
                    {"gathered_bytes", round(s.gatheredBytes)},
                    {"workspace_bytes", round(s.workspaceBytes)},
                    {"peak_bytes", round(s.peakBytes())}});
              }
              return a;
            }()}}},
      {"rejected_families",
       [&] {
         llvm::json::Array a;
         for (const auto &[key, family] : result.families)
           if (!family.fits && family.smallest)
             a.push_back(llvm::json::Object{
                 {"zero", key.first},
                 {"tp", key.second},
                 {"plans", family.evaluated},
                 {"smallest_peak_bytes", round(family.smallest->peakBytes)},
                 {"smallest_plan", shortPlan(family.smallest->plan)}});
         return a;
       }()},
      {"loom_flags", loomFlags(p, opts)},
      {"model", llvm::json::Object{{"params", model.params},
                                   {"params_per_block", model.paramsPerBlock},
                                   {"layers", model.layers}}},
      {"search", llvm::json::Object{{"plans", result.evaluated},
                                    {"fitting", (int64_t)result.fitting.size()},
                                    {"seconds", result.seconds},
                                    {"import_seconds", importSeconds}}},
  };
  os << llvm::formatv("{0:2}", llvm::json::Value(std::move(root))) << "\n";
}

std::string loom::plan::noPlanFitsMessage(const SearchResult &result,
                                          const PlanOptions &opts) {
  const Candidate &c = *result.smallest;
  return llvm::formatv(
             "no plan fits in {0} per GPU: the smallest predicted peak is {1} "
             "({2}: {3}); give --gpu-mem-gb {4:f1} or more, or more --gpus",
             gb(opts.cluster.memoryBytes), gb(c.peakBytes), shortPlan(c.plan),
             memoryBreakdown(c), std::ceil(c.peakBytes / kGB * 10) / 10)
      .str();
}

void loom::plan::printPlanReport(llvm::raw_ostream &os, const ModelShape &model,
                                 const PlanOptions &opts,
                                 const SearchResult &result,
                                 double importSeconds) {
  const Cluster &cluster = opts.cluster;
  int64_t nodes =
      (cluster.gpus + cluster.gpusPerNode - 1) / cluster.gpusPerNode;
  os << llvm::formatv("loom plan: {0}: n_layer={1} n_head={2} n_embd={3} "
                      "vocab_size={4}; Phi = {5} ({6} per block)\n",
                      opts.config, model.layers, model.heads, model.hidden,
                      model.vocab, model.params, model.paramsPerBlock);
  os << llvm::formatv("  cluster: {0} GPU{9} = {1} node{2} x {3}, {4} each, "
                      "{5:f0} TFLOP/s peak ({6}), intra-node {7:f0} GB/s, "
                      "inter-node {8:f0} GB/s\n",
                      cluster.gpus, nodes, nodes > 1 ? "s" : "",
                      std::min(cluster.gpus, cluster.gpusPerNode),
                      gb(cluster.memoryBytes), cluster.peakFlops / 1e12,
                      name(cluster.precision), cluster.intraNodeBandwidth / 1e9,
                      cluster.interNodeBandwidth / 1e9,
                      cluster.gpus > 1 ? "s" : "");
  double tokens = double(opts.work.batch) * double(opts.work.seq);
  os << llvm::formatv("  step: batch {0} x seq {1} = {2} tokens, {3:e} model "
                      "FLOPs (6N + 6LCT per token)\n",
                      opts.work.batch, opts.work.seq, (int64_t)tokens,
                      modelFlopsPerToken(model, opts.work.seq) * tokens);
  os << llvm::formatv("search: {0} plans in {1:f1} ms (model import {2:f1} "
                      "ms); {3} fit in {4} per GPU\n\n",
                      result.evaluated, 1e3 * result.seconds,
                      1e3 * importSeconds, result.fitting.size(),
                      gb(cluster.memoryBytes));
  os << "top " << std::min<int64_t>(opts.top, result.fitting.size()) << " of "
     << result.fitting.size()
     << " plans that fit (predicted; peak and traffic per GPU per step):\n";
  printTable(os, result, opts.top);
  os << "\n";
  printFamilies(os, result);
  printRejected(os, result, opts);
  os << "\n";
  printExplanation(os, model, opts, result);
  os << "\n";
  printPlacement(os, result.fitting.front().plan, cluster);
}
