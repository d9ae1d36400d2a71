//===- PlanModel.cpp - Analytic cost model of a parallel plan ---*- C++ -*-===//
//
// The formulas and the evaluation of one plan; see PlanModel.h for the
// sources and the assumptions.
//
//===----------------------------------------------------------------------===//

#include "tools/loom/PlanModel.h"
#include "tools/loom/PlanState.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>

using namespace loom::plan;

const char *loom::plan::name(Precision p) {
  return p == Precision::BF16 ? "bf16" : "fp32";
}

const char *loom::plan::name(Schedule s) {
  switch (s) {
  case Schedule::GPipe:
    return "gpipe";
  case Schedule::OneFOneB:
    return "1f1b";
  case Schedule::Interleaved:
    return "interleaved";
  }
  return "?";
}

const char *loom::plan::name(Recompute r) {
  switch (r) {
  case Recompute::None:
    return "none";
  case Recompute::Selective:
    return "selective";
  case Recompute::Full:
    return "full";
  }
  return "?";
}

//===----------------------------------------------------------------------===//
// Formulas
//===----------------------------------------------------------------------===//

double loom::plan::modelStateBytesPerParam(int zero, int64_t dp,
                                           StateElementBytes bytes) {
  const double n = double(dp), p = bytes.param, g = bytes.grad,
               k = bytes.optimizer;
  switch (zero) {
  case 0:
    return p + g + k;
  case 1:
    return p + g + k / n;
  case 2:
    return p + (g + k) / n;
  default:
    return (p + g + k) / n;
  }
}

std::string loom::plan::modelStateFormula(int zero, StateElementBytes bytes) {
  // The byte counts are whole numbers.
  auto phi = [](double x) {
    return llvm::formatv("{0}Φ", std::llround(x)).str();
  };
  const double p = bytes.param, g = bytes.grad, k = bytes.optimizer;
  switch (zero) {
  case 0:
    return phi(p + g + k);
  case 1:
    return phi(p + g) + "+" + phi(k) + "/N";
  case 2:
    return phi(p) + "+" + phi(g + k) + "/N";
  default:
    return phi(p + g + k) + "/N";
  }
}

double loom::plan::activationBytesPerLayer(int64_t s, int64_t b, int64_t h,
                                           int64_t a, int64_t t,
                                           bool sequenceParallel,
                                           Recompute recompute,
                                           Precision precision) {
  double sbh = double(s) * double(b) * double(h);
  double scale = precision == Precision::FP32 ? 2.0 : 1.0;
  bool sp = sequenceParallel && t > 1;
  if (recompute == Recompute::Full) {
    // Only the layer's input is kept; with SP it is sharded over tp.
    return scale * 2.0 * sbh / (sp ? double(t) : 1.0);
  }
  // The attention scores, softmax output and its dropout mask: 5as/h.
  double scores = recompute == Recompute::Selective
                      ? 0.0
                      : 5.0 * double(a) * double(s) / double(h);
  double perLayer;
  if (t == 1)
    perLayer = sbh * (34.0 + scores);
  else if (sp)
    perLayer = sbh * (34.0 + scores) / double(t);
  else
    perLayer = sbh * (10.0 + 24.0 / double(t) + scores / double(t));
  return scale * perLayer;
}

std::string loom::plan::activationFormula(int64_t t, bool sequenceParallel,
                                          Recompute recompute) {
  bool sp = sequenceParallel && t > 1;
  switch (recompute) {
  case Recompute::Full:
    return sp ? "2sbh/t" : "2sbh";
  case Recompute::Selective:
    return t == 1 ? "34sbh" : sp ? "34sbh/t" : "sbh(10+24/t)";
  case Recompute::None:
    break;
  }
  return t == 1 ? "sbh(34+5as/h)"
         : sp   ? "sbh(34+5as/h)/t"
                : "sbh(10+24/t+5as/(ht))";
}

double loom::plan::loomActivationBytesPerLayer(int64_t s, int64_t b, int64_t h,
                                               int64_t a, int64_t t,
                                               bool sequenceParallel,
                                               Recompute recompute,
                                               Precision precision) {
  double sbh = double(s) * double(b) * double(h);
  double elementBytes = precision == Precision::FP32 ? 4.0 : 2.0;
  double tp = double(std::max<int64_t>(t, 1));
  bool sp = sequenceParallel && t > 1;
  double residual = sp ? sbh / tp : sbh; // one residual-stream value
  if (recompute == Recompute::Full)
    return elementBytes * residual; // the block input
  // q|k|v 3h, attention output h, MLP hidden 4h twice (c_fc, GELU; the
  // GELU recomputed in the backward with selective): split over tp; the
  // block input, ln_1 and ln_2 inputs, the attention residual: the
  // residual stream. Attention's fp32 log-sum-exp [b, a, s] over tp (whole
  // heads).
  const double split = recompute == Recompute::Selective ? 8.0 : 12.0;
  const double lse = 4.0 * double(s) * double(b) * double(a) / tp;
  return elementBytes * (split * sbh / tp + 4.0 * residual) + lse;
}

std::string loom::plan::loomActivationFormula(int64_t t, bool sequenceParallel,
                                              Recompute recompute) {
  bool sp = sequenceParallel && t > 1;
  if (recompute == Recompute::Full)
    return sp ? "2sbh/t" : "2sbh";
  if (recompute == Recompute::Selective)
    return t == 1 ? "24sbh+4sab" : sp ? "(24sbh+4sab)/t" : "sbh(8+16/t)+4sab/t";
  return t == 1 ? "32sbh+4sab" : sp ? "(32sbh+4sab)/t" : "sbh(8+24/t)+4sab/t";
}

double loom::plan::ringAllReduceBytes(double bytes, int64_t n) {
  return n <= 1 ? 0.0 : 2.0 * double(n - 1) / double(n) * bytes;
}

double loom::plan::ringGatherBytes(double bytes, int64_t n) {
  return n <= 1 ? 0.0 : double(n - 1) / double(n) * bytes;
}

double loom::plan::bubbleFraction(int64_t p, int64_t m, int64_t v) {
  double idle = double(p - 1) / double(std::max<int64_t>(v, 1));
  return idle / (double(m) + idle);
}

double loom::plan::microbatchesInFlight(const Plan &plan, int64_t stage) {
  int64_t p = plan.pp, m = plan.microbatches;
  if (p == 1)
    return 1; // gradient accumulation: one micro-batch at a time
  switch (plan.schedule) {
  case Schedule::GPipe:
    return double(m);
  case Schedule::OneFOneB:
    return double(std::min(m, p - stage));
  case Schedule::Interleaved: {
    // Megatron's warm-up: 2(p-i-1) + (v-1)p chunks, plus the one in the
    // steady state, each 1/v of the stage's layers.
    int64_t v = plan.virtualStages;
    int64_t chunks = std::min(m * v, 2 * (p - stage - 1) + (v - 1) * p + 1);
    return double(chunks) / double(v);
  }
  }
  return double(m);
}

double loom::plan::modelFlopsPerToken(const ModelShape &model, int64_t seq) {
  return 6.0 * double(model.params) +
         6.0 * double(model.layers) * double(model.hidden) * double(seq);
}

/// FLOPs per token of one layer (6·Φ_block + 6·C·T) and of everything
/// outside the layers (6·(Φ - L·Φ_block): the LM head through the tied
/// wte, wpe and ln_f, as llm.c counts them).
static double layerFlopsPerToken(const ModelShape &model, int64_t seq) {
  return 6.0 * double(model.paramsPerBlock) +
         6.0 * double(model.hidden) * double(seq);
}

static double headFlopsPerToken(const ModelShape &model) {
  return std::max(
      0.0, 6.0 * double(model.params - model.layers * model.paramsPerBlock));
}

/// Bytes one GPU of a stage sends over tp per micro-batch (ring-counted):
/// per layer Megatron's 4 all-reduces of b·s·h (`message` bytes; full
/// recomputation re-runs the forward's 2), with sequence parallelism 4
/// reduce-scatters and 6 all-gathers of it (the backward re-gathers each
/// column-parallel linear's saved sequence shard; full recomputation adds
/// the volume of 2 more, as measured on the compiled step). The first
/// stage's vocab-parallel embedding all-reduces its output (SP: reduce-scatters
/// it, and gathers the sequence of its gradient for wte and of wpe's
/// `positionBytes` gradient, already widened with fp32 gradients); the last stage's LM head all-reduces its input
/// gradient (SP: gathers its input, reduce-scatters the gradient) and the
/// vocab-parallel cross-entropy all-reduces 3 fp32 values per token (max, sum
/// of exponentials, target logit).
static double tensorParallelBytes(const Plan &plan, bool sp, int64_t layers,
                                  bool first, bool last, double message,
                                  double positionBytes, double tokens) {
  const int64_t t = plan.tp;
  if (t <= 1)
    return 0;
  bool full = plan.recompute == Recompute::Full;
  double ar = ringAllReduceBytes(message, t), ag = ringGatherBytes(message, t);
  double bytes;
  if (sp) {
    bytes = double(layers) * (4 + 6 + (full ? 2 : 0)) * ag;
    if (first)
      bytes += 2 * ag + ringGatherBytes(positionBytes, t);
    if (last)
      bytes += 2 * ag;
  } else {
    bytes = double(layers) * (full ? 6 : 4) * ar;
    if (first)
      bytes += ar;
    if (last)
      bytes += ar;
  }
  if (last)
    bytes += 3 * ringAllReduceBytes(4.0 * tokens, t);
  return bytes;
}

/// What `comm` seconds of communication overlapping `window` seconds of
/// compute add to the step: the part that does not fit the window, plus
/// kOverlapCost of the part that does.
static double overlappedTime(double comm, double window) {
  double exposed = std::max(0.0, comm - window);
  return exposed + kOverlapCost * (comm - exposed);
}

std::vector<int64_t> loom::plan::stageLayers(const ModelShape &model,
                                             int64_t pp, int64_t seq,
                                             int64_t virtualStages,
                                             Recompute recompute) {
  int64_t L = model.layers;
  if (pp <= 1)
    return {L};
  if (virtualStages > 1) {
    std::vector<int64_t> chunks =
        stageLayers(model, pp * virtualStages, seq, 1, recompute);
    std::vector<int64_t> layers(pp, 0);
    for (size_t k = 0; k < chunks.size(); ++k)
      layers[k % pp] += chunks[k];
    return layers;
  }
  // 1. How many layers the last stage (with the LM head) takes: the count
  //    that minimises the largest stage; none when the head alone weighs
  //    as much as a stage of layers (GPT-2 124M over pp=4: the compiler's
  //    cut, 4/4/4/head, too).
  double layer = layerFlopsPerToken(model, seq) *
                 (recompute == Recompute::Full ? 4.0 / 3.0 : 1.0);
  double head = headFlopsPerToken(model);
  // (A strict comparison, not one scaled by bestMax: INFINITY * 1e-9 makes
  // INFINITY - INFINITY, NaN, and the first candidate would never win.)
  int64_t bestLast = 0;
  double bestMax = INFINITY;
  for (int64_t last = 0; last <= L - (pp - 1); ++last) {
    int64_t rest = L - last;
    int64_t front = (rest + pp - 2) / (pp - 1);
    double largest =
        std::max(double(front) * layer, double(last) * layer + head);
    if (last == 0 || largest < bestMax * (1 - 1e-9)) {
      bestMax = largest;
      bestLast = last;
    }
  }
  // 2. The rest spread evenly over the other stages, extras last (the
  //    first stage also runs the embedding), as the compiler cuts them.
  std::vector<int64_t> layers(pp);
  int64_t rest = L - bestLast;
  for (int64_t i = 0; i < pp - 1; ++i)
    layers[i] = rest / (pp - 1) + (pp - 1 - i <= rest % (pp - 1) ? 1 : 0);
  layers[pp - 1] = bestLast;
  return layers;
}

//===----------------------------------------------------------------------===//
// Evaluation
//===----------------------------------------------------------------------===//

std::string loom::plan::checkPlan(const ModelShape &model,
                                  const Cluster &cluster, const Workload &work,
                                  const Plan &plan) {
  auto str = [](int64_t v) { return std::to_string(v); };
  if (plan.dp < 1 || plan.tp < 1 || plan.pp < 1)
    return "mesh sizes must be positive";
  if (plan.dp * plan.tp * plan.pp != cluster.gpus)
    return "dp x tp x pp = " + str(plan.dp * plan.tp * plan.pp) +
           " is not --gpus " + str(cluster.gpus);
  if (plan.tp > cluster.gpusPerNode)
    return "tp " + str(plan.tp) + " is more than --gpus-per-node " +
           str(cluster.gpusPerNode) + " (a TP group stays inside a node)";
  if (model.heads % plan.tp != 0)
    return "tp " + str(plan.tp) + " does not divide n_head " + str(model.heads);
  if (plan.pp > model.layers)
    return "pp " + str(plan.pp) + " is more stages than n_layer " +
           str(model.layers);
  if (work.batch % plan.dp != 0)
    return "dp " + str(plan.dp) + " does not divide --batch " + str(work.batch);
  if (plan.zero < 0 || plan.zero > 3)
    return "zero must be 0, 1, 2 or 3";
  if (plan.microbatches < 1 || (work.batch / plan.dp) % plan.microbatches)
    return "microbatches " + str(plan.microbatches) + " does not divide the " +
           str(work.batch / plan.dp) + " rows of a dp rank";
  if (plan.pp == 1) {
    if (plan.virtualStages != 1)
      return "virtual stages need pp > 1";
    return "";
  }
  switch (plan.schedule) {
  case Schedule::GPipe:
    break;
  case Schedule::OneFOneB:
    if (plan.microbatches < plan.pp)
      return "1f1b needs microbatches >= pp (" + str(plan.microbatches) +
             " < " + str(plan.pp) + ")";
    break;
  case Schedule::Interleaved:
    if (plan.virtualStages < 2)
      return "interleaved needs virtual stages >= 2";
    if (model.layers % (plan.pp * plan.virtualStages))
      return "interleaved needs n_layer " + str(model.layers) +
             " divisible by pp x virtual stages = " +
             str(plan.pp * plan.virtualStages);
    if (plan.microbatches % plan.pp)
      return "interleaved needs microbatches divisible by pp (" +
             str(plan.microbatches) + " % " + str(plan.pp) + ")";
    return "";
  }
  if (plan.virtualStages != 1)
    return "virtual stages need the interleaved schedule";
  return "";
}

PlanCost loom::plan::evaluatePlan(const ModelShape &model,
                                  const Cluster &cluster, const Workload &work,
                                  const Plan &plan) {
  PlanCost cost;
  const int64_t p = plan.pp, t = plan.tp, n = plan.dp, m = plan.microbatches;
  const int64_t v = p > 1 ? plan.virtualStages : 1;
  const int64_t s = work.seq, h = model.hidden;
  const int64_t b = work.batch / (n * m);
  const bool sp = work.sequenceParallel && t > 1;
  const bool fp32 = cluster.precision == Precision::FP32;
  // Bytes of a parameter / activation element on the wire and in the
  // working copies, and of a gradient element (4 with fp32 gradients).
  const double elementBytes = fp32 ? 4.0 : 2.0;
  const double gradientBytes = cluster.gradientBytes();
  cost.microbatchRows = double(b);

  Placement placement{n, t, p, cluster.gpusPerNode};
  cost.tpCrossesNodes = placement.crossesNodes(Axis::TP);
  cost.dpCrossesNodes = placement.crossesNodes(Axis::DP);
  cost.ppCrossesNodes = placement.crossesNodes(Axis::PP);
  auto bandwidth = [&](bool crosses) {
    return crosses ? cluster.interNodeBandwidth : cluster.intraNodeBandwidth;
  };

  // 1. Parameters per GPU of each stage, tensor by tensor as the compiler
  //    shards them (PlanState.h): the blocks split over tp, the
  //    vocab-padded wte on the first stage and, tied, on the last one, wpe
  //    on the first and ln_f on the last (replicated over tp).
  std::vector<int64_t> layers =
      stageLayers(model, p, s,
                  plan.schedule == Schedule::Interleaved ? plan.virtualStages
                                                         : 1,
                  plan.recompute);
  double vocabPerGpu =
      double(compiledVocabRows(model, t, work.vocabDivisibleBy)) / double(t);
  double blockPerGpu = 0;
  for (const ParamTensor &tensor : blockTensors(h, t))
    blockPerGpu += double(tensor.elements()) / (tensor.tpDim >= 0 ? t : 1);
  std::vector<StageState> states(p);
  cost.vocabRowsPerGpu = vocabPerGpu;

  // 2. Memory per stage. Activations: what Loom's backward reads (the
  //    memory), next to Korthikanti et al.'s count for Megatron (reported).
  cost.activationBytesPerLayer = loomActivationBytesPerLayer(
      s, b, h, model.heads, t, work.sequenceParallel, plan.recompute,
      cluster.precision);
  cost.formulaActivationBytesPerLayer =
      activationBytesPerLayer(s, b, h, model.heads, t, work.sequenceParallel,
                              plan.recompute, cluster.precision);
  const StateElementBytes stateBytes = cluster.stateBytes();
  cost.stages.resize(p);
  for (int64_t i = 0; i < p; ++i) {
    StageMemory &st = cost.stages[i];
    st.layers = layers[i];
    // Loom's program, and the formula with the steps between them.
    TensorSplit split = TensorSplit::ideal();
    double formula =
        stageState(model, plan, work, i, layers[i], split).bytes(stateBytes);
    split.padVocab = true;
    double padded =
        stageState(model, plan, work, i, layers[i], split).bytes(stateBytes);
    split.tpReplicates = true;
    double replicated =
        stageState(model, plan, work, i, layers[i], split).bytes(stateBytes);
    states[i] =
        stageState(model, plan, work, i, layers[i], TensorSplit::loom());
    st.paramsPerGpu = states[i].unshardedParams;
    st.modelStateBytes = states[i].bytes(stateBytes);
    st.formulaModelStateBytes = formula;
    st.vocabPaddingBytes = padded - formula;
    st.tpReplicatedBytes = replicated - padded;
    st.dpWholeBytes = st.modelStateBytes - replicated;

    double inFlight = microbatchesInFlight(plan, i);
    st.activationBytes =
        double(layers[i]) * inFlight * cost.activationBytesPerLayer;
    // On top of the saved values, the largest of what is live only for a
    // while: the vocab-parallel LM head's logits and their gradient (the
    // loss's, 2-byte in bf16 next to fp32 per-token statistics), from the
    // head's forward to its backward (last stage); a block's backward
    // working set: its MLP's two 4h-wide input gradients, the incoming
    // gradient and the largest weight gradient before it is accumulated,
    // sbh(1 + 8/t) + 4h²/t (attention keeps no [b, nh, s, s] probabilities
    // in the arena: the kernels hold them a head at a time), with full
    // recomputation the re-run layer's values next to the incoming
    // gradient and the first 4h-wide one, sbh(1 + 4/t); and the first
    // stage's backward ends with the embedding's gradient over the whole
    // vocabulary. They are not live at once: the head's backward frees the
    // logits before the first block's backward recomputes it. Unpipelined
    // the logits win; a pipeline stage's saved values are in its stash
    // slots, so its arena holds one action's working set: one of these.
    double transient = 0;
    if (layers[i] > 0) {
      const double sbhBytes = elementBytes * double(s) * double(b) * double(h);
      transient = sbhBytes * (1.0 + 8.0 / double(t)) +
                  gradientBytes * 4.0 * double(h) * double(h) / double(t);
      if (plan.recompute == Recompute::Full)
        transient = std::max(transient,
                             loomActivationBytesPerLayer(
                                 s, b, h, model.heads, t, work.sequenceParallel,
                                 Recompute::None, cluster.precision) +
                                 sbhBytes * (1.0 + 4.0 / double(t)));
    }
    // The tied wte's gradient over this rank's vocabulary rows, before it
    // is added to the accumulator (the head's weight gradient, and the
    // embedding's).
    const double wteGradientBytes = gradientBytes * vocabPerGpu * double(h);
    if (i == 0)
      transient = std::max(transient, wteGradientBytes);
    const double logitsBytes =
        elementBytes * double(s) * double(b) * vocabPerGpu;
    if (i == p - 1) {
      // The logits' gradient, then with it the head's weight gradient.
      // Unpipelined the gradient is written over the logits, which its
      // kernel reads last (passes/Lowering/InPlaceResults.h). A pipeline's
      // last stage keeps the logits in each in-flight micro-batch's stash
      // slot instead, where its forward writes them and its backward reads
      // them (executor_pipeline.cpp), and their gradient beside them.
      transient = std::max(transient, logitsBytes + wteGradientBytes);
      if (p > 1)
        st.activationBytes += inFlight * logitsBytes;
    }
    st.activationBytes += transient;
    if (plan.zero == 3 && n > 1 && layers[i] > 0)
      // The current and the prefetched block's parameters, and a block of
      // gradients before its reduce-scatter.
      st.gatheredBytes = blockPerGpu * (2.0 * elementBytes + gradientBytes);
    st.workspaceBytes = kWorkspaceBytes + kFragmentation * (st.modelStateBytes +
                                                            st.activationBytes +
                                                            st.gatheredBytes);
    if (st.peakBytes() > cost.peakBytes) {
      cost.peakBytes = st.peakBytes();
      cost.peakStage = i;
    }
  }
  cost.fits = cost.peakBytes <= cluster.memoryBytes;

  // 3. FLOPs: the model's, and what runs with recomputation. Loom's
  //    attention backward recomputes the scores q k^T from q|k|v and the
  //    saved log-sum-exp whatever the plan: causal, s·h per token.
  //    Selective recomputation re-runs the MLP's GELU over its 4h values
  //    (kGeluFlops each, tanh counted as a few); full recomputation the
  //    block's whole forward: its matmuls and attention (2s·h).
  constexpr double kGeluFlops = 10.0;
  const double tokens = double(work.batch) * double(s);
  double recomputePerLayer = double(h) * double(s); // per token
  if (plan.recompute == Recompute::Selective)
    recomputePerLayer += kGeluFlops * 4.0 * double(h);
  if (plan.recompute == Recompute::Full)
    recomputePerLayer +=
        2.0 * double(model.paramsPerBlock) + 2.0 * double(h) * double(s);
  cost.modelFlops = modelFlopsPerToken(model, s) * tokens;
  cost.hardwareFlops =
      cost.modelFlops + double(model.layers) * recomputePerLayer * tokens;
  double rows = double(b) * double(s), width = double(h) / double(t);
  cost.computeEfficiency = kMaxComputeEfficiency * rows /
                           (rows + kHalfEfficiencyRows) * width /
                           (width + kHalfEfficiencyWidth);
  const double flopRate = cluster.peakFlops * cost.computeEfficiency;

  // 4. Time of one micro-batch on each stage; the slowest sets the pace.
  const double microTokens = rows;
  const double tpMessage = rows * double(h) * elementBytes; // b·s·h
  const double p2pMessage = tpMessage / (sp ? double(t) : 1.0);
  double slowest = -1;
  for (int64_t i = 0; i < p; ++i) {
    const StageMemory &st = cost.stages[i];
    double flops = double(st.layers) *
                   (layerFlopsPerToken(model, s) + recomputePerLayer) *
                   microTokens;
    if (i == p - 1)
      flops += headFlopsPerToken(model) * microTokens;
    double compute = flops / double(t) / flopRate;
    double tpBytes =
        tensorParallelBytes(plan, sp, st.layers, i == 0, i == p - 1, tpMessage,
                            double(s) * double(h) * gradientBytes, rows);
    double tpTime = tpBytes / bandwidth(cost.tpCrossesNodes);
    // ZeRO-2 reduce-scatters each micro-batch's gradients (hidden behind
    // its backward, 2/3 of the compute); ZeRO-3 also gathers the params
    // for the forward and again for the backward (hidden behind both).
    // ZeRO-3 gathers (and reduce-scatters the gradients of) only the
    // tensors it splits; the others are whole on every dp rank. (Today
    // Loom all-reduces wpe's gradient every micro-batch instead of
    // reduce-scattering it: not modelled, a compiler matter.)
    double stageParamBytes = st.paramsPerGpu * elementBytes;
    double stageGradBytes = st.paramsPerGpu * gradientBytes;
    double zeroBytes = 0, zeroWindow = 0;
    if (plan.zero == 2) {
      zeroBytes = ringGatherBytes(stageGradBytes, n);
      zeroWindow = compute * 2.0 / 3.0;
    } else if (plan.zero == 3) {
      // Forward gather + gradient reduce-scatter of every tensor ZeRO
      // splits; the backward gathers the blocks' again (the ZeRO paper's
      // 1.5x DDP, less wte, wpe and ln_f: the head runs its backward on
      // the copy its forward gathered, and the embedding's backward needs
      // no table).
      zeroBytes =
          ringGatherBytes(states[i].dpSplittableParams * elementBytes, n) +
          ringGatherBytes(states[i].dpSplittableParams * gradientBytes, n) +
          ringGatherBytes(states[i].blockDpSplittableParams * elementBytes, n);
      zeroWindow = compute;
    }
    double zeroTime = zeroBytes / bandwidth(cost.dpCrossesNodes);
    double zeroExposed = overlappedTime(zeroTime, zeroWindow);
    // Activations forward to the next chunk, gradients back to the
    // previous one: stage i holds chunks i + k·p (k < v) of the p·v; each
    // but the last sends forward, each but the first backward.
    int64_t sends = 0;
    for (int64_t k = 0; k < v; ++k) {
      int64_t chunk = i + k * p;
      sends += (chunk < p * v - 1 ? 1 : 0) + (chunk > 0 ? 1 : 0);
    }
    double p2pBytes = double(sends) * p2pMessage;
    double p2pTime = p2pBytes / bandwidth(cost.ppCrossesNodes);
    double total = compute + tpTime + zeroExposed + p2pTime;

    // Per-step traffic of this stage's GPUs.
    double tpStepBytes = tpBytes * double(m);
    cost.ppBytes = std::max(cost.ppBytes, p2pBytes * double(m));

    // Once per step, as the compiled step schedules it
    // (passes/Sharding/GradientReduction.cpp, passes/Sharding/ScheduleComm.cpp):
    //  * DDP accumulates whole gradients locally over the micro-batches and
    //    all-reduces their sums in the last micro-batch (PyTorch DDP's
    //    no_sync; in a pipeline, each chunk's last backward, as Megatron's
    //    overlapped gradient reduction), bucketed and launched
    //    asynchronously as each block's gradients are ready: they run
    //    behind the rest of that backward (2/3 of a micro-batch's compute),
    //    as with one micro-batch.
    //  * ZeRO-1 reduce-scatters the accumulated gradients in place in the
    //    last micro-batch (with one micro-batch too), each launched as its
    //    accumulation is ready, behind the rest of that backward (Megatron's
    //    distributed optimizer), and all-gathers the updated parameters
    //    after the optimizer (exposed).
    //  * ZeRO-2 reduce-scatters every micro-batch (zeroBytes above, behind
    //    the backward) and all-gathers the updated parameters (exposed).
    //  * ZeRO-3 has nothing once per step (gathers and reduce-scatters run
    //    inside every micro-batch, above).
    double dpBytes = 0, dpExposed = 0, dpTotal = 0;
    double lastBackward = compute * 2.0 / 3.0;
    double dpBandwidth = bandwidth(cost.dpCrossesNodes);

    std::string reason;
    switch (plan.zero) {
    case 0: {
      double ar = ringAllReduceBytes(stageGradBytes, n);
      dpBytes = ar;
      dpTotal = ar / dpBandwidth;
      dpExposed = overlappedTime(dpTotal, lastBackward);
      reason = std::string(p > 1   ? "DDP's bucketed all-reduces of the "
                                     "gradients accumulated over the "
                                     "micro-batches run in each chunk's last "
                                     "backward, behind the rest of it"
                           : m > 1 ? "DDP's bucketed all-reduces of the "
                                     "gradients accumulated over the "
                                     "micro-batches run in the last one, "
                                     "behind the rest of its backward"
                                   : "DDP's bucketed all-reduces of the one "
                                     "micro-batch's gradients run behind the "
                                     "rest of its backward") +
               " (the part that does not fit is exposed, the hidden part "
               "costs " +
               std::to_string(int(100 * kOverlapCost)) + "%)";
      break;
    }
    case 1: {
      double rs = ringGatherBytes(stageGradBytes, n),
             ag = ringGatherBytes(stageParamBytes, n);
      dpBytes = rs + ag;
      dpTotal = dpBytes / dpBandwidth;
      dpExposed = overlappedTime(rs / dpBandwidth, lastBackward) +
                  ag / dpBandwidth;
      reason = std::string(p > 1 ? "ZeRO-1 reduce-scatters the accumulated "
                                   "gradients in place in each chunk's last "
                                   "backward, behind the rest of it"
                                 : "ZeRO-1 reduce-scatters the accumulated "
                                   "gradients in place in the last "
                                   "micro-batch, behind the rest of its "
                                   "backward") +
               "; the all-gather of the updated parameters after the "
               "optimizer is exposed";
      break;
    }
    case 2: {
      double ag = ringGatherBytes(stageParamBytes, n);
      dpBytes = double(m) * zeroBytes + ag;
      dpTotal = double(m) * zeroTime + ag / dpBandwidth;
      dpExposed = ag / dpBandwidth;
      reason = "ZeRO-2's per-micro-batch reduce-scatters run behind each "
               "backward (counted in the micro-batch); the all-gather of the "
               "updated parameters after the optimizer is exposed";
      break;
    }
    default:
      dpBytes = double(m) * zeroBytes;
      dpTotal = double(m) * zeroTime;
      reason = "ZeRO-3's prefetched gathers and per-micro-batch "
               "reduce-scatters run inside every micro-batch (counted "
               "there); nothing once per step";
      break;
    }
    // Sequence parallelism's partial layer-norm gradients: all-reduced
    // over dp and tp at once (ZeRO-0/1; instead of their share of the dp
    // reduction), or their dp shard over tp once per step (ZeRO-2/3, or
    // no dp).
    if (sp) {
      double lnBytes = states[i].layerNormGrads * gradientBytes;
      if (plan.zero >= 2 || n == 1) {
        tpStepBytes += ringAllReduceBytes(lnBytes, t);
      } else {
        double share = plan.zero == 0 ? ringAllReduceBytes(lnBytes, n)
                                      : ringGatherBytes(lnBytes, n);
        dpBytes += ringAllReduceBytes(lnBytes, n * t) - share;
      }
    }
    cost.dpBytes = std::max(cost.dpBytes, dpBytes);
    cost.tpBytes = std::max(cost.tpBytes, tpStepBytes);
    double formulaTp = double(st.layers) *
                       (plan.recompute == Recompute::Full ? 6 : 4) *
                       ringAllReduceBytes(tpMessage, t) * double(m);
    cost.stageTraffic.push_back(
        {tpStepBytes, dpBytes, p2pBytes * double(m), formulaTp});
    if (total > slowest) {
      slowest = total;
      cost.slowestStage = i;
      cost.microbatchComputeS = compute;
      cost.microbatchTpS = tpTime;
      cost.microbatchZeroS = zeroExposed;
      cost.microbatchP2pS = p2pTime;
      cost.microbatchZeroTotalS = zeroTime;
    }
    if (n > 1 && (cost.dpExposedReason.empty() ||
                  dpExposed > cost.dpExposedS)) {
      cost.dpExposedReason = reason;
    }
    cost.dpExposedS = std::max(cost.dpExposedS, dpExposed);
    cost.dpTotalS = std::max(cost.dpTotalS, dpTotal);
  }

  // 5. The tied embedding: its gradient is all-reduced between the first
  //    and the last stage once per step (Megatron), exposed.
  //    Under ZeRO-1/2/3 the gradient is first split over dp: the dp shard
  //    is all-reduced.
  if (p > 1) {
    double bytes = ringAllReduceBytes(states[0].wteGrad * gradientBytes, 2);
    cost.embeddingSyncS = bytes / bandwidth(cost.ppCrossesNodes);
    cost.stageTraffic.front().pp += bytes;
    cost.stageTraffic.back().pp += bytes;
    cost.ppBytes = 0;
    for (const StageTraffic &traffic : cost.stageTraffic)
      cost.ppBytes = std::max(cost.ppBytes, traffic.pp);
  }

  // 6. The step: m micro-batch slots plus the (p-1)/v fill and drain.
  cost.bubble = bubbleFraction(p, m, v);
  double slots = double(m) + double(p - 1) / double(v);
  cost.stepS = slowest * slots + cost.dpExposedS + cost.embeddingSyncS;
  cost.mfu =
      cost.modelFlops / (cost.stepS * double(cluster.gpus) * cluster.peakFlops);
  return cost;
}
