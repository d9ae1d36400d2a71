//===- residual_norms.cpp - Which Add + LayerNorm pairs run as one call ---===//
#include "runtime/core/residual_norms.h"

#include "runtime/core/pair_fusion.h"

namespace loom {
namespace {

using namespace pair_fusion;
using program::Instruction;
using program::Opcode;
using program::Stage;

/// Whether a kernel that reads each element of `rows` (same-shape row
/// tensors) before the lane that read it writes that element of `written`
/// may do so: `written` is disjoint from each, or is it exactly.
bool writableOver(const Stage &stage, uint32_t written,
                  const std::vector<uint32_t> &rows) {
  for (uint32_t r : rows)
    if (!disjoint(stage, written, {r}) && !sameBytes(stage, written, r))
      return false;
  return true;
}

/// Whether `add` adds two BF16 operands of one size (no broadcast) into a
/// BF16 sum: a + b -> sum.
bool plainAdd(const Stage &stage, const Instruction &add, uint32_t &a,
              uint32_t &b, uint32_t &sum) {
  const std::vector<uint32_t> in = operands(add.inputs()),
                              out = operands(add.outputs());
  if (add.opcode() != Opcode::Add || in.size() != 2 || out.size() != 1 ||
      !allBF16(stage, {in[0], in[1], out[0]}))
    return false;
  const uint64_t bytes = program::bufferRange(stage, out[0]).bytes();
  if (program::bufferRange(stage, in[0]).bytes() != bytes ||
      program::bufferRange(stage, in[1]).bytes() != bytes)
    return false;
  a = in[0], b = in[1], sum = out[0];
  return true;
}

/// Add (a, b -> sum) then LayerNorm (sum, weight, bias -> y; scratch mean,
/// rstd).
bool forwardPair(const Stage &stage, const InstructionList &list,
                 uint32_t first) {
  const Instruction &add = *list.Get(first), &norm = *list.Get(first + 1);
  uint32_t a = 0, b = 0, sum = 0;
  if (norm.opcode() != Opcode::LayerNorm || !plainAdd(stage, add, a, b, sum))
    return false;
  const std::vector<uint32_t> in = operands(norm.inputs()),
                              out = operands(norm.outputs());
  if (in.size() != 3 || out.size() != 1 || !sameBytes(stage, in[0], sum) ||
      !allBF16(stage, {in[1], in[2], out[0]}))
    return false;
  // The kernel reads each row of a and b (and the whole weight and bias)
  // and writes the row of the sum and of y, each element by the lane that
  // read it. The statistics it does not write: the buffer planner puts them on
  // bytes dead after the Add (the sublayer's output), where one row's
  // statistics would land while another warp still reads that row; no
  // instruction reads them (the gradient recomputes its own), which
  // deadAfter checks.
  for (uint32_t s : operands(norm.scratch()))
    if (!deadAfter(stage, list, first + 1, first + 1, s))
      return false;
  return writableOver(stage, sum, {a, b}) &&
         writableOver(stage, out[0], {a, b, sum}) &&
         disjoint(stage, sum, {in[1], in[2]}) &&
         disjoint(stage, out[0], {in[1], in[2]});
}

/// LayerNormGrad (dout, x, weight -> dx, dweight, dbias; scratch mean,
/// rstd) then Add (r, dx -> sum) or Add (dx, r -> sum).
bool backwardPair(const Stage &stage, const InstructionList &list,
                  uint32_t first) {
  const Instruction &grad = *list.Get(first), &add = *list.Get(first + 1);
  uint32_t a = 0, b = 0, sum = 0;
  if (grad.opcode() != Opcode::LayerNormGrad ||
      !plainAdd(stage, add, a, b, sum))
    return false;
  const std::vector<uint32_t> in = operands(grad.inputs()),
                              out = operands(grad.outputs());
  if (in.size() != 3 || out.size() != 3 ||
      !allBF16(stage, {in[0], in[1], in[2]}))
    return false;
  const bool dxFirst = sameBytes(stage, a, out[0]);
  if (!dxFirst && !sameBytes(stage, b, out[0]))
    return false;
  const uint32_t residual = dxFirst ? b : a;
  // The statistics kernel writes the scratch first; then one kernel reads
  // each row of dout, x and the residual gradient (and the whole weight)
  // and writes the row of the sum, each element by the lane that read it,
  // so the sum may be any of those three; the parameter gradients are
  // written last.
  const std::vector<uint32_t> rows = {in[0], in[1], residual};
  std::vector<uint32_t> read = rows;
  read.push_back(in[2]);
  for (uint32_t w : operands(grad.scratch()))
    if (!disjoint(stage, w, read))
      return false;
  for (uint32_t w : {out[1], out[2]})
    if (!disjoint(stage, w, read) || !disjoint(stage, w, {sum}))
      return false;
  return writableOver(stage, sum, rows) &&
         disjoint(stage, residual, {out[0]}) && disjoint(stage, sum, {in[2]}) &&
         deadAfter(stage, list, first, first + 1, out[0]);
}

} // namespace

std::vector<ResidualNormPlan> planResidualNorms(const Stage &stage) {
  return findPairs(stage, forwardPair, backwardPair);
}

} // namespace loom
