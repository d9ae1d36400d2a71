//===- tensor_movement.h - Slice, concat, block packing ---------*- C++ -*-===//
//
// The device counterparts of runtime/cpu/tensor_movement.h (sliceDim,
// sliceDimGrad, concatDim) and of the communicator's packBlocks /
// unpackBlocks: each but transpose is a strided 2-D copy (cudaMemcpy2DAsync) of
// [outer rows] x [contiguous bytes], so no kernel is needed. Raw elements of
// `elemBytes`, row-major; outputs must not overlap inputs.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_TENSOR_MOVEMENT_H
#define LOOM_RUNTIME_CUDA_TENSOR_MOVEMENT_H

#include "runtime/core/status.h"

#include <cstdint>
#include <cuda_runtime_api.h>
#include <vector>

namespace loom::cuda {

Status sliceDim(void *out, const void *in, const std::vector<int64_t> &inShape,
                int64_t dim, int64_t offset, int64_t outExtent,
                int64_t elemBytes, cudaStream_t stream);
Status sliceDimGrad(void *out, const void *in,
                    const std::vector<int64_t> &outShape, int64_t dim,
                    int64_t offset, int64_t inExtent, int64_t elemBytes,
                    cudaStream_t stream);
Status concatDim(void *out, const std::vector<const void *> &inputs,
                 const std::vector<int64_t> &extents,
                 const std::vector<int64_t> &outShape, int64_t dim,
                 int64_t elemBytes, cudaStream_t stream);
/// `rows` rows of `width` bytes from src (pitch srcPitch) to dst (pitch
/// dstPitch), device to device on `stream` (cpu::copy2D's contract).
Status copy2D(void *dst, int64_t dstPitch, const void *src, int64_t srcPitch,
              int64_t width, int64_t rows, cudaStream_t stream);
/// packBlocks / unpackBlocks of runtime/core/communicator.h on device.
Status packBlocks(void *dst, const void *src, const std::vector<int64_t> &shape,
                  int64_t dim, int64_t n, int64_t elemBytes,
                  cudaStream_t stream);
Status unpackBlocks(void *dst, const void *src,
                    const std::vector<int64_t> &blockShape, int64_t dim,
                    int64_t n, int64_t elemBytes, cudaStream_t stream);

/// cpu::transpose's contract (out.shape[i] = inShape[perm[i]]; rank 0 is a
/// one-element copy): one thread per output element (transpose.cu).
/// elemBytes is 1, 2, 4 or 8; at most kMaxTransposeRank dimensions.
constexpr int kMaxTransposeRank = 8;
Status transpose(void *out, const void *in, const std::vector<int64_t> &inShape,
                 const std::vector<int64_t> &perm, int64_t elemBytes,
                 cudaStream_t stream);

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_TENSOR_MOVEMENT_H
