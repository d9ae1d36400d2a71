//===- check.h - CUDA / cuBLASLt / NCCL error checks ------------*- C++ -*-===//
//
// Each macro records the failing call, file and line and returns a Status
// from the enclosing function instead of exiting deep inside a kernel
// wrapper (nccl-tests' src/common.h habit, with Loom's Status).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_CHECK_H
#define LOOM_RUNTIME_CUDA_CHECK_H

#include "runtime/core/status.h"

#include <cuda_runtime_api.h>
#include <string>

#define LOOM_CUDA_CHECK(call)                                                  \
  do {                                                                         \
    cudaError_t loomErr_ = (call);                                             \
    if (loomErr_ != cudaSuccess)                                               \
      return ::loom::Status::error(                                            \
          std::string(#call) + " failed: " + cudaGetErrorName(loomErr_) +      \
          " (" + cudaGetErrorString(loomErr_) + ") at " + __FILE__ + ":" +     \
          std::to_string(__LINE__));                                           \
  } while (0)

/// After a kernel launch: a bad configuration shows up here.
#define LOOM_CUDA_CHECK_LAUNCH() LOOM_CUDA_CHECK(cudaGetLastError())

#define LOOM_CUBLAS_CHECK(call)                                                \
  do {                                                                         \
    cublasStatus_t loomErr_ = (call);                                          \
    if (loomErr_ != CUBLAS_STATUS_SUCCESS)                                     \
      return ::loom::Status::error(std::string(#call) + " failed: status " +   \
                                   std::to_string(int(loomErr_)) + " at " +    \
                                   __FILE__ + ":" + std::to_string(__LINE__)); \
  } while (0)

#define LOOM_NCCL_CHECK(call)                                                  \
  do {                                                                         \
    ncclResult_t loomErr_ = (call);                                            \
    if (loomErr_ != ncclSuccess)                                               \
      return ::loom::Status::error(                                            \
          std::string(#call) + " failed: " + ncclGetErrorString(loomErr_) +    \
          " at " + __FILE__ + ":" + std::to_string(__LINE__));                 \
  } while (0)

#endif // LOOM_RUNTIME_CUDA_CHECK_H
