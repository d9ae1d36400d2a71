//===- BestFitPlacement.cpp - Arena offsets from lifetimes ------*- C++ -*-===//
//
// Greedy best-fit: largest allocation first, each at the lowest aligned
// offset free for its whole lifetime.
//
// Comparing each new allocation with every placed one made planning
// quadratic in depth. Even comparing only with the placed allocations alive
// at the same time stays quadratic for training: the saved activations of
// every layer are alive together during the backward pass, so a 96-layer
// GPT-3 step compares each tensor with hundreds of others. But those
// neighbours sit next to each other in the arena (they were placed in the
// same way), so what the search needs is the *union* of their bytes, which
// is a handful of ranges. `Occupancy` keeps those unions per span of time
// (a segment tree over execution positions) and answers "lowest offset free
// during [start, end]" by skipping over a few merged ranges in O(log)
// nodes, independent of how many allocations are alive.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/BestFitPlacement.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <utility>
#include <vector>

using namespace mlir::loom;

namespace {

//===----------------------------------------------------------------------===//
// AddressRanges
//===----------------------------------------------------------------------===//

/// A union of [begin, end) byte ranges, kept sorted, disjoint and with
/// touching ranges merged.
class AddressRanges {
public:
  bool empty() const { return ranges.empty(); }

  void add(int64_t begin, int64_t end) {
    if (begin >= end)
      return;
    // The first range that ends at or after `begin` (touching merges).
    auto first = llvm::partition_point(
        ranges, [&](const Range &r) { return r.second < begin; });
    auto last = first;
    while (last != ranges.end() && last->first <= end) {
      begin = std::min(begin, last->first);
      end = std::max(end, last->second);
      ++last;
    }
    if (first == last) {
      ranges.insert(first, {begin, end});
      return;
    }
    *first = {begin, end};
    ranges.erase(first + 1, last);
  }

  /// The lowest x' >= x such that [x', x' + size) overlaps none of these
  /// ranges, moving only over ranges that block it (so every offset
  /// skipped is taken).
  int64_t skipOverlaps(int64_t x, int64_t size) const {
    for (;;) {
      // The last range starting before x + size overlaps [x, x + size)
      // exactly when it ends after x; an earlier one ends before it.
      auto after = llvm::partition_point(
          ranges, [&](const Range &r) { return r.first < x + size; });
      if (after == ranges.begin() || std::prev(after)->second <= x)
        return x;
      x = std::prev(after)->second;
    }
  }

private:
  using Range = std::pair<int64_t, int64_t>;
  std::vector<Range> ranges;
};

//===----------------------------------------------------------------------===//
// Occupancy
//===----------------------------------------------------------------------===//

/// The arena bytes taken, by execution position: a segment tree over
/// positions [0, positions). An allocation alive during [start, end] adds
/// its bytes to `own` of the O(log) nodes that tile [start, end] exactly
/// (it is alive throughout each), and to `subtree` of those nodes and all
/// their ancestors. The bytes taken at some point of [start, end] are then
/// `subtree` of the nodes inside it plus `own` of the nodes that straddle
/// its borders: a few sets, each a few merged ranges.
class Occupancy {
public:
  explicit Occupancy(int64_t positions) {
    while (leaves < positions)
      leaves *= 2;
    own.resize(2 * leaves);
    subtree.resize(2 * leaves);
  }

  /// Takes [begin, end) for positions [start, last] (inclusive).
  void take(int64_t start, int64_t last, int64_t begin, int64_t end) {
    take(/*node=*/1, /*lo=*/0, /*hi=*/leaves, start, last + 1, begin, end);
  }

  /// The lowest offset >= `base` where [offset, offset + size) is free at
  /// every position of [start, last] (inclusive).
  int64_t lowestFree(int64_t start, int64_t last, int64_t size,
                     int64_t base) const {
    llvm::SmallVector<const AddressRanges *, 32> taken;
    collect(/*node=*/1, /*lo=*/0, /*hi=*/leaves, start, last + 1, taken);
    // Move up past whatever blocks the window until no set does; every
    // offset passed over is blocked, so the first free one is found.
    int64_t offset = base;
    for (bool moved = true; moved;) {
      moved = false;
      for (const AddressRanges *ranges : taken) {
        int64_t next = ranges->skipOverlaps(offset, size);
        moved |= next != offset;
        offset = next;
      }
    }
    return offset;
  }

private:
  void take(unsigned node, int64_t lo, int64_t hi, int64_t start, int64_t stop,
            int64_t begin, int64_t end) {
    if (stop <= lo || hi <= start)
      return;
    subtree[node].add(begin, end);
    if (start <= lo && hi <= stop) {
      own[node].add(begin, end);
      return;
    }
    int64_t mid = (lo + hi) / 2;
    take(2 * node, lo, mid, start, stop, begin, end);
    take(2 * node + 1, mid, hi, start, stop, begin, end);
  }

  void collect(unsigned node, int64_t lo, int64_t hi, int64_t start,
               int64_t stop,
               llvm::SmallVectorImpl<const AddressRanges *> &taken) const {
    if (stop <= lo || hi <= start)
      return;
    if (start <= lo && hi <= stop) {
      if (!subtree[node].empty())
        taken.push_back(&subtree[node]);
      return;
    }
    if (!own[node].empty())
      taken.push_back(&own[node]);
    int64_t mid = (lo + hi) / 2;
    collect(2 * node, lo, mid, start, stop, taken);
    collect(2 * node + 1, mid, hi, start, stop, taken);
  }

  int64_t leaves = 1;
  /// Heap-ordered nodes (root 1, children 2n and 2n + 1).
  std::vector<AddressRanges> own, subtree;
};

} // namespace

//===----------------------------------------------------------------------===//
// placeBestFit
//===----------------------------------------------------------------------===//

int64_t mlir::loom::placeBestFit(llvm::SmallVectorImpl<Allocation *> &transient,
                                 int64_t base, int64_t alignment) {
  llvm::stable_sort(transient, [](Allocation *a, Allocation *b) {
    return a->bytes != b->bytes ? a->bytes > b->bytes : a->start < b->start;
  });
  int64_t positions = 1;
  for (Allocation *alloc : transient)
    positions = std::max(positions, alloc->end + 1);
  Occupancy occupancy(positions);
  int64_t top = base;
  for (Allocation *alloc : transient) {
    // Placed allocations are taken up to their aligned end, so every gap
    // starts aligned: the lowest free offset is the lowest aligned one. An
    // empty allocation overlaps nothing and stays at `base`.
    alloc->offset = alloc->bytes == 0
                        ? base
                        : occupancy.lowestFree(alloc->start, alloc->end,
                                               alloc->bytes, base);
    top = std::max(top, alloc->offset + alloc->bytes);
    occupancy.take(alloc->start, alloc->end, alloc->offset,
                   alignTo(alloc->offset + alloc->bytes, alignment));
  }
  return top;
}
