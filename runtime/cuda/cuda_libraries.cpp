//===- cuda_libraries.cpp - cuBLASLt and NCCL through dlopen ----*- C++ -*-===//
//
// Each forwarder below has the signature cublasLt.h / nccl.h declare (the
// compiler checks it against the header's declaration) and calls the
// library's function, resolved once. A forwarder called when its library
// could not be loaded returns the library's "not initialized" status, so a
// caller that skipped loadCublasLt() / loadNccl() still gets an error, not
// a crash; the loaders give the readable one.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/cuda_libraries.h"

#include "runtime/core/shared_library.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <nccl.h>

#include <string>

// Every function the backend calls, with its parameters and the names it
// passes them on as: X(name, (parameters), (arguments)).
#define LOOM_CUBLASLT_FUNCTIONS(X)                                             \
  X(cublasLtCreate, (cublasLtHandle_t * handle), (handle))                     \
  X(cublasLtDestroy, (cublasLtHandle_t handle), (handle))                      \
  X(cublasLtMatmul,                                                            \
    (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha,    \
     const void *A, cublasLtMatrixLayout_t Adesc, const void *B,               \
     cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,            \
     cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,      \
     const cublasLtMatmulAlgo_t *algo, void *workspace,                        \
     size_t workspaceSizeInBytes, cudaStream_t stream),                        \
    (handle, desc, alpha, A, Adesc, B, Bdesc, beta, C, Cdesc, D, Ddesc, algo,  \
     workspace, workspaceSizeInBytes, stream))                                 \
  X(cublasLtMatmulAlgoGetHeuristic,                                            \
    (cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,                       \
     cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,               \
     cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,               \
     cublasLtMatmulPreference_t preference, int requestedAlgoCount,            \
     cublasLtMatmulHeuristicResult_t heuristicResultsArray[],                  \
     int *returnAlgoCount),                                                    \
    (handle, desc, Adesc, Bdesc, Cdesc, Ddesc, preference, requestedAlgoCount, \
     heuristicResultsArray, returnAlgoCount))                                  \
  X(cublasLtMatmulDescCreate,                                                  \
    (cublasLtMatmulDesc_t * desc, cublasComputeType_t computeType,             \
     cudaDataType_t scaleType),                                                \
    (desc, computeType, scaleType))                                            \
  X(cublasLtMatmulDescDestroy, (cublasLtMatmulDesc_t desc), (desc))            \
  X(cublasLtMatmulDescSetAttribute,                                            \
    (cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,           \
     const void *buf, size_t sizeInBytes),                                     \
    (desc, attr, buf, sizeInBytes))                                            \
  X(cublasLtMatmulPreferenceCreate, (cublasLtMatmulPreference_t * pref),       \
    (pref))                                                                    \
  X(cublasLtMatmulPreferenceDestroy, (cublasLtMatmulPreference_t pref),        \
    (pref))                                                                    \
  X(cublasLtMatmulPreferenceSetAttribute,                                      \
    (cublasLtMatmulPreference_t pref,                                          \
     cublasLtMatmulPreferenceAttributes_t attr, const void *buf,               \
     size_t sizeInBytes),                                                      \
    (pref, attr, buf, sizeInBytes))                                            \
  X(cublasLtMatrixLayoutCreate,                                                \
    (cublasLtMatrixLayout_t * layout, cudaDataType type, uint64_t rows,        \
     uint64_t cols, int64_t ld),                                               \
    (layout, type, rows, cols, ld))                                            \
  X(cublasLtMatrixLayoutDestroy, (cublasLtMatrixLayout_t layout), (layout))

// ncclGetErrorString returns a string, not a status: it is written out by
// hand below, outside this list.
#define LOOM_NCCL_FUNCTIONS(X)                                                 \
  X(ncclAllGather,                                                             \
    (const void *sendbuff, void *recvbuff, size_t sendcount,                   \
     ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream),           \
    (sendbuff, recvbuff, sendcount, datatype, comm, stream))                   \
  X(ncclAllReduce,                                                             \
    (const void *sendbuff, void *recvbuff, size_t count,                       \
     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,                 \
     cudaStream_t stream),                                                     \
    (sendbuff, recvbuff, count, datatype, op, comm, stream))                   \
  X(ncclCommAbort, (ncclComm_t comm), (comm))                                  \
  X(ncclCommDestroy, (ncclComm_t comm), (comm))                                \
  X(ncclCommGetAsyncError, (ncclComm_t comm, ncclResult_t * asyncError),       \
    (comm, asyncError))                                                        \
  X(ncclCommInitRank,                                                          \
    (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank),            \
    (comm, nranks, commId, rank))                                              \
  X(ncclCommSplit,                                                             \
    (ncclComm_t comm, int color, int key, ncclComm_t *newcomm,                 \
     ncclConfig_t *config),                                                    \
    (comm, color, key, newcomm, config))                                       \
  X(ncclGetUniqueId, (ncclUniqueId * uniqueId), (uniqueId))                    \
  X(ncclGroupEnd, (), ())                                                      \
  X(ncclGroupStart, (), ())                                                    \
  X(ncclRecv,                                                                  \
    (void *recvbuff, size_t count, ncclDataType_t datatype, int peer,          \
     ncclComm_t comm, cudaStream_t stream),                                    \
    (recvbuff, count, datatype, peer, comm, stream))                           \
  X(ncclReduceScatter,                                                         \
    (const void *sendbuff, void *recvbuff, size_t recvcount,                   \
     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,                 \
     cudaStream_t stream),                                                     \
    (sendbuff, recvbuff, recvcount, datatype, op, comm, stream))               \
  X(ncclSend,                                                                  \
    (const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,    \
     ncclComm_t comm, cudaStream_t stream),                                    \
    (sendbuff, count, datatype, peer, comm, stream))

namespace {

using loom::SharedLibrary;

#define LOOM_FUNCTION_NAME(name, params, args) #name,

const SharedLibrary &cublasLtLibrary() {
  static const SharedLibrary lib = loom::openSharedLibrary(
      {"cuBLASLt",
       "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR),
       "LOOM_CUBLASLT_LIBRARY",
       LOOM_CUBLASLT_DIRS,
       {LOOM_CUBLASLT_FUNCTIONS(LOOM_FUNCTION_NAME)},
       "install the CUDA toolkit's cuBLASLt or PyTorch's nvidia-cublas "
       "wheel"});
  return lib;
}

const SharedLibrary &ncclLibrary() {
  static const SharedLibrary lib = loom::openSharedLibrary(
      {"NCCL",
       "libnccl.so." + std::to_string(NCCL_MAJOR),
       "LOOM_NCCL_LIBRARY",
       LOOM_NCCL_DIRS,
       {LOOM_NCCL_FUNCTIONS(LOOM_FUNCTION_NAME) "ncclGetErrorString"},
       "install NCCL or PyTorch's nvidia-nccl wheel"});
  return lib;
}

/// `name` from `lib`, or null when the library is not usable.
template <typename Fn> Fn resolve(const SharedLibrary &lib, const char *name) {
  if (!lib.error.empty() || !lib.handle)
    return nullptr;
  return reinterpret_cast<Fn>(dlsym(lib.handle, name));
}

loom::Status statusOf(const SharedLibrary &lib) {
  return lib.error.empty() ? loom::Status::success()
                           : loom::Status::error(lib.error);
}

} // namespace

namespace loom::cuda {

Status loadCublasLt() { return statusOf(cublasLtLibrary()); }

Status loadNccl() { return statusOf(ncclLibrary()); }

} // namespace loom::cuda

//===----------------------------------------------------------------------===//
// The forwarders (the headers declare them extern "C")
//===----------------------------------------------------------------------===//

#define LOOM_FORWARD(library, failure, result, name, params, args)             \
  result name params {                                                         \
    static const auto fn = resolve<decltype(&name)>(library(), #name);         \
    return fn ? fn args : failure;                                             \
  }
#define LOOM_FORWARD_CUBLASLT(name, params, args)                              \
  LOOM_FORWARD(cublasLtLibrary, CUBLAS_STATUS_NOT_INITIALIZED, cublasStatus_t, \
               name, params, args)
#define LOOM_FORWARD_NCCL(name, params, args)                                  \
  LOOM_FORWARD(ncclLibrary, ncclSystemError, ncclResult_t, name, params, args)

LOOM_CUBLASLT_FUNCTIONS(LOOM_FORWARD_CUBLASLT)
LOOM_NCCL_FUNCTIONS(LOOM_FORWARD_NCCL)

const char *ncclGetErrorString(ncclResult_t result) {
  static const auto fn = resolve<decltype(&ncclGetErrorString)>(
      ncclLibrary(), "ncclGetErrorString");
  return fn ? fn(result) : "NCCL library not loaded (see loom::cuda::loadNccl)";
}
