//===- CudaTestUtil.h - Device buffers and the no-GPU skip ------*- C++ -*-===//
//
// CUDA tests derive from CudaTest: on a machine without a usable device they
// are skipped (GTEST_SKIP) with the reason cudaGetDeviceCount gave, so a
// GPU-less CI counts them as skipped, not failed.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_TEST_RUNTIME_CUDATESTUTIL_H
#define LOOM_TEST_RUNTIME_CUDATESTUTIL_H

#include "runtime/cuda/device.h"

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>
#include <vector>

namespace loom::test {

class CudaTest : public ::testing::Test {
protected:
  void SetUp() override {
    int count = 0;
    Status s = cuda::probeDevice(count);
    if (!s.ok())
      GTEST_SKIP() << "skipped, no GPU here: " << s.message();
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
  }
  void TearDown() override {
    if (stream)
      cudaStreamDestroy(stream);
  }
  cudaStream_t stream = nullptr;
};

/// A device copy of a host vector, freed on scope exit.
template <typename T> class DeviceVector {
public:
  explicit DeviceVector(const std::vector<T> &host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void **>(&ptr), bytes()), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(ptr, host.data(), bytes(), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  explicit DeviceVector(size_t count, T fill = T())
      : DeviceVector(std::vector<T>(count, fill)) {}
  ~DeviceVector() { cudaFree(ptr); }
  DeviceVector(const DeviceVector &) = delete;
  DeviceVector &operator=(const DeviceVector &) = delete;
  T *get() const { return ptr; }
  std::vector<T> host() const {
    std::vector<T> out(n);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out.data(), ptr, bytes(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return out;
  }

private:
  size_t bytes() const { return n * sizeof(T) + (n == 0 ? 1 : 0); }
  T *ptr = nullptr;
  size_t n;
};

} // namespace loom::test

#endif // LOOM_TEST_RUNTIME_CUDATESTUTIL_H
