//===- bf16_staging.cpp - fp32 copies of bf16 operands --------------------===//
#include "runtime/core/bf16_staging.h"

namespace loom {

using program::DType;
using program::Opcode;

bool stagesBF16Operands(Opcode op) {
  switch (op) {
  case Opcode::Copy:
  case Opcode::Transpose:
  case Opcode::Slice:
  case Opcode::Concat:
  case Opcode::SliceGrad:
  case Opcode::LocalSlice:
  case Opcode::Cast:
  case Opcode::Wait:
    return false;
  default:
    return !program::isCollective(op);
  }
}

namespace {

std::vector<uint32_t> operands(const flatbuffers::Vector<uint32_t> *v) {
  std::vector<uint32_t> out;
  if (v)
    out.assign(v->begin(), v->end());
  return out;
}

} // namespace

BF16StagingPlan planBF16Staging(const program::Stage &stage,
                                const program::Instruction &ins) {
  BF16StagingPlan plan;
  const Opcode op = ins.opcode();
  if (!stagesBF16Operands(op))
    return plan;
  const std::vector<uint32_t> in = operands(ins.inputs()),
                              out = operands(ins.outputs()),
                              scr = operands(ins.scratch());
  auto isBF16 = [&](uint32_t b) {
    return stage.buffers()->Get(b)->dtype() == DType::BF16;
  };
  bool any = false;
  for (const auto *list : {&in, &out, &scr})
    for (uint32_t b : *list)
      any = any || isBF16(b);
  if (!any)
    return plan;
  auto addSlot = [&](uint32_t b, bool widen, bool round) {
    BF16Slot slot;
    slot.buffer = b;
    slot.offset = plan.bytes;
    slot.count = program::shapeNumel(program::bufferShape(stage, b));
    slot.widen = widen;
    slot.round = round;
    plan.bytes +=
        (static_cast<uint64_t>(slot.count) * sizeof(float) + 63) / 64 * 64;
    plan.slots.push_back(slot);
    return static_cast<int32_t>(plan.slots.size() - 1);
  };
  // 1. Inputs: one widened slot per distinct BF16 byte range.
  plan.inputSlot.assign(in.size(), -1);
  for (size_t j = 0; j < in.size(); ++j) {
    if (!isBF16(in[j]))
      continue;
    for (size_t i = 0; i < j && plan.inputSlot[j] < 0; ++i)
      if (plan.inputSlot[i] >= 0 &&
          program::bufferRange(stage, in[i]) == program::bufferRange(stage, in[j]))
        plan.inputSlot[j] = plan.inputSlot[i];
    if (plan.inputSlot[j] < 0)
      plan.inputSlot[j] = addSlot(in[j], /*widen=*/true, /*round=*/false);
  }
  // 2. Outputs: the slot of the input they may overwrite in place (the
  //    same bytes), else their own; rounded back after the kernel.
  // AdamW's outputs are the updated param, m and v: inputs 0, 2 and 3.
  const size_t adamwState[3] = {0, 2, 3};
  plan.outputSlot.assign(out.size(), -1);
  for (size_t k = 0; k < out.size(); ++k) {
    if (!isBF16(out[k]))
      continue;
    for (size_t j = 0; j < in.size() && plan.outputSlot[k] < 0; ++j) {
      const bool inPlace = op == Opcode::AdamW
                               ? k < 3 && j == adamwState[k]
                               : program::outputMayOverwriteInput(op, j);
      if (inPlace && plan.inputSlot[j] >= 0 &&
          program::bufferRange(stage, in[j]) == program::bufferRange(stage, out[k]))
        plan.outputSlot[k] = plan.inputSlot[j];
    }
    if (plan.outputSlot[k] >= 0)
      plan.slots[static_cast<size_t>(plan.outputSlot[k])].round = true;
    else
      plan.outputSlot[k] = addSlot(out[k], /*widen=*/false, /*round=*/true);
  }
  // 3. Scratch (kernel workspace or state kept for later): both ways.
  plan.scratchSlot.assign(scr.size(), -1);
  for (size_t k = 0; k < scr.size(); ++k)
    if (isBF16(scr[k]))
      plan.scratchSlot[k] = addSlot(scr[k], /*widen=*/true, /*round=*/true);
  return plan;
}

} // namespace loom
