//===- cuda_libraries.h - cuBLASLt and NCCL, loaded when used ---*- C++ -*-===//
//
// loom_cuda does not link libcublasLt or libnccl: cuda_libraries.cpp defines
// the cublasLt* / nccl* functions the backend calls as forwarders to the
// libraries it dlopen()s on first use. Linking them cost every process that
// carries the CUDA backend ~0.35 s at start-up (libcublasLt is 540 MB with
// ~370 000 relocations and static constructors), also `loom-run --help` and
// every CPU run, and kept loom-run from starting at all where the libraries
// are absent. Now only --backend cuda pays, and it can say what is missing.
//
// Where the libraries are looked for, in order: LOOM_CUBLASLT_LIBRARY /
// LOOM_NCCL_LIBRARY (a file path) when set; otherwise the soname the build
// was compiled against (libcublasLt.so.<CUBLAS_VER_MAJOR>,
// libnccl.so.<NCCL_MAJOR>) through the usual search (LD_LIBRARY_PATH, the
// ld.so cache), then in the directories CMake found them in
// (runtime/core/shared_library.h does the search and phrases the errors).
//
// The emulated backend (test/runtime) replaces both libraries with host
// code; its EmulatedCublasLt.cpp / EmulatedNccl.cpp define these loaders
// as always succeeding.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_CUDA_LIBRARIES_H
#define LOOM_RUNTIME_CUDA_CUDA_LIBRARIES_H

#include "runtime/core/status.h"

namespace loom::cuda {

/// Loads cuBLASLt (once per process) and checks it has every function the
/// backend calls; the error names the file, dlopen's reason, the places
/// tried and how to fix it.
Status loadCublasLt();

/// The same for NCCL.
Status loadNccl();

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_CUDA_LIBRARIES_H
