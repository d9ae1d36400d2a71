//===- PlanState.cpp - Model state of a stage, tensor by tensor -*- C++ -*-===//
//
// The GPT-2 tensors as Loom's tensor-parallel and ZeRO passes shard them;
// see PlanState.h.
//
//===----------------------------------------------------------------------===//

#include "tools/loom/PlanState.h"

#include "passes/Sharding/VocabPadding.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringRef.h"

#include <algorithm>

using namespace loom::plan;

int64_t ParamTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

double StageState::bytes(StateElementBytes bytes) const {
  // `moments` counts each parameter's optimizer state once (m and v, and
  // bf16's master, are sharded alike).
  return bytes.param * params + bytes.grad * grads + bytes.optimizer * moments;
}

llvm::SmallVector<ParamTensor, 12> loom::plan::blockTensors(int64_t h,
                                                            int64_t t) {
  // Under tensor parallelism the QKV projection is [h, 3, h] (the three
  // projections' columns split alike); without it the importer's [h, 3h].
  bool split = t > 1;
  llvm::SmallVector<ParamTensor, 12> tensors;
  tensors.push_back({"ln_1.weight", {h}, -1});
  tensors.push_back({"ln_1.bias", {h}, -1});
  if (split) {
    tensors.push_back({"attn.c_attn.weight", {h, 3, h}, 2});
    tensors.push_back({"attn.c_attn.bias", {3, h}, 1});
  } else {
    tensors.push_back({"attn.c_attn.weight", {h, 3 * h}, -1});
    tensors.push_back({"attn.c_attn.bias", {3 * h}, -1});
  }
  tensors.push_back({"attn.c_proj.weight", {h, h}, 0});
  tensors.push_back({"attn.c_proj.bias", {h}, -1});
  tensors.push_back({"ln_2.weight", {h}, -1});
  tensors.push_back({"ln_2.bias", {h}, -1});
  tensors.push_back({"mlp.c_fc.weight", {h, 4 * h}, 1});
  tensors.push_back({"mlp.c_fc.bias", {4 * h}, 0});
  tensors.push_back({"mlp.c_proj.weight", {4 * h, h}, 0});
  tensors.push_back({"mlp.c_proj.bias", {h}, -1});
  if (!split)
    for (ParamTensor &tensor : tensors)
      tensor.tpDim = -1;
  return tensors;
}

int64_t loom::plan::compiledVocabRows(const ModelShape &model, int64_t t,
                                      int64_t vocabDivisibleBy) {
  return mlir::loom::paddedRows(model.vocab, t, vocabDivisibleBy);
}

namespace {

/// Whether ZeRO over n ranks splits `tensor` (it has a dimension n divides
/// that tp does not split).
bool dpSplits(const ParamTensor &tensor, int64_t n, const TensorSplit &split) {
  if (n <= 1)
    return false;
  if (!split.dpWholeWhenIndivisible)
    return true;
  for (size_t d = 0; d < tensor.shape.size(); ++d)
    if (int(d) != tensor.tpDim && tensor.shape[d] % n == 0)
      return true;
  return false; // no dimension to split: whole on every dp rank
}

/// Elements of `tensor` on one GPU: split by t on its tp dimension, and by
/// n when `overDp` (a ZeRO-sharded role) on the first other dimension n
/// divides.
double localElements(const ParamTensor &tensor, int64_t t, int64_t n,
                     bool overDp, const TensorSplit &split) {
  double elements = double(tensor.elements());
  if (t > 1 && (tensor.tpDim >= 0 || !split.tpReplicates))
    elements /= double(t);
  return overDp && dpSplits(tensor, n, split) ? elements / double(n) : elements;
}

} // namespace

StageState loom::plan::stageState(const ModelShape &model, const Plan &plan,
                                  const Workload &work, int64_t stage,
                                  int64_t layers, TensorSplit split) {
  const int64_t h = model.hidden, t = plan.tp, n = plan.dp;
  const int64_t p = plan.pp;
  // Every block holds the same tensors: one block's, counted `layers`
  // times (the search evaluates thousands of 96-layer plans).
  llvm::SmallVector<std::pair<ParamTensor, double>, 16> tensors;
  for (ParamTensor &tensor : blockTensors(h, t))
    tensors.push_back({std::move(tensor), double(layers)});
  size_t blockTensorCount = tensors.size();
  int64_t vocab = split.padVocab
                      ? compiledVocabRows(model, t, work.vocabDivisibleBy)
                      : model.vocab;
  bool holdsWte = stage == 0 || stage == p - 1;
  if (holdsWte)
    tensors.push_back({{"wte.weight", {vocab, h}, t > 1 ? 0 : -1}, 1.0});
  // wpe and ln_f: whatever is outside the blocks besides wte (n_positions
  // rows of wpe, the rest ln_f's weight and bias).
  int64_t wpe = std::min(model.positions * h, model.otherParams);
  if (stage == 0 && wpe > 0)
    tensors.push_back({{"wpe.weight", {model.positions, h}, -1}, 1.0});
  if (stage == p - 1 && model.otherParams > wpe)
    tensors.push_back({{"ln_f", {model.otherParams - wpe}, -1}, 1.0});

  StageState state;
  for (auto [index, entry] : llvm::enumerate(tensors)) {
    const auto &[tensor, copies] = entry;
    bool inBlock = index < blockTensorCount;
    double unsharded = copies * localElements(tensor, t, n, false, split);
    state.unshardedParams += unsharded;
    if (dpSplits(tensor, n, split)) {
      state.dpSplittableParams += unsharded;
      if (inBlock)
        state.blockDpSplittableParams += unsharded;
    }
    state.params += copies * localElements(tensor, t, n, plan.zero >= 3, split);
    double grad = copies * localElements(tensor, t, n, plan.zero >= 2, split);
    state.grads += grad;
    state.moments +=
        copies * localElements(tensor, t, n, plan.zero >= 1, split);
    if (llvm::StringRef(tensor.name).starts_with("ln_"))
      state.layerNormGrads += grad;
    // The tied wte's pipeline sum moves the dp block wherever ZeRO shards
    // its optimizer state (ZeRO-1 reduce-scatters it over dp first).
    if (llvm::StringRef(tensor.name) == "wte.weight")
      state.wteGrad =
          copies * localElements(tensor, t, n, plan.zero >= 1, split);
  }
  return state;
}
