//===- transpose.cu - Dimension permutation on device ---------------------===//
//
// One thread per output element: decompose the output index over the output
// shape, gather from the input through the permuted strides. Simple and
// uncoalesced on the read side for permutations that move the last
// dimension; a tiled shared-memory version is a follow-up if a profile shows
// transposes matter (the compiler emits few of them).
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/tensor_movement.h"

#include "runtime/cuda/check.h"
#include "runtime/cuda/launch.cuh"

namespace loom::cuda {
namespace {

using launch::blocksFor;
using launch::kThreads;

/// Passed by value to the kernel.
struct TransposeGeometry {
  int rank;
  int64_t outShape[kMaxTransposeRank];
  /// Input stride of output dimension i (inStride[perm[i]]).
  int64_t stride[kMaxTransposeRank];
};

template <typename T>
__global__ void transposeKernel(T *out, const T *in, TransposeGeometry g,
                                int64_t total) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total)
    return;
  int64_t rest = i, src = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    src += (rest % g.outShape[d]) * g.stride[d];
    rest /= g.outShape[d];
  }
  out[i] = in[src];
}

template <typename T>
Status launchTranspose(void *out, const void *in, const TransposeGeometry &g,
                       int64_t total, cudaStream_t stream) {
  LOOM_LAUNCH(transposeKernel<T>, blocksFor(total), kThreads, stream,
              static_cast<T *>(out), static_cast<const T *>(in), g, total);
  return Status::success();
}

} // namespace

Status transpose(void *out, const void *in, const std::vector<int64_t> &inShape,
                 const std::vector<int64_t> &perm, int64_t elemBytes,
                 cudaStream_t stream) {
  const size_t rank = inShape.size();
  LOOM_CHECK(rank <= static_cast<size_t>(kMaxTransposeRank),
             "transpose: rank " << rank << " is above the CUDA kernel's "
                                << kMaxTransposeRank);
  LOOM_CHECK(perm.size() == rank, "transpose: permutation of "
                                      << perm.size() << " entries for rank "
                                      << rank);
  TransposeGeometry g{};
  g.rank = static_cast<int>(rank);
  int64_t total = 1;
  std::vector<int64_t> inStride(rank, 1);
  for (size_t d = rank; d-- > 1;)
    inStride[d - 1] = inStride[d] * inShape[d];
  for (size_t i = 0; i < rank; ++i) {
    g.outShape[i] = inShape[perm[i]];
    g.stride[i] = inStride[perm[i]];
    total *= inShape[i];
  }
  switch (elemBytes) {
  case 1:
    return launchTranspose<uint8_t>(out, in, g, total, stream);
  case 2:
    return launchTranspose<uint16_t>(out, in, g, total, stream);
  case 4:
    return launchTranspose<uint32_t>(out, in, g, total, stream);
  case 8:
    return launchTranspose<uint64_t>(out, in, g, total, stream);
  default:
    LOOM_ERROR("transpose: elements of " << elemBytes
                                         << " bytes (the CUDA kernel handles "
                                            "1, 2, 4 or 8)");
  }
}

} // namespace loom::cuda
