//===- cross_entropy_fusion.cpp - Which losses run with their gradient ----===//
#include "runtime/core/cross_entropy_fusion.h"

#include "runtime/core/pair_fusion.h"

namespace loom {
namespace {

using namespace pair_fusion;
using program::Instruction;
using program::Opcode;
using program::Stage;

/// Whether the loss at `first` and the gradient at first + count - 1 (a
/// Fill between when count is 3) qualify (cross_entropy_fusion.h).
bool qualifies(const Stage &stage, const InstructionList &list, uint32_t first,
               uint32_t count) {
  const Instruction &loss = *list.Get(first),
                    &grad = *list.Get(first + count - 1);
  if (loss.opcode() != Opcode::CrossEntropy ||
      grad.opcode() != Opcode::CrossEntropyGrad)
    return false;
  for (uint32_t k = first; k < first + count; ++k)
    if (list.Get(k)->last_microbatch_only() ||
        (list.Get(k)->axes() && list.Get(k)->axes()->size() > 0))
      return false;
  const std::vector<uint32_t> in = operands(loss.inputs()),
                              out = operands(loss.outputs()),
                              scratch = operands(loss.scratch()),
                              gradIn = operands(grad.inputs()),
                              gradOut = operands(grad.outputs());
  if (in.size() != 2 || out.size() != 1 || scratch.size() > 1 ||
      gradIn.size() != 3 || gradOut.size() != 1)
    return false;
  const uint32_t logits = in[0], targets = in[1], seed = gradIn[0],
                 dlogits = gradOut[0];
  if (!sameBytes(stage, gradIn[1], logits) ||
      !sameBytes(stage, gradIn[2], targets) ||
      !allBF16(stage, {logits, gradIn[1], dlogits}))
    return false;
  // 1. The Fill between runs before the loss now: it may write nothing the
  //    loss reads or writes.
  std::vector<uint32_t> lossTouches = {logits, targets, out[0]};
  lossTouches.insert(lossTouches.end(), scratch.begin(), scratch.end());
  if (count == 3) {
    const Instruction &fill = *list.Get(first + 1);
    if (fill.opcode() != Opcode::Fill)
      return false;
    for (uint32_t w : operands(fill.outputs()))
      if (!disjoint(stage, w, lossTouches))
        return false;
  }
  // 2. The call reads the logits, targets and seed; each block writes its
  //    row of the gradient after reading that row (so over the logits
  //    exactly is fine), and the losses once every row is read.
  if (!(disjoint(stage, dlogits, {logits}) ||
        sameBytes(stage, dlogits, logits)) ||
      !disjoint(stage, dlogits, {targets, seed}))
    return false;
  std::vector<uint32_t> lossWrites = {out[0]};
  lossWrites.insert(lossWrites.end(), scratch.begin(), scratch.end());
  for (uint32_t w : lossWrites)
    if (!disjoint(stage, w, {logits, targets, seed, dlogits}))
      return false;
  return lossWrites.size() < 2 || disjoint(stage, out[0], {lossWrites[1]});
}

} // namespace

std::vector<CrossEntropyFusionPlan> planCrossEntropyFusion(const Stage &stage) {
  std::vector<CrossEntropyFusionPlan> plans;
  const InstructionList *list = stage.instructions();
  if (!list)
    return plans;
  for (uint32_t i = 0; i < list->size(); ++i)
    for (uint32_t count : {2u, 3u})
      if (i + count <= list->size() && qualifies(stage, *list, i, count)) {
        plans.push_back({i, count});
        i += count - 1;
        break;
      }
  return plans;
}

} // namespace loom
