//===- pair_fusion.h - What fusing instructions must respect ----*- C++ -*-===//
//
// The planners of instruction pairs a backend runs as one call
// (gelu_epilogues.h, residual_norms.h) ask the same two questions of a
// verified stage: does a buffer the fused call writes overlap one it reads
// before, and is the value an instruction writes, which the fused call
// skips, read by nothing but its partner? Both are answered from the
// buffer table's byte ranges alone.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_PAIR_FUSION_H
#define LOOM_RUNTIME_CORE_PAIR_FUSION_H

#include "runtime/program/program.h"

#include <cstdint>
#include <initializer_list>
#include <vector>

namespace loom::pair_fusion {

using InstructionList =
    flatbuffers::Vector<flatbuffers::Offset<program::Instruction>>;

/// The buffer indices of an instruction's inputs / outputs (empty if none).
std::vector<uint32_t> operands(const flatbuffers::Vector<uint32_t> *v);

/// Whether every one of `buffers` is BF16.
bool allBF16(const program::Stage &stage,
             std::initializer_list<uint32_t> buffers);

/// Whether the bytes of `written` overlap none of `others`'.
bool disjoint(const program::Stage &stage, uint32_t written,
              const std::vector<uint32_t> &others);

/// Whether `a` and `b` are the same bytes.
bool sameBytes(const program::Stage &stage, uint32_t a, uint32_t b);

/// Whether the value buffer `dead` holds once instruction `reader` of the
/// micro-batch list `list` has run (written by instruction `writer`, before
/// it) is read by nothing else. After the list come either the next
/// micro-batch's pass, or the runtime's read of the loss, the update, the
/// runtime's reads of the gradient norm and of the model state
/// (checkpoints), and the next step's pass; on both paths, up to the
/// writer, every byte of the value must be written again (by an output or
/// a scratch buffer, which holds nothing before its instruction) before
/// anything reads it, or never be read. `reader` == `writer`: the value is
/// read by nothing at all (a result the fused call need not write).
bool deadAfter(const program::Stage &stage, const InstructionList &list,
               uint32_t writer, uint32_t reader, uint32_t dead);

/// A pair found: its first instruction, and which of the two kinds.
struct PairAt {
  uint32_t first = 0;
  bool backward = false;
  /// The first instruction's result is read by nothing but the second
  /// (deadAfter), so the fused call need not write it; set only by the
  /// planners that ask (gelu_epilogues.h's forward pairs).
  bool firstResultUnread = false;
};

/// Whether instructions `first` and first + 1 of the micro-batch list make
/// a pair of one kind.
using PairTest = bool (*)(const program::Stage &stage,
                          const InstructionList &list, uint32_t first);

/// The pairs of `stage.instructions()` that `forward` or `backward`
/// accepts, in list order; an instruction joins one pair at most, and one
/// that runs only on the last micro-batch none.
std::vector<PairAt> findPairs(const program::Stage &stage, PairTest forward,
                              PairTest backward);

} // namespace loom::pair_fusion

#endif // LOOM_RUNTIME_CORE_PAIR_FUSION_H
