//===- bf16_staging.h - fp32 copies of bf16 operands ------------*- C++ -*-===//
//
// Mixed precision stores activations, gradients and weights in bf16 but the
// kernels compute in fp32 (bf16 storage, fp32 math: on the CPU what "bf16
// inputs, fp32 accumulation" means). The executor runs an instruction whose
// float operands include BF16 buffers on fp32 copies: it widens every BF16
// input (and scratch) into a slot of its staging memory, runs the ordinary
// fp32 kernel on the slots, and rounds every BF16 output (and scratch) back
// to its buffer, to nearest even. One generic path for every opcode, so a
// kernel never needs a bf16 variant to be correct.
//
// Aliasing: an output the kernel may write over its input
// (runtime/program/in_place.h: in-place Add accumulation, Gelu,
// CrossEntropyGrad's dlogits over the logits; AdamW's state) shares the input's
// slot when both are the same BF16 bytes, so the kernel runs in place on fp32
// exactly as on fp32 buffers; any other output gets a slot of its own, rounded
// back only after the kernel has read every input.
//
// The plan depends only on the instruction and the buffer table, so the
// executor sizes its staging memory once at load (the largest plan of any
// instruction) and allocates it from its BufferMemory.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_BF16_STAGING_H
#define LOOM_RUNTIME_CORE_BF16_STAGING_H

#include "runtime/program/in_place.h"
#include "runtime/program/program.h"

#include <cstdint>
#include <vector>

namespace loom {

/// Whether `op` runs an fp32 kernel (compute, gradient, loss and optimizer
/// opcodes): its BF16 operands are staged. Data movement copies any dtype,
/// collectives move bf16 as it is, and Cast converts itself.
bool stagesBF16Operands(program::Opcode op);

/// One fp32 copy of a BF16 buffer.
struct BF16Slot {
  uint32_t buffer = 0;
  /// Bytes from the start of the staging memory (64-byte aligned).
  uint64_t offset = 0;
  int64_t count = 0;
  /// Widened from the buffer before the kernel (inputs, scratch).
  bool widen = false;
  /// Rounded into the buffer after the kernel (outputs, scratch).
  bool round = false;
};

/// Where an instruction's BF16 operands live while its fp32 kernel runs.
struct BF16StagingPlan {
  /// Per operand position: index into `slots`, or -1 (not BF16: the kernel
  /// reads / writes the buffer itself).
  std::vector<int32_t> inputSlot, outputSlot, scratchSlot;
  std::vector<BF16Slot> slots;
  /// Staging bytes the plan needs.
  uint64_t bytes = 0;
  bool empty() const { return slots.empty(); }
};

/// The staging plan of `ins` in `stage` (a verified stage): empty when the
/// opcode does not stage (stagesBF16Operands) or no operand is BF16.
BF16StagingPlan planBF16Staging(const program::Stage &stage,
                                const program::Instruction &ins);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_BF16_STAGING_H
