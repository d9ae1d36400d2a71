//===- tensor_movement.h - Transpose, slice and concat ----------*- C++ -*-===//
//
// Data movement the program's shape ops need when the buffer planner could not
// make them views: an N-d transpose, a slice along one dimension and a concat
// along one dimension. They move raw elements of `elemBytes` bytes (2 or 4:
// BF16, F32, I32), so they serve every dtype. Row-major throughout; outputs
// must not overlap inputs (the executor stages through a temporary when they
// do).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CPU_TENSOR_MOVEMENT_H
#define LOOM_RUNTIME_CPU_TENSOR_MOVEMENT_H

#include <cstdint>
#include <vector>

namespace loom::cpu {

/// out = permute(in, perm): out dimension i is input dimension perm[i], so
/// out.shape[i] = inShape[perm[i]]. `perm` must be a permutation of
/// 0..rank-1. Elements of any size `elemBytes` >= 1.
void transpose(void *out, const void *in, const std::vector<int64_t> &inShape,
               const std::vector<int64_t> &perm, int64_t elemBytes);

/// out = in[..., offset:offset+outShape[dim], ...] along `dim`; every other
/// dimension of out equals the input's.
void sliceDim(void *out, const void *in, const std::vector<int64_t> &inShape,
              int64_t dim, int64_t offset, int64_t outExtent,
              int64_t elemBytes);

/// Backward of sliceDim: out (shape outShape) is zero except the block
/// [offset, offset + inExtent) of `dim`, which holds `in` (outShape with
/// inExtent in `dim`). `in` and `out` must not overlap.
void sliceDimGrad(void *out, const void *in,
                  const std::vector<int64_t> &outShape, int64_t dim,
                  int64_t offset, int64_t inExtent, int64_t elemBytes);

/// out = concat(inputs, dim): input k contributes extents[k] along `dim`;
/// `outShape` is the result shape (other dimensions shared by all inputs).
void concatDim(void *out, const std::vector<const void *> &inputs,
               const std::vector<int64_t> &extents,
               const std::vector<int64_t> &outShape, int64_t dim,
               int64_t elemBytes);

/// `rows` rows of `rowBytes` bytes from `src` (pitch srcPitch) to `dst`
/// (pitch dstPitch); the two must not overlap.
void copy2D(void *dst, int64_t dstPitch, const void *src, int64_t srcPitch,
            int64_t rowBytes, int64_t rows);

} // namespace loom::cpu

#endif // LOOM_RUNTIME_CPU_TENSOR_MOVEMENT_H
