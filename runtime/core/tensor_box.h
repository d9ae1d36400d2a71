//===- tensor_box.h - Rows of a box inside a row-major tensor ---*- C++ -*-===//
//
// A rank's slice of a sharded parameter is a box (an offset and an extent
// per dimension) of the global row-major tensor. Checkpoints move such boxes
// between the global layout (file, gathered tensor) and the dense local one;
// both directions walk the box as runs of contiguous elements.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_TENSOR_BOX_H
#define LOOM_RUNTIME_CORE_TENSOR_BOX_H

#include <cstdint>
#include <vector>

namespace loom {

/// Calls `run(globalIndex, boxIndex, length)` for each row of the box at
/// `offset` with extent `extent` in a row-major tensor of shape `global`:
/// `length` elements contiguous in both the tensor (from flat index
/// `globalIndex`) and the dense box (from `boxIndex`), in increasing order
/// of both. A scalar is one run of one element; an empty box has none.
template <typename Run>
void forEachBoxRun(const std::vector<int64_t> &global,
                   const std::vector<int64_t> &offset,
                   const std::vector<int64_t> &extent, Run run) {
  const size_t rank = global.size();
  if (rank == 0) {
    run(int64_t{0}, int64_t{0}, int64_t{1});
    return;
  }
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;)
    stride[d - 1] = stride[d] * global[d];
  const int64_t inner = extent[rank - 1];
  int64_t runs = 1;
  for (size_t d = 0; d + 1 < rank; ++d)
    runs *= extent[d];
  if (inner == 0)
    return;
  std::vector<int64_t> index(rank, 0);
  for (int64_t r = 0; r < runs; ++r) {
    int64_t at = 0;
    for (size_t d = 0; d < rank; ++d)
      at += (offset[d] + index[d]) * stride[d];
    run(at, r * inner, inner);
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < extent[d])
        break;
      index[d] = 0;
    }
  }
}

} // namespace loom

#endif // LOOM_RUNTIME_CORE_TENSOR_BOX_H
