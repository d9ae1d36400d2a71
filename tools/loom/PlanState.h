//===- PlanState.h - Model state of a stage, tensor by tensor ---*- C++ -*-===//
//
// What one GPU of a pipeline stage holds of the model state, counted the way
// Loom's compiler shards each parameter of a GPT-2 model, so `loom plan`
// predicts the bytes `loom compile --report` prints (test/Tools/
// loom-plan-vs-compile.test):
//  * tensor parallelism (Megatron's layout, --loom-tensor-parallel): c_attn
//    and c_fc weights and biases split by columns, both c_proj weights by
//    rows, wte by vocabulary rows; the layer norms, the row-parallel biases,
//    wpe and ln_f stay whole on every tp rank;
//  * vocab padding: a vocabulary tp does not divide is padded to the next
//    multiple of vocab-divisible-by x tp rows (Megatron's
//    make-vocab-size-divisible-by, VocabPadding.h's paddedRows);
//  * ZeRO (--loom-zero): the AdamW moments (stage >= 1), gradients (>= 2)
//    and parameters (3) split over dp on the first dimension dp divides
//    that tp does not split; a tensor with no such dimension (a
//    column-parallel bias) stays whole on every dp rank;
//  * GPT-2's tied wte lives on the first and the last stage.
//
// The published formulas (16Φ, 4Φ+12Φ/N, ...; PlanModel.h) count every
// tensor as Φ/(t·N): the same figure with `TensorSplit::ideal()`, so the
// report can say how far Loom's program is from the formula and why.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_TOOLS_LOOM_PLANSTATE_H
#define LOOM_TOOLS_LOOM_PLANSTATE_H

#include "tools/loom/PlanModel.h"

#include "llvm/ADT/SmallVector.h"

#include <cstdint>

namespace loom::plan {

/// One parameter tensor with its global shape (Loom's IR shape under
/// tensor parallelism) and the dimension tp splits (-1: whole on every tp
/// rank).
struct ParamTensor {
  const char *name = "";
  llvm::SmallVector<int64_t, 3> shape;
  int tpDim = -1;
  int64_t elements() const;
};

/// How the counting treats the splits: `loom()` is what the compiler
/// builds; `ideal()` the formulas' Φ/(t·N) with the unpadded vocabulary.
struct TensorSplit {
  bool padVocab = true;
  /// Tensors with no tp dimension (layer norms, row-parallel biases, wpe,
  /// ln_f) whole on every tp rank, not Φ/t.
  bool tpReplicates = true;
  /// Only tensors with a dimension dp divides are split over dp.
  bool dpWholeWhenIndivisible = true;
  static TensorSplit loom() { return {}; }
  static TensorSplit ideal() { return {false, false, false}; }
};

/// Elements of each model-state role one GPU of a stage holds.
struct StageState {
  /// Parameters of the stage on one GPU before ZeRO splits anything.
  double unshardedParams = 0;
  double params = 0, grads = 0;
  /// Each of the AdamW moments (m and v; bf16's fp32 master weights are
  /// sharded like them).
  double moments = 0;
  /// Parameters (on one GPU, before ZeRO) of the tensors ZeRO can split
  /// over dp: what ZeRO-3 gathers and ZeRO-1/2 reduce-scatter.
  double dpSplittableParams = 0;
  /// The same for the blocks' tensors only: what ZeRO-3 gathers again for
  /// the backward (the embedding's backward needs no table, and the head
  /// runs its backward right after its forward, on the copy the forward
  /// gathered).
  double blockDpSplittableParams = 0;
  /// The layer norms' gradient elements on this GPU (ZeRO-2/3: the dp
  /// shard). Sequence parallelism leaves them partial over tp (each rank
  /// normalises its sequence shard): they are all-reduced over tp too.
  double layerNormGrads = 0;
  /// The tied wte's gradient the pipeline's first and last stage sum (0
  /// when the stage has no wte): ZeRO-1/2/3 the dp block, as the compiled
  /// step reduce-scatters it over dp before that sum.
  double wteGrad = 0;
  /// Bytes: p·P + g·G + K·M with `bytes` = (p, g, K); fp32 4·(P + G + 2M)
  /// (what `--loom-report` prints as model_state_bytes), bf16 mixed
  /// precision 2P + 2G + 12M (model_state_bytes_bf16_mixed), 2P + 4G + 12M
  /// with fp32 gradients.
  double bytes(StateElementBytes bytes) const;
};

/// The tensors of one GPT-2 transformer block (hidden size h) at tp = t.
llvm::SmallVector<ParamTensor, 12> blockTensors(int64_t h, int64_t t);

/// Vocabulary rows the compiled wte has at tp = t (padded when t does not
/// divide V).
int64_t compiledVocabRows(const ModelShape &model, int64_t t,
                          int64_t vocabDivisibleBy);

/// The model state one GPU of stage `stage` (of `plan.pp`, holding
/// `layers` blocks) holds under `split`.
StageState stageState(const ModelShape &model, const Plan &plan,
                      const Workload &work, int64_t stage, int64_t layers,
                      TensorSplit split);

} // namespace loom::plan

#endif // LOOM_TOOLS_LOOM_PLANSTATE_H
