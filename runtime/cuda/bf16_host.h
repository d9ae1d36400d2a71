//===- bf16_host.h - bf16 <-> fp32 conversion on the host -------*- C++ -*-===//
//
// Whole-vector forms of runtime/core/bfloat16.h's conversions (round to
// nearest even, as the device's __float2bfloat16 does), for building CPU
// references on bf16-rounded inputs and host images of device arrays
// (tests, benchmarks).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_BF16_HOST_H
#define LOOM_RUNTIME_CUDA_BF16_HOST_H

#include "runtime/core/bfloat16.h"

#include <cstdint>
#include <vector>

namespace loom::cuda {

/// Each value rounded to the nearest bf16, kept as fp32.
inline std::vector<float> roundedToBf16(const std::vector<float> &v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = bf16ToFloat(floatToBF16(v[i]));
  return out;
}

/// The bf16 bit patterns of `v` (a host image of a __nv_bfloat16 array).
inline std::vector<uint16_t> bf16Bits(const std::vector<float> &v) {
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = floatToBF16(v[i]);
  return out;
}

/// fp32 values of a host image of a __nv_bfloat16 array.
inline std::vector<float> floatsFromBf16(const std::vector<uint16_t> &bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i)
    out[i] = bf16ToFloat(bits[i]);
  return out;
}

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_BF16_HOST_H
