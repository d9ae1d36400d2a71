//===- TensorMovementTest.cpp - cpu::transpose against indexing -----------===//
//
// The CPU transpose (the reference the CUDA transpose is tested against)
// for every permutation of a rank-3 shape and every element size the
// program formats and the CUDA kernel use (1, 2, 4, 8 bytes), plus one
// (12 bytes) that takes the byte-wise path: each output element must be
// the input element its index names, byte for byte.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/tensor_movement.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

TEST(TensorMovement, TransposeEveryPermutationAndElementSize) {
  const std::vector<int64_t> shape = {3, 5, 7};
  const std::vector<std::vector<int64_t>> perms = {
      {0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
  const int64_t n = 3 * 5 * 7;
  for (int64_t eb : {1, 2, 4, 8, 12}) {
    std::vector<uint8_t> in(static_cast<size_t>(n * eb));
    for (size_t i = 0; i < in.size(); ++i)
      in[i] = static_cast<uint8_t>(i * 31 + 7);
    for (const auto &perm : perms) {
      // Guard bytes past the end catch a write beyond n elements.
      std::vector<uint8_t> out(in.size() + 16, 0xAB);
      loom::cpu::transpose(out.data(), in.data(), shape, perm, eb);
      const int64_t outShape[3] = {shape[perm[0]], shape[perm[1]],
                                   shape[perm[2]]};
      const int64_t inStride[3] = {shape[1] * shape[2], shape[2], 1};
      for (int64_t i = 0; i < outShape[0]; ++i)
        for (int64_t j = 0; j < outShape[1]; ++j)
          for (int64_t k = 0; k < outShape[2]; ++k) {
            const int64_t o = (i * outShape[1] + j) * outShape[2] + k;
            const int64_t s = i * inStride[perm[0]] + j * inStride[perm[1]] +
                              k * inStride[perm[2]];
            ASSERT_EQ(0, std::memcmp(&out[o * eb], &in[s * eb], eb))
                << "elemBytes " << eb << " perm " << perm[0] << perm[1]
                << perm[2] << " element " << o;
          }
      for (size_t g = in.size(); g < out.size(); ++g)
        ASSERT_EQ(out[g], 0xAB) << "write past the end, elemBytes " << eb;
    }
  }
  // A scalar (rank 0) is a one-element copy.
  const double x = 2.5;
  double y = 0;
  loom::cpu::transpose(&y, &x, {}, {}, sizeof(double));
  EXPECT_EQ(y, 2.5);
}
