//===- CudaLibrariesTest.cpp - cuBLASLt and NCCL loaded on first use ------===//
//
// runtime/cuda/cuda_libraries.cpp on the machine the tests run on (no device
// needed): both libraries load with every function the backend calls, and
// the forwarders reach the real library: calls that need no device return
// what the library returns, not the "not loaded" fallbacks. The error
// messages for a library that cannot be loaded are checked end to end in
// test/Tools/loom-run-backend-cuda.test (the loaders run once per process),
// the search behind them in SharedLibraryTest.cpp.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/cuda_libraries.h"

#include <cublasLt.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <string>

using namespace loom;

namespace {

TEST(CudaLibraries, LoadWithEveryFunctionTheBackendCalls) {
  Status cublasLt = cuda::loadCublasLt();
  EXPECT_TRUE(cublasLt.ok()) << cublasLt.message();
  Status nccl = cuda::loadNccl();
  EXPECT_TRUE(nccl.ok()) << nccl.message();
}

TEST(CudaLibraries, ForwardersReachTheLibrary) {
  ASSERT_TRUE(cuda::loadCublasLt().ok());
  ASSERT_TRUE(cuda::loadNccl().ok());
  // Descriptors live on the host: created, set and destroyed without a
  // device, with the library's own argument checks.
  cublasLtMatmulDesc_t desc = nullptr;
  ASSERT_EQ(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
            CUBLAS_STATUS_SUCCESS);
  const cublasOperation_t trans = CUBLAS_OP_T;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                           &trans, sizeof(trans)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                           &trans, 1),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatmulDescDestroy(desc), CUBLAS_STATUS_SUCCESS);
  cublasLtMatrixLayout_t layout = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&layout, CUDA_R_16BF, 64, 32, 64),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutDestroy(layout), CUBLAS_STATUS_SUCCESS);
  // NCCL's own error strings, not the forwarder's "not loaded" text.
  const std::string invalid = ncclGetErrorString(ncclInvalidArgument);
  EXPECT_NE(invalid.find("invalid argument"), std::string::npos) << invalid;
  EXPECT_EQ(invalid.find("not loaded"), std::string::npos) << invalid;
}

} // namespace
