//===- instruction_cost.h - FLOPs and bytes of a kernel call ----*- C++ -*-===//
//
// What one call of the executor (an instruction, or a span it runs as one
// call: gelu_epilogues.h, residual_norms.h, cross_entropy_fusion.h,
// adamw_groups.h) must do at the least, from the program's shapes alone:
// the FLOPs of its products and the bytes of device memory it must read
// and write. A trace carries both per span (loom-run --trace), so
// bench/trace_breakdown.py can put each opcode's measured time beside the
// time a device's peak rate and bandwidth allow (a roofline), and a GPU run
// says which kernels are far from theirs rather than only which are long.
//
// FLOPs follow the model-FLOPs convention of MFU (model_flops.h): a GEMM of
// M x K by K x N is 2MNK, each of its gradients (input and weight) the
// same again; causal attention over B sequences of T tokens and width C is
// 2·B·T²·C forward (QKᵀ and PV on the lower triangle) and twice that
// backward, whatever a kernel recomputes. Elementwise work, reductions and
// the optimizer count no FLOPs: they are bound by memory.
//
// Bytes: every buffer the span reads that it did not write itself, plus
// every buffer it writes, each once (a result written over an operand
// counts both ways). Scratch (saved statistics, workspace) is left out, and
// so is a result the span hands from one of its instructions to a later
// one that nothing after the span reads (pair_fusion::deadAfter, in the
// micro-batch list where backends fuse pairs): the input gradient a
// LinearGrad + GeluGrad pair folds into its GEMM's epilogue, which a fused
// call need never write. A result read later (a Linear + Gelu pair's
// pre-activation, which the GeluGrad reads) counts, so the figure is what
// the call must move at the least.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_INSTRUCTION_COST_H
#define LOOM_RUNTIME_CORE_INSTRUCTION_COST_H

#include "runtime/program/program.h"

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

struct InstructionCost {
  double flops = 0;
  int64_t bytes = 0;
};

/// The FLOPs of instruction `ins` of `stage` (see above; 0 for all but
/// GEMMs and attention). The stage must have been verified.
double instructionFlops(const program::Stage &stage,
                        const program::Instruction &ins);

/// The cost of instructions [first, first + count) of `list` (a list of
/// `stage`: its instructions, its update instructions or a pipeline chunk's
/// forward or backward) run as one call. Collectives cost nothing here:
/// their bytes cross a link, not a device's memory.
InstructionCost callCost(
    const program::Stage &stage,
    const flatbuffers::Vector<flatbuffers::Offset<program::Instruction>> &list,
    uint32_t first, uint32_t count);

/// One opcode's instructions in a step: how many run and what they cost.
struct OpcodeCost {
  program::Opcode opcode = program::Opcode::Embedding;
  int64_t count = 0;
  InstructionCost cost;
};

/// A step of `stage` on one of its ranks, instruction by instruction (no
/// backend's fused calls): each micro-batch's pass (Stage.instructions, or
/// every pipeline chunk's forward and backward) then the update, summed
/// per opcode in the order the opcodes first run. Collectives are left out
/// (they cost nothing here).
std::vector<OpcodeCost> stageStepCost(const program::Stage &stage);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_INSTRUCTION_COST_H
