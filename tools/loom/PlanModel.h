//===- PlanModel.h - Analytic cost model of a parallel plan -----*- C++ -*-===//
//
// The cost model behind `loom plan`: for one plan (dp x tp x pp mesh, ZeRO
// stage, micro-batches, pipeline schedule, recomputation) on one cluster,
// predicts the peak memory per GPU, the step time, the MFU, the pipeline
// bubble and the bytes each GPU sends per step on each mesh axis.
//
// Every figure is a published formula, named where it is computed:
//  * model state per GPU by ZeRO stage over N = dp ranks (Rajbhandari et al.
//    2020): bf16 mixed precision 16Φ, 4Φ+12Φ/N, 2Φ+14Φ/N, 16Φ/N; fp32
//    16Φ, 8Φ+8Φ/N, 4Φ+12Φ/N, 16Φ/N (what --loom-report prints on real IR);
//  * activations per layer and micro-batch (Korthikanti et al. 2022, bytes
//    in 16-bit training; doubled in fp32): sbh(34+5as/h); with TP
//    sbh(10+24/t+5as/(ht)); with TP+SP sbh(34+5as/h)/t; selective
//    recomputation drops the 5as/h term; full recomputation keeps 2sbh per
//    layer (/t with SP) plus one layer's working set (reported next to what
//    Loom keeps, which the memory counts: below);
//  * FLOPs per token 6N + 6·L·C·T (llm.c's MFU convention), plus the
//    recomputed forward (2·L·C·T for the attention scores, which Loom's
//    attention backward always recomputes, + 2N' with full recomputation);
//  * ring collectives (nccl-tests): all-reduce sends 2(n-1)/n·S per rank,
//    all-gather and reduce-scatter (n-1)/n·S; Megatron TP: 2 all-reduces
//    forward + 2 backward per layer of b·s·h elements (SP: all-gather +
//    reduce-scatter, the same volume);
//
// Where Loom's compiled program is known to differ from a formula, the
// plan follows the program (test/Tools/loom-plan-vs-compile.test checks it
// against `loom compile --report`) and the report says by how much:
//  * model state is counted tensor by tensor (PlanState.h): the padded
//    vocabulary, the layer norms and biases tp replicates, the tensors ZeRO
//    cannot split over dp;
//  * sequence parallelism re-gathers, as Megatron does, each
//    column-parallel linear's saved sequence shard in the backward: 2 more
//    all-gathers of b·s·h per layer (10 instead of 8 collectives of
//    (t-1)/t·b·s·h), and its embedding / LM head reduce-scatter and gather
//    the sequence (b·s·h each way, plus wpe's s·h gradient);
//  * TP's vocab-parallel embedding all-reduces b·s·h in the forward, the LM
//    head b·s·h in the backward, the cross-entropy 3 fp32 values per token;
//  * activations are what Loom's backward reads (no dropout masks, no
//    attention scores: sbh(8+24/t) in 16-bit, loomActivationBytesPerLayer,
//    plus the fp32 log-sum-exp per query row and head, 4sab/t), and its
//    attention backward always recomputes the scores, so selective
//    recomputation is what every plan runs;
//  * ZeRO-3 gathers only the tensors it splits; the tied wte's gradient
//    all-reduce between the first and last stage moves the dp shard under
//    ZeRO-2/3.
//  * pipeline bubble (p-1)/(m+p-1), with v virtual stages (p-1)/v/(m+(p-1)/v)
//    (Narayanan et al. 2021); activations in flight on stage i: GPipe m,
//    1F1B min(m, p-i), interleaved 2(p-i-1)+(v-1)p+1 chunks of 1/v stage.
//
// The step: the slowest stage's micro-batch (compute + TP collectives +
// exposed ZeRO-2/3 traffic + p2p) times m + (p-1)/v slots, plus the DP
// traffic of the step that is not hidden and the tied-embedding gradient
// all-reduce between the first and last stage. The once-per-step DP
// reductions are placed as the compiled step places them: DDP's
// all-reduces and ZeRO-1's reduce-scatters in the last micro-batch's
// backward (each chunk's, in a pipeline), behind the rest of it; ZeRO-1/2's
// all-gather of the updated parameters after the optimizer, exposed.
//
// The assumptions that are not formulas (GEMM efficiency, overlap, workspace)
// are the named constants below; docs in README.md (`loom plan`). Not
// modelled: collective latency (only bandwidth), contention between axes
// sharing a link, the optimizer step, the scalar all-reduces of the step
// (loss, gradient norm) and the gradient all-reduce over tp of the layer
// norms and biases sequence parallelism leaves partial.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_TOOLS_LOOM_PLANMODEL_H
#define LOOM_TOOLS_LOOM_PLANMODEL_H

#include "tools/loom/Placement.h"

#include <cstdint>
#include <string>
#include <vector>

namespace loom::plan {

//===----------------------------------------------------------------------===//
// Assumptions
//===----------------------------------------------------------------------===//

/// Fraction of peak FLOP/s the model's FLOPs run at on large GEMMs
/// (cuBLASLt bf16 reaches 70-80% of dense peak on H100; the memory-bound
/// ops, norms, GELU, softmax, are folded in).
inline constexpr double kMaxComputeEfficiency = 0.70;
/// GEMM efficiency saturates with size: η = η_max · r/(r+r0) · w/(w+w0),
/// r = rows per micro-batch (b·s), w = hidden columns per GPU (h/t).
inline constexpr double kHalfEfficiencyRows = 128;
inline constexpr double kHalfEfficiencyWidth = 128;
/// Data-parallel communication overlaps the compute it can run behind
/// where the compiled step runs it inside a micro-batch (DDP's bucketed
/// async all-reduces after each backward block of an unpipelined
/// one-micro-batch step, ZeRO-2/3's per-micro-batch reduce-scatters,
/// ZeRO-3's prefetched gathers): the part longer than that compute is
/// exposed, and the hidden part still costs this fraction of its time
/// (NCCL kernels take SMs, both stream through HBM). The once-per-step
/// reductions at the update overlap nothing.
inline constexpr double kOverlapCost = 0.2;
/// Memory no plan can use: CUDA context, cuBLAS workspace, NCCL buffers,
/// gradient buckets.
inline constexpr double kWorkspaceBytes = 1e9;
/// Allocator fragmentation, as a fraction of model state + activations.
inline constexpr double kFragmentation = 0.05;
/// GB in --gpu-mem-gb and every printed figure: 10^9 bytes.
inline constexpr double kGB = 1e9;

//===----------------------------------------------------------------------===//
// Inputs
//===----------------------------------------------------------------------===//

enum class Precision { BF16, FP32 };
enum class Schedule { GPipe, OneFOneB, Interleaved };
enum class Recompute { None, Selective, Full };

const char *name(Precision p);
const char *name(Schedule s);
const char *name(Recompute r);

/// The model as the planner sees it: its shape and the exact parameter
/// counts of the imported IR (the figures --loom-summary prints).
struct ModelShape {
  int64_t layers = 0;    // L
  int64_t heads = 0;     // a
  int64_t hidden = 0;    // h (C in llm.c)
  int64_t vocab = 0;     // V
  int64_t positions = 0; // n_positions
  /// Φ: every parameter once (the tied wte/LM head once).
  int64_t params = 0;
  /// Parameters of one transformer block (the largest, if they differ).
  int64_t paramsPerBlock = 0;
  /// Token embedding, tied with the LM head (wte: V x h).
  int64_t embeddingParams = 0;
  /// Everything else outside the blocks (wpe, ln_f).
  int64_t otherParams = 0;
};

/// Bytes per element of each model-state role: the parameter, its gradient,
/// and the optimizer state per parameter (AdamW's m and v, with bf16's fp32
/// master: the ZeRO paper's K). fp32: 4 + 4 + 8; bf16 mixed precision
/// 2 + 2 + 12; bf16 with fp32 gradients 2 + 4 + 12.
struct StateElementBytes {
  double param = 4, grad = 4, optimizer = 8;
};

/// The machines: G GPUs, K per node.
struct Cluster {
  int64_t gpus = 1;
  int64_t gpusPerNode = 8;
  double memoryBytes = 80 * kGB;
  /// Link bandwidth per GPU and direction, bytes/s.
  double intraNodeBandwidth = 450e9;
  double interNodeBandwidth = 50e9;
  /// Peak FLOP/s per GPU at `precision`.
  double peakFlops = 989e12;
  Precision precision = Precision::BF16;
  /// bf16 mixed precision with fp32 gradients (--grad-precision fp32,
  /// Megatron's --accumulate-allreduce-grads-in-fp32): 4-byte gradient
  /// accumulators and gradient collectives; parameters and activations
  /// stay bf16.
  bool fp32Gradients = false;
  StateElementBytes stateBytes() const {
    if (precision == Precision::FP32)
      return {4, 4, 8};
    return {2, fp32Gradients ? 4.0 : 2.0, 12};
  }
  /// Bytes of a gradient element, in the accumulators and on the wire.
  double gradientBytes() const { return stateBytes().grad; }
};

/// One training step: global batch B rows of s tokens.
struct Workload {
  int64_t batch = 1;
  int64_t seq = 1;
  /// Megatron sequence parallelism whenever tp > 1 (same traffic as TP
  /// alone, activations divided by t).
  bool sequenceParallel = true;
  /// A vocabulary tp does not divide is padded to a multiple of this x tp
  /// rows (`loom compile --vocab-divisible-by`, Megatron's
  /// make-vocab-size-divisible-by).
  int64_t vocabDivisibleBy = 128;
};

/// One point of the search space.
struct Plan {
  int64_t dp = 1, tp = 1, pp = 1;
  int zero = 0;
  int64_t microbatches = 1;
  Schedule schedule = Schedule::OneFOneB;
  int64_t virtualStages = 1;
  Recompute recompute = Recompute::None;
};

//===----------------------------------------------------------------------===//
// Formulas
//===----------------------------------------------------------------------===//

/// Model-state bytes per parameter on one GPU for stage `zero` over N =
/// `dp` ranks: the ZeRO paper's p+g+K, p+g+K/N, p+(g+K)/N, (p+g+K)/N, i.e.
/// 16, 4+12/N, 2+14/N, 16/N (bf16 mixed precision), 16, 8+8/N, 4+12/N,
/// 16/N (fp32), 18, 6+12/N, 2+16/N, 18/N (bf16 with fp32 gradients).
double modelStateBytesPerParam(int zero, int64_t dp, StateElementBytes bytes);
/// The same as a formula, e.g. "2Φ+14Φ/N".
std::string modelStateFormula(int zero, StateElementBytes bytes);

/// Korthikanti et al.'s activation bytes of one transformer layer for one
/// micro-batch of b rows of s tokens, stored for the backward (full
/// recomputation: the layer input only). 16-bit training; x2 in fp32.
double activationBytesPerLayer(int64_t s, int64_t b, int64_t h, int64_t a,
                               int64_t t, bool sequenceParallel,
                               Recompute recompute, Precision precision);
/// The formula used, e.g. "sbh(34+5as/h)/t".
std::string activationFormula(int64_t t, bool sequenceParallel,
                              Recompute recompute);
/// The bytes of one layer's forward values Loom's backward reads, for one
/// micro-batch (what --loom-report prints as "Loom keeps"): per block the
/// q|k|v, attention output, MLP input and GELU input/output (3h, h, 4h,
/// 4h per token; split over tp) and the four residual-stream values (the
/// block input, the two layer norms' inputs' outputs, the attention
/// residual: 4h, whole over tp unless SP splits them). No dropout masks
/// (Loom has no dropout) and no attention scores (its attention backward
/// recomputes them from q|k|v, as flash attention does): 16-bit
/// sbh(8+24/t), SP 32sbh/t; x2 in fp32. Plus attention's fp32 log-sum-exp,
/// one value per query row and head (`a` heads, split over tp): 4sab/t.
/// Full recomputation keeps the block input, 2sbh (/t with SP).
double loomActivationBytesPerLayer(int64_t s, int64_t b, int64_t h, int64_t a,
                                   int64_t t, bool sequenceParallel,
                                   Recompute recompute, Precision precision);
/// The same as a formula, e.g. "sbh(8+24/t)".
std::string loomActivationFormula(int64_t t, bool sequenceParallel,
                                  Recompute recompute);

/// Bytes one rank sends in a ring all-reduce of S bytes over n ranks.
double ringAllReduceBytes(double bytes, int64_t n);
/// ... in a ring all-gather or reduce-scatter of S bytes (the full buffer).
double ringGatherBytes(double bytes, int64_t n);

/// Idle fraction of a pipeline step: (p-1)/v / (m + (p-1)/v).
double bubbleFraction(int64_t p, int64_t m, int64_t v);

/// Micro-batches whose activations stage `stage` holds at once, in units
/// of a whole stage (interleaved: chunks of 1/v stage, divided by v).
double microbatchesInFlight(const Plan &plan, int64_t stage);

/// Model FLOPs per token (llm.c): 6N + 6·L·C·T.
double modelFlopsPerToken(const ModelShape &model, int64_t seq);

/// Transformer layers per pipeline stage, cut as the compiler cuts them
/// (test/Tools/loom-plan-stage-cut.test), balanced by FLOPs: the LM head
/// (6·V·h per token) weighs on the last stage, so it may get fewer layers
/// or none; left-over layers go to the later stages (the first also runs
/// the embedding). With `virtualStages` v > 1 (interleaved) the p·v chunks
/// are cut that way and stage i holds chunks i, i + p, ...: the sum of
/// their layers. Full recomputation re-runs each layer's forward in its
/// backward: a layer weighs 4/3 of its FLOPs against the head.
std::vector<int64_t> stageLayers(const ModelShape &model, int64_t pp,
                                 int64_t seq, int64_t virtualStages,
                                 Recompute recompute = Recompute::None);

//===----------------------------------------------------------------------===//
// Evaluation
//===----------------------------------------------------------------------===//

/// Memory of one pipeline stage's GPUs.
struct StageMemory {
  int64_t layers = 0;
  /// Parameters one GPU of the stage holds (before ZeRO sharding).
  double paramsPerGpu = 0;
  /// Model state as Loom's compiler shards it (PlanState.h): what
  /// `loom compile --report` prints for the stage.
  double modelStateBytes = 0;
  /// The published formula (16Φ, 4Φ+12Φ/N, ... on Φ_stage/t, unpadded
  /// vocabulary), and what separates Loom's program from it: the padded
  /// vocabulary rows, the tensors tp keeps whole (layer norms, row-parallel
  /// biases, wpe, ln_f) and those ZeRO cannot split over dp.
  double formulaModelStateBytes = 0;
  double vocabPaddingBytes = 0, tpReplicatedBytes = 0, dpWholeBytes = 0;
  /// Activations: stored per layer x layers x micro-batches in flight,
  /// plus the fp32 logits on the last stage and full recomputation's
  /// working layer.
  double activationBytes = 0;
  /// ZeRO-3's gathered blocks (current + prefetched params, one block's
  /// unsharded gradients).
  double gatheredBytes = 0;
  double workspaceBytes = 0;
  double peakBytes() const {
    return modelStateBytes + activationBytes + gatheredBytes + workspaceBytes;
  }
};

/// Bytes one GPU of a stage sends per step on each mesh axis
/// (ring-counted as --loom-report counts them).
struct StageTraffic {
  double tp = 0, dp = 0, pp = 0;
  /// Megatron's formula for the tp figure: 4 all-reduces of b·s·h per
  /// layer and micro-batch (6 with full recomputation), SP the same volume.
  double formulaTp = 0;
};

/// Everything predicted about one plan.
struct PlanCost {
  std::vector<StageMemory> stages;
  std::vector<StageTraffic> stageTraffic;
  /// The stage with the largest peak, and that peak.
  int64_t peakStage = 0;
  double peakBytes = 0;
  bool fits = false;

  /// Rows of the (padded) vocabulary one GPU holds of wte.
  double vocabRowsPerGpu = 0;
  /// Bytes of one layer's stored activations for one micro-batch: what
  /// Loom's program keeps (the memory counted), and Korthikanti et al.'s
  /// formula for Megatron's (the report compares them).
  double activationBytesPerLayer = 0;
  double formulaActivationBytesPerLayer = 0;
  double microbatchRows = 0;

  /// FLOPs of a step: the model's (llm.c) and what runs (+ recomputation).
  double modelFlops = 0;
  double hardwareFlops = 0;
  double computeEfficiency = 0;

  /// Per micro-batch on the slowest stage: compute, TP collectives
  /// (exposed), ZeRO-2/3 per-micro-batch traffic left exposed, p2p.
  int64_t slowestStage = 0;
  double microbatchComputeS = 0;
  double microbatchTpS = 0;
  double microbatchZeroS = 0;
  double microbatchP2pS = 0;
  /// ZeRO-2/3 per-micro-batch traffic time, hidden or not (the
  /// microbatchZeroS above is what it adds to the micro-batch).
  double microbatchZeroTotalS = 0;
  /// Once per step: what the DP gradient/parameter traffic adds (exposed,
  /// + kOverlapCost of the hidden part where it overlaps the backward), and
  /// the all-reduce of the tied embedding's gradient between the first
  /// and last stage.
  double dpExposedS = 0;
  double embeddingSyncS = 0;
  /// Why dpExposedS is what it is: which reductions the compiled step runs
  /// where, and what they overlap (for the report).
  std::string dpExposedReason;
  /// All DP traffic time of a step (ZeRO-2/3's per micro-batch included),
  /// hidden or not.
  double dpTotalS = 0;

  double stepS = 0;
  double bubble = 0;
  double mfu = 0;

  /// Bytes one GPU sends per step on each axis (ring-counted; the largest
  /// over the stages).
  double tpBytes = 0, dpBytes = 0, ppBytes = 0;
  /// Whether the groups of each axis cross nodes (slower links).
  bool tpCrossesNodes = false, dpCrossesNodes = false, ppCrossesNodes = false;
};

/// Why `plan` is not a valid point of the search space for this model and
/// cluster ("" when it is): sizes that do not divide, schedules that need
/// more micro-batches, ...
std::string checkPlan(const ModelShape &model, const Cluster &cluster,
                      const Workload &work, const Plan &plan);

/// Predicts `plan`, which checkPlan accepts.
PlanCost evaluatePlan(const ModelShape &model, const Cluster &cluster,
                      const Workload &work, const Plan &plan);

} // namespace loom::plan

#endif // LOOM_TOOLS_LOOM_PLANMODEL_H
