//===- in_place.h - Outputs kernels may write over an input -----*- C++ -*-===//
//
// The one table of which instruction outputs may lie exactly over which of
// their inputs: the kernels of every backend read each element of that
// input (a whole row, for the row-wise ones) before they write the same
// element of the output. The executor runs such an instruction in place
// where the buffer plan puts the output there, and stages any other
// overlap through a temporary; the buffer planner
// (passes/Lowering/InPlaceResults.h) puts outputs there only per this
// table, so a planned program needs no staging. Header-only: the compiler
// uses it too.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_PROGRAM_IN_PLACE_H
#define LOOM_RUNTIME_PROGRAM_IN_PLACE_H

#include "runtime/program/program_generated.h"

#include <cstddef>

namespace loom::program {

/// Whether every kernel of `op` may write its output over input `k` when
/// both are the same bytes. AdamW's in-place state is its own contract.
inline bool outputMayOverwriteInput(Opcode op, size_t k) {
  switch (op) {
  case Opcode::Add: // the lhs, not the broadcast rhs
    return k == 0;
  case Opcode::Gelu:
  case Opcode::Softmax:
  case Opcode::GeluGrad:
    return true;
  case Opcode::CrossEntropyGrad: // dlogits over logits (whole, or a shard)
  case Opcode::CrossEntropySumsGrad:
    return k == 1;
  default:
    return false;
  }
}

} // namespace loom::program

#endif // LOOM_RUNTIME_PROGRAM_IN_PLACE_H
