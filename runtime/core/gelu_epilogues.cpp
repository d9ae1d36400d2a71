//===- gelu_epilogues.cpp - Which GEMM + GELU pairs run as one call -------===//
#include "runtime/core/gelu_epilogues.h"

#include "runtime/core/pair_fusion.h"

namespace loom {
namespace {

using namespace pair_fusion;
using program::Instruction;
using program::Opcode;
using program::Stage;

/// Linear (x, weight[, bias] -> pre) then Gelu (pre -> out).
bool forwardPair(const Stage &stage, const InstructionList &list,
                 uint32_t first) {
  const Instruction &linear = *list.Get(first), &gelu = *list.Get(first + 1);
  if (linear.opcode() != Opcode::Linear || gelu.opcode() != Opcode::Gelu)
    return false;
  const std::vector<uint32_t> in = operands(linear.inputs()),
                              out = operands(linear.outputs()),
                              geluIn = operands(gelu.inputs()),
                              geluOut = operands(gelu.outputs());
  if (in.size() < 2 || out.size() != 1 || geluIn.size() != 1 ||
      geluOut.size() != 1 || !sameBytes(stage, geluIn[0], out[0]))
    return false;
  // One GEMM reads x, the weight and the bias while it writes the
  // pre-activation and the GELU (the executor stages no overlap here).
  for (uint32_t b : in)
    if (!allBF16(stage, {b}))
      return false;
  std::vector<uint32_t> readOrPre = in;
  readOrPre.push_back(out[0]);
  return allBF16(stage, {out[0], geluOut[0]}) && disjoint(stage, out[0], in) &&
         disjoint(stage, geluOut[0], readOrPre);
}

/// LinearGrad (dout, x, weight -> dx, dweight[, dbias]) then GeluGrad
/// (dx, pre -> dpre).
bool backwardPair(const Stage &stage, const InstructionList &list,
                  uint32_t first) {
  const Instruction &grad = *list.Get(first), &geluGrad = *list.Get(first + 1);
  if (grad.opcode() != Opcode::LinearGrad ||
      geluGrad.opcode() != Opcode::GeluGrad)
    return false;
  const std::vector<uint32_t> in = operands(grad.inputs()),
                              out = operands(grad.outputs()),
                              geluIn = operands(geluGrad.inputs()),
                              geluOut = operands(geluGrad.outputs());
  if (in.size() != 3 || out.size() < 2 || geluIn.size() != 2 ||
      geluOut.size() != 1 || !sameBytes(stage, geluIn[0], out[0]))
    return false;
  // The weight gradients come first (they read dout and x, and write
  // dweight, dbias, as the LinearGrad does); then the fused GEMM reads
  // dout, the weight and the pre-activation, and writes dpre last, as the
  // GeluGrad does. dpre may so take x's place (the buffer planner puts it
  // there: x is dead after the weight gradient).
  // The weight gradients, written directly (the executor stages no
  // overlap here), overlap nothing the pair reads.
  const uint32_t pre = geluIn[1], dpre = geluOut[0];
  std::vector<uint32_t> read = in;
  read.push_back(pre);
  for (size_t k = 1; k < out.size(); ++k)
    if (!disjoint(stage, out[k], read))
      return false;
  return allBF16(stage, {in[0], in[2], pre, dpre}) &&
         disjoint(stage, dpre, {in[0], in[2], pre}) &&
         deadAfter(stage, list, first, first + 1, out[0]);
}

} // namespace

std::vector<GeluEpiloguePlan> planGeluEpilogues(const Stage &stage) {
  std::vector<GeluEpiloguePlan> plans =
      findPairs(stage, forwardPair, backwardPair);
  const InstructionList &list = *stage.instructions();
  for (GeluEpiloguePlan &p : plans)
    if (!p.backward)
      // The pre-activation, when no GeluGrad (or anything else) reads it
      // later: an evaluation's MLP.
      p.firstResultUnread =
          deadAfter(stage, list, p.first, p.first + 1,
                    operands(list.Get(p.first)->outputs()).front());
  return plans;
}

} // namespace loom
