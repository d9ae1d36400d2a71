//===- gelu_epilogues.cpp - Which GEMM + GELU pairs run as one call -------===//
#include "runtime/core/gelu_epilogues.h"

#include <initializer_list>

namespace loom {
namespace {

using program::BufferRange;
using program::DType;
using program::Instruction;
using program::Opcode;
using program::Stage;

using InstructionList =
    flatbuffers::Vector<flatbuffers::Offset<program::Instruction>>;

BufferRange rangeOf(const Stage &stage, uint32_t buffer) {
  return program::bufferRange(stage, buffer);
}

bool allBF16(const Stage &stage, std::initializer_list<uint32_t> buffers) {
  for (uint32_t b : buffers)
    if (stage.buffers()->Get(b)->dtype() != DType::BF16)
      return false;
  return true;
}

/// Whether `written` overlaps none of `others`.
bool disjoint(const Stage &stage, uint32_t written,
              const std::vector<uint32_t> &others) {
  const BufferRange w = rangeOf(stage, written);
  for (uint32_t b : others)
    if (rangeOf(stage, b).overlaps(w))
      return false;
  return true;
}

std::vector<uint32_t> operands(const flatbuffers::Vector<uint32_t> *v) {
  return v ? std::vector<uint32_t>(v->begin(), v->end())
           : std::vector<uint32_t>();
}

/// `live` less `gone` (both sets of disjoint ranges).
void subtract(std::vector<BufferRange> &live, const BufferRange &gone) {
  std::vector<BufferRange> rest;
  for (const BufferRange &r : live) {
    if (!r.overlaps(gone)) {
      rest.push_back(r);
      continue;
    }
    if (r.begin < gone.begin)
      rest.push_back({r.begin, gone.begin});
    if (gone.end < r.end)
      rest.push_back({gone.end, r.end});
  }
  live = std::move(rest);
}

/// Whether an instruction reads any byte of `live` through an input. A
/// scratch buffer holds nothing before its instruction writes it (the
/// buffer planner gives it a live range of that instruction alone, on
/// bytes anything dead may have left), so it reads no earlier value.
bool readsAny(const Stage &stage, const Instruction &ins,
              const std::vector<BufferRange> &live) {
  if (ins.inputs())
    for (uint32_t b : *ins.inputs())
      for (const BufferRange &r : live)
        if (rangeOf(stage, b).overlaps(r))
          return true;
  return false;
}

/// What an instruction writes: its outputs and its scratch.
std::vector<uint32_t> written(const Instruction &ins) {
  std::vector<uint32_t> out = operands(ins.outputs());
  const std::vector<uint32_t> scratch = operands(ins.scratch());
  out.insert(out.end(), scratch.begin(), scratch.end());
  return out;
}

/// Walks instructions [begin, end) of `list` over the bytes still `live`:
/// false when one reads any of them; what each writes is live no more.
bool survives(const Stage &stage, const InstructionList &list, uint32_t begin,
              uint32_t end, std::vector<BufferRange> &live) {
  for (uint32_t k = begin; k < end && !live.empty(); ++k) {
    const Instruction &ins = *list.Get(k);
    if (readsAny(stage, ins, live))
      return false;
    for (uint32_t b : written(ins))
      subtract(live, rangeOf(stage, b));
  }
  return true;
}

/// Whether any of `buffers` (the ones >= 0) overlaps `live`.
bool touches(const Stage &stage, std::initializer_list<int32_t> buffers,
             const std::vector<BufferRange> &live) {
  for (int32_t b : buffers)
    if (b >= 0)
      for (const BufferRange &r : live)
        if (rangeOf(stage, static_cast<uint32_t>(b)).overlaps(r))
          return true;
  return false;
}

/// Whether the value in `dead` (written by instruction `writer` of the
/// micro-batch list, read by the next one) is read by nothing else. After
/// the list come either the next micro-batch's pass, or the runtime's read
/// of the loss, the update, the runtime's reads of the gradient norm and of
/// the model state (checkpoints), and the next step's pass; on both paths,
/// up to the writer, every byte of the value must be written again before
/// anything reads it, or never read.
bool deadAfter(const Stage &stage, const InstructionList &list, uint32_t writer,
               uint32_t dead) {
  std::vector<BufferRange> live = {rangeOf(stage, dead)};
  for (uint32_t b : written(*list.Get(writer + 1)))
    subtract(live, rangeOf(stage, b));
  if (!survives(stage, list, writer + 2, list.size(), live))
    return false;
  std::vector<BufferRange> nextMicrobatch = live;
  if (!survives(stage, list, 0, writer, nextMicrobatch) ||
      touches(stage, {stage.loss()}, live))
    return false;
  if (stage.update_instructions() &&
      !survives(stage, *stage.update_instructions(), 0,
                stage.update_instructions()->size(), live))
    return false;
  if (touches(stage, {stage.grad_norm()}, live))
    return false;
  if (stage.params())
    for (const program::Param *p : *stage.params())
      if (touches(stage,
                  {static_cast<int32_t>(p->buffer()), p->grad_buffer(),
                   p->m_buffer(), p->v_buffer(), p->master_buffer()},
                  live))
        return false;
  return survives(stage, list, 0, writer, live);
}

/// Linear (x, weight[, bias] -> pre) then Gelu (pre -> out).
bool forwardPair(const Stage &stage, const Instruction &linear,
                 const Instruction &gelu) {
  if (linear.opcode() != Opcode::Linear || gelu.opcode() != Opcode::Gelu)
    return false;
  const std::vector<uint32_t> in = operands(linear.inputs()),
                              out = operands(linear.outputs()),
                              geluIn = operands(gelu.inputs()),
                              geluOut = operands(gelu.outputs());
  if (in.size() < 2 || out.size() != 1 || geluIn.size() != 1 ||
      geluOut.size() != 1 ||
      !(rangeOf(stage, geluIn[0]) == rangeOf(stage, out[0])))
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
      geluOut.size() != 1 ||
      !(rangeOf(stage, geluIn[0]) == rangeOf(stage, out[0])))
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
         deadAfter(stage, list, first, out[0]);
}

} // namespace

std::vector<GeluEpiloguePlan> planGeluEpilogues(const Stage &stage) {
  std::vector<GeluEpiloguePlan> plans;
  const InstructionList *list = stage.instructions();
  if (!list)
    return plans;
  for (uint32_t i = 0; i + 1 < list->size(); ++i) {
    const Instruction &a = *list->Get(i), &b = *list->Get(i + 1);
    if (a.last_microbatch_only() || b.last_microbatch_only())
      continue;
    if (forwardPair(stage, a, b)) {
      plans.push_back({i, false});
      ++i;
    } else if (backwardPair(stage, *list, i)) {
      plans.push_back({i, true});
      ++i;
    }
  }
  return plans;
}

} // namespace loom
