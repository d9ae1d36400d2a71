//===- tensor_movement.cpp - Slice / concat / block packing on device -----===//
#include "runtime/cuda/tensor_movement.h"

#include "runtime/cuda/check.h"

namespace loom::cuda {

namespace {

/// Elements before / after `dim` of `shape` (outer rows, inner run).
void split(const std::vector<int64_t> &shape, int64_t dim, int64_t &outer,
           int64_t &inner) {
  outer = 1;
  inner = 1;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d)
    inner *= shape[d];
}

} // namespace

Status copy2D(void *dst, int64_t dstPitch, const void *src, int64_t srcPitch,
              int64_t width, int64_t rows, cudaStream_t stream) {
  if (width == 0 || rows == 0)
    return Status::success();
  LOOM_CUDA_CHECK(cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, width, rows,
                                    cudaMemcpyDeviceToDevice, stream));
  return Status::success();
}

Status sliceDim(void *out, const void *in, const std::vector<int64_t> &inShape,
                int64_t dim, int64_t offset, int64_t outExtent,
                int64_t elemBytes, cudaStream_t stream) {
  int64_t outer, inner;
  split(inShape, dim, outer, inner);
  const int64_t run = inner * elemBytes;
  return copy2D(out, outExtent * run,
                static_cast<const uint8_t *>(in) + offset * run,
                inShape[dim] * run, outExtent * run, outer, stream);
}

Status sliceDimGrad(void *out, const void *in,
                    const std::vector<int64_t> &outShape, int64_t dim,
                    int64_t offset, int64_t inExtent, int64_t elemBytes,
                    cudaStream_t stream) {
  int64_t outer, inner;
  split(outShape, dim, outer, inner);
  const int64_t run = inner * elemBytes;
  LOOM_CUDA_CHECK(
      cudaMemsetAsync(out, 0, outer * outShape[dim] * run, stream));
  return copy2D(static_cast<uint8_t *>(out) + offset * run,
                outShape[dim] * run, in, inExtent * run, inExtent * run, outer,
                stream);
}

Status concatDim(void *out, const std::vector<const void *> &inputs,
                 const std::vector<int64_t> &extents,
                 const std::vector<int64_t> &outShape, int64_t dim,
                 int64_t elemBytes, cudaStream_t stream) {
  int64_t outer, inner;
  split(outShape, dim, outer, inner);
  const int64_t run = inner * elemBytes;
  int64_t at = 0;
  for (size_t k = 0; k < inputs.size(); ++k) {
    LOOM_RETURN_IF_ERROR(copy2D(static_cast<uint8_t *>(out) + at * run,
                                outShape[dim] * run, inputs[k],
                                extents[k] * run, extents[k] * run, outer,
                                stream));
    at += extents[k];
  }
  return Status::success();
}

Status packBlocks(void *dst, const void *src, const std::vector<int64_t> &shape,
                  int64_t dim, int64_t n, int64_t elemBytes,
                  cudaStream_t stream) {
  // src [outer, n, block] -> dst [n, outer, block], block = extent/n * inner.
  int64_t outer, inner;
  split(shape, dim, outer, inner);
  const int64_t block = shape[dim] / n * inner * elemBytes;
  for (int64_t j = 0; j < n; ++j)
    LOOM_RETURN_IF_ERROR(copy2D(static_cast<uint8_t *>(dst) + j * outer * block,
                                block,
                                static_cast<const uint8_t *>(src) + j * block,
                                n * block, block, outer, stream));
  return Status::success();
}

Status unpackBlocks(void *dst, const void *src,
                    const std::vector<int64_t> &blockShape, int64_t dim,
                    int64_t n, int64_t elemBytes, cudaStream_t stream) {
  // src [n, outer, block] -> dst [outer, n, block].
  int64_t outer, inner;
  split(blockShape, dim, outer, inner);
  const int64_t block = blockShape[dim] * inner * elemBytes;
  for (int64_t j = 0; j < n; ++j)
    LOOM_RETURN_IF_ERROR(copy2D(static_cast<uint8_t *>(dst) + j * block,
                                n * block,
                                static_cast<const uint8_t *>(src) +
                                    j * outer * block,
                                block, block, outer, stream));
  return Status::success();
}

} // namespace loom::cuda
