//===- pair_fusion.cpp - What fusing two instructions must respect --------===//
#include "runtime/core/pair_fusion.h"

namespace loom::pair_fusion {

using program::BufferRange;
using program::DType;
using program::Instruction;
using program::Stage;

namespace {

BufferRange rangeOf(const Stage &stage, uint32_t buffer) {
  return program::bufferRange(stage, buffer);
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

} // namespace

std::vector<uint32_t> operands(const flatbuffers::Vector<uint32_t> *v) {
  return v ? std::vector<uint32_t>(v->begin(), v->end())
           : std::vector<uint32_t>();
}

bool allBF16(const Stage &stage, std::initializer_list<uint32_t> buffers) {
  for (uint32_t b : buffers)
    if (stage.buffers()->Get(b)->dtype() != DType::BF16)
      return false;
  return true;
}

bool disjoint(const Stage &stage, uint32_t written,
              const std::vector<uint32_t> &others) {
  const BufferRange w = rangeOf(stage, written);
  for (uint32_t b : others)
    if (rangeOf(stage, b).overlaps(w))
      return false;
  return true;
}

bool deadAfter(const Stage &stage, const InstructionList &list, uint32_t writer,
               uint32_t reader, uint32_t dead) {
  std::vector<BufferRange> live = {rangeOf(stage, dead)};
  if (reader != writer)
    for (uint32_t b : written(*list.Get(reader)))
      subtract(live, rangeOf(stage, b));
  if (!survives(stage, list, reader + 1, list.size(), live))
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

bool sameBytes(const Stage &stage, uint32_t a, uint32_t b) {
  return rangeOf(stage, a) == rangeOf(stage, b);
}

std::vector<PairAt> findPairs(const Stage &stage, PairTest forward,
                              PairTest backward) {
  std::vector<PairAt> pairs;
  const InstructionList *list = stage.instructions();
  if (!list)
    return pairs;
  for (uint32_t i = 0; i + 1 < list->size(); ++i) {
    if (list->Get(i)->last_microbatch_only() ||
        list->Get(i + 1)->last_microbatch_only())
      continue;
    if (forward(stage, *list, i)) {
      pairs.push_back({i, false});
      ++i;
    } else if (backward(stage, *list, i)) {
      pairs.push_back({i, true});
      ++i;
    }
  }
  return pairs;
}

} // namespace loom::pair_fusion
