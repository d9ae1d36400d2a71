//===- BestFitPlacement.h - Arena offsets from lifetimes --------*- C++ -*-===//
//
// The placement half of buffer planning (--loom-plan-buffers): given each
// allocation's size and live range, give it an arena offset such that no two
// allocations alive at the same time share a byte.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_LOWERING_BESTFITPLACEMENT_H
#define LOOM_PASSES_LOWERING_BESTFITPLACEMENT_H

#include "llvm/ADT/SmallVector.h"

#include <cstdint>

namespace mlir::loom {

/// One allocation: a tensor's storage or an op's scratch.
struct Allocation {
  int64_t bytes = 0;
  /// Execution positions of the first write and last read (inclusive).
  int64_t start = 0;
  int64_t end = 0;
  int64_t offset = -1;
};

/// Rounds `value` up to a multiple of `alignment` (> 0).
inline int64_t alignTo(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

/// Places `transient` allocations above `base` (aligned): largest first
/// (ties: earlier start first), each at the lowest aligned offset that
/// overlaps no placed allocation alive at the same time. Sets every
/// `offset`, reorders `transient` into placement order, and returns the end
/// of the highest allocation (at least `base`).
///
/// The search looks at merged byte ranges of what is taken, per span of
/// execution positions, never at each placed allocation: O(log^2) per
/// allocation, so planning grows linearly with depth.
int64_t placeBestFit(llvm::SmallVectorImpl<Allocation *> &transient,
                     int64_t base, int64_t alignment);

} // namespace mlir::loom

#endif // LOOM_PASSES_LOWERING_BESTFITPLACEMENT_H
