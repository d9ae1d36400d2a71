//===- tensor_movement.cpp - Transpose, slice and concat --------*- C++ -*-===//
//
// Slice and concat reduce to (outer, extent * inner) blocks copied with
// memcpy. Transpose walks the output in order with an odometer over the
// input strides; the innermost output dimension is a strided gather.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/tensor_movement.h"

#include <cstring>

namespace loom::cpu {

namespace {

int64_t product(const std::vector<int64_t> &shape, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i)
    n *= shape[i];
  return n;
}

template <typename T>
void transposeTyped(T *out, const T *in, const std::vector<int64_t> &inShape,
                    const std::vector<int64_t> &perm) {
  const size_t rank = inShape.size();
  const int64_t total = product(inShape, 0, rank);
  if (rank == 0) {
    out[0] = in[0];
    return;
  }
  std::vector<int64_t> inStride(rank, 1);
  for (size_t d = rank; d-- > 1;)
    inStride[d - 1] = inStride[d] * inShape[d];
  // Output dimension i walks input stride inStride[perm[i]].
  std::vector<int64_t> outShape(rank), stride(rank);
  for (size_t i = 0; i < rank; ++i) {
    outShape[i] = inShape[perm[i]];
    stride[i] = inStride[perm[i]];
  }
  const int64_t inner = outShape[rank - 1], innerStride = stride[rank - 1];
  std::vector<int64_t> index(rank, 0);
  int64_t src = 0;
  for (int64_t o = 0; o < total; o += inner) {
    for (int64_t j = 0; j < inner; ++j)
      out[o + j] = in[src + j * innerStride];
    // Advance the odometer over the outer output dimensions.
    for (size_t d = rank - 1; d-- > 0;) {
      src += stride[d];
      if (++index[d] < outShape[d])
        break;
      src -= stride[d] * outShape[d];
      index[d] = 0;
    }
  }
}

} // namespace

void transpose(void *out, const void *in, const std::vector<int64_t> &inShape,
               const std::vector<int64_t> &perm, int64_t elemBytes) {
  switch (elemBytes) {
  case 1:
    return transposeTyped(static_cast<uint8_t *>(out),
                          static_cast<const uint8_t *>(in), inShape, perm);
  case 2:
    return transposeTyped(static_cast<uint16_t *>(out),
                          static_cast<const uint16_t *>(in), inShape, perm);
  case 4:
    return transposeTyped(static_cast<uint32_t *>(out),
                          static_cast<const uint32_t *>(in), inShape, perm);
  case 8:
    return transposeTyped(static_cast<uint64_t *>(out),
                          static_cast<const uint64_t *>(in), inShape, perm);
  default: {
    // Any other element size: its bytes are one more, unmoved, dimension.
    std::vector<int64_t> shape = inShape, order = perm;
    shape.push_back(elemBytes);
    order.push_back(static_cast<int64_t>(inShape.size()));
    return transposeTyped(static_cast<uint8_t *>(out),
                          static_cast<const uint8_t *>(in), shape, order);
  }
  }
}

void sliceDim(void *out, const void *in, const std::vector<int64_t> &inShape,
              int64_t dim, int64_t offset, int64_t outExtent,
              int64_t elemBytes) {
  const int64_t outer = product(inShape, 0, dim);
  const int64_t inner = product(inShape, dim + 1, inShape.size()) * elemBytes;
  const int64_t inRow = inShape[dim] * inner, outRow = outExtent * inner;
  auto *dst = static_cast<char *>(out);
  const auto *src = static_cast<const char *>(in) + offset * inner;
  for (int64_t o = 0; o < outer; ++o)
    std::memcpy(dst + o * outRow, src + o * inRow, outRow);
}

void sliceDimGrad(void *out, const void *in,
                  const std::vector<int64_t> &outShape, int64_t dim,
                  int64_t offset, int64_t inExtent, int64_t elemBytes) {
  const int64_t outer = product(outShape, 0, dim);
  const int64_t inner = product(outShape, dim + 1, outShape.size()) * elemBytes;
  const int64_t outRow = outShape[dim] * inner, inRow = inExtent * inner;
  const int64_t before = offset * inner, after = outRow - before - inRow;
  auto *dst = static_cast<char *>(out);
  const auto *src = static_cast<const char *>(in);
  for (int64_t o = 0; o < outer; ++o) {
    char *row = dst + o * outRow;
    std::memset(row, 0, before);
    std::memcpy(row + before, src + o * inRow, inRow);
    std::memset(row + before + inRow, 0, after);
  }
}

void concatDim(void *out, const std::vector<const void *> &inputs,
               const std::vector<int64_t> &extents,
               const std::vector<int64_t> &outShape, int64_t dim,
               int64_t elemBytes) {
  const int64_t outer = product(outShape, 0, dim);
  const int64_t inner = product(outShape, dim + 1, outShape.size()) * elemBytes;
  const int64_t outRow = outShape[dim] * inner;
  auto *dst = static_cast<char *>(out);
  int64_t at = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const int64_t row = extents[k] * inner;
    const auto *src = static_cast<const char *>(inputs[k]);
    for (int64_t o = 0; o < outer; ++o)
      std::memcpy(dst + o * outRow + at, src + o * row, row);
    at += row;
  }
}

void copy2D(void *dst, int64_t dstPitch, const void *src, int64_t srcPitch,
            int64_t rowBytes, int64_t rows) {
  auto *to = static_cast<char *>(dst);
  const auto *from = static_cast<const char *>(src);
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(to + r * dstPitch, from + r * srcPitch, rowBytes);
}

} // namespace loom::cpu
