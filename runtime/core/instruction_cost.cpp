//===- instruction_cost.cpp - FLOPs and bytes of a kernel call --*- C++ -*-===//
#include "runtime/core/instruction_cost.h"

#include "runtime/core/pair_fusion.h"

#include <algorithm>
#include <vector>

namespace loom {

using program::Opcode;

namespace {

double numel(const program::Stage &stage, uint32_t buffer) {
  return static_cast<double>(
      program::shapeNumel(program::bufferShape(stage, buffer)));
}

double lastDim(const program::Stage &stage, uint32_t buffer) {
  const std::vector<int64_t> shape = program::bufferShape(stage, buffer);
  return shape.empty() ? 1.0 : static_cast<double>(shape.back());
}

/// 2·B·T²·C: QKᵀ and PV of causal attention whose output (or output
/// gradient) is buffer `out`, [B, T, C].
double causalAttentionFlops(const program::Stage &stage, uint32_t out) {
  const std::vector<int64_t> s = program::bufferShape(stage, out);
  const double B = static_cast<double>(s[0]), T = static_cast<double>(s[1]),
               C = static_cast<double>(s[2]);
  return 2 * B * T * T * C;
}

} // namespace

double instructionFlops(const program::Stage &stage,
                        const program::Instruction &ins) {
  const auto &in = *ins.inputs();
  const auto *outs = ins.outputs();
  switch (ins.opcode()) {
  case Opcode::Linear:
  case Opcode::Matmul:
    // [..., K] by K x N: 2K per element of the [..., N] result.
    return 2 * numel(stage, outs->Get(0)) * lastDim(stage, in.Get(0));
  case Opcode::LinearGrad:
  case Opcode::MatmulGrad:
    // The forward's product (dout is its result, the lhs its K) once for
    // the input gradient and once for the weight's (both always written);
    // a LinearGrad's bias gradient is a sum, no product.
    return 2 * (2 * numel(stage, in.Get(0)) * lastDim(stage, in.Get(1)));
  case Opcode::Attention:
    return causalAttentionFlops(stage, outs->Get(0));
  case Opcode::AttentionGrad:
    return 2 * causalAttentionFlops(stage, in.Get(0));
  default:
    return 0;
  }
}

InstructionCost callCost(
    const program::Stage &stage,
    const flatbuffers::Vector<flatbuffers::Offset<program::Instruction>> &list,
    uint32_t first, uint32_t count) {
  InstructionCost cost;
  auto bytesOf = [&](uint32_t b) {
    return static_cast<int64_t>(program::bufferRange(stage, b).bytes());
  };
  std::vector<uint32_t> read; // operands from outside the call
  // Each result of the call: the last instruction that wrote it, and the
  // last of the call that read it after (-1: none, it is not handed over).
  struct Result {
    uint32_t buffer, writer;
    int64_t reader = -1;
  };
  std::vector<Result> results;
  auto resultOf = [&](uint32_t b) {
    return std::find_if(results.begin(), results.end(),
                        [&](const Result &r) { return r.buffer == b; });
  };
  for (uint32_t k = first; k < first + count && k < list.size(); ++k) {
    const program::Instruction &ins = *list.Get(k);
    if (program::isCollective(ins.opcode()) || ins.opcode() == Opcode::Wait)
      continue;
    cost.flops += instructionFlops(stage, ins);
    // Operands first: an instruction reads before it writes (AdamW's
    // in-place results are its operands' buffers).
    if (const auto *in = ins.inputs())
      for (uint32_t b : *in) {
        if (auto r = resultOf(b); r != results.end()) {
          r->reader = k;
        } else if (std::find(read.begin(), read.end(), b) == read.end()) {
          read.push_back(b);
          cost.bytes += bytesOf(b);
        }
      }
    if (const auto *outs = ins.outputs())
      for (uint32_t b : *outs) {
        if (auto r = resultOf(b); r != results.end()) {
          r->writer = k;
          r->reader = -1;
        } else {
          results.push_back({b, k});
          cost.bytes += bytesOf(b);
        }
      }
  }
  // A result handed over inside the call that nothing after it reads (a
  // LinearGrad + GeluGrad pair's input gradient, which the GEMM's epilogue
  // turns into the GeluGrad's result) need never reach memory: the least
  // the call must move leaves it out. pair_fusion::deadAfter answers for
  // the micro-batch list, where the backends fuse pairs; elsewhere every
  // result counts.
  if (&list == stage.instructions())
    for (const Result &r : results)
      if (r.reader >= 0 &&
          pair_fusion::deadAfter(stage, list, r.writer,
                                 static_cast<uint32_t>(r.reader), r.buffer))
        cost.bytes -= bytesOf(r.buffer);
  return cost;
}

std::vector<OpcodeCost> stageStepCost(const program::Stage &stage) {
  std::vector<OpcodeCost> rows;
  auto addList =
      [&](const flatbuffers::Vector<flatbuffers::Offset<program::Instruction>>
              *list,
          int64_t times) {
        for (uint32_t i = 0; list && i < list->size(); ++i) {
          const Opcode op = list->Get(i)->opcode();
          if (program::isCollective(op) || op == Opcode::Wait)
            continue;
          const InstructionCost c = callCost(stage, *list, i, 1);
          auto row =
              std::find_if(rows.begin(), rows.end(),
                           [&](const OpcodeCost &r) { return r.opcode == op; });
          if (row == rows.end()) {
            rows.push_back({op, 0, {}});
            row = rows.end() - 1;
          }
          row->count += times;
          row->cost.flops += c.flops * static_cast<double>(times);
          row->cost.bytes += c.bytes * times;
        }
      };
  const int64_t microbatches = stage.microbatches();
  if (const program::Pipeline *pipe = stage.pipeline()) {
    for (uint32_t c = 0; pipe->chunks() && c < pipe->chunks()->size(); ++c) {
      const program::PipelineChunk *chunk = pipe->chunks()->Get(c);
      addList(chunk->forward(), microbatches);
      addList(chunk->backward(), microbatches);
    }
  } else {
    addList(stage.instructions(), microbatches);
  }
  addList(stage.update_instructions(), 1);
  return rows;
}

} // namespace loom
